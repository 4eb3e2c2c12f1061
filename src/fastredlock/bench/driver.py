"""Compare fastredlock with every Python Redlock client and the raw floor, in one run.

    python -m fastredlock bench             # full run: 3 rounds, ~15-20 minutes on 2 cores
    python -m fastredlock bench --quick     # ~30 s smoke run (one short round)
    python benchmarks/compare.py [...]      # the same from a source checkout (writes benchmarks/results)

It ships in the package (``pip install "fastredlock[bench]"``) and runs from any directory: it
needs no checkout.

The driver starts its own masters (5 lock masters + 1 counter master, loopback, no persistence),
installs each peer with ``pip install --target <peers-dir>/<peer>`` (cached; ``--no-install`` to
use what is there), and then runs every configuration x scenario in a **fresh subprocess**
(``worker.py``), **interleaved and shuffled** across rounds. Peers run with ``python -S`` and a
``PYTHONPATH`` of their own folder only, so redlock-py, redlock (glasslion) and redlock-ng (all the
top-level module ``redlock``) and the old redis-py that pyredlock / redlock-ng pin never meet.
A peer that cannot be installed or imported is reported as skipped, with the reason.
The C floor (``floor.c``, built with ``cc -O2`` by ``floor.py``) runs beside them in the
sequential and batch scenarios: every row gets its ratio to that physical limit ("x of C floor").

Outputs (``--out``, default ``./fastredlock-bench`` in the current directory): ``compare.md`` (the tables, also printed),
``compare.json`` (every sample of every round, plus the environment), ``compare.png`` (chart).
See benchmarks/README.md for what each column means.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from . import floor as _floor

HERE = os.path.dirname(os.path.abspath(__file__))
#: Run as a script (``python [-S] worker.py JOB``): peers' processes import nothing of fastredlock.
WORKER = os.path.join(HERE, "worker.py")

#: the C floor: every sequential / batch configuration gets its ratio to it
FLOOR_ID = "ref-c-floor"

# --------------------------------------------------------------------------------------------
# what is compared

#: pip requirement lists, one isolated --target folder each
PEER_GROUPS: Dict[str, List[str]] = {
    "redlock-py": ["redlock-py"],
    "redlock-glasslion": ["redlock"],
    "redlock-ng": ["redlock-ng"],
    "pyredlock": ["pyredlock"],
    "pottery": ["pottery"],
    # aioredis 1.x imports distutils, gone from the standard library in 3.12
    "aioredlock": ["aioredlock"] + (["setuptools"] if sys.version_info >= (3, 12) else []),
    "redis-py": ["redis"],
    "python-redis-lock": ["python-redis-lock==4.0.0"],  # the version the shim follows
}

FULL = ("seq5", "threads", "contend", "refuse", "stall")
FAST = ("seq5", "seq1", "batch", "threads", "contend", "refuse", "stall")


@dataclass
class Config:
    id: str
    label: str
    style: str
    group: Optional[str] = None  # peer install group; None = this environment (fastredlock, refs)
    scenarios: Tuple[str, ...] = FULL
    n1: bool = False  # a single-instance lock: every scenario runs on master 0 only
    reference: bool = False
    fast: bool = False  # one of fastredlock's cores
    native: bool = False  # the C floor: run by the driver itself (floor.py), not by worker.py

    @property
    def isolated(self) -> bool:
        return self.group is not None


CONFIGS: List[Config] = [
    Config("fastredlock-cython", "fastredlock (Cython core)",
           "one multiplexed round, C core, EVALSHA", scenarios=FAST, fast=True),
    Config("fastredlock-python", "fastredlock (pure core)",
           "one multiplexed round, pure-Python core, EVALSHA", scenarios=FAST, fast=True),
    Config("fastredlock-async", "fastredlock.asyncio (Cython core)",
           "one multiplexed round, C core, default loop; tasks ride together", scenarios=FULL + ("seq1",), fast=True),
    Config("fastredlock-async-uvloop", "fastredlock.asyncio on uvloop",
           "one multiplexed round, C core, uvloop; tasks ride together", scenarios=FULL + ("seq1",), fast=True),
    Config("redlock-py", "redlock-py", "sync, sequential, EVAL", "redlock-py"),
    Config("redlock-glasslion", "redlock (glasslion)", "sync, sequential, EVALSHA", "redlock-glasslion"),
    Config("redlock-ng", "redlock-ng", "sync, sequential, EVAL", "redlock-ng"),
    Config("redlock-ng-async", "redlock-ng async", "asyncio.gather, EVAL", "redlock-ng"),
    Config("pyredlock", "pyredlock", "sync, sequential, EVAL", "pyredlock"),
    Config("pyredlock-async", "pyredlock async", "asyncio, masters awaited one by one, EVAL", "pyredlock"),
    Config("pottery", "pottery Redlock", "ThreadPoolExecutor per call, EVALSHA", "pottery"),
    Config("pottery-aio", "pottery AIORedlock", "asyncio.as_completed, EVALSHA", "pottery"),
    Config("aioredlock", "aioredlock", "asyncio.gather, EVALSHA", "aioredlock"),
    Config("redis-py-lock", "redis-py Lock (N=1)", "single instance redis.lock.Lock", "redis-py",
           scenarios=("seq1", "threads", "contend"), n1=True),
    Config("redis-py-aio-lock", "redis-py asyncio Lock (N=1)", "single instance redis.asyncio.lock.Lock",
           "redis-py", scenarios=("seq1", "threads", "contend", "stall"), n1=True),
    Config("shim-redis-py-lock", "shim: compat.redis_py.Lock (N=1)",
           "redis-py's Lock API (r.lock(lock_class=...)) on fastredlock, Cython core",
           scenarios=("seq1", "threads", "contend"), n1=True),
    Config("shim-redis-py-aiolock", "shim: compat.redis_py.AsyncLock (N=1)",
           "redis-py's asyncio Lock API on fastredlock.asyncio, Cython core",
           scenarios=("seq1", "threads", "contend"), n1=True),
    Config("python-redis-lock", "python-redis-lock (N=1)", "single instance, GET + SET NX EX, BLPOP wake-up, EVALSHA (leftover keys: its "
           "lock-signal lists, which live 1 s after each release)",
           "python-redis-lock", scenarios=("seq1", "threads", "contend"), n1=True),
    Config("shim-redis-lock", "fastredlock.compat.redis_lock (N=1)",
           "the python-redis-lock shim: SET NX PX, then one EVALSHA that deletes and signals (C core; "
           "leftover keys: lock-signal lists, 1 s)",
           scenarios=("seq1", "threads", "contend"), n1=True),
    Config("ref-redis-py", "ref: redis-py minimal seq", "N x set(nx, px), then N x evalsha",
           "redis-py", scenarios=("seq5",), reference=True),
    Config("ref-raw-mux", "ref: raw socket mux (hiredis)", "write all N, then read N; pure Python",
           scenarios=("seq5", "seq1"), reference=True),
    Config("ref-aio-mux", "ref: raw mux on asyncio", "write all N, readers on the loop; pure Python",
           scenarios=("seq5",), reference=True),
    Config("ref-aio-mux-uvloop", "ref: raw mux on uvloop", "write all N, readers on uvloop; pure Python",
           scenarios=("seq5",), reference=True),
    Config("ref-raw-x64", "ref: raw pipelined x64", "64 SETs per write, then 64 EVALSHAs; pure Python",
           scenarios=("batch",), reference=True),
    Config(FLOOR_ID, "ref: C floor (syscalls only)",
           "C, cc -O2: one send + poll + recv per master per round; RELEASE / RELEASE_MANY",
           scenarios=("seq5", "seq1", "batch"), reference=True, native=True),
]
# TLS rows: sequential lock+unlock, N=5, over rediss:// to the same masters' TLS ports (scenario
# "tls5"), beside redis-benchmark -c 1 -t set with and without --tls on one of them ("tlsref").
TLS = ("tls5",)
CONFIGS += [
    Config("fastredlock-cython-tls", "fastredlock (Cython core), TLS", "one multiplexed round over TLS, C core",
           scenarios=TLS, fast=True),
    Config("fastredlock-python-tls", "fastredlock (pure core), TLS", "one multiplexed round over TLS, pure core",
           scenarios=TLS, fast=True),
    Config("pyredlock-tls", "pyredlock, TLS", "redis-py ssl=True, sync, sequential", "pyredlock", scenarios=TLS),
    Config("redlock-ng-tls", "redlock-ng, TLS", "redis-py ssl=True, sync, sequential", "redlock-ng", scenarios=TLS),
    Config("redlock-py-tls", "redlock-py, TLS", "redis-py ssl=True, sync, sequential", "redlock-py", scenarios=TLS),
    Config("ref-redis-py-tls", "ref: redis-py minimal seq, TLS", "N x set(nx, px), then N x evalsha; ssl=True",
           "redis-py", scenarios=TLS, reference=True),
]
BY_ID = {c.id: c for c in CONFIGS}
SCENARIO_NAMES = ("seq5", "seq1", "batch", "threads", "contend", "refuse", "stall", "floor", "tls5")


@dataclass
class Settings:
    rounds: int = 3
    duration: float = 3.0
    contend_duration: float = 4.0
    warmup: int = 200
    threads: int = 4
    tasks: int = 64
    procs: int = 4
    attempts: int = 4
    hang_limit: float = 2.0
    ttl: float = 10.0
    floor_requests: int = 50000
    hold_ms: float = 0.0


QUICK = Settings(rounds=1, duration=0.15, contend_duration=0.25, warmup=10, attempts=1,
                 hang_limit=0.4, ttl=3.0, floor_requests=3000)

# --------------------------------------------------------------------------------------------
# progress (rich, else tqdm, else plain lines)


class Progress:
    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total = total
        self.done = 0
        self._rich = self._tqdm = None
        if not enabled or not sys.stderr.isatty():  # plain lines in logs and CI
            return
        try:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RichProgress,
                                       TextColumn, TimeElapsedColumn, TimeRemainingColumn)

            self._rich = RichProgress(
                TextColumn("[bold]{task.description:<40}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), TimeRemainingColumn(), transient=False,
            )
            self._rich.start()
            self._task = self._rich.add_task("benchmarks", total=total)
        except ImportError:
            try:
                from tqdm import tqdm

                self._tqdm = tqdm(total=total, unit="job", dynamic_ncols=True)
            except ImportError:
                pass

    def describe(self, text: str) -> None:
        if self._rich is not None:
            self._rich.update(self._task, description=text[:40])
        elif self._tqdm is not None:
            self._tqdm.set_description(text[:40])

    def advance(self, text: str) -> None:
        self.done += 1
        if self._rich is not None:
            self._rich.update(self._task, advance=1)
        elif self._tqdm is not None:
            self._tqdm.update(1)
        else:
            print(f"[{self.done}/{self.total}] {text}", file=sys.stderr, flush=True)

    def log(self, text: str) -> None:
        if self._rich is not None:
            self._rich.console.print(text, markup=False, highlight=False)
        elif self._tqdm is not None:
            self._tqdm.write(text)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()
        elif self._tqdm is not None:
            self._tqdm.close()


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# peers: install each into its own folder


def default_peers_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    tag = f"py{sys.version_info[0]}{sys.version_info[1]}"
    return os.path.join(base, "fastredlock", f"bench-peers-{tag}")


def install_group(name: str, reqs: List[str], root: str, reinstall: bool, allow: bool
                  ) -> Tuple[Optional[str], str]:
    """Return (folder or None, note). The folder's stamp file remembers what was installed."""
    target = os.path.join(root, name)
    stamp = os.path.join(target, ".fastredlock-bench.json")
    want = {"requirements": reqs, "python": sys.version.split()[0]}
    if not reinstall and os.path.exists(stamp):
        try:
            with open(stamp) as f:
                if json.load(f) == want:
                    return target, "cached"
        except (OSError, ValueError):
            pass
    if not allow:
        return None, f"not installed in {target} and --no-install was given"
    shutil.rmtree(target, ignore_errors=True)
    os.makedirs(target, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
           "--quiet", "--target", target, *reqs]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        shutil.rmtree(target, ignore_errors=True)
        return None, f"`pip install --target` of {' '.join(reqs)} timed out after 900 s"
    if proc.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()
                 and not ln.startswith("WARNING: Running pip as")]
        return None, f"pip install {' '.join(reqs)} failed: " + " | ".join(lines[-3:])[-400:]
    with open(stamp, "w") as f:
        json.dump(want, f)
    return target, "installed"


# --------------------------------------------------------------------------------------------
# workers


class Worker:
    """One worker subprocess; JSON events from its stdout arrive on a queue."""

    def __init__(self, cfg: Config, job: Dict[str, Any], peer_dirs: Dict[str, str]) -> None:
        env = dict(os.environ)
        args = [sys.executable]
        if cfg.isolated:
            args.append("-S")  # no site-packages: the peer sees only its own folder
            env["PYTHONPATH"] = peer_dirs[cfg.group]  # type: ignore[index]
            env.pop("PYTHONHOME", None)
        env.pop("PYTHONSTARTUP", None)
        env["PYTHONUNBUFFERED"] = "1"
        self.errfile = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            args + [WORKER, json.dumps(job)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.errfile, text=True, env=env, cwd=HERE,
        )
        self.events: "queue.Queue[Optional[Dict[str, Any]]]" = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                try:
                    self.events.put(json.loads(line))
                except ValueError:
                    pass
        self.events.put(None)

    def next_event(self, timeout: float) -> Optional[Dict[str, Any]]:
        """The next event; None when the worker exited; {'event': 'timeout'} after ``timeout``."""
        try:
            return self.events.get(timeout=max(0.01, timeout))
        except queue.Empty:
            return {"event": "timeout"}

    def wait_for(self, kinds: Sequence[str], timeout: float) -> Dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            ev = self.next_event(deadline - time.monotonic())
            if ev is None:
                return {"event": "error", "error": f"worker exited (code {self.proc.wait()}): "
                        + self.stderr_tail()}
            if ev.get("event") == "timeout":
                return {"event": "error", "error": f"no answer within {timeout:.0f} s (killed)"}
            if ev.get("event") in kinds or ev.get("event") == "error":
                return ev

    def go(self) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write("go\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):
            pass

    def stderr_tail(self) -> str:
        try:
            self.errfile.seek(0)
            lines = [ln for ln in self.errfile.read().splitlines() if ln.strip()]
            return " | ".join(lines[-3:])[-400:]
        except (OSError, ValueError):
            return ""

    def finish(self, timeout: float = 5.0) -> None:
        """Reap the worker; kill it (by its own pid, we started it) if it does not exit."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        self.errfile.close()


# --------------------------------------------------------------------------------------------
# the run


class Bench:
    def __init__(self, args: argparse.Namespace, settings: Settings) -> None:
        self.args = args
        self.s = settings
        self.samples: List[Dict[str, Any]] = []
        self.skipped: Dict[str, str] = {}
        self.info: Dict[str, Dict[str, Any]] = {}
        self.peer_dirs: Dict[str, str] = {}
        self.install_notes: Dict[str, str] = {}
        self.masters: Any = None
        self.counter: Any = None
        self.floor_binary: Optional[str] = None
        self.progress: Optional[Progress] = None
        self.certs: Any = None  # TLS rows: fastredlock.testing.Certs of the masters' TLS ports

    # --- masters ----------------------------------------------------------------------------
    @property
    def lock_masters(self) -> List[Any]:
        return list(self.masters)[:5]

    @property
    def victim(self) -> Any:
        """The master that fault jobs break (killed or SIGSTOPped), standing in for lock master 0.

        Lock masters are never restarted, so they stay older than the TTL: fastredlock's
        restart-aware voting (on by default) ignores a master younger than the largest TTL in use.
        """
        return list(self.masters)[6]

    def keys_on_lock_masters(self) -> int:
        total = 0
        for m in self.lock_masters + [self.victim]:
            try:
                total += int(m.command("DBSIZE"))
            except OSError:
                pass
        return total

    def urls(self, cfg: Config, n: int = 5) -> List[str]:
        n = 1 if cfg.n1 else n
        return [m.url for m in self.lock_masters[:n]]

    def tls_urls(self, n: int = 5) -> List[str]:
        """The lock masters' TLS ports, verified against the run's CA (redis-py's query parameter)."""
        return [f"{m.tls_url}?ssl_ca_certs={self.certs.ca}" for m in self.lock_masters[:n]]

    def prepare_tls(self, configs: List[Config], scenarios: List[str], binary: str) -> Tuple[str, Any]:
        """The server binary and TLS settings for the masters: TLS ports (certificates made for the
        run, a binary built with TLS) only when a TLS row runs."""
        if "tls5" not in scenarios or not any("tls5" in c.scenarios for c in configs):
            return binary, None
        from fastredlock.testing import make_certs
        from fastredlock.testing.tls import tls_server

        self.certs = make_certs(tempfile.mkdtemp(prefix="fastredlock-bench-certs-"))
        try:
            return tls_server(self.certs), self.certs.server_tls()
        except FileNotFoundError as exc:
            for c in configs:
                if "tls5" in c.scenarios:
                    self.skipped[c.id] = str(exc)
            return binary, None

    def run_tls_reference(self) -> Dict[str, Any]:
        """redis-benchmark -c 1 -t set on lock master 0, plain port then TLS port (same run)."""
        m = self.lock_masters[0]
        result: Dict[str, Any] = {}
        for kind, port, extra in (("plain", m.port, []), ("tls", m.tls_port, ["--tls", "--cacert", self.certs.ca])):
            cmd = [self.floor_binary, "-h", "127.0.0.1", "-p", str(port), "-c", "1", "-n",
                   str(self.s.floor_requests), "-t", "set", "--csv", *extra]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            except subprocess.TimeoutExpired:
                return {"ok": False, "error": "redis-benchmark timed out"}
            rows = [ln.replace('"', "").split(",") for ln in proc.stdout.splitlines()]
            if len(rows) < 2 or "rps" not in rows[0]:
                return {"ok": False, "error": f"redis-benchmark {kind}: {(proc.stdout + proc.stderr)[:200]}"}
            result[kind] = float(rows[1][rows[0].index("rps")])
        return {"ok": True, "result": result}

    def reset_masters(self) -> None:
        """Every master running, resumed and empty before the next job."""
        for m in self.masters:
            if not m.running():
                if self.progress is not None and m is not self.victim:
                    self.progress.log(f"  master {m.url} had died: restarted")
                m.start()
            m.resume()
            try:
                m.command("FLUSHALL")
            except OSError:
                m.restart()

    # --- jobs -------------------------------------------------------------------------------
    def job(self, cfg: Config, kind: str, rnd: int, **extra: Any) -> Dict[str, Any]:
        n = 1 if kind == "seq1" else 5
        job = {
            "config": cfg.id, "urls": self.urls(cfg, n), "ttl": self.s.ttl,
            "tag": f"{cfg.id}:{kind}:{rnd}", "duration": self.s.duration,
            "warmup": self.s.warmup, "threads": self.s.threads, "tasks": self.s.tasks,
            "scenario": {"seq5": "seq", "seq1": "seq", "batch": "x64"}.get(kind, kind),
            "batch": 64,
        }
        if kind == "tls5":
            job["urls"], job["scenario"] = self.tls_urls(), "seq"
        job.update(extra)
        return job

    def run_simple(self, cfg: Config, scenario: str, rnd: int) -> Dict[str, Any]:
        job = self.job(cfg, scenario, rnd)
        w = Worker(cfg, job, self.peer_dirs)
        try:
            ev = w.wait_for(["result"], timeout=self.s.duration + 60)
        finally:
            w.finish()
        out = self._from_event(ev)
        out["leftover_keys"] = self.keys_on_lock_masters()
        return out

    def run_contend(self, cfg: Config, rnd: int) -> Dict[str, Any]:
        counter_key = f"bench:holders:{cfg.id}:{rnd}"
        workers = []
        try:
            for i in range(self.s.procs):
                job = self.job(cfg, "contend", rnd, duration=self.s.contend_duration,
                               counter_url=self.counter.url, counter_key=counter_key,
                               name=f"contend:{cfg.id}:{rnd}", hold_ms=self.s.hold_ms, proc=i)
                workers.append(Worker(cfg, job, self.peer_dirs))
            for w in workers:
                ev = w.wait_for(["ready"], timeout=60)
                if ev.get("event") != "ready":
                    return self._from_event(ev)
            for w in workers:
                w.go()
            events = [w.wait_for(["result"], timeout=self.s.contend_duration + 20 + self.s.ttl)
                      for w in workers]
        finally:
            for w in workers:
                w.finish(timeout=2.0)
        bad = [e for e in events if e.get("event") != "result"]
        if bad:
            return self._from_event(bad[0])
        per = [e["result"] for e in events]
        acquired = [p["acquired"] for p in per]
        total = sum(acquired)
        wall = max(p["wall_s"] for p in per)
        errors: Dict[str, int] = {}
        for p in per:
            for k, v in p["errors"].items():
                errors[k] = errors.get(k, 0) + v
        jain = (total * total / (len(acquired) * sum(a * a for a in acquired))) if total else 0.0
        counter_left = self.counter.command("GET", counter_key)
        return {
            "ok": True, "info": events[0].get("info", {}),
            "result": {
                "rate": total / wall if wall else 0.0,
                "failed_rate": sum(p["failed"] for p in per) / wall if wall else 0.0,
                "acquired": acquired,
                "failed": [p["failed"] for p in per],
                "jain": jain,
                "share_min": min(acquired) / total if total else 0.0,
                "share_max": max(acquired) / total if total else 0.0,
                "doubles": sum(p["doubles"] for p in per),
                "wait_p50_us": statistics.median([p["wait_p50_us"] or 0 for p in per]),
                "wait_p99_us": max(p["wait_p99_us"] or 0 for p in per),
                "errors": errors,
                "counter_left": int(counter_left or 0),
                "wall_s": wall,
            },
            "leftover_keys": self.keys_on_lock_masters(),
        }

    def run_fault(self, cfg: Config, kind: str, rnd: int) -> Dict[str, Any]:
        bad = self.victim
        job = self.job(cfg, kind, rnd, scenario="fault", bad_index=0, attempts=self.s.attempts,
                       hang_limit=self.s.hang_limit)
        job["urls"] = [bad.url] + job["urls"][1:]
        w = Worker(cfg, job, self.peer_dirs)
        broken = False
        try:
            ev = w.wait_for(["ready"], timeout=60)
            if ev.get("event") == "ready":
                if kind == "refuse":
                    bad.kill()  # the port now refuses connections
                else:
                    bad.pause()  # SIGSTOP: connections stay open, nothing answers
                broken = True
                w.go()
                limit = self.s.attempts * (2 * self.s.hang_limit + 1.0) + 20
                ev = w.wait_for(["result"], timeout=limit)
        finally:
            if broken:
                if kind == "refuse":
                    bad.start()
                else:
                    bad.resume()
            w.finish(timeout=2.0)
        out = self._from_event(ev)
        if broken:
            time.sleep(0.3)  # let a resumed master execute what was queued while it was stopped
        out["leftover_keys"] = self.keys_on_lock_masters()
        return out

    def run_floor(self, rnd: int) -> Dict[str, Any]:
        port = self.lock_masters[0].port
        result: Dict[str, Any] = {}
        for pipe in (1, 16):
            cmd = [self.floor_binary, "-h", "127.0.0.1", "-p", str(port), "-c", "1",
                   "-n", str(self.s.floor_requests), "-P", str(pipe), "-t", "ping,set", "--csv"]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            except subprocess.TimeoutExpired:
                return {"ok": False, "error": "redis-benchmark timed out"}
            rows = [ln.replace('"', "").split(",") for ln in proc.stdout.splitlines()]
            head = rows[0] if rows else []
            if "rps" not in head:
                return {"ok": False, "error": f"redis-benchmark output not understood: {proc.stdout[:200]}"}
            i_rps, i_p50 = head.index("rps"), head.index("p50_latency_ms") if "p50_latency_ms" in head else None
            for r in rows[1:]:
                if len(r) == len(head):
                    result[f"{r[0]}|P{pipe}"] = {"rps": float(r[i_rps]),
                                                 "p50_ms": float(r[i_p50]) if i_p50 is not None else None}
        return {"ok": True, "result": result}

    def run_c_floor(self, cfg: Config, scenario: str, rnd: int) -> Dict[str, Any]:
        """The C floor (floor.c) on the same masters, warm-up and duration as a worker's job."""
        job = self.job(cfg, scenario, rnd)
        batch = job["batch"] if scenario == "batch" else 1
        try:
            r = _floor.run_floor(job["urls"], cycles=10 ** 9, batch=batch, ttl_ms=int(self.s.ttl * 1000),
                                 duration=self.s.duration, warmup=max(1, self.s.warmup // batch),
                                 timeout=self.s.duration + 60)
        except (_floor.FloorUnavailable, RuntimeError, subprocess.TimeoutExpired) as exc:
            return {"ok": False, "error": str(exc)}
        return {"ok": True, "result": _floor.as_sample(r), "info": self.info.get(cfg.id, {}),
                "leftover_keys": self.keys_on_lock_masters()}

    @staticmethod
    def _from_event(ev: Dict[str, Any]) -> Dict[str, Any]:
        if ev.get("event") == "result":
            return {"ok": True, "result": ev["result"], "info": ev.get("info", {})}
        return {"ok": False, "error": ev.get("error", "unknown"), "traceback": ev.get("traceback")}

    def run_job(self, cfg: Optional[Config], scenario: str, rnd: int) -> Dict[str, Any]:
        self.reset_masters()
        t0 = time.monotonic()
        if scenario == "floor":
            out = self.run_floor(rnd)
        elif scenario == "tlsref":
            out = self.run_tls_reference()
        elif scenario == "contend":
            out = self.run_contend(cfg, rnd)  # type: ignore[arg-type]
        elif scenario in ("refuse", "stall"):
            out = self.run_fault(cfg, scenario, rnd)  # type: ignore[arg-type]
        elif cfg is not None and cfg.native:
            out = self.run_c_floor(cfg, scenario, rnd)
        else:
            out = self.run_simple(cfg, scenario, rnd)  # type: ignore[arg-type]
        out.update({"config": cfg.id if cfg else "redis-benchmark", "scenario": scenario,
                    "round": rnd, "job_s": round(time.monotonic() - t0, 3)})
        return out

    # --- phases -----------------------------------------------------------------------------
    def selected(self) -> List[Config]:
        only = set(self.args.only.split(",")) if self.args.only else None
        skip = set(self.args.skip.split(",")) if self.args.skip else set()
        for name in (only or set()) | skip:
            if name not in BY_ID:
                raise SystemExit(f"unknown configuration {name!r}; known: {', '.join(BY_ID)}")
        # the C floor comes along with --only: every table keeps its physical limit (--skip drops it)
        return [c for c in CONFIGS if (only is None or c.id in only or c.native) and c.id not in skip]

    def scenarios(self) -> List[str]:
        if not self.args.scenarios:
            return list(SCENARIO_NAMES)
        wanted = self.args.scenarios.split(",")
        for s in wanted:
            if s not in SCENARIO_NAMES:
                raise SystemExit(f"unknown scenario {s!r}; known: {', '.join(SCENARIO_NAMES)}")
        return wanted

    def install_peers(self, configs: List[Config]) -> None:
        groups = sorted({c.group for c in configs if c.group})
        if not groups:
            return
        root = self.args.peers_dir
        os.makedirs(root, exist_ok=True)
        say(f"peers: pip install --target {root}/<peer> ({', '.join(groups)}) ...")

        def one(g: str) -> Tuple[str, Optional[str], str]:
            reqs = list(PEER_GROUPS[g]) + (["hiredis"] if self.args.peer_hiredis else [])
            d, note = install_group(g, reqs, root, self.args.reinstall, not self.args.no_install)
            return g, d, note

        with ThreadPoolExecutor(max_workers=3) as pool:
            for g, d, note in pool.map(one, groups):
                self.install_notes[g] = note
                if d is None:
                    say(f"  {g}: SKIPPED: {note}")
                else:
                    self.peer_dirs[g] = d
                    say(f"  {g}: {note}")
        for c in configs:
            if c.group and c.group not in self.peer_dirs:
                self.skipped[c.id] = f"could not install: {self.install_notes[c.group]}"

    def check_cython(self) -> Optional[str]:
        proc = subprocess.run([sys.executable, "-c", "import fastredlock._io_c"],
                              capture_output=True, text=True, timeout=60)
        if proc.returncode == 0:
            return None
        last = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or ["import failed"]
        return ("the Cython core fastredlock._io_c is not built (" + last[0].strip()
                + "); build it with `pip install -e .` and a C compiler")

    def probe_one(self, c: Config) -> Tuple[Config, Optional[str]]:
        """Start the configuration once (import, connect, one lock): None if it runs, else why not."""
        if c.id == "fastredlock-cython":
            reason = self.check_cython()
            if reason:
                return c, reason
        if c.native:
            try:
                r = _floor.run_floor(self.urls(c), cycles=10, batch=1, warmup=0, timeout=120)
            except (_floor.FloorUnavailable, RuntimeError, subprocess.TimeoutExpired) as exc:
                return c, f"does not run here: {exc}"
            self.info[c.id] = {"versions": {"cc -O2": _floor.compiler_version()}, "module_file": r["binary"]}
            return c, None
        job = self.job(c, "seq1" if c.n1 else "seq5", 0, scenario="probe")
        w = Worker(c, job, self.peer_dirs)
        try:
            ev = w.wait_for(["result"], timeout=120)
        finally:
            w.finish()
        if ev.get("event") == "result":
            self.info[c.id] = ev.get("info", {})
            return c, None
        return c, f"does not run here: {ev.get('error')}"

    def probe(self, configs: List[Config]) -> List[Config]:
        """Probe every configuration in its own process (a few at a time: nothing is measured)."""
        todo = [c for c in configs if c.id not in self.skipped]
        self.reset_masters()
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = dict((c.id, reason) for c, reason in pool.map(self.probe_one, todo))
        ok = []
        for c in todo:
            reason = results[c.id]
            if reason is None:
                ok.append(c)
                vers = ", ".join(f"{k} {v}" for k, v in self.info[c.id].get("versions", {}).items() if v)
                say(f"  {c.label}: ok ({vers})")
            else:
                self.skipped[c.id] = reason
                say(f"  {c.label}: SKIPPED: {reason}")
        return ok

    def run(self) -> int:
        from fastredlock.testing import find_server, server_version, start_masters

        binary = find_server(self.args.server)
        self.server = {"binary": binary, "version": server_version(binary)}
        self.floor_binary = self.args.redis_benchmark or shutil.which("redis-benchmark") \
            or shutil.which("valkey-benchmark")
        configs = self.selected()
        scenarios = self.scenarios()
        t_start = time.time()
        t_up = time.monotonic()
        say(f"starting 7 local masters ({self.server['version']}): 5 lock masters, 1 counter master, "
            "1 to break in fault jobs")
        binary, tls = self.prepare_tls(configs, scenarios, binary)
        with start_masters(7, binary=binary, tls=tls) as masters:
            self.masters = masters
            self.counter = list(masters)[5]
            self.install_peers(configs)
            # fastredlock (restart-aware voting, its default) does not count a master younger
            # than the largest TTL in use: measure against masters that have been up longer.
            age = time.monotonic() - t_up
            if age < self.s.ttl + 0.5:
                say(f"waiting {self.s.ttl + 0.5 - age:.1f} s until the masters are older than the TTL")
                time.sleep(self.s.ttl + 0.5 - age)
            say("probing each configuration in its own process ...")
            runnable = self.probe(configs)
            jobs: List[Tuple[Optional[Config], str]] = [
                (c, s) for c in runnable for s in c.scenarios if s in scenarios]
            if tls is not None and self.floor_binary and any("tls5" in c.scenarios for c in runnable):
                jobs.append((None, "tlsref"))
            if "floor" in scenarios and not self.args.only:
                if self.floor_binary:
                    jobs.append((None, "floor"))
                else:
                    self.skipped["redis-benchmark"] = "redis-benchmark / valkey-benchmark not on PATH"
            rng = random.Random(self.args.seed)
            plan = []
            for rnd in range(1, self.s.rounds + 1):
                batch = list(jobs)
                rng.shuffle(batch)
                plan.extend((c, s, rnd) for c, s in batch)
            self.progress = Progress(len(plan), enabled=not self.args.no_progress)
            try:
                for cfg, scenario, rnd in plan:
                    label = f"r{rnd} {cfg.id if cfg else 'redis-benchmark'} {scenario}"
                    self.progress.describe(label)
                    out = self.run_job(cfg, scenario, rnd)
                    self.samples.append(out)
                    if not out.get("ok"):
                        self.progress.log(f"  {label}: FAILED: {out.get('error')}")
                    self.progress.advance(label)
            finally:
                self.progress.close()
        self.elapsed = time.time() - t_start
        return 0


# --------------------------------------------------------------------------------------------
# report


def med(xs: Iterable[Optional[float]]) -> Optional[float]:
    v = [x for x in xs if x is not None]
    return statistics.median(v) if v else None


def fnum(x: Optional[float], digits: int = 0) -> str:
    if x is None:
        return "–"
    return f"{x:,.{digits}f}"


def frange(xs: List[float], digits: int = 0) -> str:
    if not xs:
        return "–"
    return f"{min(xs):,.{digits}f}..{max(xs):,.{digits}f}"


class Report:
    def __init__(self, bench: Bench, argv: List[str]) -> None:
        self.b = bench
        self.argv = argv
        self.by: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
        for s in bench.samples:
            self.by.setdefault((s["config"], s["scenario"]), []).append(s)

    def ok(self, cid: str, scen: str) -> List[Dict[str, Any]]:
        return [s for s in self.by.get((cid, scen), []) if s.get("ok")]

    def failed(self, cid: str, scen: str) -> List[Dict[str, Any]]:
        return [s for s in self.by.get((cid, scen), []) if not s.get("ok")]

    def floor_rate(self, scen: str) -> Optional[float]:
        """The C floor's rate in this scenario (median of rounds), None if it did not run."""
        rates = [s["result"]["rate"] for s in self.ok(FLOOR_ID, scen)]
        return statistics.median(rates) if rates else None

    def fast_rate(self, scen: str) -> Tuple[Optional[float], str]:
        for cid in ("fastredlock-cython", "fastredlock-python"):
            rates = [s["result"]["rate"] for s in self.ok(cid, scen)]
            if rates:
                return statistics.median(rates), BY_ID[cid].label
        return None, ""

    # --- sections ---------------------------------------------------------------------------
    def header(self) -> List[str]:
        b = self.b
        s = b.s
        cpu = ""
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        cpu = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        floor_version = ""
        if b.floor_binary:
            try:
                floor_version = subprocess.run([b.floor_binary, "--version"], capture_output=True,
                                               text=True, timeout=10).stdout.strip()
            except (OSError, subprocess.TimeoutExpired):
                pass
        lines = [
            "# fastredlock vs other Python Redlock clients",
            "",
            f"Command: `{' '.join(self.argv)}`  ",
            f"Date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; took {b.elapsed / 60:.1f} min; "
            f"{s.rounds} round(s), jobs shuffled within each round (seed {b.args.seed}), every job in a fresh process.  ",
            f"Machine: {platform.system()} {platform.release()}, {os.cpu_count()} CPUs ({cpu}); "
            f"Python {platform.python_version()} ({platform.python_implementation()}).  ",
            f"Masters: {b.server['version']} ({b.server['binary']}) on 127.0.0.1, `--save '' --appendonly no`: "
            "5 lock masters, 1 counter master, 1 that fault jobs break in place of the first lock master. "
            f"Floor: {floor_version or 'redis-benchmark not found'}; C floor: "
            f"{(b.info.get(FLOOR_ID) or {}).get('module_file') or 'not built'}.  ",
            f"Settings: TTL {s.ttl:g} s; {s.duration:g} s per sequential/threads sample after {s.warmup} warm-up "
            f"cycles; contention {s.procs} processes x {s.contend_duration:g} s; faults {s.attempts} attempt(s) "
            f"per sample, an answer later than {s.hang_limit:g} s counts as hung.",
            "",
            "| configuration | packages (as imported by its worker) | isolation |",
            "|---|---|---|",
        ]
        for c in CONFIGS:
            if c.id in b.info:
                vers = ", ".join(f"{k} {v}" for k, v in b.info[c.id].get("versions", {}).items() if v)
                iso = f"`python -S`, PYTHONPATH={b.peer_dirs.get(c.group)}" if c.isolated else "this environment"
                lines.append(f"| {c.label} | {vers} | {iso} |")
        lines.append("")
        lines.append("Compare ratios within one run; absolute numbers move ±30% between runs on a noisy machine.")
        lines.append("")
        return lines

    def seq_table(self, scen: str, title: str) -> List[str]:
        fast, fast_label = self.fast_rate(scen)
        floor = self.floor_rate(scen)
        rows = []
        for c in CONFIGS:
            if scen not in c.scenarios:
                continue
            ok = self.ok(c.id, scen)
            if not ok:
                continue
            r = [s["result"] for s in ok]
            rate = statistics.median(x["rate"] for x in r)
            user = med(x["user_ms_per_1000"] for x in r)
            sys_ = med(x["sys_ms_per_1000"] for x in r)
            per_batch = " (per batch)" if scen == "batch" else ""
            ratio = f"{fast / rate:.2f}x" if fast else "–"
            rows.append((rate, [
                f"**{c.label}**" if c.fast else c.label, c.style, fnum(rate), frange([x["rate"] for x in r]),
                f"{fnum(med(x['acq_p50_us'] for x in r))} / {fnum(med(x['acq_p99_us'] for x in r))}{per_batch}",
                f"{fnum(med(x['rel_p50_us'] for x in r))} / {fnum(med(x['rel_p99_us'] for x in r))}",
                f"{fnum((user or 0) + (sys_ or 0))} ({fnum(user)}+{fnum(sys_)})",
                fnum(med(x["cpu_util"] for x in r), 2),
                str(sum(x["fails"] for x in r) + sum(sum(x["errors"].values()) for x in r)),
                str(sum(s.get("leftover_keys", 0) for s in ok)),
                ratio, f"{rate / floor:.2f}x" if floor else "–",
                f"{len(ok)}" + (f" (+{len(self.failed(c.id, scen))} failed)" if self.failed(c.id, scen) else ""),
            ]))
        if not rows:
            return []
        rows.sort(key=lambda t: -t[0])
        out = [f"### {title}", "",
               f"| client | style | {'locks' if scen == 'batch' else 'cycles'}/s | rounds (min..max) "
               "| acquire p50 / p99 µs | release p50 / p99 µs "
               f"| CPU ms / 1000 {'locks' if scen == 'batch' else 'cycles'} (user+sys) | client CPU util "
               f"| fails | leftover keys | {fast_label or 'fastredlock'} ÷ this | x of C floor | samples |",
               "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        out += ["| " + " | ".join(cells) + " |" for _, cells in rows]
        out.append("")
        if floor:
            unit = "locks/s" if scen == "batch" else "cycles/s"
            line = f"Physical limit of this machine: the C floor's {fnum(floor)} {unit}"
            if fast:
                line += f"; {fast_label} runs at {fast / floor:.2f}x of it"
            out.append(line + " (x of C floor: this row's rate ÷ the floor's).")
        else:
            out.append(f"No C floor in this run ({self.b.skipped.get(FLOOR_ID, 'skipped or failed')}).")
        return out + [""]

    def threads_table(self) -> List[str]:
        fast, fast_label = self.fast_rate("threads")
        rows = []
        for c in CONFIGS:
            ok = self.ok(c.id, "threads")
            if not ok:
                continue
            r = [s["result"] for s in ok]
            rate = statistics.median(x["rate"] for x in r)
            user = med(x["user_ms_per_1000"] for x in r)
            sys_ = med(x["sys_ms_per_1000"] for x in r)
            adapter_async = "-async" in c.id or "aio" in c.id  # pottery-aio, aioredlock, redis-py's asyncio Lock
            mode = f"{self.b.s.tasks} asyncio tasks, one loop" if adapter_async else f"{self.b.s.threads} threads"
            ratio = f"{fast / rate:.2f}x" if fast else "–"
            rows.append((rate, [
                f"**{c.label}**" if c.fast else c.label, mode, fnum(rate), frange([x["rate"] for x in r]),
                f"{fnum(med(x['acq_p50_us'] for x in r))} / {fnum(med(x['acq_p99_us'] for x in r))}",
                f"{fnum((user or 0) + (sys_ or 0))} ({fnum(user)}+{fnum(sys_)})",
                fnum(med(x["cpu_util"] for x in r), 2),
                str(sum(x["fails"] for x in r) + sum(sum(x["errors"].values()) for x in r)),
                str(sum(s.get("leftover_keys", 0) for s in ok)), ratio,
            ]))
        if not rows:
            return []
        rows.sort(key=lambda t: -t[0])
        out = [f"### {self.b.s.threads} threads (asyncio clients: {self.b.s.tasks} tasks) sharing one client "
               "(N=5; redis-py Lock N=1)", "",
               "| client | concurrency | cycles/s (all threads) | rounds (min..max) | acquire p50 / p99 µs "
               "| CPU ms / 1000 cycles (user+sys) | client CPU util | fails | leftover keys "
               f"| {fast_label or 'fastredlock'} ÷ this |",
               "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        out += ["| " + " | ".join(cells) + " |" for _, cells in rows]
        return out + [""]

    def contend_table(self) -> List[str]:
        rows = []
        for c in CONFIGS:
            ok = self.ok(c.id, "contend")
            if not ok:
                continue
            r = [s["result"] for s in ok]
            rate = statistics.median(x["rate"] for x in r)
            errors: Dict[str, int] = {}
            for x in r:
                for k, v in x["errors"].items():
                    errors[k] = errors.get(k, 0) + v
            rows.append((rate, [
                f"**{c.label}**" if c.fast else c.label, fnum(rate, 1), frange([x["rate"] for x in r], 1),
                fnum(med(x["failed_rate"] for x in r), 1),
                fnum(med(x["jain"] for x in r), 3),
                f"{min(x['share_min'] for x in r) * 100:.0f}%..{max(x['share_max'] for x in r) * 100:.0f}%",
                f"{fnum(med(x['wait_p50_us'] for x in r) / 1000, 1)} / {fnum(med(x['wait_p99_us'] for x in r) / 1000, 1)}",
                f"**{sum(x['doubles'] for x in r)}**" if sum(x["doubles"] for x in r) else "0",
                ", ".join(f"{k} x{v}" for k, v in sorted(errors.items())) or "0",
                str(sum(s.get("leftover_keys", 0) for s in ok)),
            ]))
        if not rows:
            return []
        rows.sort(key=lambda t: -t[0])
        s = self.b.s
        out = [f"### Contention: {s.procs} processes, one name, each library's default retry policy", "",
               "| client | acquisitions/s | rounds (min..max) | failed acquires/s | fairness (Jain, 1 = even) "
               "| share per process (min..max) | acquire wait p50 / p99 ms | double holders | exceptions "
               "| leftover keys |",
               "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
        out += ["| " + " | ".join(cells) + " |" for _, cells in rows]
        return out + [""]

    def fault_cells(self, cid: str, kind: str) -> List[str]:
        ok = self.ok(cid, kind)
        if not ok:
            failed = self.failed(cid, kind)
            return ["–"] * 4 if not failed else [f"failed: {failed[0].get('error', '')[:60]}"] + ["–"] * 3
        rows = [a for s in ok for a in s["result"]["attempts"]]
        n = len(rows)
        got = sum(1 for a in rows if a["acquired"])
        hung = sum(1 for a in rows if a["hung"])
        times = sorted(a["answer_ms"] for a in rows if not a["hung"])
        exc = sum(1 for a in rows if a["acq_exc"] or a["rel_exc"] or a.get("rel_hung"))
        holding = sum(1 for a in rows if a["exc_while_holding"])
        leaked = sum(s.get("leftover_keys", 0) for s in ok)
        abandoned = sum(a.get("holding_after", 0) for a in rows if a["hung"] or a.get("rel_hung"))
        t = f"{fnum(statistics.median(times), 1)} / {fnum(times[-1], 1)}" if times else "–"
        keys = f"**{leaked}**" if leaked else "0"
        if abandoned:
            keys += f" ({abandoned} by hung calls)"
        return [f"{got}/{n}", t + (f", **{hung} hung**" if hung else ""), f"{exc} ({holding})", keys]

    def faults_table(self) -> List[str]:
        lines = []
        for c in CONFIGS:
            if "refuse" not in c.scenarios and "stall" not in c.scenarios:
                continue
            if not (self.by.get((c.id, "refuse")) or self.by.get((c.id, "stall"))):
                continue
            cells = self.fault_cells(c.id, "refuse") + self.fault_cells(c.id, "stall")
            lines.append("| " + " | ".join([f"**{c.label}**" if c.fast else c.label] + cells) + " |")
        if not lines:
            return []
        s = self.b.s
        return ["### One of 5 masters bad: refusing connections (killed) / stalled (SIGSTOP)", "",
                f"{s.attempts} acquire+release attempt(s) per round, each on a fresh name; hung = no answer "
                f"within {s.hang_limit:g} s (then the harness interrupts it). Keys leaked are counted after the "
                "bad master is back (a stalled master then runs the SETs queued while it was stopped: they "
                "land after the client gave up or released, and stay until their TTL); in parentheses, keys "
                "that calls the harness interrupted had left on the healthy masters.", "",
                "| client | refusing: acquired | answer p50 / max ms | exceptions (while holding) | keys leaked "
                "| stalled: acquired | answer p50 / max ms | exceptions (while holding) | keys leaked |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|"] + lines + [""] + self.exceptions_seen()

    def exceptions_seen(self) -> List[str]:
        seen: Dict[Tuple[str, str], Dict[str, int]] = {}
        for s in self.b.samples:
            if s.get("ok") and s["scenario"] in ("refuse", "stall"):
                for a in s["result"]["attempts"]:
                    for e in (a["acq_exc"], a["rel_exc"]):
                        if e:
                            d = seen.setdefault((s["config"], s["scenario"]), {})
                            k = e.split(":", 1)[0]
                            d[k] = d.get(k, 0) + 1
        if not seen:
            return []
        out = ["Exceptions raised under faults:", ""]
        for (cid, scen), d in sorted(seen.items()):
            out.append(f"- {BY_ID[cid].label}, {scen}: " + ", ".join(f"{k} x{v}" for k, v in sorted(d.items())))
        return out + [""]

    def floor_table(self) -> List[str]:
        ok = self.ok("redis-benchmark", "floor")
        if not ok:
            return []
        tests = []
        for s in ok:
            for k in s["result"]:
                t = k.split("|")[0]
                if t not in tests:
                    tests.append(t)
        out = ["### redis-benchmark floor (one master, -c 1)", "",
               f"`redis-benchmark -c 1 -n {self.b.s.floor_requests} -P 1|16 -t ping,set`, median of rounds.", "",
               "| test | -P 1 req/s | -P 1 p50 ms | -P 16 req/s | -P 16 p50 ms |", "|---|---:|---:|---:|---:|"]
        for t in tests:
            cells = [t]
            for p in (1, 16):
                vals = [s["result"].get(f"{t}|P{p}") for s in ok]
                vals = [v for v in vals if v]
                cells += [fnum(med(v["rps"] for v in vals)), fnum(med(v["p50_ms"] for v in vals), 3)]
            out.append("| " + " | ".join(cells) + " |")
        return out + [""]

    def tls_table(self) -> List[str]:
        """The TLS rows, and the two ratios they are held to: fastredlock's cost of TLS against
        redis-benchmark's (the same run), and fastredlock over TLS against the best TLS peer."""
        out = self.seq_table("tls5", "Sequential lock+unlock over TLS, N=5 masters (median of rounds)")
        if not out:
            return []
        out = [line for line in out if not line.startswith("No C floor")]
        rate = {cid: med(s["result"]["rate"] for s in self.ok(cid, scen))
                for cid, scen in (("fastredlock-cython", "seq5"), ("fastredlock-cython-tls", "tls5"))}
        ref = [s["result"] for s in self.ok("redis-benchmark", "tlsref")]
        if ref and all(rate.values()):
            bench_ratio = statistics.median(r["tls"] / r["plain"] for r in ref)
            ours = rate["fastredlock-cython-tls"] / rate["fastredlock-cython"]  # type: ignore[operator]
            out.append(f"Cost of TLS: fastredlock (Cython) with TLS ÷ without = {ours:.2f}; redis-benchmark "
                       f"-c 1 -t set with --tls ÷ without = {bench_ratio:.2f} "
                       f"({fnum(statistics.median(r['tls'] for r in ref))} vs "
                       f"{fnum(statistics.median(r['plain'] for r in ref))} req/s); "
                       f"ours ÷ redis-benchmark's = {ours / bench_ratio:.2f}.")
        peers = [med(s["result"]["rate"] for s in self.ok(c.id, "tls5")) for c in CONFIGS
                 if "tls5" in c.scenarios and not c.fast and not c.reference]
        peers = [p for p in peers if p]
        if peers and rate["fastredlock-cython-tls"]:
            out.append(f"fastredlock (Cython) over TLS ÷ the best TLS peer: "
                       f"{rate['fastredlock-cython-tls'] / max(peers):.1f}x.")  # type: ignore[operator]
        return out + [""]

    def skipped(self) -> List[str]:
        out = []
        for cid, reason in self.b.skipped.items():
            label = BY_ID[cid].label if cid in BY_ID else cid
            out.append(f"- **{label}**: {reason}")
        failed = [s for s in self.b.samples if not s.get("ok")]
        for s in failed:
            out.append(f"- {s['config']} / {s['scenario']} round {s['round']}: failed: {s.get('error')}")
        return (["### Skipped or failed", ""] + out + [""]) if out else []

    def markdown(self) -> str:
        parts = self.header()
        parts += self.seq_table("seq5", "Sequential lock+unlock, N=5 masters (median of rounds)")
        parts += self.seq_table("seq1", "Sequential lock+unlock, N=1 master (median of rounds)")
        parts += self.seq_table("batch", "Batches: 64 locks per call, N=5 (fastredlock: acquire_many / "
                                "release_many; no peer has a batch API)")
        parts += self.threads_table()
        parts += self.contend_table()
        parts += self.faults_table()
        parts += self.floor_table()
        parts += self.tls_table()
        parts += self.skipped()
        return "\n".join(parts) + "\n"

    def json(self) -> Dict[str, Any]:
        b = self.b
        return {
            "command": self.argv,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "elapsed_s": b.elapsed,
            "machine": {"system": platform.platform(), "cpus": os.cpu_count(),
                        "python": platform.python_version()},
            "server": b.server,
            "redis_benchmark": b.floor_binary,
            "settings": b.s.__dict__,
            "seed": b.args.seed,
            "configs": {c.id: {"label": c.label, "style": c.style, "group": c.group,
                               "peer_dir": b.peer_dirs.get(c.group) if c.group else None,
                               "info": b.info.get(c.id)} for c in CONFIGS},
            "install": b.install_notes,
            "skipped": b.skipped,
            "samples": b.samples,
        }

    def chart(self, path: str) -> Optional[str]:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return "matplotlib is not installed (pip install -e '.[bench]')"
        rows = []
        for c in CONFIGS:
            ok = self.ok(c.id, "seq5")
            if not ok:
                continue
            r = [s["result"] for s in ok]
            rates = [x["rate"] for x in r]
            rows.append((c, statistics.median(rates), min(rates), max(rates),
                         med(x["user_ms_per_1000"] for x in r) or 0, med(x["sys_ms_per_1000"] for x in r) or 0))
        if not rows:
            return "no sequential N=5 samples to chart"
        rows.sort(key=lambda t: t[1])
        labels = [t[0].label for t in rows]
        colors = ["#d62728" if t[0].fast else ("#7f7f7f" if t[0].reference else "#1f77b4") for t in rows]
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 0.45 * len(rows) + 1.8), sharey=True)
        y = range(len(rows))
        med_r = [t[1] for t in rows]
        err = [[t[1] - t[2] for t in rows], [t[3] - t[1] for t in rows]]
        ax1.barh(list(y), med_r, xerr=err, color=colors, capsize=3)
        ax1.set_yticks(list(y))
        ax1.set_yticklabels(labels)
        ax1.set_xlabel("lock+unlock cycles/s (median; whiskers: min..max of rounds)")
        for i, t in enumerate(rows):
            ax1.text(max(t[1], t[3]), i, f"  {t[1]:,.0f}", va="center", fontsize=8)
        ax1.set_xlim(0, max(t[3] for t in rows) * 1.15)
        users = [t[4] for t in rows]
        syss = [t[5] for t in rows]
        ax2.barh(list(y), users, color=colors, label="user")
        ax2.barh(list(y), syss, left=users, color=colors, alpha=0.45, label="sys", hatch="//")
        ax2.set_xlabel("client CPU ms per 1000 cycles, lower is better (solid: user, hatched: sys)")
        for i, (u, s_) in enumerate(zip(users, syss)):
            ax2.text(u + s_, i, f"  {u + s_:,.0f}", va="center", fontsize=8)
        ax2.set_xlim(0, max(u + s_ for u, s_ in zip(users, syss)) * 1.15)
        fig.suptitle(f"Sequential lock+unlock on 5 local masters ({self.b.server['version']}), "
                     f"{self.b.s.rounds} round(s); red: fastredlock, grey: references")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return None


# --------------------------------------------------------------------------------------------


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="fastredlock bench", description="Compare fastredlock with other Python Redlock clients "
        "and the raw floor on local masters (every configuration in a fresh process, shuffled rounds).")
    p.add_argument("--quick", action="store_true", help="~30 s smoke run: one short round, 1 fault attempt")
    p.add_argument("--rounds", type=int, help="rounds (default 3; --quick: 1)")
    p.add_argument("--duration", type=float, help="seconds per sequential / threads sample (default 3)")
    p.add_argument("--contend-duration", type=float, help="seconds per contention sample (default 4)")
    p.add_argument("--attempts", type=int, help="acquire attempts per fault sample (default 4)")
    p.add_argument("--hang-limit", type=float, help="an answer later than this (s) counts as hung (default 2)")
    p.add_argument("--threads", type=int, default=4, help="threads sharing one client (default 4)")
    p.add_argument("--tasks", type=int, default=64, help="asyncio tasks sharing one async client (default 64)")
    p.add_argument("--procs", type=int, default=4, help="processes in the contention scenario (default 4)")
    p.add_argument("--ttl", type=float, help="lock TTL in seconds (default 10; --quick: 3)")
    p.add_argument("--hold-ms", type=float, default=0.0, help="time each contention holder sleeps inside (default 0)")
    p.add_argument("--only", help="comma-separated configuration ids (see --list); the C floor always comes along")
    p.add_argument("--skip", help="comma-separated configuration ids to leave out")
    p.add_argument("--scenarios", help=f"comma-separated subset of {','.join(SCENARIO_NAMES)}")
    p.add_argument("--list", action="store_true", help="list configurations and scenarios, then exit")
    p.add_argument("--out", default=os.path.join(os.getcwd(), "fastredlock-bench"),
                   help="output folder (default ./fastredlock-bench)")
    p.add_argument("--peers-dir", default=default_peers_dir(), help="where peers are pip-installed (--target)")
    p.add_argument("--no-install", action="store_true", help="use peers already installed, install nothing")
    p.add_argument("--reinstall", action="store_true", help="reinstall every peer")
    p.add_argument("--peer-hiredis", action="store_true", help="add hiredis to every peer's install (redis-py uses it)")
    p.add_argument("--server", help="redis-server / valkey-server binary (default: fastredlock.testing.find_server)")
    p.add_argument("--redis-benchmark", help="redis-benchmark binary (default: from PATH)")
    p.add_argument("--floor-requests", type=int, help="requests per redis-benchmark test (default 50000)")
    p.add_argument("--seed", type=int, default=None, help="shuffle seed (default: random, recorded)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 30)
    return args


def settings_from(args: argparse.Namespace) -> Settings:
    s = Settings(**QUICK.__dict__) if args.quick else Settings()
    for name in ("rounds", "duration", "contend_duration", "attempts", "hang_limit", "floor_requests", "ttl"):
        v = getattr(args, name)
        if v is not None:
            setattr(s, name, v)
    s.threads, s.tasks, s.procs, s.hold_ms = args.threads, args.tasks, args.procs, args.hold_ms
    if s.rounds < 1 or s.duration <= 0 or s.procs < 2 or s.threads < 1:
        raise SystemExit("--rounds >= 1, --duration > 0, --procs >= 2 and --threads >= 1, please")
    return s


def main(argv: Optional[List[str]] = None, prog: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if args.list:
        for c in CONFIGS:
            print(f"{c.id:20} {c.label:32} {','.join(c.scenarios)}")
        print("scenarios:", ", ".join(SCENARIO_NAMES))
        return 0
    bench = Bench(args, settings_from(args))
    bench.run()
    command = prog or os.environ.get("FASTREDLOCK_BENCH_PROG", "python -m fastredlock bench").split()
    report = Report(bench, command + (sys.argv[1:] if argv is None else list(argv)))
    md = report.markdown()
    os.makedirs(args.out, exist_ok=True)
    md_path = os.path.join(args.out, "compare.md")
    json_path = os.path.join(args.out, "compare.json")
    png_path = os.path.join(args.out, "compare.png")
    with open(md_path, "w") as f:
        f.write(md)
    with open(json_path, "w") as f:
        json.dump(report.json(), f, indent=1, default=str)
    problem = report.chart(png_path)
    print(md)
    say(f"wrote {md_path}, {json_path}" + (f", {png_path}" if not problem else f" (no chart: {problem})"))
    return 0
