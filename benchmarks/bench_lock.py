"""pytest-benchmark cases: one lock+unlock cycle, both cores, on N = 1, 3, 5 masters.

    pytest benchmarks/ --benchmark-only
    pytest benchmarks/ --benchmark-only --benchmark-group-by=group --benchmark-columns=min,median,ops

Each case is grouped by N so that pytest-benchmark's table puts the Cython core, the pure core,
the raw reference (write to all N, read N replies; no retries, no validity maths) and, for N = 1
and 5, the C floor (floor.c through ctypes: the syscalls of a cycle and nothing else) side by side.
"""
from __future__ import annotations

import itertools

import pytest

pytest.importorskip("pytest_benchmark")

import fastredlock  # noqa: E402
from fastredlock.bench.floor import FloorLib, FloorUnavailable  # noqa: E402
from fastredlock.bench.adapters import RawMux  # noqa: E402

N = [1, 3, 5]


@pytest.mark.parametrize("n", N, ids=lambda n: f"N={n}")
def test_acquire_release(benchmark, masters, core, n, ttl):  # type: ignore[no-untyped-def]
    """acquire() + release() of an uncontended lock, a fresh Lock handle per cycle."""
    benchmark.group = f"acquire+release N={n}"
    with fastredlock.Redlock(masters.urls[:n], core=core) as dlm:
        def cycle() -> None:
            lock = dlm.lock("bench:pytest", ttl=ttl)
            if not lock.acquire(blocking=False):
                raise AssertionError(f"uncontended acquire failed: {lock.outcomes}")
            lock.release()

        cycle()  # connect outside the measurement
        benchmark(cycle)


@pytest.mark.parametrize("n", N, ids=lambda n: f"N={n}")
def test_acquire_refused(benchmark, masters, core, n, ttl):  # type: ignore[no-untyped-def]
    """A non-blocking acquire that loses (the lock is held): one SET round plus the cleanup."""
    benchmark.group = f"refused acquire N={n}"
    for m in masters.masters[:n]:  # someone else holds it, for longer than the run
        m.command("SET", "bench:held", "someone-else", "PX", 600000)
    with fastredlock.Redlock(masters.urls[:n], core=core) as dlm:
        def attempt() -> None:
            if dlm.lock("bench:held", ttl=ttl).acquire(blocking=False):
                raise AssertionError("acquired a lock that is held")

        attempt()
        benchmark(attempt)


@pytest.mark.parametrize("n", N, ids=lambda n: f"N={n}")
def test_raw_reference(benchmark, masters, n, ttl):  # type: ignore[no-untyped-def]
    """The pure-Python floor: SET NX PX to all N sockets then N reads; EVALSHA release likewise."""
    benchmark.group = f"acquire+release N={n}"
    raw = RawMux(masters.urls[:n], ttl)
    counter = itertools.count()

    def cycle() -> None:
        handle = raw.acquire(f"bench:raw:{next(counter) % 64}")
        if handle is None:
            raise AssertionError("raw reference could not lock")
        raw.release(handle)

    cycle()
    benchmark(cycle)


@pytest.mark.parametrize("n", [1, 5], ids=lambda n: f"N={n}")
def test_c_floor(benchmark, masters, n, ttl):  # type: ignore[no-untyped-def]
    """The C floor: one cycle of floor.c per call (a ctypes call adds well under 1 µs)."""
    benchmark.group = f"acquire+release N={n}"
    try:
        floor = FloorLib(masters.urls[:n], ttl_ms=int(ttl * 1000))
    except FloorUnavailable as exc:
        pytest.skip(f"the C floor cannot be built: {exc}")

    def cycle() -> None:
        if floor.cycle() != 1:
            raise AssertionError("the C floor could not lock")

    try:
        cycle()
        benchmark(cycle)
    finally:
        floor.close()


@pytest.mark.parametrize("hook", ["noop", "prometheus"])
def test_acquire_release_with_on_event(benchmark, masters, core, hook, ttl):  # type: ignore[no-untyped-def]
    """``test_acquire_release`` at N=5 with an ``on_event`` hook: a no-op, or fastredlock.metrics'
    Prometheus recorder (the target: a no-op hook costs <= 3% of the cycle; compare the medians
    in the "acquire+release N=5" group)."""
    benchmark.group = "acquire+release N=5"
    with fastredlock.Redlock(masters.urls, core=core) as dlm:
        if hook == "noop":
            dlm.on_event = lambda event: None
        else:
            prometheus_client = pytest.importorskip("prometheus_client")
            from fastredlock import metrics

            metrics.instrument_prometheus(dlm, prometheus_client.CollectorRegistry())

        def cycle() -> None:
            lock = dlm.lock("bench:pytest", ttl=ttl)
            if not lock.acquire(blocking=False):
                raise AssertionError(f"uncontended acquire failed: {lock.outcomes}")
            lock.release()

        cycle()
        benchmark(cycle)
