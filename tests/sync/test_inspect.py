"""``Redlock.inspect(name)``: held, free, expired, partially held and foreign locks; masters killed or
stalled (SIGSTOP) answer within the timeouts; the token's secret never shows; nothing is written
(DBSIZE unchanged, and INFO commandstats counts only GET and PTTL). Real masters, both cores."""
from __future__ import annotations

import json
import time
from time import monotonic

import pytest

from fastredlock import LockInfo, MasterView, holder_of
from fastredlock.engine.tokens import new_token
from fastredlock.handles.lockinfo import format_table

from _checks import bound, timed

#: Commands that change nothing on a master (those the inspection sends, and the test's own).
READ_ONLY = {"get", "pttl", "info", "config", "dbsize", "ping"}


def _outcomes(info):
    return [m.outcome for m in info.masters]


def test_inspect_a_held_lock(make_client, masters, name):
    dlm = make_client(masters.urls, wait_for_all=True)  # every master has answered (and set it) first
    lock = dlm.lock(name, ttl=5, fencing=True)
    assert lock.acquire()
    holder_validity_end = monotonic() + lock.validity
    info = dlm.inspect(name)
    assert isinstance(info, LockInfo) and all(isinstance(m, MasterView) for m in info.masters)
    assert info.state == "held" and info.held and not info.partial
    assert info.holder == holder_of(lock.token) and len(info.holder) == 12
    assert info.holders == 5 and info.quorum == 3 and _outcomes(info) == ["held"] * 5
    assert all(4.5 < m.ttl_remaining <= 5 and m.holder == info.holder for m in info.masters)
    assert 4.5 < info.validity <= info.remaining < 5.1
    assert info.valid_until < info.held_until
    # what the holder relies on never outlasts what the inspection says is the most it can last
    assert holder_validity_end <= info.held_until
    assert info.fence == lock.fence and all(m.fence == lock.fence for m in info.masters)
    assert [m.master for m in info.masters] == list(dlm.masters)
    fence = lock.fence
    lock.release()
    after = dlm.inspect(name)
    assert after.state == "free" and after.fence == fence  # the counter outlives the lock


def test_inspect_a_free_lock(make_client, masters, name):
    info = make_client(masters.urls).inspect(name)
    assert info.state == "free" and not info.held and info.holder is None and info.holders == 0
    assert info.validity is info.remaining is info.valid_until is info.held_until is info.fence is None
    assert all(m == MasterView(m.master, "free", False, None, None, None, None) for m in info.masters)


def test_inspect_an_expired_lock(make_client, masters, name):
    dlm = make_client(masters.urls)
    assert dlm.lock(name, ttl=0.1).acquire()
    assert dlm.inspect(name).held
    time.sleep(0.15)
    assert dlm.inspect(name).state == "free"


def test_inspect_a_minority_is_partial(make_client, masters, name):
    token = new_token()
    for m in masters[:2]:
        m.command("SET", name, token, "PX", 5000)
    try:
        info = make_client(masters.urls).inspect(name)
        assert info.state == "partial" and info.partial and not info.held
        assert info.holders == 2 and info.holder == holder_of(token)
        assert [m.held for m in info.masters] == [True, True, False, False, False]
        assert info.validity is None and info.held_until is None
    finally:
        for m in masters[:2]:
            m.command("DEL", name)


def test_inspect_a_foreign_token_shows_nothing_of_it(make_client, masters, name):
    value = "redis-py-style-" + "f" * 32
    for m in masters:
        m.command("SET", name, value)  # no expiry either
    try:
        info = make_client(masters.urls).inspect(name)
        assert info.held and info.holder == "foreign" and info.remaining == float("inf")
        assert all(m.holder == "foreign" and m.ttl_remaining == float("inf") for m in info.masters)
        assert value not in repr(info) + json.dumps(info.to_dict()) + format_table(info)
        data = info.to_dict()
        assert data["remaining"] is None and data["masters"][0]["ttl_remaining"] is None  # JSON has no inf
    finally:
        for m in masters:
            m.command("DEL", name)


def test_the_secret_part_of_our_token_never_shows(make_client, masters, name):
    dlm = make_client(masters.urls)
    lock = dlm.lock(name, ttl=5)
    assert lock.acquire()
    token = lock.token.decode()
    prefix = token.split(":")[0]
    assert len(prefix) == 32
    info = dlm.inspect(name)
    assert not _leaks(info, prefix) and info.holder in _shown(info)  # the holder's digest is shown instead
    # the detector fires: an inspection that carried the token in any field would be caught
    assert _leaks(info._replace(holder=token), prefix)
    assert _leaks(info._replace(masters=(info.masters[0]._replace(detail=token[:20]),)), prefix)
    lock.release()


def _shown(info):
    """Every way an inspection is shown: repr, str, JSON, the CLI's table."""
    return "\n".join([repr(info), str(info), json.dumps(info.to_dict()), format_table(info)])


def _leaks(info, prefix):
    """Whether any 8-character slice of the token's secret prefix shows anywhere."""
    shown = _shown(info)
    return any(prefix[i:i + 8] in shown for i in range(len(prefix) - 7))


def _commandstats(master):
    stats = master.command("INFO", "commandstats").decode()
    return {line.split(":")[0][len("cmdstat_"):]: int(line.split("calls=")[1].split(",")[0])
            for line in stats.splitlines() if line.startswith("cmdstat_")}


def _written(local, inspect, names):
    """Run ``inspect`` with stats reset on every master; return (DBSIZE before, after, commands
    other than reads) over all masters."""
    for m in local:
        m.command("CONFIG", "RESETSTAT")
    before = [m.command("DBSIZE") for m in local]
    for n in names:
        inspect(n)
    after = [m.command("DBSIZE") for m in local]
    stats = [_commandstats(m) for m in local]
    others = {c for s in stats for c in s if c.split("|")[0] not in READ_ONLY}  # "config|resetstat"
    assert all(s.get("get", 0) >= 2 * len(names) and s.get("pttl", 0) >= len(names) for s in stats), stats
    return before, after, others


def test_inspect_writes_nothing(make_client, fault_masters, name):
    dlm = make_client(fault_masters.urls)
    lock = dlm.lock(name, ttl=5, fencing=True)
    assert lock.acquire()
    before, after, others = _written(fault_masters, dlm.inspect, [name, name + ":free"])
    assert before == after and others == set()
    # the detector fires: the same check around an acquisition sees its writes
    other = make_client(fault_masters.urls)
    before, after, others = _written(fault_masters, lambda n: (other.inspect(n), other.lock(n).acquire()),
                                     [name + ":new"])
    assert before != after and "set" in others
    lock.release()


def test_a_killed_master_says_so_and_the_rest_still_decide(make_client, fault_masters, name):
    dlm = make_client(fault_masters.urls, cooldown=0)
    lock = dlm.lock(name, ttl=5)
    assert lock.acquire()
    fault_masters[1].kill()
    info = timed(dlm.inspect, bound(1), name)
    assert info.held and info.holders == 4
    assert _outcomes(info) == ["held", "connection error", "held", "held", "held"]
    assert info.masters[1].detail and not info.masters[1].held and info.masters[1].ttl_remaining is None
    for m in fault_masters[2:4]:
        m.kill()
    info = timed(dlm.inspect, bound(1), name)
    assert info.state == "unknown" and info.holders == 2  # 2 hold it, 3 cannot say: could be a quorum


def test_a_stalled_master_times_out_within_the_timeouts(make_client, fault_masters, name):
    dlm = make_client(fault_masters.urls)
    lock = dlm.lock(name, ttl=5)
    assert lock.acquire()
    fault_masters[3].pause()
    try:
        info = timed(dlm.inspect, bound(1, reconnect=False), name)
        assert info.held and _outcomes(info) == ["held", "held", "held", "timeout", "held"]
        # while it cools down it is not asked (no waiting), and says why
        info = timed(dlm.inspect, bound(1, reconnect=False), name)
        assert info.masters[3].outcome == "cooling down" and "timeout" in info.masters[3].detail
        for m in fault_masters[:2]:
            m.pause()
        fresh = make_client(fault_masters.urls)
        info = timed(fresh.inspect, bound(1), name)
        assert info.state == "unknown" and _outcomes(info).count("timeout") == 3
    finally:
        for m in fault_masters:
            m.resume()


def test_a_key_of_another_type_says_so(make_client, masters, name):
    masters[0].command("HSET", name, "field", "value")
    masters[1].command("SET", "{%s}:fastredlock-fence" % name, "not-a-number")
    try:
        info = make_client(masters.urls).inspect(name)
        assert info.state == "free" and info.masters[0].outcome == "error reply"
        assert info.masters[0].detail.startswith("WRONGTYPE") and info.masters[1].fence is None
    finally:
        masters[0].command("DEL", name)
        masters[1].command("DEL", "{%s}:fastredlock-fence" % name)


def test_inspect_checks_the_name(one_dlm):
    with pytest.raises(TypeError, match="name"):
        one_dlm.inspect(42)
    with pytest.raises(ValueError, match="name"):
        one_dlm.inspect("")
    info = one_dlm.inspect(b"bytes-name:\xff")
    assert info.name == b"bytes-name:\xff" and info.to_dict()["name"] == "bytes-name:\\xff"
