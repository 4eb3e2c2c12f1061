"""Real Celery workers for the Celery drop-in tests, started once per test session (per xdist worker).

``celery_fleet`` (a session fixture, made available to tests/compat through conftest.py) starts
four local masters of its own: three are the lock masters (a quorum of two), the fourth is the
broker (db 1), the result backend (db 2) and the probe the tasks record their runs on (db 3). Two
workers consume the default queue, each a prefork pool of one child: one on the Cython core, one
on the pure core (``FASTREDLOCK_NO_EXTENSIONS=1``), so together they are two worker processes and
every task runs on either core. The tests that kill a worker have one each, on a queue of its own,
and the interop tests two more (see :meth:`Fleet.start_all`); all start at once. The originals (celery-once 3.0.1, celery-singleton 0.3.1) are
installed from PyPI at test time into the compat cache (``--no-deps``: this environment's Celery
and redis-py serve them) for the interop tests, which skip with the reason if PyPI is unreachable.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import types
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest

import fastredlock
import fastredlock.compat
from fastredlock.testing import start_masters

import _originals

HERE = Path(__file__).resolve().parent
#: The short TTL of a running task's locks in these tests (the drop-ins' default is 30 s).
RUN_TTL = 2.0
ORIGINALS = ("celery-once==3.0.1", "celery-singleton==0.3.1", "six==1.17.0")


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something true (returned), or fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def install_originals() -> Path:
    """The folder holding celery-once and celery-singleton (PyPI, cached); ``Unavailable`` if not."""
    label = "-".join(p.replace("==", "-") for p in ORIGINALS)
    return _originals._build_once(
        _originals.cache_dir() / f"celery-originals-{label}",
        lambda tmp: _originals._pip(["install", "--quiet", "--no-deps", "--target", str(tmp), *ORIGINALS],
                                    " ".join(ORIGINALS)),
    )


class Worker:
    def __init__(self, name: str, proc: subprocess.Popen, log: Path) -> None:
        self.name = name
        self.proc = proc
        self.log = log

    def output(self) -> str:
        try:
            return self.log.read_text()[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGKILL the worker and its pool children (its own process group): nothing of theirs is
        checked after the tests, and a cold shutdown of a prefork worker takes seconds."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            self.proc.kill()
            self.proc.wait(timeout=10)


class Fleet:
    """The masters, the configuration, the workers, and helpers to look at what the tasks did."""

    def __init__(self, masters: Any, tmp: Path) -> None:
        self.masters = list(masters)
        self.tmp = tmp
        self.lock_urls = [m.url for m in self.masters[:3]]
        broker = self.masters[3]
        self.broker = f"redis://127.0.0.1:{broker.port}"
        self.config = {"broker": self.broker, "probe": self.broker + "/3", "locks": self.lock_urls,
                       "impl": "shim", "run_ttl": RUN_TTL}
        self.workers: List[Worker] = []
        self._tasks: Optional[Any] = None
        self._interop: Any = None
        self.kill_workers: Dict[str, Worker] = {}

    # --- processes ---------------------------------------------------------------------------
    def env(self, *, impl: str = "shim", core: Optional[str] = None, locks: Optional[List[str]] = None,
            originals: Optional[Path] = None) -> Dict[str, str]:
        env = dict(os.environ)  # (a pure run, FASTREDLOCK_NO_EXTENSIONS=1, keeps every worker pure)
        if core == "python":
            env["FASTREDLOCK_NO_EXTENSIONS"] = "1"
        config = dict(self.config, impl=impl)
        if locks is not None:
            config["locks"] = locks
        env["FRL_CELERY"] = json.dumps(config)
        paths = [str(HERE)]
        if originals is not None:
            paths.append(str(originals))
        paths.append(str(Path(fastredlock.__file__).resolve().parent.parent))  # the fastredlock under test
        env["PYTHONPATH"] = os.pathsep.join(paths)
        return env

    def start_worker(self, name: str, *, queues: str = "celery", pool: str = "prefork", concurrency: int = 1,
                     **env_options: Any) -> Worker:
        """Start a worker (not waiting for it: see :meth:`wait_ready`)."""
        env = self.env(**env_options)
        env["FRL_CELERY_WORKER"] = name
        log = self.tmp / f"worker-{name}.log"
        cmd = [sys.executable, "-m", "celery", "-A", "_celery_app", "worker", "-P", pool, "-c", str(concurrency),
               "-n", f"{name}@frl", "-Q", queues, "--without-gossip", "--without-mingle", "--without-heartbeat",
               "-l", "warning", "--logfile", str(log)]
        proc = subprocess.Popen(cmd, cwd=str(HERE), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                start_new_session=True)  # its own process group, with its pool children
        worker = Worker(name, proc, log)
        self.workers.append(worker)
        return worker

    def wait_ready(self, *workers: Worker, timeout: float = 30.0) -> None:
        for worker in workers:
            def ready(worker: Worker = worker) -> bool:
                if worker.proc.poll() is not None:
                    raise AssertionError(f"worker {worker.name} exited ({worker.proc.returncode}):\n{worker.output()}")
                return self.probe.exists(f"ready:{worker.name}")
            wait_for(ready, timeout, f"worker {worker.name} to be ready")

    def enqueue_from(self, sides: List[Dict[str, Any]], task: str, args: List[Any], count: int,
                     queue: str = "celery", timeout: float = 30.0) -> List[Dict[str, Any]]:
        """Fork one enqueuing process per side, all enqueueing ``task`` ``count`` times at one
        instant (once all have started); return their reports, in order.

        A side is ``{"core": ...}`` (the drop-ins on that core) or ``{"impl": "original",
        "originals": folder, "locks": [url]}`` (celery-once / celery-singleton, imported in the
        child from the folder). Forked from this process (Celery and fastredlock already imported:
        a child is ready in milliseconds, where a fresh interpreter takes seconds here); each child
        builds its own app and clients, and fastredlock's clients are fork-safe.
        """
        context = multiprocessing.get_context("fork")
        barrier = f"barrier:{uuid.uuid4().hex}"
        queue_ = context.SimpleQueue()
        procs = [context.Process(target=_enqueue_child, daemon=True,
                                 args=(queue_, i, dict(self.config), side, task, args, count, queue, barrier, len(sides)))
                 for i, side in enumerate(sides)]
        for proc in procs:
            proc.start()
        reports: Dict[int, Any] = {}
        deadline = time.monotonic() + timeout
        while len(reports) < len(procs):
            if time.monotonic() > deadline:
                for proc in procs:
                    proc.kill()
                raise AssertionError(f"enqueuing processes did not report within {timeout:g} s")
            if queue_.empty():
                if any(p.exitcode not in (None, 0) for p in procs):
                    raise AssertionError("an enqueuing process failed: " + repr([p.exitcode for p in procs]))
                time.sleep(0.01)
                continue
            index, report = queue_.get()  # not empty (a SimpleQueue has no timeout; one reader)
            if isinstance(report, str):
                raise AssertionError(f"an enqueuing process failed:\n{report}")
            reports[index] = report
        for proc in procs:
            proc.join(timeout=10)
        return [reports[i] for i in range(len(procs))]

    # --- what happened -----------------------------------------------------------------------------
    @property
    def tasks(self) -> Any:
        """The app and its tasks in this process (the drop-ins, on the active core)."""
        if self._tasks is None:
            import _celery_app

            self._tasks = _celery_app.build(self.config)
        return self._tasks

    @property
    def cores(self) -> set:
        """The cores the workers and the enqueuing processes run on ("cython" and "python", or
        only "python" in a pure run)."""
        from fastredlock.io.cores import NO_EXTENSIONS

        return {"python"} if NO_EXTENSIONS else {"cython", "python"}

    def worker_cores(self) -> set:
        """The cores the two default workers run on (as they reported them when ready)."""
        return {json.loads(self.probe.get(f"ready:{name}"))[1] for name in ("cython", "python")}

    @property
    def probe(self) -> Any:
        return self.tasks.probe

    def runs(self, name: str) -> int:
        return int(self.probe.get(f"runs:{name}") or 0)

    def overlaps(self, name: str) -> int:
        return int(self.probe.get(f"overlap:{name}") or 0)

    def started(self, name: str) -> Optional[int]:
        pid = self.probe.get(f"started:{name}")
        return int(pid) if pid is not None else None

    def held(self, key: str) -> int:
        """On how many lock masters ``key`` exists."""
        return sum(m.command("EXISTS", key) for m in self.masters[:3])

    def start_all(self) -> None:
        """Start every worker the tests use, at once, and wait until all are ready: the two default
        ones, a solo worker per library for the SIGKILL tests (queues ``kill-once``/``kill-single``),
        and, if the originals can be installed, the two interop workers (queue ``interop``, both
        locking on the first lock master only, as celery-once and celery-singleton take one URL:
        one runs the originals and also consumes ``interop-original``, one the drop-ins and also
        ``interop-shim``)."""
        workers = [self.start_worker("cython", core="cython"), self.start_worker("python", core="python")]
        for lib in ("once", "single"):
            self.kill_workers[lib] = self.start_worker(f"kill-{lib}", queues=f"kill-{lib}", pool="solo")
        workers += self.kill_workers.values()
        try:
            originals = install_originals()
        except _originals.Unavailable as exc:
            self._interop = str(exc)
        else:
            locks = self.lock_urls[:1]
            workers += [self.start_worker("original", queues="interop,interop-original", impl="original",
                                          originals=originals, locks=locks),
                        self.start_worker("shim-one-master", queues="interop,interop-shim", locks=locks)]
            self._interop = types.SimpleNamespace(originals=originals, locks=locks)
        self.wait_ready(*workers)

    def handed_across(self, task: str, key_of: Callable[[str], str], name: str) -> None:
        """A task enqueued by one kind of process and run by the other kind of worker (both ways):
        while it runs the other kind's enqueue is refused, and its end frees the name (released,
        not expired: the queue lock's timeout is 60 s)."""
        interop = self.interop()
        original = {"impl": "original", "originals": interop.originals, "locks": interop.locks}
        shim = {"impl": "shim", "locks": interop.locks}
        for enqueuer, other, queue in ((original, shim, "interop-shim"), (shim, original, "interop-original")):
            run = f"{name}-{queue}"
            (first,) = self.enqueue_from([enqueuer], task, [run, 1.0], 1, queue=queue)
            assert len(first["ids"]) == 1, first
            wait_for(lambda: self.started(run), 10, f"the task to start on {queue}")
            (second,) = self.enqueue_from([other], task, [run, 1.0], 1, queue="nobody")
            assert second["ids"] in ([], first["ids"]) and (second["refused"] == 1 or second["ids"] == first["ids"]), second
            wait_for(lambda: self.runs(run) == 1 and self.held(key_of(run)) == 0, 8,
                     f"the name to be released after the run on {queue}")

    def interop(self) -> Any:
        """The interop workers' setting (``originals``: the folder, ``locks``: the one URL); skips
        the test if the originals could not be installed from PyPI."""
        if isinstance(self._interop, str):
            pytest.skip(f"cannot install celery-once / celery-singleton from PyPI: {self._interop}")
        return self._interop

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()


@pytest.fixture(autouse=False)
def trusted_masters():
    """The drop-ins in this process trust the just-started masters (no restart-aware voting), even
    after another compat test reset the shims' options (``configure()``)."""
    previous = fastredlock.compat.options()
    fastredlock.compat.configure(restart_aware=False)
    yield
    fastredlock.compat.configure(**previous)


def _enqueue_child(out: Any, index: int, config: Dict[str, Any], side: Dict[str, Any], task: str, args: List[Any],
                   count: int, queue: str, barrier: str, parties: int) -> None:
    """One enqueuing process (see :meth:`Fleet.enqueue_from`): put ``(index, report)`` on ``out``."""
    try:
        impl = side.get("impl", "shim")
        config = dict(config, impl=impl)
        if side.get("locks"):
            config["locks"] = side["locks"]
        if impl == "original":
            sys.path.insert(0, str(side["originals"]))
        elif side.get("core"):
            from fastredlock.io.cores import NO_EXTENSIONS

            # a pure run (PyPy, FASTREDLOCK_NO_EXTENSIONS=1) keeps every process pure, as its workers
            core = "python" if NO_EXTENSIONS else side["core"]
            fastredlock.compat.configure(core=core, restart_aware=False)
        import _celery_app

        tasks = _celery_app.build(config)
        fn = getattr(tasks, task.replace(".", "_"))
        probe = tasks.probe
        probe.incr(barrier)
        deadline = time.monotonic() + 20
        while int(probe.get(barrier) or 0) < parties and time.monotonic() < deadline:
            time.sleep(0.002)
        ids, refused = [], 0
        for _ in range(count):
            try:
                result = fn.apply_async(args=args, queue=queue)
            except (tasks.AlreadyQueued, tasks.DuplicateTaskError):
                refused += 1
                continue
            if result.id is None:  # celery-once's graceful refusal (an EagerResult without an id)
                refused += 1
            else:
                ids.append(result.id)
        core = fastredlock.compat.options()["core"] or fastredlock.CORE if impl == "shim" else None
        out.put((index, {"ids": ids, "refused": refused, "core": core, "impl": impl,
                         "module": fn.__class__.__mro__[1].__module__}))
    except BaseException:
        import traceback

        out.put((index, traceback.format_exc()))


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def celery_fleet(tmp_path_factory):
    """Four masters and the workers of :meth:`Fleet.start_all` serving the Celery drop-ins' tasks."""
    pytest.importorskip("celery")
    fastredlock.compat.configure(restart_aware=False)
    with start_masters(4) as masters:
        fleet = Fleet(masters, tmp_path_factory.mktemp("celery"))
        try:
            fleet.start_all()
            yield fleet
        finally:
            fleet.stop()
            fastredlock.compat.configure()
