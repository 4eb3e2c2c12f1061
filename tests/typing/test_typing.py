"""A user's ``mypy --strict`` over code that calls the sync and asyncio API is clean (py.typed)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def test_user_code_type_checks_under_strict_mypy(tmp_path):
    pytest.importorskip("mypy", reason="mypy is not installed (the dev extra has it)")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(tmp_path),
         os.path.join(HERE, "user_code.py")],
        capture_output=True, text=True, cwd=str(tmp_path), timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
