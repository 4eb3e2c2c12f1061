"""The lock family's rules (protocol.family), from tables: keys under one hash tag, the semaphore's
choice of a permit and its leftovers, the readers a quorum holds, the inspection's reads, and
the scripts' digests (checked against a real master in tests/sync/test_family_scripts.py)."""
from __future__ import annotations

import hashlib
from types import SimpleNamespace

import pytest

from fastredlock.protocol import family
from fastredlock.protocol.outcomes import NO, OK, PENDING, TIMEOUT


def rnd(outcomes, ok=False):
    return SimpleNamespace(ok=ok, outcomes=tuple(outcomes), successes=sum(1 for c in outcomes if c == OK))


@pytest.mark.parametrize("key, suffix, expected", [
    (b"orders", b":write", b"{orders}:write"),
    (b"app:{orders}:x", b":write", b"app:{orders}:x:write"),  # has a hash tag: kept
    (b"a{}b", b":rlock", b"{a{}b}:rlock"),                    # an empty tag is none
])
def test_keys_share_the_names_hash_tag(key, suffix, expected):
    assert family.tagged(key, suffix) == expected


def test_a_permit_is_the_first_slot_from_the_start_that_a_quorum_gave():
    rounds = [rnd([OK, OK, NO, NO, NO]), rnd([OK] * 5, ok=True), rnd([NO] * 5), rnd([OK] * 3 + [NO] * 2, ok=True)]
    assert family.choose_permit(rounds, 0) == 1
    assert family.choose_permit(rounds, 2) == 3
    assert family.choose_permit(rounds, 3) == 3
    assert family.choose_permit([rnd([OK, OK, NO, NO, NO])] * 3, 1) == -1  # split votes: none


def test_the_leftover_slots_are_every_other_slot_a_master_may_hold():
    rounds = [rnd([OK, OK, NO, NO, NO]), rnd([OK] * 5, ok=True), rnd([NO] * 5), rnd([PENDING, NO, NO, TIMEOUT, NO])]
    assert family.permit_leftovers(rounds, 1) == [0, 3]
    assert family.permit_leftovers(rounds, -1) == [0, 1, 3]


@pytest.mark.parametrize("values, expected", [
    ([2, 2, 2, 2, 2], 2), ([3, 2, None, 1, 0], 1), ([5, None, None, 5, 1], 1), ([4, None, None, None, 4], 0),
])
def test_readers_held_are_what_a_quorum_reports_at_least(values, expected):
    assert family.at_least_on_quorum(values, 3) == expected


def test_inspection_reads_only():
    for kind, limit in ((family.RLOCK, 0), (family.RWLOCK, 0), (family.SEMAPHORE, 3)):
        reads = family.inspect_reads(kind, b"n", limit)
        assert {cmd[0] for cmd in reads} <= {b"GET", b"HGET", b"PTTL", b"SCARD", b"EXISTS"}
        assert all(cmd[1].startswith(b"{n}:") for cmd in reads)  # one cluster slot
    assert len(family.inspect_reads(family.SEMAPHORE, b"n", 3)) == 6
    with pytest.raises(ValueError):
        family.inspect_reads("mutex", b"n")


def test_steps_carry_the_scripts_and_their_digests():
    op, args = family.owner_step(family.READ_RELEASE, [b"{n}:readers", b"{n}:write", b"{n}:writer-waiting",
                                                       b"{n}:read:tok"], [b"tok"])
    kind, sha, script, argv, ttl_ms, wait = args
    assert op == family.SCRIPT and script == family.READ_RELEASE and wait is True and ttl_ms == 0
    assert sha == hashlib.sha1(family.READ_RELEASE).hexdigest().encode()
    assert argv == (b"4", b"{n}:readers", b"{n}:write", b"{n}:writer-waiting", b"{n}:read:tok", b"tok")
    assert b"KEYS[2]" in family.PERMIT_RELEASE and b"KEYS[1], '1')" not in family.PERMIT_RELEASE
