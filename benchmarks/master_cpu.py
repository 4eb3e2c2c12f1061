"""The masters' CPU per lock+unlock cycle, from their own accounts (``INFO commandstats``).

    python benchmarks/master_cpu.py                          # this checkout, N=1 and N=5
    python benchmarks/master_cpu.py --baseline /tmp/main/src # A/B: another checkout's build first
    python benchmarks/master_cpu.py --masters 5 --blocks 12 --cycles 800 --server /usr/bin/redis-server

Each side (the baseline's build, if given, and this checkout's) gets fresh masters of its own
(``redis-server`` from PATH unless ``--server``; Redis 7.0 here) and a worker process that imports
fastredlock from its ``src/`` folder (the C build: it refuses the pure one) and runs sequential
uncontended cycles on one name: ``acquire(blocking=False)``, then ``release()``. The sides run
alternating blocks of ``--cycles`` cycles, ``--blocks`` times (the order flips every block, so a
drift of this shared machine hits both alike). Before each block the side's masters reset their
statistics (``CONFIG RESETSTAT``); after it, every master's ``INFO commandstats`` is read.

Reported, per N and side (medians over the blocks): each command's ``usec_per_call`` (the top-level
commands the client sends, ``set`` and ``evalsha``, and those its scripts call, ``get``, ``del``,
``exists``, ``publish``, which the server counts again inside the script's own time), and the
masters' CPU per cycle: the summed ``usec`` of the top-level commands over all masters, divided by
the cycles (a script's calls are inside its ``evalsha`` time, so they are not added twice). With a
baseline, also the median and interquartile range of the per-block ratio, this side ÷ baseline.
The numbers leave out what commandstats does not count (reading, parsing and answering each
command, the event loop): the CPU a master spends on the commands themselves.

Servers compared in one run (this checkout against each; Valkey 8.1 releases by script, Valkey 9.1
natively with ``DELIFEQ``)::

    python benchmarks/master_cpu.py --masters 1 --server-side valkey8.1=/path/valkey-server-8.1 \
        --server-side valkey9.1=/path/valkey-server-9.1

Each side then also reports the scripts its masters ran per cycle (``evalsha`` and ``eval`` calls,
summed over the masters: N per cycle where each master runs one),
and every side after the first its CPU per cycle as a ratio of the first's.

To build a baseline of ``main``: ``git worktree add /tmp/main main`` and, there,
``python setup.py build_ext --inplace`` (with this venv's Cython).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from typing import Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "src"))

from fastredlock.testing import find_server, server_version, start_masters  # noqa: E402

#: The commands a client sends in an uncontended cycle (or instead of a script, where the master
#: runs one natively): their usec is the masters' CPU for the cycle.
TOP = ("set", "evalsha", "eval", "delifeq", "delex", "exists")
#: The commands the release scripts call (their time is also inside ``evalsha``'s). ``exists`` is
#: both: a native release sends it (its wake mark), and the scripts call it; the native cycle's
#: goes into TOP, and a script's nested calls are counted apart (commandstats counts them too), so
#: a Lua cycle's ``exists`` are subtracted from the top-level sum when scripts ran (see Side.block).
NESTED = ("get", "del", "publish")

WORKER = r"""
import os, sys
path = sys.argv[1]
sys.path.insert(0, path)
import fastredlock
if not fastredlock.__file__.startswith(os.path.abspath(path)):
    raise SystemExit(f"imported {fastredlock.__file__}, not the package under {path}")
if fastredlock.CORE != "cython":
    raise SystemExit(f"the C build is not importable under {path} (core {fastredlock.CORE})")
# io_timeout: a master this busy machine leaves unscheduled for a while must not time out (a
# reconnect would load the scripts and probe again, inside a block)
dlm = fastredlock.Redlock(sys.argv[2].split(","), restart_aware=False, retry_count=0, io_timeout=1.0)
name = f"master-cpu:{os.getpid()}"
lock = dlm.lock(name, ttl=10.0)
def cycle():
    if not lock.acquire(blocking=False):
        return 1
    try:
        lock.release()
    except fastredlock.LockError:
        return 1
    return 0
for _ in range(50):  # connect, load the scripts, answer the probes: none of it in a block
    cycle()
print("ready", flush=True)
for line in sys.stdin:
    print(sum(cycle() for _ in range(int(line))), flush=True)
"""


def commandstats(master) -> Dict[str, Tuple[int, int]]:
    """``{command: (calls, usec)}`` from one master's ``INFO commandstats``."""
    stats = {}
    for line in master.command("INFO", "commandstats").decode().splitlines():
        if line.startswith("cmdstat_"):
            name, rest = line[len("cmdstat_"):].split(":", 1)
            fields = dict(part.split("=", 1) for part in rest.split(","))
            stats[name] = (int(fields["calls"]), int(fields["usec"]))
    return stats


class Side:
    """One build: its masters and its worker."""

    def __init__(self, label: str, src: str, n: int, binary: Optional[str]) -> None:
        self.label = label
        self.masters = start_masters(n, binary=binary)
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER, src, ",".join(self.masters.urls)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().split() != ["ready"]:  # type: ignore[union-attr]
            self.close()
            raise SystemExit(f"the worker for {src} did not start")
        #: Per block: the masters' CPU per cycle (µs), and per command its usec_per_call.
        self.per_cycle: List[float] = []
        self.per_call: Dict[str, List[float]] = {}
        #: Per block: the scripts (EVALSHA and EVAL calls) the masters ran per cycle.
        self.scripts: List[float] = []
        self.failed = 0

    def block(self, cycles: int) -> None:
        for m in self.masters:
            m.command("CONFIG", "RESETSTAT")
        self.proc.stdin.write(f"{cycles}\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        self.failed += int(self.proc.stdout.readline())  # type: ignore[union-attr]
        total: Dict[str, List[int]] = {}
        for m in self.masters:
            for name, (calls, usec) in commandstats(m).items():
                seen = total.setdefault(name, [0, 0])
                seen[0] += calls
                seen[1] += usec
        scripts = sum(total[c][0] for c in ("evalsha", "eval") if c in total)
        top = sum(total[c][1] for c in TOP if c in total and (c != "exists" or not scripts))
        self.per_cycle.append(top / cycles)
        self.scripts.append(scripts / cycles)
        for name in TOP + NESTED:
            if name in total and total[name][0]:
                self.per_call.setdefault(name, []).append(total[name][1] / total[name][0])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # type: ignore[union-attr]
            self.proc.wait(10)
        self.masters.stop()


def quartiles(values: Sequence[float]) -> Tuple[float, float, float]:
    q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
    return q[0], statistics.median(values), q[2]


def run(n: int, sources: List[Tuple[str, str, Optional[str]]], blocks: int, cycles: int) -> None:
    sides = [Side(label, src, n, binary) for label, src, binary in sources]
    try:
        for b in range(blocks):
            for side in sides[b % len(sides):] + sides[:b % len(sides)]:  # each side first in turn
                side.block(cycles)
    finally:
        for side in sides:
            side.close()
    print(f"\nN={n}: {blocks} blocks of {cycles} cycles per side (medians over blocks)")
    names = [c for c in TOP + NESTED if any(c in s.per_call for s in sides)]
    print(f"  {'side':<10} {'CPU µs/cycle':>13} {'scripts/cycle':>13} " + " ".join(f"{c + ' µs':>11}" for c in names)
          + "  failed")
    for side in sides:
        calls = " ".join(f"{statistics.median(side.per_call[c]):>11.2f}" if c in side.per_call else f"{'-':>11}"
                         for c in names)
        print(f"  {side.label:<10} {statistics.median(side.per_cycle):>13.2f} {statistics.median(side.scripts):>13.3f} "
              f"{calls}  {side.failed}")
    for side in sides[1:]:
        ratios = [b / a for a, b in zip(sides[0].per_cycle, side.per_cycle)]
        q1, med, q3 = quartiles(ratios)
        print(f"  {side.label} / {sides[0].label}: CPU per cycle x{med:.3f} (IQR {q1:.3f}..{q3:.3f}), "
              f"{(1 - med) * 100:.0f}% lower")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", help="src/ folder of the build to compare with (built in place)")
    p.add_argument("--masters", type=int, nargs="+", default=[1, 5], help="values of N (default: 1 5)")
    p.add_argument("--blocks", type=int, default=10, help="blocks per side (default 10)")
    p.add_argument("--cycles", type=int, default=1000, help="cycles per block (default 1000)")
    p.add_argument("--also", action="append", default=[], metavar="LABEL=SRC",
                   help="another side (a variant's src/ folder), measured with the others")
    p.add_argument("--server", help="the server binary (default: as the tests find it)")
    p.add_argument("--server-side", action="append", default=[], metavar="LABEL=BINARY",
                   help="this checkout on masters of another server binary, measured with the others")
    args = p.parse_args()
    binary = find_server(args.server)
    here = os.path.abspath(os.path.join(HERE, os.pardir, "src"))
    sources: List[Tuple[str, str, Optional[str]]] = []
    if args.baseline:
        sources.append(("baseline", os.path.abspath(args.baseline), binary))
    if not args.server_side:
        sources.append(("this", here, binary))
    for extra in args.also:
        label, _, src = extra.partition("=")
        sources.append((label, os.path.abspath(src), binary))
    for extra in args.server_side:
        label, _, server = extra.partition("=")
        sources.append((label, here, find_server(server)))
    for label, src, server in sources:
        print(f"side {label}: {src} on {server_version(server)} ({server})")
    for n in args.masters:
        run(n, sources, args.blocks, args.cycles)


if __name__ == "__main__":
    main()
