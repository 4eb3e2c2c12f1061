"""Processes x threads mixing readers, writers and semaphore permits of one name, checked by
independent counters on a separate server, while one master is killed and another stalled.

The short run is in the default suite; FASTREDLOCK_FAMILY_STRESS=1 adds 8 processes x 3 threads
for 12 s (slow).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from fastredlock.testing import start_masters
from fastredlock.testing.masters import paused

from _family import eventually, family_keys, no_key_without_ttl

MIXER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_family_mixer.py")


def mix(core, lock_masters, name, processes, threads, seconds, limit=2, **env_vars):
    """Run the mixers while a master is stalled then another killed; the check server's counters."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **env_vars)
    with start_masters(1) as check:
        procs = [subprocess.Popen([sys.executable, MIXER, core, name, str(seconds), str(threads), str(limit),
                                   check.urls[0], *lock_masters.urls], stdout=subprocess.PIPE, env=env, text=True)
                 for _ in range(processes)]
        time.sleep(seconds / 4)
        with paused(lock_masters[1]):  # a stalled master: its rounds time out meanwhile
            time.sleep(seconds / 4)
        lock_masters[0].kill()  # and one killed for the rest of the run
        outs = [p.communicate(timeout=seconds + 30)[0] for p in procs]
        counters = [int(check[0].command("GET", key) or 0)
                    for key in ("mix:readers", "mix:writers", "mix:permits", "mix:violations")]
    done = [int(out.split()[1]) for out in outs]
    return done, counters


def check_run(fault_masters, name, done, counters):
    assert counters == [0, 0, 0, 0]  # everyone out; never a violation
    assert all(d > 0 for d in done), done
    assert no_key_without_ttl(fault_masters, name) and no_key_without_ttl(fault_masters, name + ":s")
    # no share left behind: what a stalled round could not release goes within its TTL (2 s)
    assert eventually(lambda: family_keys(fault_masters, name) + family_keys(fault_masters, name + ":s"), 0,
                      seconds=3.0) == 0


def test_mixed_readers_writers_permits_with_faults(core, fault_masters, name):
    done, counters = mix(core, fault_masters, name, processes=2, threads=2, seconds=2.0)
    check_run(fault_masters, name, done, counters)


def test_the_counters_see_violations_without_locks(one_core, fault_masters, name):
    """The negative control: the same mixers entering without taking anything are caught."""
    done, counters = mix(one_core, fault_masters, name, processes=2, threads=3, seconds=0.6,
                         FAMILY_MIX_UNLOCKED="1")
    assert counters[3] > 0 and counters[:3] == [0, 0, 0]


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("FASTREDLOCK_FAMILY_STRESS"), reason="FASTREDLOCK_FAMILY_STRESS=1 runs it")
def test_mixed_8_processes_with_faults(core, fault_masters, name):
    done, counters = mix(core, fault_masters, name, processes=8, threads=3, seconds=12.0, limit=3)
    check_run(fault_masters, name, done, counters)
