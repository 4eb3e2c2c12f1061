"""Each original's own test suite, from its sdist, passes against the shim as it does against the original.

The suites run in subprocesses, each on fresh local servers, adapted only as
``_originals.ADAPTATIONS`` lists (the server's address, the import line, fault injection that
reaches the shim); see ``_originals``' docstring for why. The original runs once per session, the
shim once per core; the original's run and the first core's shim run overlap (two subprocesses on
servers of their own, mostly waiting in their suites' sleeps). The shim's outcomes equal the
original's but for the tests that assert what the shim documents as different
(``Original.differences``, each with the evidence its failure message must show, and
``_originals.DIFFERENCES``, by test id): those must fail against the shim, and only those.
Skipped, with the reason, only when the original cannot be fetched.
"""
from __future__ import annotations

import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from fastredlock.testing import start_masters

import _originals

_original_runs = {}
_mktemp_lock = threading.Lock()  # the original's run makes its folders in another thread


def _run_once(lib, dest, *, shim, core=None):
    with start_masters(5) as servers:
        ports = [s.port for s in servers]
        applied = _originals.adapt(lib, dest, ports=ports, shim=shim, core=core)
        return applied, _originals.run_suite(lib, dest, port=ports[0], shim=shim)


def _mktemp(tmp_path_factory, label):
    with _mktemp_lock:
        return tmp_path_factory.mktemp(label)


def _run(lib, tmp_path_factory, label, *, shim, core=None, expected=None, done=None):
    """Run a suite; once more if it did not end as ``expected`` (default: every test passed; some of
    the originals' tests are timing-sensitive, and this machine has two cores): a real difference
    fails twice. ``done``: the first run's ``(applied, run)``, if it was already made."""
    applied, run = done or _run_once(lib, _mktemp(tmp_path_factory, label), shim=shim, core=core)
    if run.outcomes != (expected or {t: "passed" for t in run.outcomes}):
        first = run.output
        applied, run = _run_once(lib, _mktemp(tmp_path_factory, label), shim=shim, core=core)
        run = run._replace(output=f"first run:\n{first[-3000:]}\nsecond run:\n{run.output}")
    return applied, run


def _fetch(lib):
    try:
        _originals.sdist(lib)
        _originals.install(lib)
        _originals.shim_deps(lib)
    except _originals.Unavailable as exc:
        pytest.skip(f"cannot fetch the original {lib}: {exc}")


#: Suites too long for the default run (python-redis-lock's: 171 tests with process, gevent and
#: eventlet variants, several minutes per run and three runs): FASTREDLOCK_LONG_SUITES=1 runs them.
LONG = {"python-redis-lock"}
_LONG_OPT_IN = pytest.mark.skipif(not os.environ.get("FASTREDLOCK_LONG_SUITES"),
                                  reason="a long suite: runs with FASTREDLOCK_LONG_SUITES=1")


@pytest.mark.slow
@pytest.mark.parametrize("lib", [pytest.param(lib, marks=_LONG_OPT_IN) if lib in LONG else lib
                                 for lib in _originals.WITH_SUITES])
def test_original_suite_passes_against_the_shim(lib, core, tmp_path_factory):
    _fetch(lib)
    shim_first = None
    if lib not in _original_runs:
        # The original's run (retried in its thread if it fails) beside this core's first shim run.
        with ThreadPoolExecutor(1) as pool:
            original_run = pool.submit(_run, lib, tmp_path_factory, f"{lib}-original", shim=False)
            shim_first = _run_once(lib, _mktemp(tmp_path_factory, f"{lib}-shim-{core}"), shim=True, core=core)
            _original_runs[lib] = original_run.result(timeout=1800)  # run_suite bounds each try (600 s)
    applied, original = _original_runs[lib]
    print(f"{lib}: adaptations\n  " + "\n  ".join(applied))
    assert original.outcomes, original.output[-3000:]
    failing = {t: s for t, s in original.outcomes.items() if s != "passed"}
    assert not failing, f"the original {lib} fails its own suite here:\n{original.output[-3000:]}"

    # The shim fails exactly the tests that assert a documented difference, and for that reason.
    expected = _originals.expected_of_shim(lib, original.outcomes)
    for test, why in _originals.DIFFERENCES.get(lib, {}).items():
        print(f"{lib}: expected difference {test}: {why}")
        assert original.outcomes.get(test) == "passed", f"{test} is not in the original's run: {sorted(original.outcomes)}"
    for difference in _originals.ORIGINALS[lib].differences:
        assert any(difference.covers(t) for t in expected), f"{lib}: no test {difference.test} (a stale list?)"
    _, shim = _run(lib, tmp_path_factory, f"{lib}-shim-{core}", shim=True, core=core, expected=expected,
                   done=shim_first)
    assert shim.outcomes == expected, f"the shim differs from {lib}:\n{shim.output[-5000:]}"
    for test_id, state in shim.outcomes.items():
        for difference in _originals.ORIGINALS[lib].differences:
            if difference.covers(test_id):
                assert re.search(difference.evidence, shim.messages[test_id]), (
                    f"{test_id} failed for another reason than {difference.why!r}:\n{shim.messages[test_id]}")
