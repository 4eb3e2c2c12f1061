"""A lock name cannot be another lock's derived key (security issue 39, item 4).

Before: A held the lock ``{job}:wake``; B acquired and released ``job``, whose release deletes
``{job}:wake`` (its wake mark) without an owner check; C then acquired ``{job}:wake`` while A held
it. Now such a name is refused with a ValueError at every entry point, and the keys the code
really derives are all declared in :mod:`fastredlock.protocol.keyspace` (checked on the source).
"""
from __future__ import annotations

import asyncio
import os
import re

import pytest

import fastredlock
import fastredlock.asyncio
from fastredlock.handles.family import _permit_shared, _rw_keys
from fastredlock.handles.lock import fence_key
from fastredlock.protocol import family
from fastredlock.protocol.keyspace import DERIVED, KINDS, VARIABLE, acl_rules, derived_keys, reserved_by

SRC = os.path.dirname(os.path.abspath(fastredlock.__file__))


def _derived_names(base: str):
    """Every key a lock on ``base`` derives, with its variable parts filled in."""
    out = []
    for kind in KINDS:
        for key, _what, _holds in derived_keys(base.encode(), kind):
            if key != base.encode():
                out.append(key.replace(b"<slot>", b"3").replace(b"<token>", b"abc:1").decode())
    return out


def test_no_two_holders_through_a_derived_name(dlm, name, keys_on, masters):
    """The issue's scenario, on both cores: A holds ``{job}:wake``; B acquires and releases ``job``
    (its release deletes its wake mark, ``{job}:wake``); C must not get ``{job}:wake`` while A holds
    it. (On main this reached the last assertion and failed: two holders.) Now A is refused."""
    base = f"job-{name}"
    try:
        a = dlm.lock(f"{{{base}}}:wake", ttl=5.0)
    except ValueError as exc:
        assert f"reserved: it is the wake mark of the lock '{base}'" in str(exc)
        return
    assert a.acquire(blocking=False)
    b = dlm.lock(base, ttl=5.0)
    assert b.acquire(blocking=False)
    b.release()
    c = dlm.lock(f"{{{base}}}:wake", ttl=5.0)
    assert not c.acquire(blocking=False), "two holders of one lock"


@pytest.mark.parametrize("base", ["job", "{tenant}job", "app:x", "{a}"])
def test_every_derived_key_is_refused_on_every_entry(one_dlm, base):
    for derived in _derived_names(base):
        for make in (lambda n: one_dlm.lock(n), lambda n: one_dlm.rlock(n), lambda n: one_dlm.rwlock(n),
                     lambda n: one_dlm.semaphore(n, 2), lambda n: one_dlm.lock_all(["free", n])):
            with pytest.raises(ValueError, match="reserved"):
                make(derived)


def test_prefix_counts_in_the_key(make_one_client, masters):
    """A client with prefix ``p:`` locks ``job`` (key ``p:job``); another client must not lock ``{p:job}:wake``."""
    plain = make_one_client(masters.urls)
    with pytest.raises(ValueError, match="reserved"):
        plain.lock("{p:job}:wake")
    prefixed = make_one_client(masters.urls, prefix="{p:")
    with pytest.raises(ValueError, match="reserved"):
        prefixed.lock("job}:next")


@pytest.mark.parametrize("ok", ["job:wake", "{job}", "{job}:orders", "{}:wake", "{job}:wake-up",
                                "{job}:permit:x", "a{b:wake", "{job}:readers:2"])
def test_ordinary_names_are_not_refused(one_dlm, ok):
    assert reserved_by(ok.encode()) is None
    one_dlm.lock(ok)


def test_asyncio_client_refuses(one_core, masters, name):
    async def main():
        dlm = fastredlock.asyncio.Redlock(masters.urls, core=one_core, restart_aware=False)
        try:
            for derived in _derived_names(name):
                with pytest.raises(ValueError, match="reserved"):
                    dlm.lock(derived)
        finally:
            await dlm.aclose()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_code_derives_only_declared_keys():
    """What the code derives (its functions, and every suffix literal passed to ``tagged``) is declared."""
    key = b"k"
    real = [family.wake_mark(key), fence_key(key), *_rw_keys(key)[:3], *_permit_shared(key, 2)[0],
            _permit_shared(key, 2)[1], family.tagged(key, b":wait"), family.tagged(key, b":next")]
    real += [read[1] for kind in (family.RLOCK, family.RWLOCK) for read in family.inspect_reads(kind, key)]
    for k in real:
        if k != key:
            assert reserved_by(k) == (key, reserved_by(k)[1]), k
    declared = {s for s, *_ in DERIVED} | {s for s, *_ in VARIABLE}
    literal = re.compile(rb"""tagged\([^,()]+,\s*b["'](:[^"']*?)(?:%d)?["']""")
    found = set()
    for folder, _dirs, files in os.walk(SRC):
        for f in files:
            if f.endswith((".py", ".pyx")):
                with open(os.path.join(folder, f), "rb") as fh:
                    found |= set(literal.findall(fh.read()))
    found.discard(b":")  # keyspace's own pattern helper
    assert found and found <= declared, found - declared


def test_acl_rules_cover_the_derived_keys():
    assert acl_rules(b"app:x") == ("~app:x ~{app:x}:* &fastredlock-wake:app:x &fastredlock-wake:{app:x}:* "
                                   "&fastredlock-turn:*")
    assert acl_rules(b"{t}x*") == (r"~{t}x\* ~{t}x\*:* &fastredlock-wake:{t}x\* &fastredlock-wake:{t}x\*:* "
                                   r"&fastredlock-turn:*")
