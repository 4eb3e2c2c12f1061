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
    for name in ("driver.py", "configs.py", "peers.py", "run.py", "report.py", "worker.py", "adapters.py",
                 "scenarios.py", "measure.py", "control.py", "floor.py", "floor.c", "rtt.py", "rttproxy.c"):
        assert files.joinpath(name).is_file(), name


def test_the_worker_side_imports_only_the_standard_library(tmp_path):
    """Peers' worker processes run ``python -S worker.py`` with only their own folder on the path:
    the worker and its sibling modules must import without fastredlock or any third-party package."""
    bench = os.path.join(SRC, "fastredlock", "bench")
    probe = ("import sys; import worker; "
             "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
             "('fastredlock', 'redis', 'hiredis')); print(bad); sys.exit(1 if bad else 0)")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONNOUSERSITE": "1", "PYTHONPATH": bench}  # its folder alone
    done = subprocess.run([sys.executable, "-S", "-c", probe], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory):
    """fastredlock built as a wheel and installed into a folder of its own (``pip install --target``).

    The pure-Python wheel (``FASTREDLOCK_NO_EXTENSIONS=1``): it builds in seconds and carries the same
    package data (the bench modules, ``floor.c``); the compiled wheels are built and tested by
    .github/workflows/wheels.yml."""
    root = tmp_path_factory.mktemp("wheel")
    env = dict(os.environ, FASTREDLOCK_NO_EXTENSIONS="1")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                            "-w", str(root / "dist"), os.path.dirname(SRC)], env=env, timeout=300,
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    (wheel,) = (root / "dist").glob("fastredlock-*.whl")
    site = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                    str(wheel)], check=True, timeout=300, capture_output=True)
    return site


@pytest.mark.slow
def test_bench_quick_from_another_directory_on_an_installed_wheel(tmp_path, installed_wheel):
    # The wheel's folder first on the path: it shadows the checkout (an editable install adds src
    # through a .pth file, which comes after PYTHONPATH); the report says which files ran.
    env = dict(os.environ, PYTHONPATH=str(installed_wheel))
    argv = [sys.executable, "-m", "fastredlock", "bench", "--quick", "--only", "fastredlock-python",
            "--scenarios", "seq1", "--no-install", "--no-progress", "--rounds", "1", "--duration", "0.5"]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "fastredlock-bench"  # the default report folder: in the current directory
    report = json.loads((out / "compare.json").read_text())
    md = (out / "compare.md").read_text()
    assert "fastredlock (pure core)" in md and "python -m fastredlock bench" in md
    files = json.dumps(report)
    assert str(installed_wheel / "fastredlock") in files, "the worker did not run the installed wheel"
    assert os.path.join(SRC, "fastredlock") not in files, "the checkout's sources ran"
