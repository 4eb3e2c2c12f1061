"""Masters that answer nonsense, refuse to log in, or lack permissions: they count as "no".

A :class:`~fastredlock.testing.FakeMaster` answers every lock command with one hostile behaviour
that only a socket shows (close, reset, a reply cut short, silence; the reply-content cases are
protocol tables in tests/protocol/test_hostile_replies.py). Next
to four real masters the lock is still acquired (4 of 5) and that master's outcome says what was
wrong; alone it is simply "not acquired". Never an exception, never a hang, never unbounded memory.
"""
from __future__ import annotations


import pytest

from fastredlock import LockNotOwnedError
from fastredlock.testing import HOSTILE_REPLIES, FakeMaster, start_masters
from fastredlock.protocol.family import READ_ACQUIRE, sha_of
from fastredlock.protocol.scripts import RELEASE_SHA

from _checks import Timer, bound, gone_within

#: What each hostile behaviour that needs a socket must be reported as. The reply *content* cases
#: (garbage, wrong types, huge headers, streams, two replies...) are protocol tables:
#: tests/protocol/test_hostile_replies.py feeds their bytes through the guard and both readers.
EXPECTED = {
    "truncated": {"timeout"},
    "half then close": {"connection error"},
    "half then reset": {"connection error"},
    "close": {"connection error"},
    "silent": {"timeout"},
    # content, but what follows needs a connection: the release on the out-of-step connection
    "two replies": {"ok", "protocol error"},
}
assert set(EXPECTED) <= set(HOSTILE_REPLIES)
CASES = [pytest.param(case, id=case.replace(" ", "-")) for case in EXPECTED]

#: Growth of the process's peak RSS one hostile round may cause: a lock reply is a few bytes, so a
#: master announcing 512 MB (or a billion elements) must be cut off, not buffered.
RSS_BUDGET_MB = 64

def _peak_rss_mb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
    return 0


def _reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class PeakRss:
    """``with PeakRss() as p: ...`` then ``p.growth_mb`` (None where it cannot be measured)."""

    def __enter__(self) -> "PeakRss":
        self.ok = _reset_peak_rss()
        self.before = _peak_rss_mb()
        self.growth_mb = None
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.ok:
            self.growth_mb = _peak_rss_mb() - self.before


@pytest.mark.parametrize("case", CASES)
def test_hostile_master_counts_as_no(make_client, masters, name, case):
    with FakeMaster(HOSTILE_REPLIES[case]) as fake:
        dlm = make_client(masters.urls[:4] + [fake.url], retry_count=0, connect_timeout=0.02)
        lock = dlm.lock(name, ttl=5.0)
        with PeakRss() as rss, Timer() as t:
            assert lock.acquire()
        assert t.elapsed < bound(1), t.elapsed
        assert [o.outcome for o in lock.outcomes[:4]] == ["ok"] * 4
        hostile = lock.outcomes[4]
        assert hostile.outcome in EXPECTED[case], hostile
        if hostile.outcome in ("protocol error", "error reply", "connection error"):
            assert hostile.detail, hostile  # a clear reason for the operator
        if case == "error":
            assert "the fake master refuses" in hostile.detail
        if rss.growth_mb is not None:
            assert rss.growth_mb < RSS_BUDGET_MB, f"peak RSS grew by {rss.growth_mb} MB"
        with Timer() as t:
            lock.release()  # 4 of 5 confirm: no exception
        assert t.elapsed < bound(1), t.elapsed
        assert lock.outcomes[4].outcome in EXPECTED[case] | {"no"}
    gone_within(masters, name, bound(1))


@pytest.mark.parametrize("case", CASES)
def test_hostile_single_master_is_not_acquired(make_client, name, case):
    with FakeMaster(HOSTILE_REPLIES[case]) as fake:
        dlm = make_client([fake.url], retry_count=0, connect_timeout=0.02)
        lock = dlm.lock(name, ttl=5.0)
        with Timer() as t:
            acquired = lock.acquire()
        assert t.elapsed < bound(2), t.elapsed  # the attempt and its cleanup
        if case == "two replies":
            assert acquired and lock.outcomes[0].outcome == "ok"
            with pytest.raises(LockNotOwnedError):
                lock.release()  # the fake answers +OK to the script: a wrong type, reported
            assert lock.outcomes[0].outcome == "protocol error"
            return
        assert acquired is False
        assert not lock.locked() and lock.validity == 0.0


def test_streamed_huge_reply_is_cut_off_early(make_client, name):
    with FakeMaster(HOSTILE_REPLIES["huge bulk streamed"]) as fake:
        dlm = make_client([fake.url], retry_count=0, io_timeout=0.5)
        lock = dlm.lock(name, ttl=5.0)
        with PeakRss() as rss:
            assert lock.acquire() is False
        if rss.growth_mb is None:
            pytest.skip("peak RSS cannot be reset on this platform")
        # A lock reply is a few bytes (INFO a few KB): a master that announces 512 MB is lying.
        assert rss.growth_mb < 64, f"peak RSS grew by {rss.growth_mb} MB"


# --- AUTH and ACL -------------------------------------------------------------------------------------
def test_wrong_password_counts_as_no_with_server_message(make_client, name):
    with start_masters(3, extra_args=["--requirepass", "right"]) as local:
        urls = [f"redis://:{'wrong' if i == 0 else 'right'}@127.0.0.1:{m.port}" for i, m in enumerate(local)]
        lock = make_client(urls, retry_count=0).lock(name, ttl=5.0)
        assert lock.acquire()
        first = lock.outcomes[0]
        assert first.outcome == "error reply" and "WRONGPASS" in first.detail, first
        lock.release()
        assert all(m.command("AUTH", "right") == b"OK" for m in local)


def test_password_for_master_without_one_counts_as_no(make_client, name):
    with start_masters(1) as local:
        lock = make_client([f"redis://:secret@127.0.0.1:{local[0].port}"], retry_count=0).lock(name, ttl=5.0)
        assert lock.acquire() is False
        outcome = lock.outcomes[0]
        assert outcome.outcome == "error reply" and "AUTH" in outcome.detail, outcome


@pytest.mark.parametrize(
    "rules, denied",
    [
        (["+@all", "-set", "~*"], "acquire"),  # may not SET
        (["+@all", "-evalsha", "-eval", "~*"], "release"),  # may lock, may not run the scripts
        (["+@all", "~other:*"], "acquire"),  # may not touch our keys
    ],
    ids=["no-set", "no-scripts", "no-key"],
)
def test_missing_acl_permission_counts_as_no_with_server_message(make_client, name, rules, denied):
    with start_masters(3) as local:
        for m in local:
            assert m.command("ACL", "SETUSER", "locker", "on", ">pw", "+@all", "~*") == b"OK"
        # master 0 lacks a permission; the other two grant everything
        assert local[0].command("ACL", "SETUSER", "locker", "reset", "on", ">pw", *rules) == b"OK"
        urls = [f"redis://locker:pw@127.0.0.1:{m.port}" for m in local]
        lock = make_client(urls, retry_count=0).lock(name, ttl=5.0)
        assert lock.acquire()
        if denied == "acquire":
            first = lock.outcomes[0]
            assert first.outcome == "error reply" and "NOPERM" in first.detail, first
            lock.release()
        else:
            lock.release()  # 2 of 3: no exception
            first = lock.outcomes[0]
            # A master that refuses scripts gets native commands only: where it has a native
            # delete (Valkey >= 9.0) the release is that; where not, the client never took the
            # lock there (it could not release it), so nothing was left for the TTL.
            assert first.outcome == "ok" or (first.outcome == "error reply" and "NOPERM" in first.detail
                                             and "scripts refused" in first.detail), first
            assert local[0].command("EXISTS", name) == 0
        gone_within(local, name, bound(1))


# --- a real master in an unexpected state ------------------------------------------------------------------
def test_error_reply_counts_as_no(make_client, fault_masters, name):
    dlm = make_client(fault_masters.urls, retry_count=0)
    fault_masters[0].command("RPUSH", name, "x")  # the key holds a list: WRONGTYPE for our script
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire() is True  # SET NX on a list key just answers nil there
    assert lock.outcomes[0].outcome == "no"
    lock.release()
    assert fault_masters[0].command("TYPE", name) == b"list"


def test_a_master_that_refuses_script_load_still_runs_the_scripts(make_client, name):
    # new connections load every script first (so that a round decided at quorum never leaves a
    # slow master behind on NOSCRIPT); an ACL without SCRIPT refuses that, which must cost nothing.
    # One master, so that each round waits for it: with more, a round decided by the others
    # before its NOSCRIPT came back would not send the EVAL (by design) and say nothing here.
    with start_masters(1) as local:
        assert local[0].command("ACL", "SETUSER", "locker", "on", ">pw", "+@all", "-script", "~*") == b"OK"
        dlm = make_client([f"redis://locker:pw@127.0.0.1:{local[0].port}"], retry_count=0)
        read = dlm.rwlock(name, ttl=5.0).read
        assert read.acquire()
        assert [o.outcome for o in read.outcomes] == ["ok"], read.outcomes
        read.release()
        assert [o.outcome for o in read.outcomes] == ["ok"], read.outcomes
        assert local[0].command("SCRIPT", "EXISTS", sha_of(READ_ACQUIRE)) == [1]  # loaded by its EVAL
        assert local[0].command("KEYS", "*") == []


def test_new_connections_load_the_scripts_before_the_first_round(make_client, name):
    with start_masters(3) as local:
        lock = make_client(local.urls, retry_count=0).lock(name, ttl=5.0)
        assert lock.acquire()  # a plain SET: no script of its own
        assert [m.command("SCRIPT", "EXISTS", sha_of(READ_ACQUIRE), RELEASE_SHA) for m in local] == [[1, 1]] * 3
        lock.release()
