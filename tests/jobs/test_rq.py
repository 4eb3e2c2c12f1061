"""Real RQ workers (three ``rq worker`` processes on a broker started here): the same single-run job
enqueued 8 times at once from 4 threads runs exactly once (the other 7 return SKIPPED as their
result); after the work-horse running it is killed with SIGKILL, its key is gone within 2 x TTL
and the job enqueued again runs. Both cores (the job's client), the workers started once."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

rq = pytest.importorskip("rq")
redis = pytest.importorskip("redis")

HERE = os.path.dirname(os.path.abspath(__file__))
import _jobs

QUEUE = "single-run"


@pytest.fixture(scope="module")
def rq_workers(job_env, job_broker, job_helpers):
    conn = redis.Redis.from_url(job_broker.url)
    procs = [subprocess.Popen([sys.executable, "-c", "from rq.cli import main; main()", "worker", "-u", job_broker.url,
                               "-q", QUEUE],
                              env=job_env, cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
             for _ in range(3)]  # one runs the job, two drain the copies
    try:
        deadline = time.monotonic() + 20
        while len(rq.Worker.all(connection=conn)) < 3:
            assert all(p.poll() is None for p in procs), "an rq worker exited at start"
            assert time.monotonic() < deadline, "the rq workers did not register within 20 s"
            time.sleep(0.05)
        yield rq.Queue(QUEUE, connection=conn)
    finally:
        for proc in procs:  # the worker and its work-horses (a warm shutdown takes rq seconds)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(10)
        conn.close()


def _statuses(jobs):
    for job in jobs:
        job.refresh()
    return [job.get_status() for job in jobs]


def test_rq_runs_once_and_frees_after_sigkill(core, rq_workers, job_broker, keys_on, masters, until, job_helpers):
    ran_pids, free_after_kill, _ = job_helpers
    queue, tag = rq_workers, uuid.uuid4().hex
    job_fn = _jobs.HOLD[core]
    with ThreadPoolExecutor(4) as pool:
        jobs = [j for js in pool.map(lambda _: [queue.enqueue(job_fn, tag) for _ in range(2)], range(4)) for j in js]
    try:
        until(lambda: _statuses(jobs).count("finished") == 7 and len(ran_pids(job_broker, tag)) == 1, 20,
              "7 copies to finish while 1 runs")
        skipped = [job.return_value() for job in jobs if job.get_status() == "finished"]
        assert all(r is _jobs.SKIPPED for r in skipped) and len(skipped) == 7
        (pid,) = ran_pids(job_broker, tag)
        key = _jobs.lock_name(tag)
        took = free_after_kill(pid, lambda: keys_on(masters, key), _jobs.TTL, until)
        assert took <= 2 * _jobs.TTL, f"the name was free {took:.2f} s after the kill"
        again = queue.enqueue(job_fn, tag)
        until(lambda: len(ran_pids(job_broker, tag)) == 2, 10, "the job enqueued again to run")
        assert ran_pids(job_broker, tag)[1] != pid
        job_broker.command("RPUSH", f"go:{tag}", "go")
        until(lambda: _statuses([again]) == ["finished"], 10, "the second run to finish")
        assert again.return_value() == "done"
        assert keys_on(masters, key) == 0
    finally:
        job_broker.command("RPUSH", f"go:{tag}", *["go"] * 10)
        job_broker.command("EXPIRE", f"go:{tag}", 30)
