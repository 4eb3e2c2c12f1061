"""Tokens are unique and re-seeded after fork; a fork child never reuses its parent's sockets."""
from __future__ import annotations

import os

import pytest

from fastredlock.engine import tokens as _tokens
from fastredlock.protocol.scripts import (
    EXTEND, EXTEND_SHA, MARK, MARK_SHA, RELEASE, RELEASE_FULL, RELEASE_FULL_SHA, RELEASE_SHA, RELEASE_TAGGED, RELEASE_TAGGED_SHA,
)


def test_tokens_are_unique_and_long():
    tokens = {_tokens.new_token() for _ in range(10000)}
    assert len(tokens) == 10000
    prefix = next(iter(tokens)).split(b":")[0]
    assert len(bytes.fromhex(prefix.decode())) * 8 >= 128


def _in_child(fn):
    """Run ``fn`` in a fork child; return what it wrote to the pipe."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            os.write(w, fn())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return data


def test_fork_child_gets_new_token_prefix():
    parent = _tokens.new_token().split(b":")[0]
    child = _in_child(lambda: _tokens.new_token().split(b":")[0])
    assert child and child != parent


def test_fork_child_opens_its_own_connections(dlm, masters, name, keys_on):
    with dlm.lock(name + ":warm", ttl=1.0):
        pass  # the parent now has open connections in its pool
    before = masters[0].command("CLIENT", "LIST").count(b"\n")

    def child() -> bytes:
        lock = dlm.lock(name, ttl=5.0)
        ok = lock.acquire(blocking=False)
        lock.release()
        return b"ok" if ok else b"fail"

    assert _in_child(child) == b"ok"
    # the parent's pooled connections still work: the child did not use or shut them down
    with dlm.lock(name, ttl=1.0) as lock:
        assert [o.outcome for o in lock.outcomes] == ["ok"] * 5
    assert keys_on(masters, name) == 0
    assert masters[0].command("CLIENT", "LIST").count(b"\n") >= before


def test_fork_child_cannot_release_parents_lock_by_accident(dlm, masters, name, keys_on):
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire()

    def child() -> bytes:
        # the child inherited the handle and its token; a fresh handle has a different token
        other = dlm.lock(name, ttl=5.0)
        return b"acquired" if other.acquire(blocking=False) else b"refused"

    assert _in_child(child) == b"refused"
    assert keys_on(masters, name) == 5
    lock.release()


@pytest.mark.parametrize("script, sha", [(RELEASE, RELEASE_SHA), (RELEASE_TAGGED, RELEASE_TAGGED_SHA),
                                         (RELEASE_FULL, RELEASE_FULL_SHA), (MARK, MARK_SHA),
                                         (EXTEND, EXTEND_SHA)])
def test_script_sha_matches_server(masters, script, sha):
    assert masters[0].command("SCRIPT", "LOAD", script) == sha


def test_tokens_reveal_nothing_about_each_other():
    """(issue 39, item 9) A token is the process id and 128 random bits of its own: before, it was a
    secret prefix and a counter, so one token gave away every other token of its process."""
    tokens = [_tokens.new_token() for _ in range(600)]  # more than one refill of the pool
    ids = {t.split(b":")[0] for t in tokens}
    secrets = [t.split(b":")[1] for t in tokens]
    assert len(ids) == 1 and len(set(secrets)) == len(secrets)
    assert all(len(s) == 32 and int(s, 16) >= 0 for s in secrets)
    # no arithmetic link between neighbours (a counter, or a counter under a fixed mask, would show one)
    steps = {int(b, 16) - int(a, 16) for a, b in zip(secrets, secrets[1:])}
    assert len(steps) == len(secrets) - 1
    batch = _tokens.new_tokens(3)
    assert len(set(batch)) == 3 and all(t.startswith(batch[0].rsplit(b".", 1)[0] + b".") for t in batch)
    assert _tokens.holder_of(tokens[0]) == _tokens.holder_of(batch[0]) != _tokens.FOREIGN


def test_fork_child_never_spends_its_parents_unspent_tokens():
    _tokens.new_token()  # the pool now holds unspent tokens, copied into the child by fork
    child = _in_child(lambda: b" ".join(_tokens.new_token() for _ in range(5)))
    later = {_tokens.new_token() for _ in range(300)}
    assert child and not set(child.split()) & later
