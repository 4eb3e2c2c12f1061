"""Compare fastredlock with every Python Redlock client and the raw floor, in one run.

    python -m fastredlock bench             # full run: 3 rounds, ~20-25 minutes on 2 cores
    python -m fastredlock bench --quick     # ~30 s smoke run (one short round)
    python benchmarks/compare.py [...]      # the same from a source checkout (writes benchmarks/results)

It ships in the package (``pip install "fastredlock[bench]"``) and runs from any directory: it
needs no checkout.

The driver starts its own masters (5 lock masters + 1 counter master, loopback, no persistence),
installs each peer with ``pip install --target <peers-dir>/<peer>`` (cached; ``--no-install`` to
use what is there), and then runs every configuration x scenario in a **fresh subprocess**
(``worker.py``), **interleaved and shuffled** across rounds. Peers run with ``python -S`` and a
``PYTHONPATH`` of their own folder only, so redlock-py, redlock (glasslion) and redlock-ng (all the
top-level module ``redlock``) and the old redis-py that pyredlock / redlock-ng pin never meet.
A peer that cannot be installed or imported is reported as skipped, with the reason.
The C floor (``floor.c``, built with ``cc -O2`` by ``floor.py``) runs beside them in the
sequential and batch scenarios: every row gets its ratio to that physical limit ("x of C floor").
The round-trip scenario (``rtt5``, ``rtt1``; :mod:`.rtt`) runs sequential rows again with every
lock master behind a delay proxy (``rttproxy.c``, 0.25 ms each way), beside the loopback ones.

Outputs (``--out``, default ``./fastredlock-bench`` in the current directory): ``compare.md`` (the tables, also printed),
``compare.json`` (every sample of every round, plus the environment), ``compare.png`` (chart, N=5;
``compare-seq1.png``: N=1; ``python -m fastredlock.bench.report compare.json DIR`` draws them again).
See benchmarks/README.md for what each column means.

The parts, by what they are: :mod:`.configs` (what is compared), :mod:`.peers` (installing them),
:mod:`.run` (the run and its worker processes), :mod:`.report` (tables, JSON, chart); inside each
worker process :mod:`.worker` with :mod:`.adapters` (one per configuration), :mod:`.scenarios`,
:mod:`.measure` and :mod:`.control`. This module is the command line.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
from typing import List, Optional

from .configs import CONFIGS, QUICK, SCENARIO_NAMES, Settings
from .peers import default_peers_dir
from .progress import say
from .report import Report
from .run import Bench

__all__ = ["main"]


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="fastredlock bench", description="Compare fastredlock with other Python Redlock clients "
        "and the raw floor on local masters (every configuration in a fresh process, shuffled rounds).")
    p.add_argument("--quick", action="store_true", help="~30 s smoke run: one short round, 1 fault attempt")
    p.add_argument("--rounds", type=int, help="rounds (default 3; --quick: 1)")
    p.add_argument("--duration", type=float, help="seconds per sequential / threads sample (default 3)")
    p.add_argument("--contend-duration", type=float, help="seconds per contention sample (default 4)")
    p.add_argument("--attempts", type=int, help="acquire attempts per fault sample (default 4)")
    p.add_argument("--hang-limit", type=float, help="an answer later than this (s) counts as hung (default 2)")
    p.add_argument("--threads", type=int, default=4, help="threads sharing one client (default 4)")
    p.add_argument("--tasks", type=int, default=64, help="asyncio tasks sharing one async client (default 64)")
    p.add_argument("--procs", type=int, default=4, help="processes in the contention scenario (default 4)")
    p.add_argument("--ttl", type=float, help="lock TTL in seconds (default 10; --quick: 3)")
    p.add_argument("--hold-ms", type=float, default=0.0, help="time each contention holder sleeps inside (default 0)")
    p.add_argument("--turns-procs", type=int, help="processes of the turns scenario (default 8)")
    p.add_argument("--turns-duration", type=float, help="seconds per turns sample (default 5; --quick: 0.5)")
    p.add_argument("--turns-hold-ms", type=float, help="time each turns holder holds the lock (default 1)")
    p.add_argument("--rtt-delay-us", type=int, help="round-trip scenario (rtt5, rtt1): the delay proxy's hold "
                   "per chunk, each way, in µs (default 250)")
    p.add_argument("--only", help="comma-separated configuration ids (see --list); the C floor always comes along")
    p.add_argument("--skip", help="comma-separated configuration ids to leave out")
    p.add_argument("--scenarios", help=f"comma-separated subset of {','.join(SCENARIO_NAMES)}")
    p.add_argument("--list", action="store_true", help="list configurations and scenarios, then exit")
    p.add_argument("--out", default=os.path.join(os.getcwd(), "fastredlock-bench"),
                   help="output folder (default ./fastredlock-bench)")
    p.add_argument("--peers-dir", default=default_peers_dir(), help="where peers are pip-installed (--target)")
    p.add_argument("--no-install", action="store_true", help="use peers already installed, install nothing")
    p.add_argument("--reinstall", action="store_true", help="reinstall every peer")
    p.add_argument("--peer-hiredis", action="store_true", help="add hiredis to every peer's install (redis-py uses it)")
    p.add_argument("--server", help="redis-server / valkey-server binary (default: fastredlock.testing.find_server)")
    p.add_argument("--redis-benchmark", help="redis-benchmark binary (default: from PATH)")
    p.add_argument("--floor-requests", type=int, help="requests per redis-benchmark test (default 50000)")
    p.add_argument("--seed", type=int, default=None, help="shuffle seed (default: random, recorded)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 30)
    return args


def settings_from(args: argparse.Namespace) -> Settings:
    s = Settings(**QUICK.__dict__) if args.quick else Settings()
    for name in ("rounds", "duration", "contend_duration", "attempts", "hang_limit", "floor_requests", "ttl",
                 "turns_procs", "turns_duration", "turns_hold_ms", "rtt_delay_us"):
        v = getattr(args, name)
        if v is not None:
            setattr(s, name, v)
    s.threads, s.tasks, s.procs, s.hold_ms = args.threads, args.tasks, args.procs, args.hold_ms
    if s.rounds < 1 or s.duration <= 0 or s.procs < 2 or s.threads < 1:
        raise SystemExit("--rounds >= 1, --duration > 0, --procs >= 2 and --threads >= 1, please")
    return s


def main(argv: Optional[List[str]] = None, prog: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if args.list:
        for c in CONFIGS:
            print(f"{c.id:20} {c.label:32} {','.join(c.scenarios)}")
        print("scenarios:", ", ".join(SCENARIO_NAMES))
        return 0
    bench = Bench(args, settings_from(args))
    bench.run()
    command = prog or os.environ.get("FASTREDLOCK_BENCH_PROG", "python -m fastredlock bench").split()
    report = Report(bench, command + (sys.argv[1:] if argv is None else list(argv)))
    md = report.markdown()
    os.makedirs(args.out, exist_ok=True)
    md_path = os.path.join(args.out, "compare.md")
    json_path = os.path.join(args.out, "compare.json")
    png_path = os.path.join(args.out, "compare.png")
    with open(md_path, "w") as f:
        f.write(md)
    with open(json_path, "w") as f:
        json.dump(report.json(), f, indent=1, default=str)
    problem = report.chart(png_path)
    report.chart(os.path.join(args.out, "compare-seq1.png"), "seq1")  # N=1, where it ran
    print(md)
    say(f"wrote {md_path}, {json_path}" + (f", {png_path}" if not problem else f" (no chart: {problem})"))
    return 0
