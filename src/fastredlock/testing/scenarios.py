"""Safety runs: K client processes contend for one lock under a fault, and the history is checked.

The command line is :mod:`fastredlock.testing.safety`::

    python -m fastredlock.testing.safety --scenario all --seconds 120 --out safety-report
    python -m fastredlock.testing.safety --scenario restart --seconds 10

Each scenario starts five masters (no persistence), two groups of :class:`FaultProxy` in front of
them (the clients of each group reach the masters through their own proxies), a
:class:`~fastredlock.testing.nemesis.FencedResource`, and, for each *mode*, ``clients`` processes
that loop: acquire the mode's lock (``timeout=ttl``) -> write ``begin`` to the resource -> hold for
2-30% of the TTL -> write ``end`` -> release; every operation recorded by a
:class:`~fastredlock.testing.history.HistoryRecorder`. Meanwhile the scenario's nemesis injects its
fault (see :mod:`fastredlock.testing.nemesis`). The modes run side by side on the same masters under
the same faults, each on its own lock name:

- ``defaults``: ``Redlock(urls)`` with the library's defaults (restart-aware voting on), plain locks;
- ``unsafe``: the same with ``restart_aware=False``;
- ``fencing``: the defaults with ``fencing=True``, and the resource refuses stale fences.

(All modes retry every 50-100 ms, so that waiting clients pounce as soon as they can.) The client
is the common ``with dlm.lock(...)`` user: it trusts an acquisition for its whole hold and does
not look at its validity again before writing.

The report (JSON and Markdown) has, per scenario and mode, the operations, the held overlaps, the
use overlaps, the stale writes accepted and those a fence check caught (see
:mod:`fastredlock.testing.checker`), and whether the row is what the scenario expects.
"""
from __future__ import annotations

import functools
import importlib
import json
import multiprocessing
import os
import random
import shlex
import signal
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Sequence

from .checker import CheckResult, ResourceWrite, check_history
from .history import HistoryRecorder, load_history
from .masters import LocalMaster, start_masters
from .nemesis import NEMESES, ClientSlot, Cluster, FencedResource, ResourceClient, clock_master
from .proxy import FaultProxy

__all__ = ["MODES", "SCENARIOS", "KNOWN_LIMITS", "run_scenario", "run_safety", "recheck", "render_markdown"]

#: Mode name -> (Redlock keyword arguments, lock with fencing, resource checks fences).
MODES: Dict[str, Dict[str, Any]] = {
    "defaults": {"client": {}, "fencing": False, "check": False},
    "unsafe": {"client": {"restart_aware": False}, "fencing": False, "check": False},
    "fencing": {"client": {}, "fencing": True, "check": True},
}
_RETRY: Dict[str, Any] = {"retry_delay": 0.05, "retry_jitter": 0.05}

#: Scenario name -> what it does (the nemesis), as the report says it.
SCENARIOS: Dict[str, str] = {
    "none": "no fault (baseline)",
    "restart": "3 of 5 masters killed (SIGKILL, no persistence) and restarted empty at once, every 1.5-3 TTLs",
    "partition-minority": "each client group cut off from a random 2 of 5 masters for 1-2 TTLs, every 0.5-1 TTL",
    "partition-majority": "one client group cut off from a random 3 of 5 masters for 1-2 TTLs, every 0.5-1 TTL",
    "pause": "a client holding the lock SIGSTOPped for 2.5 TTLs (one per mode), every 0.5-1.5 TTLs",
    "clock-jump": "one master's clock jumps 5 TTLs forward (libfaketime), the next master every 1.5-3 TTLs",
    "clock-jump-majority": "the clocks of 3 of 5 masters jump 5 TTLs forward at once (libfaketime), every 1.5-3 "
                           "TTLs",
    "slow-links": "every proxy gets 0-200 ms of latency (some past the 50 ms I/O timeout), 10% reset, reshuffled "
                  "every 0.3-1 TTL",
    "kill-release": "one client per mode SIGKILLed within 2 ms of invoking a release (restarted), every 1-2 TTLs",
}


#: Rows where something the checker flags is a documented limit, not a defect: scenario, mode, key -> why.
KNOWN_LIMITS: Dict[tuple, str] = {
    ("restart", "fencing", "fence_inversions"): "fence counters forgotten by masters restarted without persistence "
                                                 "(docs: Fencing tokens, Limits)",
    ("clock-jump", "defaults", "held_overlaps"): "a master whose clock jumps forgets its keys; a holder that held a "
                                                  "bare quorum (3 of 5: racing contenders split the masters) loses "
                                                  "it, and restart-aware voting cannot see a jump",
    ("clock-jump", "unsafe", "held_overlaps"): "as for defaults",
    ("clock-jump", "fencing", "held_overlaps"): "as for defaults; the fence check guards the resource",
    ("clock-jump", "defaults", "use_overlaps"): "follows from the held overlaps",
    ("clock-jump", "unsafe", "use_overlaps"): "follows from the held overlaps",
    ("clock-jump-majority", "defaults", "held_overlaps"): "a majority of clocks jumping past the TTL breaks Redlock "
                                                           "(no client can see it)",
    ("clock-jump-majority", "unsafe", "held_overlaps"): "as for defaults",
    ("clock-jump-majority", "fencing", "held_overlaps"): "as for defaults; the fence check guards the resource",
    ("clock-jump-majority", "defaults", "use_overlaps"): "follows from the held overlaps",
    ("clock-jump-majority", "unsafe", "use_overlaps"): "follows from the held overlaps",
}


def _expect(scenario: str, mode: str, s: Dict[str, Any]) -> Optional[str]:
    """What a row must show, as a failed expectation's text (None: met). Documented limits
    (:data:`KNOWN_LIMITS`) are not failures; the row's ``known`` says which applied."""
    problems = []

    def flag(key: str, text: str) -> None:
        if (scenario, mode, key) not in KNOWN_LIMITS:
            problems.append(text)

    if s.get("stale_accepted"):
        flag("stale_accepted", "stale writes accepted with the fence check on")
    if s.get("fence_inversions"):
        flag("fence_inversions", "fence inversions")
    if mode == "fencing" and s.get("late_accepted"):
        flag("late_accepted", "late writes accepted with the fence check on")
    if mode == "fencing" and s["use_overlaps"]:
        flag("use_overlaps", "holds interleaved at a resource that checks fences")
    if mode in ("defaults", "fencing") and s["held_overlaps"]:
        flag("held_overlaps", "held overlaps under defaults")
    if mode == "defaults" and s["use_overlaps"] and scenario != "pause":
        flag("use_overlaps", "use overlaps under defaults outside the pause scenario")
    if mode == "unsafe" and scenario == "restart" and not s["held_overlaps"]:
        problems.append("the control saw no overlap")
    if scenario == "pause":
        if mode == "fencing" and not s["late_refused"]:
            problems.append("the fence check caught nothing")
        if mode == "defaults" and not s["use_overlaps"]:
            problems.append("no use overlap from a paused holder")
    return "; ".join(problems) or None


def _known(scenario: str, mode: str, s: Dict[str, Any]) -> List[str]:
    return [why for (sc, m, key), why in KNOWN_LIMITS.items() if sc == scenario and m == mode and s.get(key)]


def _judge(scenario: str, mode: str, row: Dict[str, Any]) -> Dict[str, Any]:
    """Add ``expected``, ``unexpected`` and ``known`` to a row of the report."""
    problem = _expect(scenario, mode, row)
    row["expected"] = problem is None
    row["unexpected"] = problem
    row["known"] = _known(scenario, mode, row)
    return row


def _flag_set(flags: Any, i: int) -> bool:
    return bool(flags[i])


def _outcomes(lock: Any) -> List[str]:
    """What each master answered in the acquisition's last round (which masters the holder holds)."""
    try:
        return [str(o.outcome) for o in lock.outcomes]
    except Exception:  # the history must not fail on a diagnostic
        return []


def _token(lock: Any) -> str:
    t = lock.token
    return t.decode("ascii", "backslashreplace") if isinstance(t, bytes) else str(t)


def _client_main(cfg: Dict[str, Any], process: str, slot: int, flags: Any) -> None:
    """One client process: loop acquire -> write begin -> hold -> write end -> release until ``cfg['end']``."""
    import fastredlock
    from fastredlock import LockNotOwnedError

    nslots = cfg["nslots"]
    rng = random.Random()
    dlm = fastredlock.Redlock(cfg["urls"], **_RETRY, **cfg["client"])
    rec = HistoryRecorder(cfg["history"], process)
    res = ResourceClient(cfg["resource_port"])
    name, ttl, fencing, check = cfg["name"], cfg["ttl"], cfg["fencing"], cfg["check"]
    lo, hi = cfg["hold"]
    delay = cfg["start"] - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    while time.monotonic() < cfg["end"]:
        lock = dlm.lock(name, ttl=ttl, fencing=fencing) if fencing else dlm.lock(name, ttl=ttl)
        p = rec.invoke("acquire", name=name)
        try:
            got = lock.acquire(timeout=ttl)
        except Exception as exc:
            rec.complete(p, "unknown", error=repr(exc)[:200])
            continue
        if not got:
            rec.complete(p, "fail")
            continue
        now = time.monotonic()
        valid_until = now + lock.validity
        token, fence = _token(lock), (lock.fence if fencing else None)
        rec.complete(p, "ok", token=token, fence=fence, valid_until=valid_until, outcomes=_outcomes(lock))
        flags[slot] = 1
        for step in ("begin", "end"):
            if step == "end":
                time.sleep(rng.uniform(lo, hi) * ttl)
            w = rec.invoke("write", name=name, hold=p.index, token=token, fence=fence, step=step)
            try:
                accepted, seq = res.write(name, process, w.index, p.index, token, fence, check)
                rec.complete(w, "ok", accepted=accepted, seq=seq)
            except Exception as exc:
                rec.complete(w, "unknown", error=repr(exc)[:200])
                res.close()
                res = ResourceClient(cfg["resource_port"])
        flags[slot] = 0
        r = rec.invoke("release", name=name, hold=p.index, token=token)
        if flags[nslots + slot]:
            flags[nslots + slot] = 0

            def die(after: float = rng.uniform(0.0, 0.002)) -> None:
                time.sleep(after)
                os.kill(os.getpid(), signal.SIGKILL)

            threading.Thread(target=die, daemon=True).start()
        try:
            lock.release()
            rec.complete(r, "ok")
        except LockNotOwnedError:
            rec.complete(r, "fail")
        except Exception as exc:
            rec.complete(r, "unknown", error=repr(exc)[:200])
    dlm.close()
    rec.close()
    res.close()


def _context() -> Any:
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["fastredlock", "fastredlock.testing.scenarios"])
        return ctx
    return multiprocessing.get_context("spawn")


def _start_masters(scenario: str) -> tuple:
    if not scenario.startswith("clock-jump"):
        return start_masters(5).masters, []
    masters: List[LocalMaster] = []
    files = []
    try:
        for _ in range(5):
            m, f = clock_master()
            masters.append(m.start())
            files.append(f)
    except BaseException:
        for m in masters:
            m.stop()
        raise
    return masters, files


def run_scenario(scenario: str, seconds: float = 120.0, *, ttl: float = 2.0, clients: int = 4,
                 modes: Sequence[str] = tuple(MODES), out: Optional[str] = None, seed: Optional[int] = None,
                 hold: Sequence[float] = (0.02, 0.3), core: Optional[str] = None) -> Dict[str, Any]:
    """Run one scenario for ``seconds`` and return its report (a JSON-ready dict).

    ``clients`` processes per mode; ``ttl`` the lock's TTL (seconds); ``hold`` the range of a hold,
    in TTLs; ``out`` a directory for the histories and the resource's log (default: a temporary
    one, removed afterwards); ``core`` the clients' core: ``None`` the active one, ``"cython"``,
    ``"python"``, or ``"mixed"`` (each mode's clients alternate between the two). Raises ``FileNotFoundError`` when the scenario needs something missing
    (libfaketime for ``clock-jump``).

    The clients are :mod:`multiprocessing` processes (forkserver where available): call this from
    under ``if __name__ == "__main__":`` in a script.
    """
    import shutil
    import tempfile

    if scenario not in NEMESES:
        raise ValueError(f"scenario must be one of {sorted(NEMESES)}, not {scenario!r}")
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {sorted(MODES)}, not {mode!r}")
    own_dir = out is None
    run_dir = tempfile.mkdtemp(prefix=f"fastredlock-safety-{scenario}-") if out is None else os.path.join(out, scenario)
    hist_dir = os.path.join(run_dir, "history")
    os.makedirs(hist_dir, exist_ok=True)
    for old in os.listdir(hist_dir):  # a run into the same directory replaces the last one
        os.unlink(os.path.join(hist_dir, old))
    resource = FencedResource()
    masters: List[LocalMaster] = []
    sides: List[List[FaultProxy]] = []
    procs: Dict[int, Any] = {}
    try:
        masters, clock_files = _start_masters(scenario)
        masters_started = time.monotonic()
        sides = [[FaultProxy(m).start() for m in masters] for _ in range(2)]
        ctx = _context()
        target = importlib.import_module("fastredlock.testing.scenarios")._client_main  # picklable by name
        nslots = clients * len(modes)
        flags = ctx.Array("b", 2 * nslots, lock=False)
        slots: List[ClientSlot] = []
        cfgs: List[Dict[str, Any]] = []
        # Restart-aware clients do not trust masters up for less than a TTL: start after that.
        start = max(masters_started + ttl + 0.3, time.monotonic() + 1.0)
        end = start + seconds
        for mode in modes:
            for k in range(clients):
                i = len(slots)
                side = k % 2
                slots.append(ClientSlot(mode, k, side, holding=functools.partial(_flag_set, flags, i),
                                        arm_kill=functools.partial(flags.__setitem__, nslots + i, 1)))
                client = dict(MODES[mode]["client"])
                if core is not None:
                    client["core"] = ("cython", "python")[k % 2] if core == "mixed" else core
                cfgs.append({"urls": [p.url for p in sides[side]], "client": client,
                             "fencing": MODES[mode]["fencing"], "check": MODES[mode]["check"],
                             "name": f"safety:{mode}", "ttl": ttl, "hold": list(hold), "start": start, "end": end,
                             "resource_port": resource.port, "nslots": nslots, "history": None})
        incarnation = [0] * nslots

        def spawn(i: int) -> None:
            incarnation[i] += 1
            s = slots[i]
            process = f"{s.mode}/c{s.number}.{incarnation[i]}"
            cfg = dict(cfgs[i], history=os.path.join(hist_dir, process.replace("/", "-") + ".jsonl"))
            flags[i] = 0
            proc = ctx.Process(target=target, args=(cfg, process, i, flags), daemon=True)
            proc.start()
            procs[i] = proc
            s.pid = proc.pid

        for i in range(nslots):
            spawn(i)
        cluster = Cluster(masters, sides, slots, ttl, clock_files)
        nemesis = NEMESES[scenario](cluster, os.path.join(hist_dir, "nemesis.jsonl"), seed)
        time.sleep(max(0.0, start - time.monotonic()))
        nemesis.start()
        respawns = 0
        failed: Dict[int, Any] = {}
        while time.monotonic() < end:
            time.sleep(0.05)
            for i, proc in list(procs.items()):
                # Only a client the kill-release nemesis killed comes back; one that failed stays down
                # (its exit code is in the report) rather than failing again and again.
                if proc.exitcode == -signal.SIGKILL and time.monotonic() < end - 1.0:
                    respawns += 1
                    spawn(i)
                elif proc.exitcode not in (None, 0, -signal.SIGKILL) and i not in failed:
                    failed[i] = proc.exitcode
        nemesis.stop()
        exit_codes = []
        for i, proc in procs.items():
            proc.join(max(1.0, end + 3 * ttl + 15 - time.monotonic()))
            if proc.exitcode is None:
                proc.kill()
                proc.join(5)
            exit_codes.append(proc.exitcode)
        ops = load_history(hist_dir)
        report: Dict[str, Any] = {
            "scenario": scenario, "fault": SCENARIOS[scenario], "seconds": seconds, "ttl": ttl,
            "clients_per_mode": clients, "hold_ttls": list(hold),
            "cores": sorted({c["client"].get("core", "default") for c in cfgs}),
            "nemesis": {"strikes": nemesis.count, "errors": nemesis.errors[:5]},
            "client_restarts": respawns,
            "clients_failed": {f"{slots[i].mode}/c{slots[i].number}": code for i, code in failed.items()},
            "clients_killed": sum(1 for c in exit_codes if c == -signal.SIGKILL),
            "modes": {},
        }
        for mode in modes:
            mine = [o for o in ops if o.process.startswith(mode + "/")]
            writes = resource.log(f"safety:{mode}")
            with open(os.path.join(run_dir, f"resource-{mode}.jsonl"), "w") as log:
                log.writelines(json.dumps(w.to_dict()) + "\n" for w in writes)
            result: CheckResult = check_history(mine, writes)
            report["modes"][mode] = _judge(scenario, mode, result.to_dict())
        with open(os.path.join(run_dir, "report.json"), "w") as saved:
            json.dump(report, saved, indent=1)
        return report
    finally:
        for proc in procs.values():
            if proc.exitcode is None:
                try:
                    os.kill(proc.pid, signal.SIGCONT)
                    proc.kill()
                except (ProcessLookupError, TypeError):
                    pass
                proc.join(5)
        for group in sides:
            for proxy in group:
                proxy.stop()
        for m in masters:
            m.stop()
        resource.stop()
        if own_dir:
            shutil.rmtree(run_dir, ignore_errors=True)


def _meaning(scenario: str, mode: str, s: Dict[str, Any]) -> str:
    """A sentence or two: what the row shows."""
    parts = []
    if s["held_overlaps"]:
        parts.append(f"the lock failed: {s['held_overlaps']} times two clients held it at once by their own "
                     "(conservative) validity")
    else:
        parts.append("the lock held: no two believed-held intervals overlap")
    if s["use_overlaps"] and not s["held_overlaps"]:
        parts.append(f"yet {s['late_accepted']} writes were accepted from holders whose lock had passed on "
                     f"(they wrote after their validity ended), interleaving {s['use_overlaps']} pairs of holds "
                     "at the resource")
    elif s["use_overlaps"]:
        parts.append(f"{s['use_overlaps']} pairs of holds interleaved at the resource")
    if s.get("late_refused"):
        parts.append(f"the fence check refused {s['late_refused']} late writes of holders whose lock had passed on")
    if s.get("refused_current"):
        parts.append(f"it also refused {s['refused_current']} writes of the current holder, whose fence was not "
                     "larger than one already used (fence inversions)")
    for why in s.get("known", []):
        parts.append(f"known limit: {why}")
    return "; ".join(parts)


def _cell(v: Any) -> str:
    return "–" if v is None else str(v)


def render_markdown(reports: Sequence[Dict[str, Any]], command: str = "") -> str:
    """The reports of :func:`run_scenario` as a Markdown table (one row per scenario and mode)."""
    lines = [
        "| scenario | mode | acquired / operations | held overlaps | use overlaps (pairs of holds) "
        "| late writes accepted | stale writes accepted | stale writes with the check off | current holder refused "
        "| fence inversions | as expected | what it means | reproduce |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        if "skipped" in r:
            lines.append(f"| {r['scenario']} | – | skipped: {r['skipped']} | | | | | | | | | | |")
            continue
        ttl = "" if r["ttl"] == 2.0 else f" --ttl {r['ttl']:g}"
        cmd = f"`python -m fastredlock.testing.safety --scenario {r['scenario']} --seconds {r['seconds']:g}{ttl}`"
        for mode, s in r["modes"].items():
            fenced = s["stale_accepted"] is not None
            lines.append(
                f"| {r['scenario']} | {mode} | {s['acquired']} / {s['operations']} | {s['held_overlaps']} "
                f"| {s['use_overlaps']} | {s['late_accepted']} | {_cell(s['stale_accepted'])} "
                f"| {_cell(s['stale_unchecked'])} "
                f"| {s['refused_current'] if fenced else '–'} | {_cell(s['fence_inversions'])} "
                f"| {'yes' if s['expected'] else 'NO: ' + s['unexpected']} "
                f"| {_meaning(r['scenario'], mode, s)} | {cmd} |"
            )
    out = "\n".join(lines) + "\n"
    faults = "\n".join(f"- `{r['scenario']}`: {r.get('fault', '')} ({r.get('nemesis', {}).get('strikes', 0)} "
                       f"faults injected; {r.get('wall_seconds', '?')} s wall)" for r in reports if "skipped" not in r)
    head = f"Command: `{command}`\n\n" if command else ""
    return head + out + "\nFaults:\n\n" + faults + "\n"


def recheck(out: str) -> List[Dict[str, Any]]:
    """Check the histories of an earlier run in ``out`` again (with this version of the checker)
    and rewrite its ``report.json`` and ``report.md``; return the reports."""
    with open(os.path.join(out, "report.json")) as f:
        saved = json.load(f)
    reports = []
    for report in saved["reports"]:
        if "skipped" in report:
            reports.append(report)
            continue
        run_dir = os.path.join(out, report["scenario"])
        ops = load_history(os.path.join(run_dir, "history"))
        for mode in list(report["modes"]):
            mine = [o for o in ops if o.process.startswith(mode + "/")]
            log = os.path.join(run_dir, f"resource-{mode}.jsonl")
            writes = None
            if os.path.exists(log):
                with open(log) as f:
                    writes = [ResourceWrite.from_dict(json.loads(line)) for line in f if line.strip()]
            report["modes"][mode] = _judge(report["scenario"], mode, check_history(mine, writes).to_dict())
        reports.append(report)
    _write_reports(out, saved.get("command", ""), reports)
    return reports


def _write_reports(out: str, command: str, reports: List[Dict[str, Any]]) -> None:
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump({"command": command, "reports": reports}, f, indent=1)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(render_markdown(reports, command))


def run_safety(scenarios: Sequence[str], seconds: float, out: str, **kwargs: Any) -> List[Dict[str, Any]]:
    """Run ``scenarios`` one after the other; write ``report.json`` and ``report.md`` into ``out``."""
    os.makedirs(out, exist_ok=True)
    reports = []
    command = "python -m fastredlock.testing.safety " + " ".join(shlex.quote(a) for a in kwargs.pop("argv", []))
    for scenario in scenarios:
        started = time.monotonic()
        try:
            report = run_scenario(scenario, seconds, out=out, **kwargs)
        except FileNotFoundError as exc:
            report = {"scenario": scenario, "skipped": str(exc)}
        report["wall_seconds"] = round(time.monotonic() - started, 1)
        reports.append(report)
        print(json.dumps({"scenario": scenario, **{m: {k: s[k] for k in ("acquired", "held_overlaps", "use_overlaps",
                                                                          "stale_accepted", "stale_unchecked",
                                                                          "late_refused", "refused_current",
                                                                          "fence_inversions", "expected")}
                                                    for m, s in report.get("modes", {}).items()}}),
              file=sys.stderr, flush=True)
        _write_reports(out, command, reports)
    return reports
