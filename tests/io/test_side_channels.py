"""Side channels guarded like the lock path: the wake-on-release connection, sentinels, cluster maps
and ``fastredlock audit`` bound the size of a reply and the time it takes, and a malformed reply is
a master's outcome (or a ``LockError``), never a raw ``TypeError``/``IndexError``/``RecursionError``.

The misbehaving "masters", "sentinels" and "cluster nodes" are small real loopback servers
(tests/_peers.py) that speak just enough RESP; the other masters are real servers.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from fastredlock.cli.audit import WARN, audit
from fastredlock.engine.wake import MAX_REPLY, reply_within
from fastredlock.io import reader_py
from fastredlock.io.masters import parse_master
from fastredlock.io.sentinel import Resolver, SentinelError

from _peers import CHUNK, Peer, PeakRss, answers, begin_and_go_silent, encode, stream_after_subscribe

SRC = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "src")


def test_a_200mb_stream_on_the_wake_connection_is_cut_and_the_waiter_goes_on(make_client, masters, name):
    with Peer(stream_after_subscribe) as hostile:
        holder = make_client(masters.urls[:2], connect_timeout=0.2)
        dlm = make_client([f"redis://127.0.0.1:{hostile.port}"] + masters.urls[:2], connect_timeout=0.2,
                          retry_delay=0.1)
        with dlm.lock(name + ":warm", ttl=5.0):  # the client's own allocations, before the baseline
            pass
        held = holder.lock(name, ttl=5.0)
        assert held.acquire(timeout=3.0)
        timer = threading.Timer(1.0, held.release)
        with PeakRss() as memory:
            timer.start()
            try:
                started = time.monotonic()
                lock = dlm.lock(name, ttl=5.0)
                assert lock.acquire(timeout=5.0), lock.outcomes  # the hostile master's wake-ups lost: no more
                waited = time.monotonic() - started
                streams = [c for c in hostile.conns if getattr(c, "streamed", False)]
                assert streams, "the notification connection never subscribed on the hostile master"
                for c in streams:  # the client cut each stream: it stopped reading and closed
                    assert c.closed.wait(5.0)
            finally:
                timer.cancel()
        lock.release()
        growth = memory.growth
        sent = max(c.sent for c in streams)
        print(f"\nwake stream: client memory grew {growth / 1e6:.1f} MB (peak); the hostile master sent "
              f"at most {sent / 1e6:.1f} MB on one connection, {len(streams)} connection(s); waiter "
              f"acquired after {waited:.2f}s")
        assert growth < 10e6, f"client memory grew {growth / 1e6:.1f} MB"
        assert sent < MAX_REPLY + (16 << 20)  # the limit plus what the sockets' buffers take
        assert 0.9 < waited < 3.0


def test_a_reply_begun_and_never_finished_drops_the_wake_connection(make_client, masters, name):
    with Peer(begin_and_go_silent) as hostile:
        holder = make_client(masters.urls[:2], connect_timeout=0.2)
        dlm = make_client([f"redis://127.0.0.1:{hostile.port}"] + masters.urls[:2], connect_timeout=0.2,
                          retry_delay=0.1)
        with holder.lock(name, ttl=5.0):
            assert not dlm.lock(name, ttl=5.0).acquire(timeout=reply_within(0.2) + 1.0)
        begun = [c for c in hostile.conns if hasattr(c, "began")]
        assert begun
        c = begun[0]
        assert c.closed.wait(3.0)
        assert hasattr(c, "ended") and c.ended - c.began < reply_within(0.2) + 0.8


# --- sentinels -------------------------------------------------------------------------------------
def sentinel(master_reply):
    """A sentinel that names a master, then answers SENTINEL MASTER with ``master_reply``."""

    def table(command):
        if command[:2] == [b"SENTINEL", b"GET-MASTER-ADDR-BY-NAME"]:
            return encode([b"127.0.0.1", b"6379"])
        if command[:2] == [b"SENTINEL", b"MASTER"]:
            return master_reply
        return encode(Exception("ERR unknown"))

    return answers(table)


@pytest.mark.parametrize("reply, outcome", [
    (encode([[], []]), "sentinel error"),  # fields that are arrays: unhashable keys
    # values of another type: the answer is taken without its age (then 127.0.0.1:6379 is down)
    (encode([b"ip", [b"x"], b"port", [1, 2]]), "connection error"),
    (b"*1\r\n" * 3000 + b":1\r\n", "sentinel error"),  # nested past any reader's depth
], ids=["array-keys", "array-values", "deep-nesting"])
def test_malformed_sentinel_replies_are_a_sentinel_error(make_client, masters, name, reply, outcome):
    with Peer(sentinel(reply)) as fake:
        url = f"redis+sentinel://127.0.0.1:{fake.port}/svc"
        dlm = make_client([url] + masters.urls[:2], connect_timeout=0.5)
        lock = dlm.lock(name, ttl=5.0)
        assert lock.acquire(timeout=3.0)  # the two real masters decide
        first = lock.outcomes[0]
        assert first.outcome == outcome
        assert outcome != "sentinel error" or f"127.0.0.1:{fake.port}: " in first.detail
        lock.release()


def test_a_sentinel_streaming_a_huge_reply_is_cut_at_the_limit(one_core):
    def flood(conn, peer):
        if conn.recv(3.0) and conn.send(b"*2\r\n$%d\r\n" % (100 << 20)):
            while conn.sent < (100 << 20) and not peer.stopping.is_set() and conn.send(CHUNK):
                pass

    with Peer(flood) as fake:
        resolver = Resolver(parse_master(f"redis+sentinel://127.0.0.1:{fake.port}/svc"))
        started = time.monotonic()
        with pytest.raises(SentinelError, match="without completing a reply"):
            resolver.ask(10.0)
        assert time.monotonic() - started < 2.0  # cut at the limit, not at the 10 s deadline


def test_the_pure_reader_refuses_deep_nesting_as_a_protocol_error():
    reader = reader_py.Reader()
    reader.feed(b"*1\r\n" * 100_000 + b":1\r\n")
    with pytest.raises(reader_py.ProtocolError, match="nesting"):
        reader.gets()
    reader = reader_py.Reader()
    reader.feed(b"*1\r\n" * 100 + b":1\r\n")  # what a real reply may nest, and far more
    reply = reader.gets()
    for _ in range(100):
        reply = reply[0]
    assert reply == 1


# --- cluster maps ------------------------------------------------------------------------------------
def moved_out_of_range(port_of):
    """A one-node "cluster" that owns every slot, then redirects every lock command to slot 99999."""

    def table(command):
        name = command[0].upper()
        if name == b"AUTH" or name == b"SELECT":
            return b"+OK\r\n"
        if name == b"INFO":
            return encode(b"# Replication\r\nrole:master\r\nsecond_repl_offset:-1\r\n")
        if command[:2] == [b"CLUSTER", b"SHARDS"]:
            node = [b"id", b"a" * 40, b"port", port_of(), b"ip", b"127.0.0.1", b"endpoint", b"127.0.0.1",
                    b"role", b"master", b"health", b"online"]
            return encode([[b"slots", [0, 16383], b"nodes", [node]]])
        if name == b"SCRIPT":
            return encode(b"0" * 40)
        if name in (b"SET", b"EVAL", b"EVALSHA", b"DEL", b"PEXPIRE", b"GET"):
            return b"-MOVED 99999 127.0.0.1:%d\r\n" % port_of()
        return encode(Exception("ERR unknown command"))

    return answers(table)


def test_moved_to_a_slot_out_of_range_is_that_masters_no(make_client, masters, name):
    box = []
    with Peer(moved_out_of_range(lambda: box[0])) as fake:
        box.append(fake.port)
        dlm = make_client([f"redis+cluster://127.0.0.1:{fake.port}"] + masters.urls[:2], connect_timeout=0.5)
        lock = dlm.lock(name, ttl=5.0)
        assert lock.acquire(timeout=3.0)
        first = lock.outcomes[0]
        assert first.outcome != "ok" and "MOVED 99999" in first.detail
        assert [o.outcome for o in lock.outcomes[1:]] == ["ok", "ok"]
        lock.release()


# --- audit --------------------------------------------------------------------------------------------
def trickle_info(conn, peer):
    """A master that answers INFO with a 5000-byte bulk reply, one byte every 50 ms."""
    for command in conn.commands(peer.stopping, idle=15.0):
        if command[0].upper() == b"INFO":
            if not conn.send(b"$5000\r\n"):
                return
            deadline = time.monotonic() + 15.0
            while time.monotonic() < deadline and not peer.stopping.is_set():
                if not conn.send(b"x"):
                    return
                time.sleep(0.05)
            return
        conn.send(b"+OK\r\n")


def test_audit_timeout_bounds_a_whole_reply(one_core):
    # `fastredlock audit` in a process of its own (so that a hang cannot hold the suite: on a
    # per-recv timeout it never ends); its own clock measures the audit, without the interpreter's start
    timeout = 1.0
    env = {**os.environ, "PYTHONPATH": SRC}
    with Peer(trickle_info) as slow:
        code = ("import sys, time\nfrom fastredlock.cli.audit import main\nstarted = time.monotonic()\n"
                f"rc = main(['--timeout', '{timeout}', 'redis://127.0.0.1:{slow.port}'])\n"
                "print('ELAPSED', time.monotonic() - started)\nsys.exit(rc)\n")
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=12)
    elapsed = float(proc.stdout.rsplit("ELAPSED", 1)[1])
    print(f"\naudit against a trickling master: ended after {elapsed:.2f}s (--timeout {timeout:g})")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "reach" in proc.stdout and "timed out" in proc.stdout
    assert elapsed < timeout + 1.0


def test_audit_on_a_cluster_url_says_what_it_does(one_core, masters):
    verdicts = audit(["redis+cluster://127.0.0.1:7000,127.0.0.1:7001", masters.urls[0]], clock_seconds=0.1,
                     samples=1, timeout=0.5)
    reach = {v.master: v for v in verdicts if v.check == "reach"}
    cluster = reach["cluster:127.0.0.1:7000,127.0.0.1:7001"]
    assert cluster.verdict == WARN and "not audited" in cluster.found and "redis://" in cluster.change
    assert reach[f"127.0.0.1:{masters[0].port}"].verdict == "PASS"


def test_a_cluster_node_streaming_its_slot_map_is_cut_at_the_limit(one_core):
    from fastredlock.io.cluster import MAX_MAP, ClusterError, ask_slots

    def flood(conn, peer):
        for command in conn.commands(peer.stopping):
            if command[:2] == [b"CLUSTER", b"SHARDS"]:
                if conn.send(b"*1\r\n$%d\r\n" % (MAX_MAP * 4)):
                    while conn.sent < MAX_MAP * 4 and not peer.stopping.is_set() and conn.send(CHUNK):
                        pass
                return

    with Peer(flood) as fake:
        spec = parse_master(f"redis+cluster://127.0.0.1:{fake.port}")
        started = time.monotonic()
        with pytest.raises(ClusterError, match="without completing a reply"):
            ask_slots(spec, [("127.0.0.1", fake.port)], 20.0)
        assert time.monotonic() - started < 5.0  # cut at the limit, not at the 20 s deadline
        assert fake.wait_conns(1, 5.0) and fake.conns[0].sent < MAX_MAP + (16 << 20)
