"""Where a hand-over's time goes: 8 processes take turns on one name (the turns scenario's loop).

    python benchmarks/handover.py                 # Cython core, N=5, 8 processes, 4 s
    python benchmarks/handover.py --masters 1 --core python
    python benchmarks/handover.py --asyncio       # one task of fastredlock.asyncio per process
    python benchmarks/handover.py --no-native     # the masters' user may not run DELIFEQ/DELEX/SET IFEQ:
                                                  # the releases go as scripts (compare on Valkey >= 9.0)

Each process loops: acquire (the default blocking acquire: queued waiters, turns), INCR a counter on
a separate master, hold 1 ms, DECR, release. Every turn is stamped on the machine-wide monotonic
clock: when the previous holder began its release, when the waiter's event was set (the notifier
thread heard its turn), when its wait returned (its thread runs), when its queued round was done
and when acquire returned. The medians over consecutive turns say how long each step of a
hand-over takes under contention, beside the uncontended cycle of the same client (timed first),
and how busy the machine was meanwhile. "Woken by the release before them" counts the turns whose
waiter heard the previous holder's release; the others came some other way (a backoff, a first
attempt), and the mean and p99 of the turn period show what they cost.

This is a diagnostic, not a comparison: it wraps ``threading.Event`` and the notifier's ``leave``
in the worker processes to stamp them (both are pure Python), which costs a few microseconds.
The comparison driver's turns scenario (``python -m fastredlock bench --scenarios turns``) gives
the figures to quote.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
from time import monotonic
from typing import Any, Dict, List, Optional, Tuple

#: One turn: (asked, heard, woken, round done, acquired, release began, release done).
Turn = Tuple[float, Optional[float], Optional[float], Optional[float], float, float, float]


def _stamps(use_asyncio: bool = False) -> Dict[str, float]:
    """Wrap this process's ``threading.Event`` (``asyncio.Event`` for the asyncio client) and the
    notifier's ``leave`` so that they stamp the dict returned: heard (the event set), woken (the
    waiter took the news), round (the acquire's round is done: it leaves the waiters)."""
    import asyncio
    import threading

    from fastredlock.sync import notifier as sync_notifier
    from fastredlock.asyncio import notifier as async_notifier

    marks: Dict[str, float] = {}

    class Stamped:
        """Heard: the event is set; woken: the waiter takes the event's news (it clears a set event
        after its wait, or without waiting when the news came first: the asyncio pause does that)."""

        def set(self) -> None:
            marks.setdefault("heard", monotonic())
            super().set()  # type: ignore[misc]

        def clear(self) -> None:
            if self.is_set():  # type: ignore[attr-defined]
                marks["woken"] = monotonic()
            super().clear()  # type: ignore[misc]

    class StampedEvent(Stamped, threading.Event):
        pass

    class StampedAsyncEvent(Stamped, asyncio.Event):
        pass

    notifier = async_notifier.AsyncNotifier if use_asyncio else sync_notifier.Notifier
    leave = notifier.leave

    def stamped_leave(self: Any, *args: Any) -> None:
        marks["round"] = monotonic()
        leave(self, *args)

    if use_asyncio:
        asyncio.Event = StampedAsyncEvent  # type: ignore[misc]
    else:
        threading.Event = StampedEvent  # type: ignore[misc]
    notifier.leave = stamped_leave  # type: ignore[method-assign]
    return marks


async def _take_turns(dlm: Any, acquire: Any, release: Any, sleep: Any, ctl: Any, marks: Dict[str, float],
                      seconds: float, hold: float) -> List[Turn]:
    """The loop of one process (both clients): acquire, INCR, hold, DECR, release, each turn
    stamped. ``acquire``/``release``/``sleep`` are awaitables (for the sync client, coroutines that
    block: nothing else runs on that loop)."""
    turns: List[Turn] = []
    end = monotonic() + seconds
    while monotonic() < end:
        marks.clear()
        asked = monotonic()
        lock = dlm.lock("handover", ttl=10)
        await acquire(lock)
        acquired = monotonic()
        ctl.cmd("INCR", "handover:holders")
        await sleep(hold)
        ctl.cmd("DECR", "handover:holders")
        began = monotonic()
        await release(lock)
        turns.append((asked, marks.get("heard"), marks.get("woken"), marks.get("round"), acquired, began,
                      monotonic()))
    return turns


def _async_worker(urls: List[str], counter_port: int, core: str, seconds: float, hold: float, ready: Any,
                  go: Any, results: Any) -> None:
    """:func:`_worker` with one task of the asyncio client (the counter calls block the loop
    briefly: the task is alone in its process)."""
    import asyncio

    from fastredlock.bench.control import Ctl

    marks = _stamps(use_asyncio=True)

    async def main() -> List[Turn]:
        from fastredlock.asyncio import Redlock

        ctl = Ctl(f"redis://127.0.0.1:{counter_port}")
        async with Redlock(urls, core=core, restart_aware=False) as dlm:
            await dlm.lock("handover:warm", ttl=10).acquire(blocking=False)
            ready.put(1)
            go.wait(120)
            return await _take_turns(dlm, lambda lock: lock.acquire(), lambda lock: lock.release(), asyncio.sleep,
                                     ctl, marks, seconds, hold)

    results.put(asyncio.run(main()))


def _worker(urls: List[str], counter_port: int, core: str, seconds: float, hold: float, ready: Any, go: Any,
            results: Any) -> None:
    import asyncio

    import fastredlock
    from fastredlock.bench.control import Ctl

    marks = _stamps()
    dlm = fastredlock.Redlock(urls, core=core, restart_aware=False)
    ctl = Ctl(f"redis://127.0.0.1:{counter_port}")
    dlm.lock("handover:warm", ttl=10).acquire(blocking=False)  # connected before the go
    ready.put(1)
    go.wait(120)

    async def acquire(lock: Any) -> None:
        lock.acquire()

    async def release(lock: Any) -> None:
        lock.release()

    async def sleep(seconds: float) -> None:
        time.sleep(seconds)

    turns = asyncio.run(_take_turns(dlm, acquire, release, sleep, ctl, marks, seconds, hold))
    dlm.close()
    results.put(turns)


def _busy(seconds: float) -> float:
    """The share of this machine's CPU time that was not idle over ``seconds`` from now."""
    def sample() -> Tuple[int, int]:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        return sum(values), values[3] + values[4]

    t0, idle0 = sample()
    time.sleep(seconds)
    t1, idle1 = sample()
    return 1.0 - (idle1 - idle0) / max(1, t1 - t0)


def _ping_pong(port: int, me: bytes, other: bytes, rounds: int, starts: bool, ready: Any, results: Any) -> None:
    """One side of the raw wake floor: subscribe to ``me``; on each message publish to ``other``."""
    import select
    import socket

    import hiredis

    from fastredlock.protocol.resp import encode_command

    sub, pub = socket.create_connection(("127.0.0.1", port)), socket.create_connection(("127.0.0.1", port))
    for sock in (sub, pub):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sub_reader, pub_reader = hiredis.Reader(), hiredis.Reader()

    def read(sock: Any, reader: Any) -> Any:
        while (reply := reader.gets()) is False:
            select.select([sock], [], [])
            reader.feed(sock.recv(65536))
        return reply

    sub.sendall(encode_command(b"SUBSCRIBE", me))
    read(sub, sub_reader)
    ready.put(1)
    time.sleep(0.3)
    rtts = []
    for _ in range(rounds):
        began = monotonic()
        if starts:
            pub.sendall(encode_command(b"PUBLISH", other, b"x"))
            read(pub, pub_reader)
        read(sub, sub_reader)
        if starts:
            rtts.append(monotonic() - began)
        else:
            pub.sendall(encode_command(b"PUBLISH", other, b"x"))
            read(pub, pub_reader)
    if starts:
        results.put(statistics.median(rtts))


def wake_floor(rounds: int = 3000) -> float:
    """Seconds of one raw pub/sub wake between two processes on this machine (half the median
    round trip of a ping-pong over one master, raw sockets and hiredis): the least a release can
    cost a waiter in another process before the waiter's own round."""
    from fastredlock.testing import start_masters

    with start_masters(1) as local:
        ctx = multiprocessing.get_context("spawn")
        ready, results = ctx.Queue(), ctx.Queue()
        b = ctx.Process(target=_ping_pong, args=(local[0].port, b"b", b"a", rounds, False, ready, results))
        b.start()
        ready.get(timeout=60)
        a = ctx.Process(target=_ping_pong, args=(local[0].port, b"a", b"b", rounds, True, ready, results))
        a.start()
        ready.get(timeout=60)
        rtt = results.get(timeout=120)
        a.join()
        b.join()
    return rtt / 2


def _uncontended_cycle(urls: List[str], core: str) -> float:
    """Median seconds of one uncontended lock+unlock cycle of this client (before the contenders start)."""
    import fastredlock

    with fastredlock.Redlock(urls, core=core, restart_aware=False) as dlm:
        solo = dlm.lock("handover:solo", ttl=10)
        times = []
        for _ in range(500):
            a = monotonic()
            solo.acquire()
            solo.release()
            times.append(monotonic() - a)
    return statistics.median(times)


def run(core: str, masters: int, processes: int, seconds: float, hold: float,
        use_asyncio: bool = False, native: bool = True) -> Dict[str, float]:
    """One run: the medians of each step (milliseconds) and the machine's busy share. ``native``
    False: the masters refuse the native commands to the default user (the client's probes find
    none: it releases and extends by script, as on a server without them)."""
    from fastredlock.testing import start_masters

    with start_masters(masters + 1) as local:
        urls = local.urls[:masters]
        if not native:
            for m in list(local)[:masters]:
                for cmd in ("-delifeq", "-delex"):  # (a server without one refuses the rule: nothing to take)
                    try:
                        m.command("ACL", "SETUSER", "default", cmd)
                    except Exception:
                        pass
        cycle = _uncontended_cycle(urls, core)
        ctx = multiprocessing.get_context("spawn")
        results, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
        target = _async_worker if use_asyncio else _worker
        procs = [ctx.Process(target=target, args=(urls, local[masters].port, core, seconds, hold, ready, go, results))
                 for i in range(processes)]
        for p in procs:
            p.start()
        for _ in procs:
            ready.get(timeout=120)
        go.set()
        time.sleep(seconds / 4)
        busy = _busy(seconds / 2) if os.path.exists("/proc/stat") else float("nan")
        reports = [results.get(timeout=120 + seconds) for _ in procs]
        for p in procs:
            p.join()
    turns = sorted((t for ts in reports for t in ts), key=lambda t: t[4])
    turns = turns[len(turns) // 20:]  # past the start
    steps: Dict[str, List[float]] = {k: [] for k in ("period", "handover", "release", "heard", "woken", "round",
                                                      "after_round")}
    for prev, nxt in zip(turns, turns[1:]):
        steps["period"].append(nxt[4] - prev[4])
        steps["handover"].append(nxt[4] - prev[5])
        steps["release"].append(prev[6] - prev[5])
        if None not in nxt[1:4] and nxt[1] >= prev[5]:  # woken by this release
            steps["heard"].append(nxt[1] - prev[5])
            steps["woken"].append(nxt[2] - nxt[1])
            steps["round"].append(nxt[3] - nxt[2])
            steps["after_round"].append(nxt[4] - nxt[3])
    out = {k: statistics.median(v) * 1000 for k, v in steps.items() if v}
    out["mean_period"] = (turns[-1][4] - turns[0][4]) / max(1, len(turns) - 1) * 1000
    out["p99_period"] = sorted(steps["period"])[int(len(steps["period"]) * 0.99)] * 1000 if steps["period"] else 0.0
    out.update(cycle=cycle * 1000, busy=busy, turns=len(turns), woken_turns=len(steps["heard"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--core", choices=("cython", "python"), default="cython")
    ap.add_argument("--masters", type=int, default=5)
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--hold-ms", type=float, default=1.0)
    ap.add_argument("--asyncio", action="store_true", help="one task of fastredlock.asyncio per process")
    ap.add_argument("--no-native", action="store_true", help="releases by script where the server has DELIFEQ")
    args = ap.parse_args()
    floor = wake_floor()
    r = run(args.core, args.masters, args.processes, args.seconds, args.hold_ms / 1000.0, args.asyncio,
            not args.no_native)
    print(f"{'asyncio, ' if args.asyncio else ''}{args.core} core, N={args.masters}, {args.processes} processes, hold {args.hold_ms:g} ms: "
          f"{r['turns']} turns ({r['woken_turns']} woken by the release before them); machine busy "
          f"{r['busy'] * 100:.0f}% of {os.cpu_count()} CPUs")
    print(f"  raw pub/sub wake, one way          {floor * 1000:.3f} ms (two processes, raw sockets: the floor)")
    print(f"  uncontended lock+unlock cycle      {r['cycle']:.3f} ms")
    print(f"  turn period                        {r['period']:.3f} ms (mean {r['mean_period']:.3f}, p99 {r['p99_period']:.3f})")
    print(f"  release began -> next acquired     {r['handover']:.3f} ms (the hand-over)")
    print(f"    the release round                {r['release']:.3f} ms")
    for key, label in (("heard", "release began -> turn heard"), ("woken", "heard -> waiter's thread runs"),
                       ("round", "runs -> its queued round done"), ("after_round", "round done -> acquire returns")):
        if key in r:
            print(f"    {label:<32} {r[key]:.3f} ms")


if __name__ == "__main__":
    main()
