"""The floor of fair turns on this machine: 8 processes passing one lock round-robin, no client library.

    python benchmarks/turns_floor.py                # N=5 and N=1, 8 processes, 1 ms holds, 4 s each
    python benchmarks/turns_floor.py --masters 5 --seconds 8

Why. The turns scenario (issue 16) asks fair turns for 0.7x the serial limit, ``1 / (hold + one
uncontended lock+unlock cycle)``. Under strict fairness every acquisition is a hand-over between
two processes: the holder's release must reach a waiter that has been asleep for several turns,
and that waiter must take the lock. What does that cost on this machine before any client library
adds its own? Here each process does, with raw sockets and hiredis and nothing else:

* ``ring``: the least any fair hand-over needs. Wait for a message on its own pub/sub channel
  (asleep in ``select``), INCR a counter on a separate master, hold, DECR, ``PUBLISH`` to the next
  process's channel on one master. No lock at all.
* ``redlock``: the least a fair Redlock hand-over needs. As ``ring``, but the woken process sends
  ``SET key token NX PX`` to every master and holds once a quorum said OK; its release is one
  ``EVALSHA`` per master that deletes the key if the token matches and publishes to the next
  process's channel (the waiter wakes at the first message). Nothing is queued on the masters
  (the ring decides the order), and no reply that is not on the critical path is waited for.
* ``fastredlock``: the same loop with the library's blocking ``acquire`` and ``release`` (turns:
  queued waiters, woken by the release), as the comparison driver's turns scenario runs it.

Each is reported as turns/s and as a ratio to the serial limit measured in the same run (the
library's uncontended cycle, timed hot). The ``redlock`` row is the ceiling for any fair Redlock
client on this machine; the ``fastredlock`` row's share of it is what the library itself costs.
Double holders (the counter above 1) are counted for every row.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import select
import socket
import statistics
import sys
import time
from time import perf_counter
from typing import Any, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "src"))

import hiredis  # noqa: E402

import fastredlock  # noqa: E402
from fastredlock.testing import start_masters  # noqa: E402

#: Release and pass the turn: delete the key if it holds the token, then wake the next process.
RELEASE_AND_PASS = (b"if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) end\n"
                    b"redis.call('publish', ARGV[2], ARGV[3])\nreturn 1")


def command(*args: Any) -> bytes:
    """One RESP command."""
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(parts)


class Conn:
    """A raw connection: write commands, read replies (``owed`` replies not read yet)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = hiredis.Reader()
        self.owed = 0

    def send(self, data: bytes, replies: int = 1) -> None:
        self.sock.sendall(data)
        self.owed += replies

    def reply(self) -> Any:
        """The next reply (blocking)."""
        while True:
            got = self.reader.gets()
            if got is not False:
                self.owed -= 1
                return got
            self.reader.feed(self.sock.recv(65536))

    def drain(self) -> None:
        """Read the replies nobody waited for (they came long ago)."""
        while self.owed:
            self.reply()

    def call(self, *args: Any) -> Any:
        self.drain()
        self.send(command(*args))
        return self.reply()


def wait_turn(subs: List[Conn], last: int, until: float) -> Optional[int]:
    """Block until a message on this process's channel names a turn after ``last``; None at ``until``."""
    while True:
        for c in subs:  # what a socket already delivered
            while True:
                msg = c.reader.gets()
                if msg is False:
                    break
                if isinstance(msg, list) and msg[0] == b"message" and int(msg[2]) > last:
                    return int(msg[2])
        left = until - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([c.sock for c in subs], [], [], left)
        for s in ready:
            c = next(c for c in subs if c.sock is s)
            c.reader.feed(s.recv(65536))


def ring_worker(mode: str, me: int, procs: int, ports: List[int], counter_port: int, hold: float, seconds: float,
                start: float, out: Any) -> None:
    quorum = len(ports) // 2 + 1
    notify = ports if mode == "redlock" else ports[:1]
    subs = [Conn(p) for p in notify]
    for c in subs:
        c.sock.sendall(command(b"SUBSCRIBE", f"ring:{me}"))
        c.reply()
    conns = [Conn(p) for p in ports]
    sha = conns[0].call(b"SCRIPT", b"LOAD", RELEASE_AND_PASS)
    for c in conns[1:]:
        c.call(b"SCRIPT", b"LOAD", RELEASE_AND_PASS)
    counter = Conn(counter_port)
    nxt = f"ring:{(me + 1) % procs}".encode()
    turns, doubles, refused = 0, 0, 0
    last = -1
    while time.time() < start:
        time.sleep(0.0005)
    end = time.monotonic() + seconds
    while True:
        if me == 0 and last == -1:
            seq = 0
        else:
            seq = wait_turn(subs, last, end + 1.0)
            if seq is None:
                break
        last = seq
        token = os.urandom(16).hex().encode()
        if mode == "redlock":
            for c in conns:
                c.drain()
                c.send(command(b"SET", b"floor:lock", token, b"NX", b"PX", b"10000"))
            ok, heard = 0, 0
            pending = list(conns)
            while heard < len(conns) and ok < quorum:
                ready, _, _ = select.select([c.sock for c in pending], [], [])
                for s in ready:
                    c = next(c for c in pending if c.sock is s)
                    c.reader.feed(s.recv(65536))
                    got = c.reader.gets()
                    if got is not False:  # (each owes one reply: the SET)
                        c.owed -= 1
                        heard += 1
                        ok += got == b"OK"
                        pending.remove(c)
            if ok < quorum:
                refused += 1
        if time.monotonic() < end:
            turns += 1
        if counter.call(b"INCR", b"floor:counter") != 1:
            doubles += 1
        time.sleep(hold)
        counter.call(b"DECR", b"floor:counter")
        if time.monotonic() >= end + 0.5:  # the others have stopped waiting
            break
        if mode == "redlock":
            for c in conns:
                c.drain()
                c.send(command(b"EVALSHA", sha, b"1", b"floor:lock", token, nxt, seq + 1))
        else:
            conns[0].drain()
            conns[0].send(command(b"PUBLISH", nxt, seq + 1))
    out.put((turns, doubles, refused))


def library_worker(urls: List[str], counter_port: int, hold: float, seconds: float, start: float, out: Any) -> None:
    dlm = fastredlock.Redlock(urls)
    lock = dlm.lock("floor:library", ttl=10.0)
    counter = Conn(counter_port)
    turns = doubles = 0
    while time.time() < start:
        time.sleep(0.0005)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not lock.acquire(timeout=2.0):
            continue
        turns += time.monotonic() < end
        if counter.call(b"INCR", b"floor:counter:lib") != 1:
            doubles += 1
        time.sleep(hold)
        counter.call(b"DECR", b"floor:counter:lib")
        lock.release()
    dlm.close()
    out.put((turns, doubles, 0))


def run(target: Any, args_of: Any, procs: int, seconds: float) -> Tuple[float, int, int]:
    """(turns/s, double holders, refused rounds) of ``procs`` processes started together."""
    out: "multiprocessing.Queue[Tuple[int, int, int]]" = multiprocessing.Queue()
    start = time.time() + 1.0
    ps = [multiprocessing.Process(target=target, args=args_of(i) + (start, out)) for i in range(procs)]
    for p in ps:
        p.start()
    got = [out.get(timeout=seconds + 30) for _ in ps]
    for p in ps:
        p.join()
    return sum(g[0] for g in got) / seconds, sum(g[1] for g in got), sum(g[2] for g in got)


def serial_cycle(urls: Sequence[str]) -> float:
    """Median seconds of the library's uncontended lock+unlock cycle (hot, as the driver times it)."""
    dlm = fastredlock.Redlock(list(urls))
    lock = dlm.lock("floor:serial", ttl=10.0)
    times = []
    for _ in range(400):
        a = perf_counter()
        if lock.acquire(blocking=False):
            lock.release()
        times.append(perf_counter() - a)
    dlm.close()
    return statistics.median(times[100:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--masters", default="5,1", help="comma-separated master counts (default 5,1)")
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--hold-ms", type=float, default=1.0)
    args = ap.parse_args()
    hold, procs, secs = args.hold_ms / 1000.0, args.processes, args.seconds
    for n in (int(x) for x in args.masters.split(",")):
        with start_masters(n) as masters, start_masters(1) as counters:
            counter = counters[0]
            time.sleep(0.2)
            ports = [m.port for m in masters]
            urls = [m.url for m in masters]
            cycle = serial_cycle(urls)
            limit = 1.0 / (hold + cycle)
            rows = []
            for mode in ("ring", "redlock", "fastredlock"):
                if mode == "fastredlock":
                    rate, doubles, refused = run(library_worker, lambda i: (urls, counter.port, hold, secs), procs, secs)
                else:
                    rate, doubles, refused = run(
                        ring_worker, lambda i, mode=mode: (mode, i, procs, ports, counter.port, hold, secs), procs, secs)
                rows.append((mode, rate, doubles, refused))
        print(f"N={n}, {procs} processes, hold {args.hold_ms:g} ms, {os.cpu_count()} CPUs: the library's uncontended "
              f"cycle {cycle * 1e3:.3f} ms, serial limit {limit:,.0f}/s")
        floor = rows[1][1]
        for mode, rate, doubles, refused in rows:
            extra = f"; {rate / floor:.2f} of the redlock floor" if mode == "fastredlock" else ""
            print(f"  {mode:12} {rate:7,.0f} turns/s = {rate / limit:.2f}x the serial limit{extra}"
                  f" (double holders {doubles}, refused rounds {refused})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
