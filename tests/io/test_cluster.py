"""Redis Cluster masters on both cores: real ``redis-server --cluster-enabled yes`` processes.

A module's cluster (3 primaries, no replicas) serves the tests that only move slots (the client
must follow); the ones that break a cluster (CLUSTERDOWN, a primary killed) start their own. A
cluster is one master of the Redlock: one outcome per key, the answer of the node that owns the key.
"""
from __future__ import annotations

import os
import random
import threading
import time

import pytest

from fastredlock.errors import LockNotOwnedError
from fastredlock.io.blocking import Connection
from fastredlock.protocol.cluster import SLOTS, key_slot
from fastredlock.testing import start_cluster

from _bounded import joined
from _checks import command_calls
from _contender import Counter, contend_loop

TTL = 5.0
CONNECT = 0.5
IO = 0.5  # per node: the shared test machine can be slow
GRACE = 2.0  # restart_grace of the failover test (seconds)

failover_opt_in = pytest.mark.skipif(
    os.environ.get("FASTREDLOCK_FAILOVER_TESTS", "") in ("", "0"),
    reason="a killed primary's failover: FASTREDLOCK_FAILOVER_TESTS=1 runs it",
)


@pytest.fixture(scope="module")
def cluster():
    """Three primaries shared by the module's tests, which may move slots but not break it."""
    with start_cluster(3) as c:
        yield c


@pytest.fixture(scope="module")
def small_clusters():
    """Two more clusters of one primary each (N=3 clusters with the module's)."""
    with start_cluster(1) as a, start_cluster(1) as b:
        yield a, b


def outcomes(lock):
    return [o.outcome for o in lock.outcomes]


def names_per_slot(prefix, slots):
    """One name for each slot in ``slots`` (found by counting up: CRC16 spreads them evenly)."""
    wanted, found, n = set(slots), {}, 0
    while wanted:
        name = f"{prefix}:{n}"
        slot = key_slot(name.encode())
        if slot in wanted:
            wanted.discard(slot)
            found[slot] = name
        n += 1
    return [found[s] for s in slots]


def holder(cluster, name):
    """The node that holds key ``name`` (by its owner's view), and its value."""
    node = cluster.primary_of(name)
    return node, node.command("GET", name)


def other_primary(cluster, node):
    return next(p for p in cluster.live() if p is not node and p.info("replication")["role"] == "master")


# --- the slot function ---------------------------------------------------------------------------
def test_key_slot_matches_the_server(cluster):
    rng = random.Random(15)
    node = cluster.nodes[0]
    keys = [b"", b"{}", b"{}x", b"a{}b{c}", b"{user1000}.following", b"foo{}{bar}", b"foo{{bar}}zap", b"}{x}"]
    for _ in range(300):
        key = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 20)))
        if rng.random() < 0.4:
            key = key[:3] + b"{" + key[3:8] + b"}" + key[8:]
        keys.append(key)
    for key in keys:
        assert key_slot(key) == int(node.command("CLUSTER", "KEYSLOT", key)), key


def test_key_slot_detects_a_wrong_crc(cluster, monkeypatch):
    """The check above fires: a slot function off by one for some keys is caught."""
    node = cluster.nodes[0]
    keys = [f"k{i}".encode() for i in range(50)]
    assert any((key_slot(k) + (k[-1] == ord("7"))) % SLOTS != int(node.command("CLUSTER", "KEYSLOT", k)) for k in keys)


# --- it works ------------------------------------------------------------------------------------
def test_names_over_the_slots_lock_extend_release(make_client, cluster):
    dlm = make_client([cluster.url], connect_timeout=CONNECT, io_timeout=IO)
    names = names_per_slot(f"spread{random.random()}", range(0, SLOTS, 97))  # 169 slots, every node
    for name in names:
        lock = dlm.lock(name, ttl=TTL)
        assert lock.acquire(blocking=False), lock.outcomes
        assert outcomes(lock) == ["ok"] and lock.outcomes[0].master.startswith("cluster:")
        assert holder(cluster, name)[1] == lock.token
        lock.extend()
        assert 3000 < cluster.primary_of(name).command("PTTL", name) <= TTL * 1000
        lock.release()
        assert holder(cluster, name)[1] is None
    assert [(s.connect_errors, s.connection_errors, s.error_replies) for s in dlm.stats()] == [(0, 0, 0)]


def test_one_name_per_slot_in_one_batch(make_client, cluster):
    dlm = make_client([cluster.url], connect_timeout=CONNECT, io_timeout=2.0)
    names = names_per_slot(f"all{random.random()}", range(SLOTS))
    locks = dlm.acquire_many(names, ttl=TTL)
    assert all(lock is not None for lock in locks)
    assert sum(int(p.command("DBSIZE")) >= 1 for p in cluster.primaries) == 3
    assert all(dlm.release_many(locks))
    assert all(holder(cluster, n)[1] is None for n in names[::1000])


def test_release_each_on_a_node_as_a_plain_master(make_client, cluster):
    # Core.release_each: one RELEASE per key in one round, what a cluster node takes where a
    # plain master's batch release (one script over keys of several slots) is refused.
    node = cluster.primaries[0]
    names = [n for n in (f"re:{random.random()}:{i}" for i in range(200)) if cluster.primary_of(n) is node][:10]
    dlm = make_client([node.url], connect_timeout=CONNECT, io_timeout=IO)
    locks = dlm.acquire_many(names, ttl=TTL)
    assert all(locks) and len(names) == 10
    with dlm.executor.core() as core:
        refused = core.release_many([lk.key for lk in locks], [lk.token for lk in locks])
        assert not any(r.ok for r in refused) and "CROSSSLOT" in str(refused[0].details)
        rounds = core.release_each([lk.key for lk in locks] + [b"re:absent"], [lk.token for lk in locks] + [b"x"])
    assert [r.ok for r in rounds] == [True] * 10 + [False]
    assert all(holder(cluster, n)[1] is None for n in names)


def test_batch_of_1000_names_across_slots(make_client, cluster):
    dlm = make_client([cluster.url], connect_timeout=CONNECT, io_timeout=1.0)
    names = [f"batch:{random.random()}:{i}" for i in range(1000)]
    locks = dlm.acquire_many(names, ttl=TTL)
    assert all(lock is not None for lock in locks)
    per_node = {p.port: 0 for p in cluster.primaries}
    for name in names[:100]:
        node, value = holder(cluster, name)
        assert value is not None
        per_node[node.port] += 1
    assert all(per_node.values())  # spread over every primary
    again = dlm.acquire_many(names[:10], ttl=TTL)
    assert again == [None] * 10  # held: nobody else gets them
    assert all(dlm.release_many(locks))
    assert all(holder(cluster, n)[1] is None for n in names[:100])


def test_forms_url_dict_and_redis_cluster_client(make_client, cluster, name):
    from redis.cluster import ClusterNode, RedisCluster

    first = cluster.nodes[0]
    client = RedisCluster(startup_nodes=[ClusterNode(first.host, first.port)])
    try:
        forms = [
            f"redis+cluster://{first.host}:{first.port}",  # one node is enough: the rest is learned
            {"cluster": [(first.host, first.port), f"{cluster.nodes[1].host}:{cluster.nodes[1].port}"]},
            client,
        ]
        for form in forms:
            dlm = make_client([form], connect_timeout=CONNECT, io_timeout=IO)
            lock = dlm.lock(name, ttl=TTL)
            assert lock.acquire(blocking=False), (form, lock.outcomes)
            assert holder(cluster, name)[1] == lock.token
            lock.release()
    finally:
        client.close()


def test_bad_cluster_forms_are_refused(one_core):
    from fastredlock import Redlock

    for bad, words in [("redis+cluster://h:1/2", "no db"), ({"cluster": []}, "non-empty"),
                       ({"cluster": [("h", 1)], "db": 3}, "only db 0"), ({"cluster": [("h", 1)], "host": "x"}, "unknown")]:
        with pytest.raises(ValueError, match=words):
            Redlock([bad], core=one_core)


def test_a_cluster_named_twice_is_refused(one_core, cluster):
    from fastredlock import Redlock

    with pytest.raises(ValueError, match="same server"):
        Redlock([cluster.url, f"redis+cluster://{cluster.nodes[0].host}:{cluster.nodes[0].port}"], core=one_core)


def test_fence_counters_stay_in_the_lock_keys_slot(make_client, cluster, name):
    dlm = make_client([cluster.url], connect_timeout=CONNECT, io_timeout=IO)
    fences = []
    for n in (name, f"{{order:{name}}}:a"):
        for _ in range(2):
            with dlm.lock(n, ttl=TTL, fencing=True) as lock:
                fences.append(lock.fence)
    assert fences[1] > fences[0] and fences[3] > fences[2]


# --- redirections --------------------------------------------------------------------------------
def test_moved_between_two_calls(make_client, cluster, name):
    dlm = make_client([cluster.url], connect_timeout=CONNECT, io_timeout=IO)
    lock = dlm.lock(name, ttl=TTL)
    assert lock.acquire(blocking=False)
    slot = cluster.keyslot(name)
    source = cluster.owner(slot)
    cluster.migrate_slot(slot, other_primary(cluster, source))  # the key moves with its slot
    lock.extend()  # -MOVED, resent to the new owner in the same call
    assert outcomes(lock) == ["ok"]
    assert holder(cluster, name)[1] == lock.token and cluster.owner(slot) is not source
    lock.release()
    assert holder(cluster, name)[1] is None
    assert [s.error_replies for s in dlm.stats()] == [0]


def test_moved_during_one_call_of_a_batch(make_client, cluster):
    dlm = make_client([cluster.url], connect_timeout=CONNECT, io_timeout=IO)
    names = [f"mv:{random.random()}:{i}" for i in range(60)]
    dlm.release_many(dlm.acquire_many(names[:1], ttl=TTL))  # connected, the map learned
    slots = sorted({cluster.keyslot(n) for n in names[:3]})
    for slot in slots:  # the client's map is now wrong for these slots
        cluster.migrate_slot(slot, other_primary(cluster, cluster.owner(slot)))
    locks = dlm.acquire_many(names, ttl=TTL)  # a few commands answered MOVED, resent in the round
    assert all(lock is not None for lock in locks), [lk and lk.outcomes for lk in locks]
    assert all(holder(cluster, n)[1] is not None for n in names[:3])
    assert all(dlm.release_many(locks))
    assert all(holder(cluster, n)[1] is None for n in names[:3])


def test_ask_while_a_slot_migrates(make_client, cluster, name):
    dlm = make_client([cluster.url], connect_timeout=CONNECT, io_timeout=IO)
    held = dlm.lock(name + ":warm", ttl=TTL)
    assert held.acquire(blocking=False)
    slot = cluster.keyslot(name)
    source = cluster.owner(slot)
    target = other_primary(cluster, source)
    cluster.migrate_slot(slot, target, finish=False)  # MIGRATING: a missing key is asked of the target
    try:
        lock = dlm.lock(name, ttl=TTL)
        assert lock.acquire(blocking=False), lock.outcomes  # -ASK: ASKING + SET on the target
        assert str(source.command("EXISTS", name)).startswith("ASK ")  # not there: asked of the target
        conn = Connection((target.host, target.port))
        try:
            assert conn.call("ASKING") == b"OK" and conn.call("GET", name) == lock.token
        finally:
            conn.close()
        lock.extend()
        lock.release()
        assert outcomes(lock) == ["ok"]
    finally:
        cluster.finish_migration(slot, source, target)
    held.release()
    assert [s.error_replies for s in dlm.stats()] == [0]


def test_ask_to_a_node_with_an_empty_script_cache(make_client, cluster, name):
    """A script redirected by -ASK that meets NOSCRIPT is resent as EVAL behind ASKING again
    (without ASKING the importing node answers -MOVED back to the source, which asks again)."""
    dlm = make_client([cluster.url], connect_timeout=CONNECT, io_timeout=IO)
    slot = cluster.keyslot(name)
    source = cluster.owner(slot)
    target = other_primary(cluster, source)
    cluster.migrate_slot(slot, target, finish=False)
    try:
        lock = dlm.lock(name, ttl=TTL)
        assert lock.acquire(blocking=False), lock.outcomes  # SET: ASKING + SET on the target
        assert target.command("SCRIPT", "FLUSH") == b"OK"
        lock.extend()  # EVALSHA: -ASK, then NOSCRIPT on the target, then ASKING + EVAL
        assert outcomes(lock) == ["ok"]
        assert target.command("SCRIPT", "FLUSH") == b"OK"
        lock.release()
        assert outcomes(lock) == ["ok"]
    finally:
        cluster.finish_migration(slot, source, target)
    assert holder(cluster, name)[1] is None
    assert [s.error_replies for s in dlm.stats()] == [0]


def test_a_cluster_release_publishes_nothing_where_nobody_waits(make_client, cluster, name):
    """A cluster's keys get the lean release (RELEASE_CLUSTER): GET and DEL, and no PUBLISH to
    the lock's channel where no waiter marked the name (RELEASE_FULL always publishes)."""
    dlm = make_client([cluster.url], connect_timeout=CONNECT, io_timeout=IO)
    names = [name, f"{{{name}}}:tagged"]
    for n in names:  # connected, every script loaded
        with dlm.lock(n, ttl=TTL):
            pass
    before = {id(p): command_calls(p).get("publish", 0) for p in cluster.live()}
    for n in names:
        for _ in range(3):
            with dlm.lock(n, ttl=TTL):
                pass
            assert holder(cluster, n)[1] is None
    assert {id(p): command_calls(p).get("publish", 0) for p in cluster.live()} == before
    locks = dlm.acquire_many([f"{name}:{i}" for i in range(8)], ttl=TTL)  # release_many: one script per key
    assert all(dlm.release_many(locks))
    assert {id(p): command_calls(p).get("publish", 0) for p in cluster.live()} == before
    assert [s.error_replies for s in dlm.stats()] == [0]


def test_release_while_the_key_waits_on_a_migrating_node(make_client, cluster, name):
    """A key still on the node its slot migrates from (MIGRATING, not moved yet): the release
    deletes it there. That node answers the command naming a key it lacks (the wake mark) with
    -ASK, an error raised in the script; the release deletes the key by a command of its own
    first, as RELEASE_FULL did (one DEL of the key and the mark would fail before deleting)."""
    dlm = make_client([cluster.url], connect_timeout=CONNECT, io_timeout=IO)
    lock = dlm.lock(name, ttl=TTL)
    assert lock.acquire(blocking=False)
    slot = cluster.keyslot(name)
    source = cluster.owner(slot)
    target = other_primary(cluster, source)
    cluster.wait_agreed()
    target.command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
    source.command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)  # the key stays on the source
    try:
        try:
            lock.release()
        except LockNotOwnedError:
            pass  # the mark's -ASK, raised in the script after the delete: that master's error reply
        assert str(source.command("EXISTS", name)).startswith("ASK ")  # deleted all the same (-ASK: not there)
    finally:
        cluster.finish_migration(slot, source, target)
    assert holder(cluster, name)[1] is None


def test_lock_all_across_slots_is_refused_naming_hash_tags(make_client, cluster, name):
    dlm = make_client([cluster.url], connect_timeout=CONNECT, io_timeout=IO)
    a, b = names_per_slot(name, [1, 2])
    with pytest.raises(ValueError, match=r"different cluster slots.*\{order:42\}:a"):
        dlm.lock_all([a, b], ttl=TTL)
    assert holder(cluster, a)[1] is None and holder(cluster, b)[1] is None
    tagged = [f"{{{name}}}:a", f"{{{name}}}:b"]
    locks = dlm.lock_all(tagged, ttl=TTL)
    assert locks is not None and holder(cluster, tagged[0])[1] == holder(cluster, tagged[1])[1]
    assert all(dlm.release_many(locks))


def test_three_clusters_as_redlock_masters(make_client, cluster, small_clusters, name):
    a, b = small_clusters
    dlm = make_client([cluster.url, a.url, b.url], connect_timeout=CONNECT, io_timeout=IO)
    lock = dlm.lock(name, ttl=TTL)
    assert lock.acquire(blocking=False)
    assert outcomes(lock) == ["ok"] * 3
    assert a.nodes[0].command("GET", name) == b.nodes[0].command("GET", name) == lock.token
    b.nodes[0].pause()  # one cluster silent: the other two are a quorum
    try:
        lock.extend()
        assert outcomes(lock)[:2] == ["ok", "ok"] and outcomes(lock)[2] == "timeout"
    finally:
        b.nodes[0].resume()
    lock.release()


def test_threads_on_a_cluster_never_hold_together(make_client, cluster, name):
    dlm = make_client([cluster.url], connect_timeout=CONNECT, io_timeout=IO, retry_count=200, retry_delay=0.005, retry_jitter=0.005)
    inside, worst, done = [0], [0], []

    def work():
        for _ in range(20):
            with dlm.lock(name, ttl=TTL):
                inside[0] += 1
                worst[0] = max(worst[0], inside[0])
                time.sleep(0.0005)
                inside[0] -= 1
            done.append(1)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    joined(*threads)
    assert len(done) == 120 and worst[0] == 1


# --- failures ------------------------------------------------------------------------------------
def test_clusterdown_is_that_masters_no(make_client, masters, name):
    plain = masters[0]
    with start_cluster(1) as c:
        node = c.nodes[0]
        dlm = make_client([c.url, plain.url], connect_timeout=CONNECT, io_timeout=IO, cooldown=0)
        lock = dlm.lock(name, ttl=TTL)
        assert lock.acquire(blocking=False) and outcomes(lock) == ["ok", "ok"]
        lock.release()
        slot = c.keyslot(name)
        assert node.command("CLUSTER", "DELSLOTS", slot) == b"OK"  # the slot is not served: the cluster is down
        deadline = time.monotonic() + 10
        while node.info("cluster")["cluster_state"] != "fail":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        started = time.monotonic()
        lock = dlm.lock(name, ttl=TTL)
        assert not lock.acquire(blocking=False)  # 1 of 2: no quorum
        assert time.monotonic() - started < 1.0  # no hang
        assert outcomes(lock) == ["error reply", "ok"] and "CLUSTERDOWN" in lock.outcomes[0].detail
        assert plain.command("EXISTS", name) == 0  # the cleanup released the plain master's key


def test_every_node_down_is_a_connection_error(make_client, name):
    with start_cluster(1) as c:
        dlm = make_client([c.url], connect_timeout=CONNECT, io_timeout=IO, cooldown=0)
        assert dlm.lock(name, ttl=TTL).acquire(blocking=False)
        c.nodes[0].kill()
        started = time.monotonic()
        lock = dlm.lock(name + ":2", ttl=TTL)
        assert not lock.acquire(blocking=False)
        assert time.monotonic() - started < 2 * CONNECT + 0.5
        assert outcomes(lock) == ["connection error"], lock.outcomes


def _old_enough(nodes, seconds):
    for node in nodes:
        up = int(node.info("server")["uptime_in_seconds"])
        if up < seconds + 1:
            time.sleep(seconds + 1 - up)


@pytest.mark.slow
@failover_opt_in
def test_primary_killed_replica_promoted_no_double_holder(make_client, masters, name):
    counter = masters[0]  # an independent server: never two holders
    with start_cluster(3, 1, node_timeout_ms=1500) as c:
        opts = dict(connect_timeout=CONNECT, io_timeout=IO, restart_aware=True, restart_grace=GRACE, cooldown=0)
        dlm = make_client([c.url], **opts)
        _old_enough(c.nodes, GRACE)
        lock = dlm.lock(name, ttl=1.0)
        assert lock.acquire(blocking=False), lock.outcomes
        primary = c.primary_of(name)
        stop, double, held = threading.Event(), [], [0]

        def contend():  # an independent counter on a plain server: never two holders
            other = make_client([c.url], **opts)

            def acquire():
                lk = other.lock(name, ttl=1.0)
                return lk if lk.acquire(blocking=False) else None

            tally = contend_loop(acquire, lambda lk: lk.release() if lk.validity > 0 else None,
                                 Counter(counter.port), lambda _tally: stop.is_set(), hold=0.01,
                                 key=name + ":holders", pause=lambda: time.sleep(0.01),
                                 on_overlap=lambda lk: double.append(lk.outcomes))
            held[0] += tally.held

        threads = [threading.Thread(target=contend) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            new = c.fail_over(primary)
            promoted_at = time.monotonic()
            seen = set()
            while time.monotonic() - promoted_at < GRACE - 0.3:
                lk = dlm.lock(name, ttl=1.0)
                got = lk.acquire(blocking=False)
                seen.add(outcomes(lk)[0])
                assert not got, lk.outcomes  # the promoted node does not vote during restart_grace
                time.sleep(0.05)
            assert "restarted recently" in seen, seen
            deadline = time.monotonic() + GRACE + 5
            after = f"{{{name}}}:after"  # the same slot: on the promoted node
            while not dlm.lock(after, ttl=1.0).acquire(blocking=False):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert c.primary_of(name) is new and c.primary_of(after) is new
            time.sleep(1.0)  # the contenders take turns on the promoted node too
        finally:
            stop.set()
            joined(*threads)
        assert not double and held[0] > 0


@pytest.mark.slow
@failover_opt_in
def test_without_restart_aware_voting_the_promoted_node_votes_at_once(make_client, name):
    # The negative control of the test above: the same failover with restart_aware=False, and the
    # promoted replica grants a name of the moved slot right away (so it is the restart grace, not
    # the failover itself, that kept it from voting there).
    with start_cluster(3, 1, node_timeout_ms=1500) as c:
        dlm = make_client([c.url], connect_timeout=CONNECT, io_timeout=IO, restart_aware=False, cooldown=0)
        _old_enough(c.nodes, GRACE)
        lock = dlm.lock(name, ttl=1.0)
        assert lock.acquire(blocking=False), lock.outcomes
        new = c.fail_over(c.primary_of(name))
        promoted_at = time.monotonic()
        after = f"{{{name}}}:after"  # the same slot: on the promoted node
        while not dlm.lock(after, ttl=1.0).acquire(blocking=False):
            assert time.monotonic() - promoted_at < GRACE - 0.5, "the promoted node did not vote"
            time.sleep(0.05)
        assert c.primary_of(after) is new


@pytest.mark.parametrize("name", ["turns:{tag}x", "turns:plain", "turns:a}b"])
def test_waiters_take_turns_on_a_cluster(make_client, cluster, name):
    # Queued waiters on a cluster master: the queue and turn keys live in the name's slot (RELEASE
    # derives them there); a name with '}' and no hash tag has no queue and still works.
    name = f"{name}:{random.random()}"
    holder = make_client([cluster.url], connect_timeout=CONNECT, io_timeout=IO).lock(name, ttl=TTL)
    assert holder.acquire(blocking=False)
    results = []

    def wait_once():
        lock = make_client([cluster.url], connect_timeout=CONNECT, io_timeout=IO, retry_delay=0.05).lock(name, ttl=TTL)
        results.append(lock.acquire(timeout=5.0))
        lock.release()

    threads = [threading.Thread(target=wait_once) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    holder.release()
    for t in threads:
        t.join(10.0)
    assert results == [True] * 3
    assert holder.outcomes[0].outcome == "ok"
    assert cluster.primary_of(name).command("EXISTS", name) == 0
