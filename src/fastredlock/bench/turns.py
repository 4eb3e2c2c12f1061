"""The "turns" scenario: contention with real work (issue 16).

``turns_procs`` processes (default 8) share one name for ``turns_duration`` seconds (default 5),
each holding the lock ``turns_hold_ms`` (default 1 ms) per turn with the library's default
blocking acquire. Reported: acquisitions/s, wait p50/p99/max (from asking to holding), Jain's
fairness over the processes' acquisitions, double holders (an independent counter on a separate
master, INCR on entry and DECR on exit), and the serial limit ``1 / (hold + one lock+unlock
cycle)``, the cycle measured uncontended by the first process in the same run just before.

Three parts, one per side of the comparison: :func:`scenario_turns` runs in each worker process,
:func:`run_turns` is the driver's (it starts the workers and merges their reports), and
:func:`turns_table` is the report's table.
"""
from __future__ import annotations

import statistics
import time
from time import perf_counter, perf_counter_ns
from typing import Any, Dict, List

if __package__:
    from .adapters import Runner
    from .control import Ctl, emit, wait_go
    from .measure import Stats, cpu_times, pct
else:  # a worker process: this folder is sys.path[0] (see worker.py)
    from adapters import Runner  # type: ignore[no-redef]
    from control import Ctl, emit, wait_go  # type: ignore[no-redef]
    from measure import Stats, cpu_times, pct  # type: ignore[no-redef]

__all__ = ["run_turns", "scenario_turns", "turns_table"]

#: Uncontended lock+unlock cycles the first process times for the serial limit.
SERIAL_CYCLES = 200


def _serial_cycle(run: Runner, name: str) -> float:
    """Median seconds of one uncontended lock+unlock cycle of ``name``."""
    times = []
    for _ in range(SERIAL_CYCLES):
        a = perf_counter()
        h = run.acquire(name)
        if h is not None:
            run.release(h)
        times.append(perf_counter() - a)
    return statistics.median(times)


def _alone_loop(run: Runner, job: Dict[str, Any], hold: float) -> float:
    """Median seconds of one turn of :func:`take_turns`'s loop run by one process alone: acquire,
    INCR, hold, DECR, release (a counter key of its own). What a turn costs with a perfect hand-over."""
    ctl = Ctl(job["counter_url"])
    ckey = job["counter_key"] + ":alone"
    name = job["name"] + ":alone"
    times = []
    for _ in range(SERIAL_CYCLES // 2):
        a = perf_counter()
        h = run.acquire(name)
        ctl.cmd("INCR", ckey)
        time.sleep(hold)
        ctl.cmd("DECR", ckey)
        if h is not None:
            run.release(h)
        times.append(perf_counter() - a)
    ctl.cmd("DEL", ckey)
    return statistics.median(times)


def take_turns(run: Runner, job: Dict[str, Any], hold: float, failed_waits: bool) -> Dict[str, Any]:
    """The worker's loop of the contention scenarios (``contend`` and ``turns``): after the driver's
    go, acquire ``job["name"]`` with the library's default acquire, INCR the independent counter,
    hold ``hold`` seconds, DECR, release, until ``job["duration"]`` passed. ``failed_waits``: count
    the time of acquires that gave up among the waits too."""
    ctl = Ctl(job["counter_url"])
    ckey = job["counter_key"]
    name = job["name"]
    acquired = failed = doubles = 0
    st = Stats()
    waits: List[int] = []
    emit({"event": "ready"})
    wait_go()
    t0 = cpu_times()
    w0 = perf_counter()
    end = w0 + job["duration"]
    while perf_counter() < end:
        a = perf_counter_ns()
        try:
            h = run.acquire(name)
        except Exception as exc:
            st.error(exc)
            h = None
        if h is None or failed_waits:
            waits.append(perf_counter_ns() - a)
        if h is None:
            failed += 1
            continue
        if h is not None and not failed_waits:
            waits.append(perf_counter_ns() - a)
        if ctl.cmd("INCR", ckey) != 1:
            doubles += 1
        if hold:
            time.sleep(hold)
        ctl.cmd("DECR", ckey)
        acquired += 1
        try:
            run.release(h)
        except Exception as exc:
            st.error(exc)
    wall = perf_counter() - w0
    t1 = cpu_times()
    waits.sort()
    return {"acquired": acquired, "failed": failed, "doubles": doubles, "wall_s": wall, "waits_ns": waits,
            "cpu_s": (t1[0] - t0[0]) + (t1[1] - t0[1]), "errors": st.errors}


def scenario_turns(run: Runner, job: Dict[str, Any]) -> Dict[str, Any]:
    """One of the processes: time the serial cycle (the first process), then take turns."""
    first = job.get("proc") == 0
    cycle = _serial_cycle(run, job["name"] + ":serial") if first else None
    alone = _alone_loop(run, job, job["hold_ms"] / 1000.0) if first else None
    out = take_turns(run, job, job["hold_ms"] / 1000.0, failed_waits=False)
    out["cycle_s"] = cycle
    out["alone_s"] = alone
    return out


def run_turns(bench: Any, cfg: Any, rnd: int) -> Dict[str, Any]:
    """The driver's side: start the processes, let them go together, merge their reports."""
    s = bench.s
    counter_key = f"bench:turns:{cfg.id}:{rnd}"
    jobs = [bench.job(cfg, "turns", rnd, duration=s.turns_duration, counter_url=bench.counter.url,
                      counter_key=counter_key, name=f"turns:{cfg.id}:{rnd}", hold_ms=s.turns_hold_ms, proc=i)
            for i in range(s.turns_procs)]
    events = bench.run_together(cfg, jobs, s.turns_duration)
    if isinstance(events, dict):  # one of them failed
        return events
    from .run import merged

    per, acquired, total, wall, errors, jain = merged(events)
    waits = sorted(w for p in per for w in p["waits_ns"])
    cycle = next(p["cycle_s"] for p in per if p["cycle_s"] is not None)
    alone = next(p["alone_s"] for p in per if p.get("alone_s") is not None)
    return {
        "ok": True, "info": events[0].get("info", {}),
        "result": {
            "rate": total / wall if wall else 0.0,
            "serial_limit": 1.0 / (s.turns_hold_ms / 1000.0 + cycle),
            "cycle_us": cycle * 1e6,
            "alone_limit": 1.0 / alone,
            "acquired": acquired,
            "jain": jain,
            "wait_p50_us": pct(waits, 50),
            "wait_p99_us": pct(waits, 99),
            "wait_max_us": waits[-1] / 1000 if waits else None,
            "doubles": sum(p["doubles"] for p in per),
            "errors": errors,
            "counter_left": bench.counter.command("GET", counter_key),
        },
        "leftover_keys": bench.keys_on_lock_masters(),
    }


def turns_table(report: Any, configs: List[Any], fnum: Any, med: Any) -> List[str]:
    """The report's table of the "turns" scenario (median of rounds), fastest first."""
    rows = []
    for c in configs:
        ok = report.ok(c.id, "turns")
        if not ok:
            continue
        r = [x["result"] for x in ok]
        rate = med(x["rate"] for x in r)
        limit = med(x["serial_limit"] for x in r)
        alone = med(x.get("alone_limit", 0.0) for x in r)
        doubles = sum(x["doubles"] for x in r)
        rows.append((rate, [
            f"**{c.label}**" if c.fast else c.label, fnum(rate, 0), fnum(limit, 0),
            f"{rate / limit:.2f}" if limit else "-",
            f"{fnum(alone, 0)} ({rate / alone:.2f})" if alone else "-", fnum(med(x["jain"] for x in r), 3),
            " / ".join(fnum(med(x[k] for x in r) / 1000, 1) for k in ("wait_p50_us", "wait_p99_us", "wait_max_us")),
            f"**{doubles}**" if doubles else "0",
            ", ".join(f"{k} x{v}" for x in r for k, v in sorted(x["errors"].items())) or "0",
            str(sum(x.get("leftover_keys", 0) for x in ok)),
        ]))
    if not rows:
        return []
    rows.sort(key=lambda t: -t[0])
    s = report.b.s
    return [f"### Turns: {s.turns_procs} processes, one name, each holding {s.turns_hold_ms:g} ms, "
            f"{s.turns_duration:g} s (median of rounds)", "",
            "Serial limit: 1 / (hold + one uncontended lock+unlock cycle), measured in the same run by the first "
            "process. One process alone: the turns' own loop (acquire, INCR, hold, DECR, release) run "
            "uncontended by the first process, turns/s and the ratio to it: what a perfect hand-over would "
            "give (the counter's two round trips and the sleep's overshoot are in every turn, not in the "
            "serial limit). Waits are from asking to holding, over every acquisition of every process.", "",
            "| configuration | acquisitions/s | serial limit/s | ratio | one process alone/s (ratio) | Jain "
            "| wait p50 / p99 / max ms | double holders | errors | leftover keys |",
            "|---|---:|---:|---:|---:|---:|---|---:|---|---:|"] + ["| " + " | ".join(cells) + " |" for _, cells in rows] + [""]
