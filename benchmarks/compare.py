#!/usr/bin/env python
"""The comparison driver from a source checkout: ``python benchmarks/compare.py [--quick] ...``.

The driver itself ships in the package (:mod:`fastredlock.bench`, ``python -m fastredlock bench``);
this script runs it with the checkout's defaults (reports in ``benchmarks/results``).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "src"))  # the checkout's package, even if not installed

from fastredlock.bench.driver import main  # noqa: E402

if __name__ == "__main__":
    argv = sys.argv[1:]
    if not any(a == "--out" or a.startswith("--out=") for a in argv):
        argv += ["--out", os.path.join(HERE, "results")]
    sys.exit(main(argv, prog=["python", "benchmarks/compare.py"]))
