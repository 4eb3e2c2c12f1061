"""Each original's own test suite, from its sdist, passes against the shim as it does against the original.

The suites run in subprocesses, each on fresh local servers, adapted only as
``_originals.ADAPTATIONS`` lists (the server's address, the import line, fault injection that
reaches the shim); see ``_originals``' docstring for why. Where the shim differs on purpose, the
tests listed in ``_originals.DIFFERENCES`` (each with why) must fail against it, and only those.
The original runs once per session, the shim once per core. Skipped, with the reason, only when
the original cannot be fetched.
"""
from __future__ import annotations

import os
import sys

import pytest

from fastredlock.testing import start_masters

sys.path.insert(0, os.path.dirname(__file__))
import _originals  # noqa: E402

_original_runs = {}


def _run_once(lib, dest, *, shim, core=None):
    with start_masters(5) as servers:
        ports = [s.port for s in servers]
        applied = _originals.adapt(lib, dest, ports=ports, shim=shim, core=core)
        return applied, _originals.run_suite(lib, dest, port=ports[0], shim=shim)


def _expected(lib, outcomes, *, shim):
    """Whether a run came out as expected: all passed, but for the shim's listed differences."""
    differences = _originals.DIFFERENCES.get(lib, {}) if shim else {}
    return all((state == "failed") if test in differences else (state == "passed") for test, state in outcomes.items())


def _run(lib, tmp_path_factory, label, *, shim, core=None):
    """Run a suite; once more if it did not come out as expected (some of the originals' tests are
    timing-sensitive, and this machine has two cores): a real difference fails twice."""
    applied, run = _run_once(lib, tmp_path_factory.mktemp(label), shim=shim, core=core)
    if not _expected(lib, run.outcomes, shim=shim):
        first = run.output
        applied, run = _run_once(lib, tmp_path_factory.mktemp(label), shim=shim, core=core)
        run = run._replace(output=f"first run:\n{first[-3000:]}\nsecond run:\n{run.output}")
    return applied, run


def _fetch(lib):
    try:
        _originals.sdist(lib)
        _originals.install(lib)
        _originals.shim_deps(lib)
    except _originals.Unavailable as exc:
        pytest.skip(f"cannot fetch the original {lib}: {exc}")


@pytest.mark.slow
@pytest.mark.parametrize("lib", _originals.WITH_SUITES)
def test_original_suite_passes_against_the_shim(lib, core, tmp_path_factory):
    _fetch(lib)
    if lib not in _original_runs:
        _original_runs[lib] = _run(lib, tmp_path_factory, f"{lib}-original", shim=False)
    applied, original = _original_runs[lib]
    print(f"{lib}: adaptations\n  " + "\n  ".join(applied))
    assert original.outcomes, original.output[-3000:]
    failing = {t: s for t, s in original.outcomes.items() if s != "passed"}
    assert not failing, f"the original {lib} fails its own suite here:\n{original.output[-3000:]}"

    _, shim = _run(lib, tmp_path_factory, f"{lib}-shim-{core}", shim=True, core=core)
    differences = _originals.DIFFERENCES.get(lib, {})
    for test, why in differences.items():
        print(f"{lib}: expected difference {test}: {why}")
        assert original.outcomes.get(test) == "passed", f"{test} is not in the original's run: {sorted(original.outcomes)}"
        assert shim.outcomes.get(test) == "failed", f"{test} no longer differs ({shim.outcomes.get(test)}): " + why
    expected = {t: ("failed" if t in differences else s) for t, s in original.outcomes.items()}
    assert shim.outcomes == expected, f"the shim differs from {lib}:\n{shim.output[-5000:]}"
