"""Two real APScheduler processes (a ``BlockingScheduler`` each) fire the same single-run job every
0.5 s from the same moment: it runs in exactly one of them while the other's firings skip; after
the process running it is killed with SIGKILL, its key is gone within 2 x TTL and the other
process's next firing runs it. Both cores (the job's client); the processes are the test's own."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest

pytest.importorskip("apscheduler")

HERE = os.path.dirname(os.path.abspath(__file__))
import _jobs


def _outcomes(job_broker, tag):
    return [o.decode() for o in job_broker.command("LRANGE", f"outcome:{tag}", 0, -1)]


def test_apscheduler_runs_once_and_frees_after_sigkill(core, job_env, job_broker, keys_on, masters, until,
                                                        job_helpers):
    ran_pids, free_after_kill, stop_processes = job_helpers
    tag = uuid.uuid4().hex
    start_at = time.time() + 0.5  # a process that starts later fires at the next tick of the same grid
    procs = [subprocess.Popen([sys.executable, "_apscheduler_proc.py", tag, core, repr(start_at)], env=job_env,
                              cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(2)]
    try:
        until(lambda: len(ran_pids(job_broker, tag)) == 1 and _outcomes(job_broker, tag).count("skipped") >= 1,
              15, "one run while the other process's firings skip")
        (pid,) = ran_pids(job_broker, tag)
        assert pid in [p.pid for p in procs]
        key = _jobs.lock_name(tag)
        took = free_after_kill(pid, lambda: keys_on(masters, key), _jobs.TTL, until)
        assert took <= 2 * _jobs.TTL, f"the name was free {took:.2f} s after the kill"
        until(lambda: len(ran_pids(job_broker, tag)) == 2, 5, "the other process's next firing to run it")
        survivor = ran_pids(job_broker, tag)[1]
        assert survivor != pid and survivor in [p.pid for p in procs]
        assert _outcomes(job_broker, tag).count("done") == 0  # (the first run never finished: killed)
        job_broker.command("RPUSH", f"go:{tag}", "go")
        until(lambda: "done" in _outcomes(job_broker, tag), 5, "the second run to finish")
    finally:
        job_broker.command("RPUSH", f"go:{tag}", *["go"] * 20)
        job_broker.command("EXPIRE", f"go:{tag}", 30)
        stop_processes(procs)
