"""``python -m fastredlock bench`` runs from the package, outside any checkout: the driver, its worker
and the C floor's source ship in ``fastredlock.bench`` (a short run of one configuration)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources

import pytest

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "src"))


def test_the_package_carries_the_driver_and_the_floor_source():
    files = resources.files("fastredlock.bench")
    for name in ("driver.py", "worker.py", "floor.py", "floor.c"):
        assert files.joinpath(name).is_file(), name


@pytest.mark.slow
def test_bench_quick_from_another_directory(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p))
    argv = [sys.executable, "-m", "fastredlock", "bench", "--quick", "--only", "fastredlock-python",
            "--scenarios", "seq1", "--no-install", "--no-progress", "--rounds", "1", "--duration", "0.5"]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "fastredlock-bench"  # the default report folder: in the current directory
    report = json.loads((out / "compare.json").read_text())
    md = (out / "compare.md").read_text()
    assert "fastredlock (pure core)" in md and "python -m fastredlock bench" in md
    assert report, "an empty report"
