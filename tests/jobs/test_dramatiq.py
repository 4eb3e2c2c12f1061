"""Real Dramatiq workers (two ``dramatiq`` command-line instances, one worker process of two
threads each, on a Redis broker started here): the same single-run actor message sent 8 times at
once from 4 threads runs exactly once (7 deliveries skip); after the worker process running it is
killed with SIGKILL, its key is gone within 2 x TTL and the message sent again runs on the other
instance. Both cores (the job's client); an instance that died is started again for the next test."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

dramatiq = pytest.importorskip("dramatiq")
pytest.importorskip("dramatiq.brokers.redis")

HERE = os.path.dirname(os.path.abspath(__file__))
import _jobs


class Instances:
    """Two ``dramatiq _dramatiq_jobs`` instances, started again when one has died."""

    def __init__(self, env, logs):
        self.env = env
        self.logs = logs
        self.procs = [None, None]
        self.started = 0

    def ensure(self, until):
        """Start the instances that are not running, and wait until each says it is ready."""
        for i, proc in enumerate(self.procs):
            if proc is None or proc.poll() is not None:
                if proc is not None:
                    proc.wait(10)
                self.started += 1
                log = self.logs / f"dramatiq-{self.started}.log"
                with open(log, "wb") as out:
                    self.procs[i] = subprocess.Popen(
                        [sys.executable, "-m", "dramatiq", "_dramatiq_jobs", "--processes", "1", "--threads", "2",
                         "--path", HERE], env=self.env, cwd=HERE, stdout=subprocess.DEVNULL, stderr=out,
                        start_new_session=True)
                self.procs[i].log = log
        for proc in self.procs:
            until(lambda: b"ready for action" in proc.log.read_bytes() or proc.poll() is not None, 30,
                  "a dramatiq instance to be ready")
            assert proc.poll() is None, proc.log.read_text(errors="replace")

    def reap(self, pgid):
        """The instance whose process group is ``pgid`` lost its worker: it shuts itself down; wait
        for that (killing the group after 10 s), so that :meth:`ensure` starts a new one."""
        for proc in self.procs:
            if proc is not None and proc.pid == pgid:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(pgid, signal.SIGKILL)
                    proc.wait(10)

    def log_tail(self) -> str:
        """The end of every instance's log so far (for a failure's message)."""
        return "\n".join(f"--- {log.name}:\n{log.read_text(errors='replace')[-3000:]}"
                         for log in sorted(self.logs.glob("dramatiq-*.log")))

    def kill(self):
        """SIGKILL each instance's process group (its main process and worker), then reap them."""
        for proc in self.procs:
            if proc is not None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(10)


@pytest.fixture(scope="module")
def dramatiq_broker(job_env, job_broker, tmp_path_factory):
    from dramatiq.brokers.redis import RedisBroker

    broker = RedisBroker(url=job_broker.url)
    broker.declare_queue("default")
    instances = Instances(job_env, tmp_path_factory.mktemp("dramatiq"))
    try:
        yield broker, instances
    finally:
        instances.kill()  # (a graceful stop takes dramatiq seconds; the broker is thrown away anyway)
        broker.close()


def _send(broker, tag, core):
    broker.enqueue(dramatiq.Message(queue_name="default", actor_name="deliver", args=(tag, core), kwargs={},
                                    options={}))


def _outcomes(job_broker, tag):
    return [o.decode() for o in job_broker.command("LRANGE", f"outcome:{tag}", 0, -1)]


def test_dramatiq_runs_once_and_frees_after_sigkill(core, dramatiq_broker, job_broker, keys_on, masters, until,
                                                     job_helpers):
    ran_pids, free_after_kill, _ = job_helpers
    broker, instances = dramatiq_broker
    instances.ensure(until)
    tag = uuid.uuid4().hex
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: [_send(broker, tag, core) for _ in range(2)], range(4)))
    try:
        until(lambda: _outcomes(job_broker, tag).count("skipped") == 7 and len(ran_pids(job_broker, tag)) == 1,
              30, "7 deliveries to skip while 1 runs")
        (pid,) = ran_pids(job_broker, tag)
        pgid = os.getpgid(pid)  # its instance (each instance is a session of its own)
        key = _jobs.lock_name(tag)
        took = free_after_kill(pid, lambda: keys_on(masters, key), _jobs.TTL, until)
        assert took <= 2 * _jobs.TTL, f"the name was free {took:.2f} s after the kill"
        _send(broker, tag, core)
        try:
            until(lambda: len(ran_pids(job_broker, tag)) == 2, 15, "the message sent again to run")
        except pytest.fail.Exception:
            pytest.fail(f"the message sent again did not run within 15 s; the instances said:\n{instances.log_tail()}")
        assert ran_pids(job_broker, tag)[1] != pid
        job_broker.command("RPUSH", f"go:{tag}", "go")
        until(lambda: "done" in _outcomes(job_broker, tag), 10, "the second run to finish")
        assert _outcomes(job_broker, tag).count("skipped") == 7
        until(lambda: keys_on(masters, key) == 0, 2, "the second run's release")
        instances.reap(pgid)  # (not left half-dead for the next test's ensure())
    finally:
        job_broker.command("RPUSH", f"go:{tag}", *["go"] * 10)
        job_broker.command("EXPIRE", f"go:{tag}", 30)
