"""Benchmark scenarios run inside a worker: sequential, threads (tasks), batches, contention, faults.

Each ``scenario_*(run, job)`` takes a :class:`~.adapters.Runner` and the job the driver sent, and
returns the result row (see benchmarks/README.md for the columns). :data:`SCENARIOS` names them.
"""
from __future__ import annotations

import asyncio
import signal
import threading
import time
from time import perf_counter, perf_counter_ns
from typing import Any, Dict, List

if __package__:
    from .adapters import Runner
    from .control import Ctl, emit, err_name, wait_go
    from .measure import Stats, cpu_times, pct, summarize
    from .turns import scenario_turns, take_turns
else:  # a worker process: this folder is sys.path[0] (see worker.py)
    from adapters import Runner  # type: ignore[no-redef]
    from control import Ctl, emit, err_name, wait_go  # type: ignore[no-redef]
    from measure import Stats, cpu_times, pct, summarize  # type: ignore[no-redef]
    from turns import scenario_turns, take_turns  # type: ignore[no-redef]

def loop_sync(ad: Any, prefix: str, end_ns: int, st: Stats) -> None:
    i = 0
    acq_append, rel_append = st.acq.append, st.rel.append
    while True:
        i += 1
        name = f"{prefix}{i}"
        a = perf_counter_ns()
        try:
            h = ad.acquire(name)
        except Exception as exc:
            st.error(exc)
            h = None
        b = perf_counter_ns()
        acq_append(b - a)
        c = b
        if h is None:
            st.fails += 1
        else:
            try:
                ad.release(h)
            except Exception as exc:
                st.error(exc)
            c = perf_counter_ns()
            rel_append(c - b)
        if c >= end_ns:
            return


async def loop_async(ad: Any, prefix: str, end_ns: int, st: Stats) -> None:
    i = 0
    while True:
        i += 1
        name = f"{prefix}{i}"
        a = perf_counter_ns()
        try:
            h = await ad.acquire(name)
        except Exception as exc:
            st.error(exc)
            h = None
        b = perf_counter_ns()
        st.acq.append(b - a)
        c = b
        if h is None:
            st.fails += 1
        else:
            try:
                await ad.release(h)
            except Exception as exc:
                st.error(exc)
            c = perf_counter_ns()
            st.rel.append(c - b)
        if c >= end_ns:
            return


def warmup(run: Runner, tag: str, n: int) -> None:
    """``n`` lock+unlock cycles before the measurement. An error here does not lose the sample (seen
    on a loaded 2-core box: one 50 ms I/O timeout on loopback); the measured loop counts its own."""
    for i in range(n):
        try:
            h = run.acquire(f"warm:{tag}:{i}")
            if h is not None:
                run.release(h)
        except Exception:
            pass


def scenario_seq(run: Runner, job: Dict[str, Any]) -> Dict[str, Any]:
    warmup(run, job["tag"], job["warmup"])
    st = Stats()
    t0 = cpu_times()
    w0 = perf_counter()
    end_ns = perf_counter_ns() + int(job["duration"] * 1e9)
    if run.loop is not None:
        run.loop.run_until_complete(loop_async(run.ad, f"seq:{job['tag']}:", end_ns, st))
    else:
        loop_sync(run.ad, f"seq:{job['tag']}:", end_ns, st)
    wall = perf_counter() - w0
    t1 = cpu_times()
    return summarize([st], wall, t0, t1)


def scenario_threads(run: Runner, job: Dict[str, Any]) -> Dict[str, Any]:
    """T threads (async clients: ``tasks`` tasks on one loop) sharing one client, distinct names."""
    n = job.get("tasks", job["threads"]) if run.loop is not None else job["threads"]
    warmup(run, job["tag"], job["warmup"])
    parts = [Stats() for _ in range(n)]
    if run.loop is not None:
        async def main() -> None:
            end_ns = perf_counter_ns() + int(job["duration"] * 1e9)
            await asyncio.gather(*(loop_async(run.ad, f"thr:{job['tag']}:{k}:", end_ns, parts[k])
                                   for k in range(n)))

        t0 = cpu_times()
        w0 = perf_counter()
        run.loop.run_until_complete(main())
    else:
        barrier = threading.Barrier(n + 1)
        box: Dict[str, int] = {}

        def body(k: int) -> None:
            barrier.wait()
            loop_sync(run.ad, f"thr:{job['tag']}:{k}:", box["end"], parts[k])

        threads = [threading.Thread(target=body, args=(k,), daemon=True) for k in range(n)]
        for t in threads:
            t.start()
        t0 = cpu_times()
        w0 = perf_counter()
        box["end"] = perf_counter_ns() + int(job["duration"] * 1e9)
        barrier.wait()
        for t in threads:
            t.join()
    wall = perf_counter() - w0
    t1 = cpu_times()
    out = summarize(parts, wall, t0, t1)
    out["per_thread"] = [len(p.rel) for p in parts]
    return out


def scenario_x64(run: Runner, job: Dict[str, Any]) -> Dict[str, Any]:
    """64 locks per call (one write per master); cycles count locks, latencies are per batch."""
    ad = run.ad
    batch = job.get("batch", 64)
    for i in range(max(1, job["warmup"] // batch)):
        ad.release_batch(ad.acquire_batch([f"warm:{job['tag']}:{i}:{k}" for k in range(batch)]))
    st = Stats()
    t0 = cpu_times()
    w0 = perf_counter()
    end_ns = perf_counter_ns() + int(job["duration"] * 1e9)
    i = 0
    while True:
        i += 1
        names = [f"x64:{job['tag']}:{i}:{k}" for k in range(batch)]
        a = perf_counter_ns()
        held = ad.acquire_batch(names)
        b = perf_counter_ns()
        st.acq.append(b - a)
        st.fails += (batch - len(held)) / batch
        ad.release_batch(held)
        c = perf_counter_ns()
        st.rel.append(c - b)
        if c >= end_ns:
            break
    wall = perf_counter() - w0
    t1 = cpu_times()
    out = summarize([st], wall, t0, t1, unit=batch)
    out["fails"] = int(round(out["fails"]))
    out["batch"] = batch
    return out


def scenario_contend(run: Runner, job: Dict[str, Any]) -> Dict[str, Any]:
    """One of P processes hammering one name with the library's default acquire; an independent
    counter on a separate master (INCR on entry, DECR on exit) catches two holders at once."""
    out = take_turns(run, job, job.get("hold_ms", 0) / 1000.0, failed_waits=True)
    waits = out.pop("waits_ns")
    out["wait_p50_us"], out["wait_p99_us"] = pct(waits, 50), pct(waits, 99)
    return out


class Hung(BaseException):
    """Raised by the watchdog alarm: a BaseException, so a library's ``except Exception`` cannot
    swallow it."""


def _alarm(signum: int, frame: Any) -> None:
    raise Hung()


def bounded(run: Runner, fn: str, arg: Any, limit: float) -> Any:
    """Call ``run.<fn>(arg)``; raise Hung if it has not answered within ``limit`` seconds."""
    if run.loop is not None:
        coro = getattr(run.ad, fn)(arg)
        try:
            return run.loop.run_until_complete(asyncio.wait_for(coro, limit))
        except asyncio.TimeoutError:
            raise Hung() from None
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return getattr(run, fn)(arg)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def scenario_fault(run: Runner, job: Dict[str, Any]) -> Dict[str, Any]:
    """Warm up on healthy masters, let the driver break one master, then time each acquire and
    record what the library did: answered, hung, raised (and whether it left its key on a quorum)."""
    warmup(run, job["tag"], 3)
    emit({"event": "ready"})
    wait_go()
    bad = job["bad_index"]
    quorum = len(job["urls"]) // 2 + 1
    limit = job["hang_limit"]
    rows = []
    for k in range(job["attempts"]):
        name = f"fault:{job['tag']}:{k}"
        row: Dict[str, Any] = {"acquired": False, "hung": False, "acq_exc": None, "rel_exc": None}
        a = perf_counter()
        try:
            h = bounded(run, "acquire", name, limit)
            row["acquired"] = h is not None
        except Hung:
            h = None
            row["hung"] = True
        except Exception as exc:
            h = None
            row["acq_exc"] = f"{err_name(exc)}: {str(exc)[:120]}"
        row["answer_ms"] = (perf_counter() - a) * 1000.0
        if h is not None:
            b = perf_counter()
            try:
                bounded(run, "release", h, limit)
            except Hung:
                row["rel_hung"] = True
            except Exception as exc:
                row["rel_exc"] = f"{err_name(exc)}: {str(exc)[:120]}"
            row["release_ms"] = (perf_counter() - b) * 1000.0
        # who still holds this name's key on the healthy masters right now
        key = run.ad.key(name)
        holding = 0
        for i, u in enumerate(job["urls"]):
            if i == bad:
                continue
            try:
                c = Ctl(u, timeout=1.0)
                holding += int(c.cmd("EXISTS", key) == 1)
                c.close()
            except OSError:
                pass
        row["holding_after"] = holding
        row["exc_while_holding"] = bool(
            (row["acq_exc"] and holding >= quorum) or row["rel_exc"] or row.get("rel_hung")
        )
        rows.append(row)
    return {"attempts": rows}


SCENARIOS = {
    "seq": scenario_seq,
    "threads": scenario_threads,
    "x64": scenario_x64,
    "contend": scenario_contend,
    "turns": scenario_turns,
    "fault": scenario_fault,
}
