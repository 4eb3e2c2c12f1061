"""The comparison run: its masters, one :class:`Worker` subprocess per configuration x scenario x
round (see :mod:`.worker`), interleaved and shuffled, faults injected between ``ready`` and ``go``."""
from __future__ import annotations

import argparse
import json
import os
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
from typing import Any, Dict, List, Optional, Sequence, Tuple

import fastredlock

from . import floor as _floor
from . import rtt as _rtt
from .configs import BY_ID, CONFIGS, RTT, Config, PEER_GROUPS, SCENARIO_NAMES, Settings
from .progress import Progress, say
from .peers import install_group
from .turns import run_turns
from ..protocol.scripts import WAKE_SUFFIX

HERE = os.path.dirname(os.path.abspath(__file__))
#: Run as a script (``python [-S] worker.py JOB``): peers' processes import nothing of fastredlock.
WORKER = os.path.join(HERE, "worker.py")

def merged(events: List[Dict[str, Any]]) -> Tuple[List[Any], List[int], int, float, Dict[str, int], float]:
    """The contention workers' result events merged: ``(results, acquisitions per process, their
    total, the longest wall time, errors summed by name, Jain's fairness)``."""
    per = [e["result"] for e in events]
    acquired = [p["acquired"] for p in per]
    total = sum(acquired)
    errors: Dict[str, int] = {}
    for p in per:
        for k, v in p["errors"].items():
            errors[k] = errors.get(k, 0) + v
    jain = (total * total / (len(acquired) * sum(a * a for a in acquired))) if total else 0.0
    return per, acquired, total, max(p["wall_s"] for p in per), errors, jain


class Worker:
    """One worker subprocess; JSON events from its stdout arrive on a queue."""

    def __init__(self, cfg: Config, job: Dict[str, Any], peer_dirs: Dict[str, str]) -> None:
        env = dict(os.environ)
        args = [sys.executable]
        if cfg.interpreter:  # PyPy: no site-packages (CPython's are not its own); this fastredlock's source
            args = [shutil.which(cfg.interpreter) or cfg.interpreter, "-S"]
            env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(fastredlock.__file__)))
            env.pop("PYTHONHOME", None)
        elif cfg.isolated:
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
        self.proxy: Optional[_rtt.DelayProxy] = None  # the round-trip scenario's delay proxy

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
        """Keys left on the lock masters, counted once a turn given at the very end (fastredlock's
        `<key>:next`, 50 ms) has lapsed: what stays, not what is still expiring on its own. So
        fastredlock's wake marks (`<key>:wake`, which outlive contention by a second or so: see
        fastredlock.engine.wake) are not counted while they have a TTL."""
        time.sleep(0.1)
        total = 0
        for m in self.lock_masters + [self.victim]:
            try:
                total += int(m.command("DBSIZE"))
                cursor = b"0"
                while True:
                    cursor, marks = m.command("SCAN", cursor, "MATCH", "*" + WAKE_SUFFIX.decode(), "COUNT", 1000)
                    total -= sum(1 for mark in marks if int(m.command("PTTL", mark)) > 0)
                    if cursor == b"0":
                        break
            except OSError:
                pass
        return total

    def urls(self, cfg: Config, n: int = 5, kind: str = "") -> List[str]:
        n = 1 if cfg.n1 else n
        if kind in RTT:
            assert self.proxy is not None
            return self.proxy.urls[:n]
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
        n = 1 if kind in ("seq1", "rtt1") else 5
        job = {
            "config": cfg.id, "urls": self.urls(cfg, n, kind), "ttl": self.s.ttl,
            "tag": f"{cfg.id}:{kind}:{rnd}", "duration": self.s.duration,
            "warmup": self.s.warmup, "threads": self.s.threads, "tasks": self.s.tasks,
            "scenario": {"seq5": "seq", "seq1": "seq", "rtt5": "seq", "rtt1": "seq", "batch": "x64"}.get(kind, kind),
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

    def run_together(self, cfg: Config, jobs: List[Dict[str, Any]], duration: float) -> Any:
        """Start one worker per job, let them go together once all are ready; their result events,
        or the failed one's report (a dict) if one of them did not get there."""
        workers = []
        try:
            for job in jobs:
                workers.append(Worker(cfg, job, self.peer_dirs))
            for w in workers:
                ev = w.wait_for(["ready"], timeout=60)
                if ev.get("event") != "ready":
                    return self._from_event(ev)
            for w in workers:
                w.go()
            events = [w.wait_for(["result"], timeout=duration + 20 + self.s.ttl) for w in workers]
        finally:
            for w in workers:
                w.finish(timeout=2.0)
        bad = [e for e in events if e.get("event") != "result"]
        if bad:
            return self._from_event(bad[0])
        return events

    def run_contend(self, cfg: Config, rnd: int) -> Dict[str, Any]:
        counter_key = f"bench:holders:{cfg.id}:{rnd}"
        jobs = [self.job(cfg, "contend", rnd, duration=self.s.contend_duration, counter_url=self.counter.url,
                         counter_key=counter_key, name=f"contend:{cfg.id}:{rnd}", hold_ms=self.s.hold_ms, proc=i)
                for i in range(self.s.procs)]
        events = self.run_together(cfg, jobs, self.s.contend_duration)
        if isinstance(events, dict):  # one of them failed
            return events
        per, acquired, total, wall, errors, jain = merged(events)
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
        assert self.floor_binary is not None  # the floor runs only where redis-benchmark was found
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
                                 timeout=self.s.duration + 60, nowait=cfg.nowait)
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
        if scenario in RTT:
            return self.run_through_proxy(cfg, scenario, rnd)
        t0 = time.monotonic()
        if scenario == "floor":
            out = self.run_floor(rnd)
        elif scenario == "tlsref":
            out = self.run_tls_reference()
        elif scenario == "contend":
            out = self.run_contend(cfg, rnd)  # type: ignore[arg-type]
        elif scenario == "turns":
            out = run_turns(self, cfg, rnd)
        elif scenario in ("refuse", "stall"):
            out = self.run_fault(cfg, scenario, rnd)  # type: ignore[arg-type]
        elif cfg is not None and cfg.native:
            out = self.run_c_floor(cfg, scenario, rnd)
        else:
            out = self.run_simple(cfg, scenario, rnd)  # type: ignore[arg-type]
        out.update({"config": cfg.id if cfg else "redis-benchmark", "scenario": scenario,
                    "round": rnd, "job_s": round(time.monotonic() - t0, 3)})
        return out

    def run_through_proxy(self, cfg: Optional[Config], scenario: str, rnd: int) -> Dict[str, Any]:
        """A sequential job with its masters behind the delay proxy, and what the proxy did meanwhile."""
        assert cfg is not None
        if self.proxy is None or not self.proxy.alive():
            return {"ok": False, "error": "the delay proxy is not running", "config": cfg.id,
                    "scenario": scenario, "round": rnd, "job_s": 0.0}
        try:
            self.proxy.stats()  # opens the job's window
            t0 = time.monotonic()
            out = self.run_c_floor(cfg, scenario, rnd) if cfg.native else self.run_simple(cfg, scenario, rnd)
            wall = time.monotonic() - t0
            stats = self.proxy.stats()
        except RuntimeError as exc:
            out, wall, stats = {"ok": False, "error": f"delay proxy: {exc}"}, 0.0, None
        if out.get("ok") and stats is not None:
            out["proxy"] = _rtt.job_proxy_numbers(stats, out["result"], self.s.warmup, wall)
        out.update({"config": cfg.id, "scenario": scenario, "round": rnd, "job_s": round(wall, 3)})
        return out

    def start_proxy(self, configs: List[Config], scenarios: List[str]) -> None:
        """One delay proxy in front of the five lock masters, if a round-trip job is to run."""
        wanted = [c for c in configs if any(s in RTT for s in c.scenarios if s in scenarios)]
        if not wanted:
            return
        try:
            self.proxy = _rtt.DelayProxy([m.url for m in self.lock_masters], self.s.rtt_delay_us)
        except (_floor.FloorUnavailable, RuntimeError, OSError, ValueError) as exc:
            self.skipped["rttproxy"] = f"the round-trip scenario did not run: {exc}"
            return
        say(f"delay proxy (pid {self.proxy.pid}, {self.proxy.wait_call}): {self.s.rtt_delay_us} µs each way "
            f"in front of the 5 lock masters")

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
        proc = subprocess.run([sys.executable, "-c", "import fastredlock.io.core_c"],
                              capture_output=True, text=True, timeout=60)
        if proc.returncode == 0:
            return None
        last = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or ["import failed"]
        return ("the Cython core fastredlock.io.core_c is not built (" + last[0].strip()
                + "); build it with `pip install -e .` and a C compiler")

    def probe_one(self, c: Config) -> Tuple[Config, Optional[str]]:
        """Start the configuration once (import, connect, one lock): None if it runs, else why not."""
        if c.id == "fastredlock-cython":
            reason = self.check_cython()
            if reason:
                return c, reason
        if c.interpreter and shutil.which(c.interpreter) is None:
            return c, f"{c.interpreter} is not on PATH (Debian: apt-get install {c.interpreter})"
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
            self.start_proxy(configs, scenarios)
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
            if self.proxy is None:
                jobs = [(c, s) for c, s in jobs if s not in RTT]
            rng = random.Random(self.args.seed)
            plan: List[Any] = []
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
                if self.proxy is not None:
                    self.proxy.close()  # (it also ends by itself when this process goes: its stdin closes)
        self.elapsed = time.time() - t_start
        return 0


# --------------------------------------------------------------------------------------------
# report
