"""The fault kit itself (``fastredlock.testing``) does what its documentation says."""
from __future__ import annotations

import socket
import subprocess
import sys
import time

from fastredlock.io import reader as hiredis  # hiredis, or the pure reader where it is absent
import pytest

from fastredlock.io.blocking import Connection
from fastredlock.testing import (
    Close, FakeMaster, FaultProxy, HalfThenClose, blackhole_address, pause_process, restart, start_master,
)

from _bounded import BOUND, read_line


class Raw(Connection):
    """A blocking RESP connection for probing the kit without the code under test."""

    def unanswered(self, *args) -> None:
        """Send a command and assert no answer comes within the socket timeout."""
        self.send(*args)
        with pytest.raises(socket.timeout):
            self.reply()


@pytest.fixture(scope="module")
def master():
    m = start_master()
    yield m
    m.stop()


@pytest.fixture
def proxy(master):
    with FaultProxy(master) as p:
        yield p


def test_proxy_forwards_and_counts(proxy):
    conn = Raw(proxy.address)
    assert conn.call("PING") == b"PONG"
    assert conn.call("SET", "kit:a", "1") == b"OK"
    assert proxy.connections == 1 and proxy.requests == 2 and proxy.replies == 2
    assert proxy.url == f"redis://127.0.0.1:{proxy.port}"
    conn.close()


def test_proxy_latency_delays_replies(proxy):
    conn = Raw(proxy.address)
    proxy.latency(0.1)
    t0 = time.monotonic()
    assert conn.call("PING") == b"PONG"
    assert 0.1 <= time.monotonic() - t0 < 1.0
    proxy.latency(0)
    t0 = time.monotonic()
    conn.call("PING")
    assert time.monotonic() - t0 < 0.1
    conn.close()


def test_proxy_stall_holds_until_heal(proxy, master):
    conn = Raw(proxy.address, timeout=0.2)
    proxy.stall("down")
    conn.unanswered("SET", "kit:stall", "x")
    assert master.command("GET", "kit:stall") == b"x"  # the request went through; the answer is held
    proxy.heal()
    assert conn.reply() == b"OK"
    conn.close()


def test_proxy_blackhole_swallows_bytes(proxy, master):
    conn = Raw(proxy.address, timeout=0.2)
    proxy.blackhole("up")
    conn.unanswered("SET", "kit:bh", "x")
    assert master.command("EXISTS", "kit:bh") == 0
    conn.close()


def test_proxy_refuse_and_drop(proxy):
    conn = Raw(proxy.address)
    assert conn.call("PING") == b"PONG"
    proxy.drop(reset=True)
    with pytest.raises(OSError):
        conn.call("PING")
    proxy.refuse()
    with pytest.raises(OSError):
        Raw(proxy.address).call("PING")
    proxy.refuse(False)
    assert Raw(proxy.address).call("PING") == b"PONG"


def test_proxy_reset_mid_reply_sends_half_then_rst(proxy):
    conn = Raw(proxy.address)
    conn.call("SET", "kit:half", "0123456789")
    proxy.reset_mid_reply(keep=5)
    conn.send("GET", "kit:half")
    data = conn.sock.recv(100)
    assert data == b"$10\r\n"
    with pytest.raises(ConnectionResetError):
        conn.sock.recv(100)


def test_proxy_hooks_run_at_the_right_moment(proxy, master):
    seen = []
    conn = Raw(proxy.address, timeout=0.5)
    proxy.on_request(lambda: seen.append(("request", master.command("EXISTS", "kit:hook"))))
    proxy.stall("down")
    proxy.on_reply(lambda: seen.append(("reply", master.command("EXISTS", "kit:hook"))))
    conn.send("SET", "kit:hook", "x")
    assert proxy.wait_for("replies", 1)
    assert seen == [("request", 0), ("reply", 1)]  # before the master ran it; after
    proxy.heal()
    assert conn.reply() == b"OK"


def test_proxy_closes_client_when_master_dies_with_replies_held():
    m = start_master()
    try:
        with FaultProxy(m) as proxy:
            conn = Raw(proxy.address)
            proxy.stall("down")
            proxy.on_reply(m.kill)
            conn.send("SET", "kit:kill", "x")
            with pytest.raises((ConnectionError, OSError)):
                conn.reply()
            assert not m.running()
    finally:
        m.stop()


def test_proxy_listens_on_loopback_only(master):
    with pytest.raises(ValueError, match="loopback"):
        FaultProxy(master, host="0.0.0.0")


def test_fake_master_counts_malformed_requests_and_connections():
    # The negative control of the suite's "malformed == 0" (the fuzz test: our requests stayed well
    # formed) and "connections == 0" (nothing was sent) checks: a planted bad request is counted.
    with FakeMaster() as fake:
        assert fake.malformed == 0 and fake.connections == 0
        conn = Raw(fake.address)
        conn.sock.sendall(b"?not RESP\r\n")
        assert conn.sock.recv(100) == b""  # closed on it
        deadline = time.monotonic() + 2.0
        while fake.malformed == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert fake.malformed == 1 and fake.connections == 1


def test_fake_master_scripts_and_records():
    with FakeMaster(lambda args: b":7\r\n" if args[0] == b"INCR" else b"-ERR nope\r\n") as fake:
        conn = Raw(fake.address)
        assert conn.call("INCR", "x") == 7
        assert isinstance(conn.call("SET", "a", "b"), hiredis.ReplyError)
        assert conn.call("PING") == b"PONG"  # handshake commands get plausible answers
        info = conn.call("INFO", "server")
        assert b"run_id:" in info and b"uptime_in_seconds:" in info
        assert fake.commands[0] == [b"INCR", b"x"]
    with FakeMaster(HalfThenClose(b"+OK\r\n")) as fake:
        conn = Raw(fake.address)
        conn.send("SET", "a", "b")
        assert conn.sock.recv(100) == b"+O"
        assert conn.sock.recv(100) == b""
    with FakeMaster(Close()) as fake:
        with pytest.raises(ConnectionError):
            Raw(fake.address).call("SET", "a", "b")


def test_blackhole_address_never_completes_a_connect():
    with blackhole_address() as address:
        t0 = time.monotonic()
        with pytest.raises(socket.timeout):
            socket.create_connection(address, timeout=0.2)
        assert time.monotonic() - t0 >= 0.19


@pytest.mark.parametrize("persistent, survives", [(False, False), (True, True)])
def test_restart_with_and_without_persistence(persistent, survives):
    m = start_master(persistent=persistent)
    try:
        assert m.command("SET", "kit:p", "x", "PX", 60000) == b"OK"
        old = m.pid
        restart(m)
        assert m.pid != old and m.running()
        assert m.command("GET", "kit:p") == (b"x" if survives else None)
        assert 0 < m.command("PTTL", "kit:p") <= 60000 or not survives
    finally:
        m.stop()


def test_delayed_restart_in_background():
    m = start_master()
    try:
        thread = restart(m, delay=0.3, background=True)
        time.sleep(0.1)
        assert not m.running()
        thread.join(10)
        assert m.running() and m.command("PING") == b"PONG"
    finally:
        m.stop()


def test_pause_process_stops_and_continues():
    proc = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: print(time.monotonic(), flush=True); time.sleep(0.01)"],
                            stdout=subprocess.PIPE, text=True)
    try:
        read_line(proc)
        with pause_process(proc.pid):
            time.sleep(0.05)
            with open(f"/proc/{proc.pid}/stat") as f:
                assert f.read().split(") ")[1][0] == "T"  # stopped
        with open(f"/proc/{proc.pid}/stat") as f:
            assert f.read().split(") ")[1][0] in "RS"
    finally:
        proc.kill()
        proc.wait(timeout=BOUND)
