"""Latency and CPU bookkeeping of one measurement: percentiles, per-loop stats, the summary row.

Standard library only: peers' processes import this file.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

if __package__:
    from .control import err_name
else:  # a worker process: this folder is sys.path[0] (see worker.py)
    from control import err_name  # type: ignore[no-redef]


def pct(sorted_ns: List[int], q: float) -> Optional[float]:
    """Nearest-rank percentile of sorted nanoseconds, in microseconds."""
    if not sorted_ns:
        return None
    i = min(len(sorted_ns) - 1, max(0, int(round(q / 100.0 * len(sorted_ns) + 0.5)) - 1))
    return sorted_ns[i] / 1000.0


def cpu_times() -> Tuple[float, float]:
    """(user, system) CPU seconds of this process, all threads: getrusage, finer than os.times()."""
    try:
        import resource

        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_utime, ru.ru_stime
    except ImportError:  # pragma: no cover - not POSIX
        t = os.times()
        return t[0], t[1]


class Stats:
    """Latencies and outcomes of one loop (one thread or task)."""

    def __init__(self) -> None:
        self.acq: List[int] = []
        self.rel: List[int] = []
        self.fails = 0
        self.errors: Dict[str, int] = {}

    def error(self, exc: BaseException) -> None:
        k = err_name(exc)
        self.errors[k] = self.errors.get(k, 0) + 1


def summarize(parts: List[Stats], wall: float, t0: Any, t1: Any, unit: int = 1) -> Dict[str, Any]:
    acq = sorted(x for p in parts for x in p.acq)
    rel = sorted(x for p in parts for x in p.rel)
    cycles = sum(len(p.rel) for p in parts) * unit
    errors: Dict[str, int] = {}
    for p in parts:
        for k, v in p.errors.items():
            errors[k] = errors.get(k, 0) + v
    user = t1[0] - t0[0]
    system = t1[1] - t0[1]
    per = 1000.0 / cycles if cycles else 0.0
    return {
        "cycles": cycles,
        "wall_s": wall,
        "rate": cycles / wall if wall > 0 else 0.0,
        "acq_p50_us": pct(acq, 50),
        "acq_p99_us": pct(acq, 99),
        "rel_p50_us": pct(rel, 50),
        "rel_p99_us": pct(rel, 99),
        "user_ms_per_1000": user * 1000.0 * per,
        "sys_ms_per_1000": system * 1000.0 * per,
        "cpu_util": (user + system) / wall if wall > 0 else 0.0,
        "fails": sum(p.fails for p in parts) * unit,
        "errors": errors,
    }
