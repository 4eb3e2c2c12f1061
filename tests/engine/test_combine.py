"""Automatic pipelining: requests of threads sharing one client ride together in one round trip.

The first part drives :class:`fastredlock.engine.combine.Combiner` with a runner that holds its round
open until the test lets it go (no network: this is the leader/follower logic alone). The second
part runs against real masters on both cores: a proxy in front of every master adds latency so a
round is reliably in flight while other threads ask, and the test checks who rode with whom, that
releases are written before acquisitions in a shared round, and that nothing is left behind.
"""
from __future__ import annotations

import threading
import time

import pytest

from fastredlock import LockError
from fastredlock.engine.checks import key_of
from fastredlock.engine.combine import Combiner, Request
from fastredlock.testing import FaultProxy


class HeldRunner:
    """A ``run`` callable whose rounds wait until :meth:`go`; records each batch it was given."""

    def __init__(self, fail: BaseException = None) -> None:
        self.batches = []
        self.entered = threading.Semaphore(0)
        self.release = threading.Event()
        self.fail = fail

    def __call__(self, batch):
        self.batches.append([r.key for r in batch])
        self.entered.release()
        assert self.release.wait(10)
        if self.fail is not None:
            raise self.fail
        for r in batch:
            r.rnd = ("done", r.key)
            r.ok = True

    def go(self):
        self.release.set()


def submit_in_thread(combiner, req, errors):
    def body():
        try:
            combiner.submit(req)
        except BaseException as exc:  # noqa: B902 - recorded for the test to look at
            errors[req.key] = exc

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t


def wait_queued(combiner, n, limit=5.0):
    end = time.monotonic() + limit
    while len(combiner._queue) < n:
        assert time.monotonic() < end, f"{len(combiner._queue)} queued, wanted {n}"
        time.sleep(0.001)


def test_a_thread_alone_runs_its_request_at_once():
    seen = []

    def run(batch):
        seen.append([r.key for r in batch])
        batch[0].ok = True

    combiner = Combiner(run, lambda req: None)
    for k in range(3):
        req = Request(b"k%d" % k, b"t", 1000)
        combiner.submit(req)
        assert req.ok
    assert seen == [[b"k0"], [b"k1"], [b"k2"]]
    assert not combiner._busy and combiner.carried == 0


def test_requests_arriving_during_a_round_ride_together_in_the_next():
    run = HeldRunner()
    combiner = Combiner(run, lambda req: None)
    errors = {}
    first = Request(b"a", b"t", 1000)
    threads = [submit_in_thread(combiner, first, errors)]
    assert run.entered.acquire(timeout=5)  # round 1 ([a]) is in flight
    later = [Request(b"b", b"t", 1000), Request(b"c", b"t", 0), Request(b"d", b"t", 1000)]
    for req in later:
        threads.append(submit_in_thread(combiner, req, errors))
    wait_queued(combiner, 3)
    run.go()
    for t in threads:
        t.join(5)
        assert not t.is_alive()
    assert errors == {}
    # b led round 2 (first to arrive) and took c (a release rides with anything) and d (same TTL)
    assert run.batches == [[b"a"], [b"b", b"c", b"d"]]
    assert all(r.ok and r.rnd == ("done", r.key) for r in [first] + later)
    assert combiner.carried == 2 and not combiner._busy and combiner._queue == []


def test_acquisitions_with_another_ttl_and_releases_on_another_core_wait_for_a_later_round():
    run = HeldRunner()
    combiner = Combiner(run, lambda req: None)
    errors = {}
    threads = [submit_in_thread(combiner, Request(b"a", b"t", 1000), errors)]
    assert run.entered.acquire(timeout=5)
    core_x, core_y = object(), object()
    later = [
        Request(b"b", b"t", 1000),
        Request(b"c", b"t", 2000),           # another TTL: not with b
        Request(b"d", b"t", 0, core_x),      # a release bound to core x
        Request(b"e", b"t", 0, core_y),      # bound to another core: not with d
        Request(b"f", b"t", 0),              # a free release rides with the first round
    ]
    for req in later:
        threads.append(submit_in_thread(combiner, req, errors))
        wait_queued(combiner, len(threads) - 1)
    run.go()
    for t in threads:
        t.join(5)
        assert not t.is_alive()
    assert errors == {}
    assert run.batches == [[b"a"], [b"b", b"d", b"f"], [b"c", b"e"]]


def test_a_failed_round_fails_every_request_it_carried_and_the_next_round_still_runs():
    run = HeldRunner(fail=OSError("boom"))
    combiner = Combiner(run, lambda req: None)
    errors = {}
    threads = [submit_in_thread(combiner, Request(b"a", b"t", 1000), errors)]
    assert run.entered.acquire(timeout=5)
    for key in (b"b", b"c"):
        threads.append(submit_in_thread(combiner, Request(key, b"t", 1000), errors))
    wait_queued(combiner, 2)
    run.go()
    for t in threads:
        t.join(5)
    assert set(errors) == {b"a", b"b", b"c"}
    assert all(isinstance(e, OSError) for e in errors.values())
    assert not combiner._busy


def test_an_interrupted_leader_fails_its_followers_with_a_lock_error():
    run = HeldRunner(fail=KeyboardInterrupt())
    combiner = Combiner(run, lambda req: None)
    errors = {}
    threads = [submit_in_thread(combiner, Request(b"a", b"t", 1000), errors)]
    assert run.entered.acquire(timeout=5)
    threads.append(submit_in_thread(combiner, Request(b"b", b"t", 1000), errors))
    threads.append(submit_in_thread(combiner, Request(b"c", b"t", 1000), errors))
    wait_queued(combiner, 2)
    run.go()
    for t in threads:
        t.join(5)
    assert isinstance(errors[b"a"], KeyboardInterrupt)
    # b led the next round itself (it also fails: the runner fails every round), c rode with it
    assert isinstance(errors[b"b"], KeyboardInterrupt)
    assert isinstance(errors[b"c"], LockError) and "interrupted" in str(errors[b"c"])


# --- against real masters ---------------------------------------------------------------------------
@pytest.fixture
def slow_masters(masters):
    """Every master behind a proxy that delays replies by 40 ms: a round stays in flight that long."""
    proxies = [FaultProxy(m).start() for m in masters]
    for p in proxies:
        p.latency(0.04, "down")
    yield proxies
    for p in proxies:
        p.stop()


def run_threads(fns):
    out, errors = [None] * len(fns), []

    def body(k):
        try:
            out[k] = fns[k]()
        except BaseException as exc:  # noqa: B902
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(k,), daemon=True) for k in range(len(fns))]
    for t in threads:
        t.start()
        time.sleep(0.005)  # the first one leads; the others arrive while its round is in flight
    for t in threads:
        t.join(10)
    assert errors == []
    return out


def test_threads_acquiring_during_a_round_share_the_next_one(make_client, slow_masters, name, keys_on, masters):
    dlm = make_client([p.url for p in slow_masters], io_timeout=1.0, retry_count=0)
    locks = [dlm.lock(f"{name}:{k}", ttl=10.0) for k in range(6)]
    got = run_threads([lambda lk=lk: lk.acquire(blocking=False) for lk in locks])
    assert got == [True] * 6
    assert dlm.executor.combiner.carried >= 4  # 6 requests in 2 rounds (3 on a slow machine)
    for lk in locks:
        assert lk.validity > 9.0
        assert [o.outcome for o in lk.outcomes] == ["ok"] * 5
        assert all(masters[i].command("GET", lk.key) == lk.token for i in range(5))
    run_threads([lk.release for lk in locks])
    assert all(keys_on(masters, lk.key) == 0 for lk in locks)


def test_a_release_and_an_acquisition_of_one_name_in_one_round(make_client, masters, name, keys_on):
    """The runner writes releases first: the waiting acquisition gets the name in the same round."""
    dlm = make_client(masters.urls, retry_count=0)
    holder = dlm.lock(name, ttl=10.0)
    assert holder.acquire()
    rel = Request(holder.key, holder.token, 0)
    acq = Request(holder.key, b"second-token", 10_000)
    dlm.executor._run_batch([acq, rel])
    assert rel.ok and acq.ok
    # (the round may return at quorum: the stragglers' answers are read when asked for)
    assert [o.outcome for o in dlm.executor.outcomes(rel.rnd)] == ["ok"] * 5
    assert [o.outcome for o in dlm.executor.outcomes(acq.rnd)] == ["ok"] * 5
    assert all(masters[i].command("GET", holder.key) == b"second-token" for i in range(5))
    again = Request(holder.key, b"second-token", 0)
    dlm.executor._run_batch([again])
    assert again.ok and keys_on(masters, name) == 0


def test_a_release_in_a_shared_round_reports_a_lock_no_longer_held(make_client, masters, name, keys_on):
    dlm = make_client(masters.urls, retry_count=0)
    stale = Request(key_of(dlm.prefix, name), b"not-the-holder", 0)
    other = Request(key_of(dlm.prefix, name + ":x"), b"tok-x", 10_000)
    dlm.executor._run_batch([other, stale])
    assert other.ok
    # not held anywhere: the round waited until a quorum had become impossible, or every answer
    assert not stale.ok and stale.rnd.successes == 0
    assert [o.outcome for o in dlm.executor.outcomes(stale.rnd)] == ["no"] * 5
    dlm.executor._run_batch([Request(other.key, b"tok-x", 0)])
    assert keys_on(masters, name + ":x") == 0


def test_pipelined_threads_with_a_master_stalled(make_client, fault_masters, name, keys_on):
    """A stalled master costs the shared rounds nothing past the early decision; nothing leaks.

    The stall is kept far below the age at which a connection that owes replies is given up
    (``protocol.link.STALE_AFTER``): until then every release is queued behind its SET on the stalled
    master's connection, so the resumed master runs both, in that order.
    """
    dlm = make_client(fault_masters.urls, retry_count=0, io_timeout=0.2)
    warm = dlm.lock(name + ":warm", ttl=5.0)
    assert warm.acquire()
    warm.release()
    fault_masters[2].pause()
    try:
        def cycles(k):
            done = 0
            for i in range(10):
                lk = dlm.lock(f"{name}:{k}:{i}", ttl=5.0)
                if lk.acquire(blocking=False):
                    lk.release()
                    done += 1
            return done

        started = time.monotonic()
        done = run_threads([lambda k=k: cycles(k) for k in range(4)])
        took = time.monotonic() - started
    finally:
        fault_masters[2].resume()
    assert done == [10] * 4
    assert took < 0.2 * 80 / 4  # 80 rounds; had each waited for the stalled master: 16 s
    end = time.monotonic() + 3.0  # the resumed master runs what was queued: SETs, then releases
    left = [(k, i) for k in range(4) for i in range(10)]
    while left and time.monotonic() < end:
        left = [(k, i) for k, i in left if keys_on(fault_masters, f"{name}:{k}:{i}")]
        time.sleep(0.05)
    assert left == []


def test_auto_pipeline_must_be_a_bool(make_client, masters):
    with pytest.raises(TypeError, match="auto_pipeline"):
        make_client(masters.urls, auto_pipeline="yes")
    dlm = make_client(masters.urls, auto_pipeline=False)
    lock = dlm.lock("fastredlock-test:no-pipeline", ttl=5.0)
    assert lock.acquire()
    lock.release()
    assert dlm.executor.combiner.carried == 0


def test_a_shared_round_repairs_a_release_whose_connection_broke(make_client, fault_masters, name, keys_on):
    """A master restarted under a reused connection: the acquisition behind the release reconnects
    for itself; the release, not waited for, is written again on a fresh connection."""
    dlm = make_client(fault_masters.urls, retry_count=0)
    holder = dlm.lock(name, ttl=10.0)
    assert holder.acquire()
    for m in fault_masters[:2]:
        m.restart()  # empty: no keys, no script cache
        m.command("SET", holder.key, holder.token, "PX", 10000)  # as if the key survived (persistence)
    rel = Request(holder.key, holder.token, 0)
    acq = Request(key_of(dlm.prefix, name + ":other"), b"other-token", 10_000)
    dlm.executor._run_batch([acq, rel])
    # Where the restarted masters' reset reached us before the release was written, the release's
    # own write reconnected and resent it; else the acquisitions found the connection broken and
    # the release was written again afterwards (_repair_releases). Either way it is gone everywhere.
    assert acq.ok and rel.ok
    assert keys_on(fault_masters, name) == 0
    dlm.executor._run_batch([Request(acq.key, b"other-token", 0)])
    assert keys_on(fault_masters, name + ":other") == 0


@pytest.mark.parametrize("serialized", [True, False], ids=["combiner", "control:no-combiner"])
def test_many_threads_entering_leaving_and_submitting_never_lose_a_wakeup_or_overlap(serialized):
    # The lean path takes and gives up the lead without the mutex (enter/leave); a follower that
    # queues in the instant the leader lets go must still be led. With the GIL switching every
    # microsecond, 8 threads x 3000 mixed requests: every thread finishes, and at most one round
    # (lean or shared) ever runs at a time. The negative control (``serialized=False``): the same
    # threads run their rounds without the combiner, and the overlap check must fire.
    import sys

    active = [0]
    overlaps = []
    done = [0]

    def round_body():
        active[0] += 1
        if active[0] != 1:
            overlaps.append(active[0])
        time.sleep(0) if done[0] % 7 == 0 else None
        active[0] -= 1

    def run(batch):
        round_body()
        for r in batch:
            r.ok = True

    combiner = Combiner(run, lambda req: None)

    def worker(w):
        for i in range(3000):
            if not serialized:
                round_body()
                done[0] += 1
                continue
            if (i + w) % 2:
                if combiner.enter():
                    try:
                        round_body()
                    finally:
                        combiner.leave()
                    continue
            req = Request(b"k", b"t", 1000)
            combiner.submit(req)
            assert req.ok
            done[0] += 1

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(old)
    assert not any(t.is_alive() for t in threads), "a request was never led (lost wake-up)"
    if not serialized:
        assert overlaps != [], "the overlap check saw nothing without the combiner"
        return
    assert overlaps == []
    assert not combiner._busy and combiner._queue == []


class PausingLead(list):
    """Stands in for the combiner's lead token: the next failed take (``pop()`` compiled, ``del``
    interpreted: the lead is taken) stops until resumed, so a test can let the leader go in exactly
    that instant."""

    def __init__(self, inner):
        super().__init__(inner)
        self.pause_next_failure = False
        self.failed = threading.Event()
        self.resume = threading.Event()

    def pop(self, *args):
        try:
            return super().pop(*args)
        except IndexError:
            self._failed()
            raise

    def __delitem__(self, index):
        try:
            super().__delitem__(index)
        except IndexError:
            self._failed()
            raise

    def _failed(self):
        if self.pause_next_failure:
            self.pause_next_failure = False
            self.failed.set()
            assert self.resume.wait(10)


def test_a_follower_that_queues_just_as_the_leader_lets_go_is_still_led():
    # The exact interleaving the lean path's leave() must survive: the follower finds the lead
    # taken, the leader lets go (its queue still empty), and only then the follower queues. The
    # follower must take the lead itself rather than wait for a leader that will never come.
    seen = []

    def run(batch):
        seen.append([r.key for r in batch])
        for r in batch:
            r.ok = True

    combiner = Combiner(run, lambda req: None)
    lead = combiner._lead_token = PausingLead(combiner._lead_token)
    assert combiner.enter()
    lead.pause_next_failure = True
    req, errors = Request(b"late", b"t", 1000), {}
    t = submit_in_thread(combiner, req, errors)
    assert lead.failed.wait(5)
    combiner.leave()
    lead.resume.set()
    t.join(5)
    assert not t.is_alive(), "the follower waits for a leader that is gone"
    assert req.ok and errors == {} and seen == [[b"late"]]
    assert not combiner._busy and combiner._queue == []
