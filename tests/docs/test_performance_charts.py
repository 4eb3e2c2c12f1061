"""The performance page shows the charts the benchmark's report code draws from the committed JSON
of a comparison run (docs/assets/performance/)."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "docs" / "assets" / "performance"
CHARTS = ("seq5.png", "seq1.png")


def _png_size(path: Path) -> tuple:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def test_page_shows_the_committed_charts():
    page = (ROOT / "docs" / "performance.md").read_text()
    for name in CHARTS:
        assert f"](assets/performance/{name})" in page, f"performance.md does not show {name}"
        width, height = _png_size(ASSETS / name)
        assert width > 500 and height > 300
    data = json.loads((ASSETS / "compare.json").read_text())
    scenarios = {s["scenario"] for s in data["samples"] if s.get("ok")}
    assert {"seq5", "seq1"} <= scenarios


def test_report_code_draws_the_charts_from_the_json(tmp_path):
    """The report code, run on the committed JSON, draws charts of the committed charts' size (the
    pixels themselves depend on matplotlib's version and fonts)."""
    pytest.importorskip("matplotlib")  # the `bench` extra
    proc = subprocess.run([sys.executable, "-m", "fastredlock.bench.report", str(ASSETS / "compare.json"),
                           str(tmp_path)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MPLBACKEND": "Agg"})
    assert proc.returncode == 0, proc.stderr
    for name in CHARTS:
        assert _png_size(tmp_path / name) == _png_size(ASSETS / name), name
