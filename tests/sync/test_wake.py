"""Wake on release (fastredlock.engine.wake), fair turns, and the wait semantics of ``acquire``.

Every waiter here has a long ``retry_delay`` (2 s) unless the test is about the backoff, so a
waiter that got the lock within a fraction of it was woken, not polling. The negative controls run
the same harness with ``wake=False`` and must then wait for the backoff.
"""
from __future__ import annotations

import sys
import threading
import time

import pytest

from fastredlock.engine.wake import LINGER
from fastredlock.protocol.scripts import TURN_MS
from fastredlock.testing import LocalMaster, start_masters

from _checks import command_calls
from _contender import contend_no_hold, contend_woken, run_contenders
from _server import capabilities

SLOW = 2.0  # retry_delay of the waiters: a wake-up must beat it by far


def channel(name: str) -> bytes:
    return b"fastredlock-wake:" + name.encode()


def subscriptions(masters, name: str) -> int:
    """Subscribers of ``name``'s channel, summed over the masters."""
    return sum(m.command("PUBSUB", "NUMSUB", channel(name))[1] for m in masters)


def subscribed_clients(masters) -> int:
    """Connections with a subscription, over the masters (CLIENT LIST's ``sub=``/``psub=``)."""
    count = 0
    for m in masters:
        for line in m.command("CLIENT", "LIST").decode().splitlines():
            fields = dict(f.split("=", 1) for f in line.split(" ") if "=" in f)
            if int(fields.get("sub", 0)) or int(fields.get("psub", 0)):
                count += 1
    return count


def wait_until(predicate, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def waiter_thread(lock, out: list, release: bool = False, **kwargs):
    """Start a thread that acquires ``lock`` (``release``: and releases it at once); ``out`` gets
    the result and the time it returned."""
    def run() -> None:
        out.append(lock.acquire(**kwargs))
        out.append(time.monotonic())
        if release and out[0]:
            lock.release()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def time_to_wake(make_client, masters, name, delay: float = SLOW, **client_kwargs) -> float:
    """Seconds from a release to the acquisition by a waiter of another client (backoff ``delay``)."""
    holder = make_client(masters.urls).lock(name, ttl=10)
    assert holder.acquire(blocking=False)
    waiting = make_client(masters.urls, retry_delay=delay, retry_jitter=0.0, **client_kwargs)
    waiter = waiting.lock(name, ttl=10)
    out: list = []
    thread = waiter_thread(waiter, out)
    if client_kwargs.get("wake", True):
        assert wait_until(lambda: subscriptions(masters, name) == len(masters), 2.0)
    else:  # nothing to subscribe to: wait until its first attempt was answered (then it sleeps)
        assert wait_until(lambda: sum(s.replies for s in waiting.stats()) >= 3, 2.0)
    time.sleep(0.05)
    released = time.monotonic()
    holder.release()
    thread.join(delay * 3)
    assert out and out[0] is True
    waiter.release()
    return out[1] - released


def test_a_waiter_wakes_within_ms_of_the_release(make_client, masters, name, keys_on):
    took = time_to_wake(make_client, masters, name)
    assert took < 0.25, f"the waiter took {took * 1000:.1f} ms: it polled (retry_delay {SLOW} s)"
    assert keys_on(masters, name) == 0


def test_without_wake_the_waiter_sleeps_its_backoff(make_client, masters, name):
    # The negative control of the test above: the same harness with wake=False must wait.
    took = time_to_wake(make_client, masters, name, 0.6, wake=False)
    assert took > 0.3, f"woken in {took * 1000:.1f} ms without wake: the detector above cannot fail"


def test_subscriptions_end_with_the_last_waiter(make_client, masters, name):
    time_to_wake(make_client, masters, name)
    assert wait_until(lambda: subscriptions(masters, name) == 0, LINGER + 2.0), "a subscription was left"


def test_one_connection_per_master_serves_every_waiter(make_client, masters, name):
    holder = make_client(masters.urls).lock(name, ttl=10)
    other = make_client(masters.urls).lock(name + ":other", ttl=10)
    assert holder.acquire(blocking=False) and other.acquire(blocking=False)
    before = subscribed_clients(masters)
    dlm = make_client(masters.urls, retry_delay=SLOW, retry_jitter=0.0)
    outs = [[] for _ in range(6)]
    threads = [waiter_thread(dlm.lock(name, ttl=10), outs[k], release=True) for k in range(3)]
    threads += [waiter_thread(dlm.lock(name + ":other", ttl=10), outs[3 + k], release=True) for k in range(3)]
    assert wait_until(lambda: subscriptions(masters, name) == len(masters), 2.0)
    assert subscribed_clients(masters) - before == len(masters)  # one per master, two channels, six waiters
    released = time.monotonic()
    holder.release()
    other.release()
    for t in threads:
        t.join(SLOW * 4)
    assert all(out and out[0] is True for out in outs), outs  # each turn woke the next
    assert outs[0][1] - released < 3 * SLOW
    dlm.close()
    assert wait_until(lambda: subscribed_clients(masters) == before, 2.0)


def test_a_dropped_notification_connection_costs_one_backoff(make_client, fault_masters, name, keys_on):
    # CLIENT KILL of every notification connection just before the release: the message is lost,
    # the waiter gets the lock by its backoff, and the next waits are woken again (reconnected).
    masters = fault_masters
    holder = make_client(masters.urls).lock(name, ttl=10)
    assert holder.acquire(blocking=False)
    waiter = make_client(masters.urls, retry_delay=0.4, retry_jitter=0.0).lock(name, ttl=10)
    out: list = []
    thread = waiter_thread(waiter, out)
    assert wait_until(lambda: subscriptions(masters, name) == len(masters), 2.0)
    for m in masters:
        m.command("CLIENT", "KILL", "TYPE", "pubsub")
    released = time.monotonic()
    holder.release()
    thread.join(5.0)
    assert out and out[0] is True, "the waiter hung after its notifications were lost"
    assert out[1] - released < 0.4 + 1.0
    waiter.release()
    assert keys_on(masters, name) == 0
    took = time_to_wake(make_client, masters, name)  # reconnected: woken again
    assert took < 0.25


def test_all_notifications_lost_waiters_get_the_lock_by_backoff(make_client, fault_masters, name):
    # Every message is dropped as it arrives at the client: no wake-up ever comes.
    masters = fault_masters
    holder = make_client(masters.urls).lock(name, ttl=10)
    assert holder.acquire(blocking=False)
    dlm = make_client(masters.urls, retry_delay=0.3, retry_jitter=0.0)
    notifier = dlm.executor.notifier
    notifier.channels.on_reply = lambda reply: []  # every message lost on arrival
    out: list = []
    thread = waiter_thread(dlm.lock(name, ttl=10), out)
    time.sleep(0.1)
    released = time.monotonic()
    holder.release()
    thread.join(3.0)
    assert out and out[0] is True
    assert 0.1 < out[1] - released < 0.3 + 1.0  # by the backoff, not woken, not hung


def release_to_a_waiter(make_client, masters, name, **holder_kwargs):
    """A holder releases while a waiter of another client listens: ``(holder, out, thread)``;
    the waiter's thread releases as soon as it acquired."""
    holder = make_client(masters.urls, **holder_kwargs).lock(name, ttl=10)
    assert holder.acquire(blocking=False)
    waiter = make_client(masters.urls, retry_delay=SLOW, retry_jitter=0.0).lock(name, ttl=10)
    out: list = []
    thread = waiter_thread(waiter, out, release=True)
    assert wait_until(lambda: subscriptions(masters, name) == len(masters), 2.0)
    time.sleep(0.05)
    holder.release()
    return holder, out, thread


def test_a_releaser_asking_again_lets_the_woken_waiter_go_first(make_client, masters, name):
    holder, out, thread = release_to_a_waiter(make_client, masters, name)
    assert {"woke waiters", "gave the turn"} & {o.detail for o in holder.outcomes}
    assert holder.acquire(timeout=SLOW * 3)  # at once: without the courtesy pause it would win
    took_back = time.monotonic()
    thread.join(SLOW * 3)
    assert out and out[0] is True
    assert out[1] < took_back, "the releaser took the lock back before the woken waiter"
    holder.release()


def queued(masters, name: str) -> int:
    """Waiters in ``name``'s queue (its ``:wait`` sorted set), summed over the masters."""
    return sum(m.command("ZCARD", "{" + name + "}:wait") for m in masters)


def released_to_a_deaf_waiter(make_client, masters, name):
    """A holder releases while a waiter of another client is in the masters' queues but never
    hears a message (every pub/sub reply dropped on arrival): ``(holder, released, thread)``; the
    waiter's thread releases at once if it acquires."""
    holder = make_client(masters.urls, retry_delay=0.01, retry_jitter=0.0).lock(name, ttl=10)
    assert holder.acquire(blocking=False)
    dlm = make_client(masters.urls, retry_delay=0.05, retry_jitter=0.0)
    dlm.executor.notifier.channels.on_reply = lambda reply: []
    thread = waiter_thread(dlm.lock(name, ttl=10), [], release=True, timeout=0.4)
    assert wait_until(lambda: queued(masters, name) == len(masters), 2.0), "the waiter did not queue"
    dlm.retry_delay = SLOW  # from now on it sleeps long: only the turn can hold the releaser back
    time.sleep(0.06)  # its current sleep (0.05) ends: it sleeps SLOW now
    released = time.monotonic()
    holder.release()
    return holder, released, thread


def test_the_turn_holds_back_a_releaser_that_asks_again(make_client, masters, name):
    # The waiter a release names has the turn for TURN_MS: the releaser's next (queued) attempt
    # does not take the free key meanwhile, even when the named waiter never comes.
    holder, released, thread = released_to_a_deaf_waiter(make_client, masters, name)
    assert {"woke waiters", "gave the turn"} & {o.detail for o in holder.outcomes}
    assert holder.acquire(timeout=SLOW)
    took = time.monotonic() - released
    assert TURN_MS / 1000 * 0.8 <= took < SLOW / 2, took  # after the turn lapsed, not at once
    holder.release()
    thread.join(SLOW * 2)


def test_a_plain_attempt_does_not_wait_for_the_turn(make_client, masters, name):
    # The negative control of the test above: the same free key with the same turn given, taken
    # at once by a non-blocking attempt (a plain SET NX, which knows nothing of turns).
    holder, released, thread = released_to_a_deaf_waiter(make_client, masters, name)
    assert all(m.command("EXISTS", "{" + name + "}:next") for m in masters)  # the turn was given
    assert holder.acquire(blocking=False)
    assert time.monotonic() - released < TURN_MS / 1000
    holder.release()
    thread.join(SLOW * 2)


def queued_behind_a_holder(make_client, masters, name, retry_delay, count=3, **acquire):
    """``count`` waiters of clients of their own queued behind a holder: ``(holder, outs, threads)``
    (each waiter's thread releases as soon as it acquired; ``out`` as for :func:`waiter_thread`)."""
    holder = make_client(masters.urls).lock(name, ttl=10)
    assert holder.acquire(blocking=False)
    outs, threads = [], []
    for _ in range(count):
        out: list = []
        outs.append(out)
        threads.append(waiter_thread(make_client(masters.urls, retry_delay=retry_delay, retry_jitter=0.0).lock(name, ttl=10),
                                     out, release=True, **acquire))
    assert wait_until(lambda: queued(masters, name) == count * len(masters), 3.0)
    return holder, outs, threads


def test_queued_waiters_leave_no_queue_behind(make_client, masters, name, keys_on):
    # Three waiters queue, each is named in turn and takes the lock; then no queue, no turn key.
    holder, outs, threads = queued_behind_a_holder(make_client, masters, name, 0.05, timeout=5.0)
    holder.release()
    for thread in threads:
        thread.join(5.0)
    assert all(out and out[0] is True for out in outs)
    assert queued(masters, name) == 0
    time.sleep(2 * TURN_MS / 1000)  # a turn given where its waiter had already won elsewhere lapses
    assert keys_on(masters, "{" + name + "}:next") == 0 and keys_on(masters, name) == 0


def test_a_release_nobody_waits_for_says_nothing(make_client, masters, name):
    lock = make_client(masters.urls).lock(name, ttl=10)
    assert lock.acquire()
    lock.release()
    assert all(o.detail is None for o in lock.outcomes)
    assert not lock._client.executor.notifier.channels.released_at


def test_threads_of_two_clients_take_turns(make_client, masters, name, keys_on):
    # 8 threads over two clients, each holding 1 ms for 1.5 s: nobody starves, nobody overlaps.
    counter = {"holders": 0, "overlaps": 0}
    guard = threading.Lock()
    clients = [make_client(masters.urls), make_client(masters.urls)]
    held = [0] * 8

    def body(k: int) -> None:
        end = time.monotonic() + 1.5
        lock = clients[k % 2].lock(name, ttl=5)
        while time.monotonic() < end:
            if not lock.acquire(timeout=max(0.0, end - time.monotonic())):
                break
            with guard:
                counter["holders"] += 1
                counter["overlaps"] += counter["holders"] != 1
            time.sleep(0.001)
            with guard:
                counter["holders"] -= 1
            held[k] += 1
            lock.release()

    threads = [threading.Thread(target=body, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert counter["overlaps"] == 0
    assert min(held) > 0, f"a thread starved: {held}"
    assert keys_on(masters, name) == 0


@pytest.mark.slow
def test_processes_and_threads_contending_take_turns_and_leave_nothing(core, masters, name, keys_on):
    counter = LocalMaster().start()
    try:
        reports = run_contenders(contend_woken, 8, (masters.urls, core, name, counter.port, 3.0, 2))
        held = [h for totals in reports for h, _, _ in totals]
        assert sum(o for totals in reports for _, o, _ in totals) == 0, f"two holders at once: {reports}"
        assert sum(e for totals in reports for _, _, e in totals) == 0
        assert min(held) > 0, f"a contender never got the lock: {held}"
        assert keys_on(masters, name) == 0
        assert counter.command("GET", "holders") == b"0"
        assert wait_until(lambda: subscriptions(masters, name) == 0, LINGER + 2.0)
    finally:
        counter.stop()


def test_a_split_round_does_not_leave_every_waiter_to_its_backoff(core, masters, name, keys_on):
    # Four processes taking and dropping one name with no hold: now and then two queued attempts
    # split a round (each took the key on some masters) and both fail; their cleanups are quiet
    # (no turn given, nobody woken), so unless the losers retry soon every waiter sleeps its
    # backoff (1 s here). Nobody should wait anywhere near that long.
    reports = run_contenders(contend_no_hold, 4, (masters.urls, core, name, 3.0))
    assert min(held for held, _ in reports) > 0, reports
    assert max(longest for _, longest in reports) < 0.5, reports
    assert keys_on(masters, name) == 0


# --- wait semantics -----------------------------------------------------------------------------
def test_acquire_without_timeout_waits_until_acquired(make_client, masters, name):
    holder = make_client(masters.urls).lock(name, ttl=10)
    assert holder.acquire()
    # default retry_count: no limit; with the old "1 + 3 attempts" it would give up after ~0.2 s
    waiter = make_client(masters.urls, retry_delay=0.05, retry_jitter=0.0, wake=False).lock(name, ttl=10)
    out: list = []
    thread = waiter_thread(waiter, out)
    time.sleep(0.6)
    assert not out, "acquire() gave up while the lock was held"
    holder.release()
    thread.join(2.0)
    assert out and out[0] is True
    waiter.release()


@pytest.mark.parametrize("kwargs", [{"timeout": 0}, {"blocking": False}])
def test_timeout_zero_and_non_blocking_make_one_attempt(make_client, masters, name, kwargs):
    events: list = []
    holder = make_client(masters.urls).lock(name, ttl=10)
    assert holder.acquire()
    lock = make_client(masters.urls, on_event=events.append).lock(name, ttl=10)
    started = time.monotonic()
    assert lock.acquire(**kwargs) is False
    assert time.monotonic() - started < 0.2
    assert events[-1].attempts == 1
    holder.release()


def test_a_timeout_bounds_the_whole_wait(make_client, masters, name):
    holder = make_client(masters.urls).lock(name, ttl=10)
    assert holder.acquire()
    lock = make_client(masters.urls, retry_delay=SLOW, retry_jitter=0.0).lock(name, ttl=10)
    started = time.monotonic()
    assert lock.acquire(timeout=0.3) is False
    assert 0.29 < time.monotonic() - started < 0.3 + 0.2
    holder.release()


def test_a_queued_waiter_killed_does_not_block_the_others(make_client, masters, name, core, keys_on):
    # A waiter in another process queues, then is killed with SIGKILL. The release pops it (its
    # entry has no deadline) but nobody listens on its turn channel any more: the turn is taken
    # back and the release wakes everyone instead. At worst (its subscription still alive) the
    # turn lapses after TURN_MS and the next waiter's backoff ends. No deadlock; nothing is left.
    import signal
    import subprocess

    holder = make_client(masters.urls).lock(name, ttl=10)
    assert holder.acquire(blocking=False)
    code = ("import sys\nfrom fastredlock import Redlock\n"
            "Redlock(sys.argv[1:], retry_delay=0.05, retry_jitter=0.0, restart_aware=False, core=%r)"
            ".lock(%r, ttl=10).acquire()\n" % (core, name))
    victim = subprocess.Popen([sys.executable, "-c", code, *masters.urls])
    try:
        assert wait_until(lambda: queued(masters, name) == len(masters), 10.0), "the victim did not queue"
        victim.send_signal(signal.SIGKILL)
        victim.wait(5)
    finally:
        if victim.poll() is None:
            victim.kill()
    backoff = 0.3
    out: list = []
    thread = waiter_thread(make_client(masters.urls, retry_delay=backoff, retry_jitter=0.0).lock(name, ttl=10),
                           out, release=True, timeout=5.0)
    assert wait_until(lambda: queued(masters, name) == 2 * len(masters), 3.0)  # behind the victim
    released = time.monotonic()
    holder.release()
    thread.join(5.0)
    assert out and out[0] is True, "the waiter behind a killed one never got the lock"
    assert out[1] - released < TURN_MS / 1000 + backoff + 1.0
    time.sleep(2 * TURN_MS / 1000)
    assert queued(masters, name) == 0 and keys_on(masters, "{" + name + "}:next") == 0


@pytest.mark.parametrize("channels, woken", [(["&fastredlock-wake:*", "&fastredlock-turn:*"], True),
                                             (["&fastredlock-wake:*"], True), ([], False)],
                         ids=["both-channels", "lock-channels-only", "no-channels"])
def test_acl_channel_permissions(make_client, name, channels, woken):
    # An ACL user with both channel patterns is woken (by its turn); with the lock channels only,
    # by the release's fallback message ('1': its turn was not heard); with none, releases still
    # work and the waiter gets the lock by its backoff.
    with start_masters(1) as local:
        master = local[0]
        assert master.command("ACL", "SETUSER", "locker", "on", ">pw", "+@all", "~*", "resetchannels",
                              *channels) == b"OK"
        urls = [f"redis://locker:pw@127.0.0.1:{master.port}"]
        holder = make_client(urls).lock(name, ttl=10)
        assert holder.acquire(blocking=False)
        backoff = 1.0
        out: list = []
        dlm = make_client(urls, retry_delay=0.05, retry_jitter=0.0)
        thread = waiter_thread(dlm.lock(name, ttl=10), out, release=True, timeout=5.0)
        assert wait_until(lambda: master.command("ZCARD", "{" + name + "}:wait") == 1, 2.0)
        dlm.retry_delay = backoff
        time.sleep(0.06)  # its current sleep (0.05) ends: it sleeps the backoff now
        released = time.monotonic()
        holder.release()
        assert all(o.outcome == "ok" for o in holder.outcomes)
        thread.join(5.0)
        assert out and out[0] is True
        took = out[1] - released
        if woken:
            assert took < backoff / 2, took
        else:
            assert took > backoff / 2, took  # not woken: its backoff let it in


ODD_KEYS = [b"plain", b"{t}x", b"a}b", b"a{}b", b"{}", b"x{y", b"}", b"{a}b}", b"{{a}}", b"a{b}c}"]


def test_queue_keys_share_the_key_slot_and_the_lua_agrees(masters):
    # Queue and turn keys are derived in two places, Python (the waiters' ACQUIRE_QUEUED) and Lua
    # (RELEASE): they must agree, and stay in the key's cluster slot; a key with '}' and no hash
    # tag has no queue (its '{key}' would hash elsewhere).
    from fastredlock.protocol.cluster import key_slot
    from fastredlock.protocol.family import queueable, tagged
    from fastredlock.protocol.scripts import _TAGGED

    probe = _TAGGED + b"return tagged(KEYS[1], ':wait') or false"
    for key in ODD_KEYS:
        lua = masters[0].command("EVAL", probe, 1, key)
        if queueable(key):
            assert lua == tagged(key, b":wait") and key_slot(lua) == key_slot(key), key
        else:
            assert lua is None and key_slot(b"{" + key + b"}:wait") != key_slot(key), key
    assert not queueable(b"a}b") and queueable(b"{t}x") and queueable(b"plain")


def test_a_key_without_a_queue_still_wakes_its_waiter(make_client, masters):
    # 'a}b' cannot queue: its waiter is woken by the release's message to all, as before turns.
    name = "odd:a}b"
    holder = make_client(masters.urls).lock(name, ttl=10)
    assert holder.acquire(blocking=False)
    out: list = []
    thread = waiter_thread(make_client(masters.urls, retry_delay=SLOW, retry_jitter=0.0).lock(name, ttl=10),
                           out, release=True)
    assert wait_until(lambda: subscriptions(masters, name) == len(masters), 2.0)
    released = time.monotonic()
    holder.release()
    thread.join(SLOW * 2)
    assert out and out[0] is True and out[1] - released < SLOW / 4


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_a_client_alone_again_owes_no_courtesy_to_itself(make_client, masters, name, kind):
    # After one contention a client keeps its subscription for a while: its own releases are
    # then heard by itself. That must not make it hold back before each next acquisition (it did:
    # every cycle paid the courtesy pause, ten times slower).
    a, b = make_client(masters.urls, retry_delay=SLOW), make_client(masters.urls)
    make = (lambda dlm: dlm.lock(name, ttl=10)) if kind == "lock" else (lambda dlm: dlm.semaphore(name, 1, ttl=10))
    held = make(b)
    assert held.acquire(blocking=False)
    out: list = []
    thread = waiter_thread(make(a), out, release=True)
    assert wait_until(lambda: subscriptions(masters, name if kind == "lock" else held.key.decode()) == len(masters), 2.0)
    held.release()
    thread.join(SLOW)
    assert out and out[0] is True
    owed = a.executor.notifier.channels.released_at
    for _ in range(5):
        lock = make(a)
        assert lock.acquire(blocking=False)
        lock.release()
        assert not owed, "a release heard only by this client's own subscription made it hold back"


@pytest.mark.parametrize("fencing", [False, True], ids=["plain", "fenced"])
def test_a_failed_plain_attempt_gives_no_turn_away(make_client, masters, name, fencing):
    # The same for an attempt that does not queue (non-blocking; a fenced one): the cores' own
    # cleanup of a failed attempt is a quiet RELEASE (no turn, no wake), not the holder's release.
    queue = "{" + name + "}:wait"
    for m in masters:
        m.command("SET", name, "holder", "PX", 10000)
    for m in masters[3:]:
        m.command("DEL", name)  # the holder's key lost on two masters
        m.command("ZADD", queue, 1, "next.1|0")  # and a waiter queued there, first in line
        m.command("PERSIST", queue)
    lock = make_client(masters.urls, retry_count=0).lock(name, ttl=10, fencing=fencing)
    assert lock.acquire(blocking=False) is False  # two masters of five
    for m in masters[3:]:
        assert wait_until(lambda: m.command("EXISTS", name) == 0, 2.0)  # its own key was cleaned up
        assert m.command("ZSCORE", queue, "next.1|0") is not None, "the cleanup popped the next waiter"
        assert m.command("EXISTS", "{" + name + "}:next") == 0
    for m in masters:
        m.command("DEL", name, queue)


def test_a_failed_queued_attempt_gives_no_turn_away(make_client, masters, name):
    # A queued attempt that took the key on two masters only (the holder's key is gone there, as
    # after a restart) cleans up there; that cleanup must not hand the turn to the next waiter of
    # those masters (it would be named there while the real release names another elsewhere).
    queue = "{" + name + "}:wait"
    for m in masters:
        m.command("SET", name, "holder", "PX", 10000)
    waiter = make_client(masters.urls, retry_count=None, retry_delay=0.1, retry_jitter=0.0).lock(name, ttl=10)
    done = []
    thread = threading.Thread(target=lambda: done.append(waiter.acquire(timeout=0.6)))
    thread.start()
    assert wait_until(lambda: all(m.command("ZCARD", queue) == 1 for m in masters), 2.0)  # it queued
    for m in masters[3:]:
        m.command("DEL", name)  # the holder's key lost on two masters
        m.command("ZADD", queue, 1, "next.1|0")  # and another waiter queued there, first in line
        m.command("PERSIST", queue)  # (that waiter's renewals, which keep the queue alive, are not simulated)
    thread.join(5)
    assert done == [False]  # two masters of five: never a quorum
    for m in masters[3:]:
        assert m.command("ZSCORE", queue, "next.1|0") is not None, "the cleanup popped the next waiter"
        assert m.command("EXISTS", "{" + name + "}:next") == 0
        assert m.command("EXISTS", name) == 0  # its own key was cleaned up
    for m in masters:
        m.command("DEL", name, queue)


# --- the wake mark (issue 30: a release that finds no mark only deletes) ----------------------------
@pytest.mark.parametrize("name", ["plain", "{tag}:x", "x{y"], ids=["no-tag", "tag", "open-brace"])
def test_a_release_nobody_waits_for_costs_the_master_get_and_del(make_client, name):
    # The common case: no waiter marked the name, so the release script calls GET and one DEL (of
    # the key and the mark it does not find), nothing else: no PUBLISH, no look at the queue. (Where
    # the master has DELIFEQ or DELEX, the native release: the delete and EXISTS of the mark.)
    with start_masters(1) as local:
        lock = make_client(local.urls, retry_count=0).lock(name, ttl=10)
        assert lock.acquire() and lock.release() is None  # connected, scripts loaded, probes answered
        local[0].command("CONFIG", "RESETSTAT")
        for _ in range(20):
            assert lock.acquire()
            lock.release()
        calls = command_calls(local[0])
        assert calls.pop("set") == 20
        caps = capabilities(local[0])
        if caps.native_delete:
            # A native release: the owner-checked delete and the mark's EXISTS, no script at all
            assert calls.pop("delifeq", 0) + calls.pop("delex", 0) == 20 and calls.pop("exists") == 20
        else:
            assert calls.pop("evalsha") == 20
            assert calls.pop("get") == 20 and calls.pop("del") == 20
        # (Redis 6.2 counts CONFIG RESETSTAT as "config", later servers as "config|resetstat")
        assert set(calls) <= {"config", "config|resetstat"}, calls  # no publish, exists, zpopmin, time


ODD_QUEUEABLE = [key for key in ODD_KEYS if __import__("fastredlock.protocol.family").protocol.family.queueable(key)]


def test_the_lean_release_takes_the_mark_the_waiters_set(masters):
    # The waiters name the mark in Python (wake_mark, as ACQUIRE_QUEUED and MARK get it), the
    # release scripts build it in Lua: for every key that can queue they must name the same key,
    # in the key's slot (a release that found it goes on to wake; the mark is gone with the key).
    from fastredlock.protocol.cluster import key_slot
    from fastredlock.protocol.family import lean_release, wake_mark

    m = masters[0]
    for key in ODD_QUEUEABLE:
        mark = wake_mark(key)
        assert key_slot(mark) == key_slot(key), key
        m.command("SET", key, "tok")
        m.command("SET", mark, "1")
        assert m.command("EVAL", lean_release(key), 1, key, "tok") == 1
        assert m.command("EXISTS", key, mark) == 0, key
    assert {lean_release(key) for key in ODD_KEYS if key not in ODD_QUEUEABLE} == {None}  # RELEASE_FULL


def test_a_fenced_waiter_is_woken_by_the_release(make_client, masters, name, keys_on):
    # A fenced lock's waiter has no place in the queue: it marks the name before each pause, so
    # the holder's release (of a key otherwise unmarked) still publishes to it.
    holder = make_client(masters.urls).lock(name, ttl=10, fencing=True)
    assert holder.acquire(blocking=False)
    out: list = []
    thread = waiter_thread(make_client(masters.urls, retry_delay=SLOW, retry_jitter=0.0).lock(name, ttl=10, fencing=True),
                           out, release=True)
    assert wait_until(lambda: keys_on(masters, "{" + name + "}:wake") == len(masters), 2.0), "no mark"
    assert queued(masters, name) == 0
    released = time.monotonic()
    holder.release()
    thread.join(SLOW * 2)
    assert out and out[0] is True
    assert out[1] - released < 0.25, f"the waiter took {(out[1] - released) * 1000:.0f} ms: it was not woken"


def test_a_waiter_with_retry_count_is_woken_in_its_first_pause(make_client, masters, name):
    # With a retry_count, the waiter pauses before its first queued attempt: no place in the queue
    # yet, so it marks the name for that pause.
    holder = make_client(masters.urls).lock(name, ttl=10)
    assert holder.acquire(blocking=False)
    out: list = []
    thread = waiter_thread(make_client(masters.urls, retry_count=3, retry_delay=SLOW, retry_jitter=0.0).lock(name, ttl=10),
                           out, release=True)
    assert wait_until(lambda: subscriptions(masters, name) == len(masters), 2.0)
    time.sleep(0.05)
    assert queued(masters, name) == 0
    released = time.monotonic()
    holder.release()
    thread.join(SLOW * 2)
    assert out and out[0] is True and out[1] - released < 0.25


def test_each_queued_waiter_is_named_in_turn_without_its_backoff(make_client, masters, name, keys_on):
    # The first release takes the mark and names the first waiter; the queue is not empty, so it
    # marks the name again, and every release after it names the next waiter. (Unmarked, the later
    # waiters would sleep their backoff, SLOW, one after another.)
    holder, outs, threads = queued_behind_a_holder(make_client, masters, name, SLOW)
    released = time.monotonic()
    holder.release()
    for thread in threads:
        thread.join(SLOW * 4)
    assert all(out and out[0] is True for out in outs), outs
    assert max(out[1] for out in outs) - released < SLOW / 2, [out[1] - released for out in outs]
    assert queued(masters, name) == 0 and keys_on(masters, name) == 0


def test_a_release_by_an_older_client_still_wakes_a_marked_waiter(make_client, masters, name):
    # Mixed versions: a client from before the wake mark releases with RELEASE_FULL (it always
    # looks at the queue and publishes), which names this version's queued waiter all the same.
    from fastredlock.protocol.scripts import RELEASE_FULL

    for m in masters:
        m.command("SET", name, "old-client", "PX", 10000)
    out: list = []
    thread = waiter_thread(make_client(masters.urls, retry_delay=SLOW, retry_jitter=0.0).lock(name, ttl=10), out,
                           release=True)
    assert wait_until(lambda: queued(masters, name) == len(masters), 2.0)
    released = time.monotonic()
    said = [m.command("EVAL", RELEASE_FULL, 1, name, "old-client") for m in masters]
    assert said[0] == 3 and set(said) <= {2, 3}, said  # (the woken waiter may be in or out of a later queue)
    thread.join(SLOW * 2)
    assert out and out[0] is True and out[1] - released < 0.25


def test_a_waiter_of_an_older_client_is_not_named_and_waits_its_backoff(make_client, masters, name):
    # Mixed versions, the other way: a waiter from before the wake mark queued without marking
    # the name, so this version's release only deletes; it keeps its place, and comes back by its
    # backoff (its attempts still exclude everyone: only its wake-up is late).
    holder = make_client(masters.urls).lock(name, ttl=10)
    assert holder.acquire(blocking=False)
    for m in masters:
        m.command("ZADD", "{" + name + "}:wait", 1, "older.1|0")
    holder.release()
    assert all(o.detail is None for o in holder.outcomes)
    assert [m.command("ZSCORE", "{" + name + "}:wait", "older.1|0") for m in masters] == [b"1"] * len(masters)
    for m in masters:
        m.command("DEL", "{" + name + "}:wait")
