"""The safety report's command line: run fault scenarios against real masters, check the histories.

    python -m fastredlock.testing.safety [--scenario X|all] [--seconds S] [--out DIR]

Writes ``DIR/report.md`` (a Markdown table: scenario x mode -> operations, held overlaps, use
overlaps, stale writes accepted and caught, whether the row is as expected, what it means, the
command that reproduces it), ``DIR/report.json``, and per scenario ``DIR/<scenario>/history/*.jsonl``
(the histories) and ``DIR/<scenario>/report.json``. Exits 1 when a row is not as expected. See
:mod:`fastredlock.testing.scenarios` for what runs, and docs/concepts/safety-report.md for a full run.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from .scenarios import MODES, SCENARIOS, recheck, run_safety

__all__ = ["main"]


def main(argv: Optional[List[str]] = None) -> int:
    """The command line: run scenarios, write the report, exit 1 if a row is not as expected."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m fastredlock.testing.safety",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="all",
                        help=f"one of {', '.join(SCENARIOS)}, a comma-separated list, or all (default; "
                             "all but none)")
    parser.add_argument("--seconds", type=float, default=120.0, help="length of each scenario (default 120)")
    parser.add_argument("--ttl", type=float, default=2.0, help="the lock's TTL in seconds (default 2)")
    parser.add_argument("--clients", type=int, default=4, help="client processes per mode (default 4)")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated modes (default: all)")
    parser.add_argument("--out", default="safety-report", help="directory for the report and histories")
    parser.add_argument("--core", choices=["cython", "python", "mixed"], default=None,
                        help="the clients' core (default: the active one; mixed: alternate per client)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--recheck", action="store_true",
                        help="run nothing: check the histories saved in --out again and rewrite its report")
    args = parser.parse_args(argv)
    if args.recheck:
        reports = recheck(args.out)
        print(f"report: {os.path.join(args.out, 'report.md')}", file=sys.stderr)
        return 1 if any(not s["expected"] for r in reports for s in r.get("modes", {}).values()) else 0
    scenarios = [s for s in SCENARIOS if s != "none"] if args.scenario == "all" else args.scenario.split(",")
    for s in scenarios:
        if s not in SCENARIOS:
            parser.error(f"unknown scenario {s!r}")
    reports = run_safety(scenarios, args.seconds, args.out, ttl=args.ttl, clients=args.clients,
                         modes=args.modes.split(","), seed=args.seed, core=args.core, argv=argv)
    print(f"report: {os.path.join(args.out, 'report.md')}", file=sys.stderr)
    bad = [(r["scenario"], m) for r in reports for m, s in r.get("modes", {}).items() if not s["expected"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
