"""The round-trip scenario of the comparison driver: its delay proxy (``rttproxy.c``) forwards every
byte in order and holds it at least the configured time each way; the C floor's not-waiting mode
(``-W``) releases every lock it takes; a tiny run of the scenario reports its rows and ratios.
Behaviour only: no speed is asserted (the delay's lower bound is what the proxy is for)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from fastredlock.bench import floor, rtt

pytestmark = pytest.mark.skipif(floor.compiler() is None, reason="no C compiler: the proxy and the floor need one")


def command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


class Conn:
    """A bare RESP connection (TCP_NODELAY) that reads replies of the few kinds used here."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            data = self.sock.recv(1 << 16)
            assert data, "the proxy closed the connection"
            self.buf += data
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def reply(self) -> bytes:
        line = self._line()
        if line[:1] != b"$":
            return line
        size = int(line[1:])
        while len(self.buf) < size + 2:
            data = self.sock.recv(1 << 16)
            assert data, "the proxy closed the connection"
            self.buf += data
        body, self.buf = self.buf[:size], self.buf[size + 2:]
        return body

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("timerfd", [False, True], ids=["epoll_pwait2", "timerfd"])
def test_the_delay_proxy_forwards_in_order_and_holds_each_way(masters, timerfd):
    with rtt.DelayProxy(masters.urls[:2], delay_us=250, timerfd=timerfd) as proxy:
        assert len(proxy.ports) == 2 and (proxy.wait_call == "timerfd") == timerfd
        c = Conn(proxy.ports[0])
        try:
            # in order: 50 commands in 50 writes, answered one after the other
            for i in range(50):
                c.sock.sendall(command(b"ECHO", b"%d" % i))
            assert [c.reply() for _ in range(50)] == [b"%d" % i for i in range(50)]
            # a value larger than a socket buffer, both ways
            value = os.urandom(600_000)
            key = b"rtt-test:%d" % os.getpid()
            c.sock.sendall(command(b"SET", key, value) + command(b"GET", key) + command(b"DEL", key))
            assert [c.reply(), c.reply(), c.reply()] == [b"+OK", value, b":1"]
            # the delay: a round trip takes at least twice the hold (0.5 ms), however busy the machine
            trips = []
            for _ in range(20):
                t0 = time.perf_counter()
                c.sock.sendall(b"PING\r\n")
                assert c.reply() == b"+PONG"
                trips.append(time.perf_counter() - t0)
            assert min(trips) >= 0.0005, trips
        finally:
            c.close()
        # the second port leads to the second master
        c = Conn(proxy.ports[1])
        try:
            c.sock.sendall(command(b"CONFIG", b"GET", b"port"))
            assert c.reply() == b"*2" and c.reply() == b"port" and int(c.reply()) == masters[1].port
        finally:
            c.close()
        time.sleep(0.05)  # the closes, held like data, have passed
        stats = proxy.stats()
        assert stats["chunks"] >= 2 and stats["hold_p50_us"] >= 250 and stats["accepts"] == 2
        assert stats["user_s"] + stats["sys_s"] >= 0 and stats["wakeups"] > 0 and stats["lead_us"] >= 0
        assert proxy.stats()["chunks"] == 0  # each call covers the time since the one before


def test_the_delay_proxy_passes_a_close_on(masters):
    master = masters[0]
    with rtt.DelayProxy([master.url], delay_us=250) as proxy:
        name = b"rtt-close-%d" % os.getpid()
        clients = lambda: master.command("CLIENT", "LIST")  # noqa: E731
        c = Conn(proxy.ports[0])
        c.sock.sendall(command(b"CLIENT", b"SETNAME", name))
        assert c.reply() == b"+OK"
        assert name in clients()
        c.close()
        deadline = time.monotonic() + 5
        while name in clients():
            assert time.monotonic() < deadline, "the master-side connection stayed open"
            time.sleep(0.01)
        assert proxy.alive()


def test_the_delay_proxy_refuses_other_addresses():
    with pytest.raises(ValueError, match="loopback"):
        rtt.DelayProxy(["redis://10.1.2.3:6379"])
    done = subprocess.run([rtt.build_proxy(), "-d", "250", "10.1.2.3:6379"], capture_output=True,
                          text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "loopback" in done.stderr


@pytest.mark.parametrize("n", [1, 5])
def test_the_floor_not_waiting_releases_every_lock(masters, n):
    before = sum(len(m.command("KEYS", "floor:*")) for m in masters)
    r = floor.run_floor(masters.urls[:n], cycles=300, warmup=10, nowait=True)
    assert r["nowait"] == 1 and r["cycles"] == 300 and r["fails"] == 0 and r["unreleased"] == 0
    assert r["syscalls_per_cycle"]["send"] == 2 * n
    assert sum(len(m.command("KEYS", "floor:*")) for m in masters) == before


@pytest.mark.slow
def test_the_round_trip_scenario_runs_end_to_end(tmp_path):
    """A tiny run (one round, 0.1 s samples, N=1): every row through the proxy, the proxy's numbers,
    the ratio table. The not-waiting row runs where Lock.release takes wait=, else it is reported."""
    out = tmp_path / "report"
    argv = [sys.executable, "-m", "fastredlock", "bench", "--quick", "--only", "fastredlock-cython,fastredlock-cython-nowait",
            "--scenarios", "seq1,rtt1", "--no-install", "--no-progress", "--duration", "0.1", "--ttl", "1",
            "--out", str(out)]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "compare.json").read_text())
    md = (out / "compare.md").read_text()
    through = [s for s in report["samples"] if s["scenario"] == "rtt1"]
    rows = {s["config"] for s in through if s["ok"]}
    assert {"fastredlock-cython", "ref-c-floor", "ref-c-floor-nowait"} <= rows, through
    for s in through:
        assert s["ok"], s
        assert s["proxy"]["chunks"] > 0 and s["proxy"]["hold_p50_us"] >= 250
        assert s["proxy"]["cpu_ms_per_1000"] is not None
        assert s["result"]["fails"] == 0 and s["leftover_keys"] == 0
    assert "### Round trips: every master behind a delay proxy" in md
    assert "| through the proxy: not waiting ÷ C floor (waiting) |" in md
    assert "| the proxy keeps up: C floor through it ÷ ideal 1 / (2 x round trip) |" in md
    if "fastredlock-cython-nowait" not in rows:
        assert "No not-waiting row:" in md and "fastredlock-cython-nowait" in report["skipped"]
