"""Many processes contending on one name never hold it at once, and leave no key behind."""
from __future__ import annotations


import pytest

from fastredlock.testing import LocalMaster

from _contender import contend, run_contenders


@pytest.mark.slow
def test_eight_processes_never_overlap(core, masters, name, keys_on):
    counter = LocalMaster().start()
    try:
        outcomes = run_contenders(contend, 8, (masters.urls, core, name, counter.port, 3.0))
        held = sum(o[0] for o in outcomes)
        assert sum(o[1] for o in outcomes) == 0, f"two holders at once: {outcomes}"
        assert sum(o[2] for o in outcomes) == 0
        assert held > 50, outcomes  # the test really exercised the lock
        # (the counter and the key check below run after every process has finished)
        assert sum(1 for o in outcomes if o[0] > 0) >= 4  # several processes made progress
        assert keys_on(masters, name) == 0
        assert counter.command("GET", "holders") == b"0"
    finally:
        counter.stop()


@pytest.mark.slow
def test_processes_overlap_when_the_lock_excludes_nobody(core, masters, name):
    # The negative control of the counter above: the same harness, each process locking a name of
    # its own (``unprotected``), must see two holders at once, or "overlaps == 0" proves nothing.
    counter = LocalMaster().start()
    try:
        outcomes = run_contenders(contend, 3, (masters.urls, core, name, counter.port, 1.0), (True,))
        assert sum(o[0] for o in outcomes) > 10, outcomes  # they did hold, through the real client
        assert sum(o[1] for o in outcomes) > 0, f"the counter saw no overlap without exclusion: {outcomes}"
    finally:
        counter.stop()
