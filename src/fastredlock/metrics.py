"""Metrics: a client's ``stats()`` and its lock events, for Prometheus and OpenTelemetry.

    from fastredlock import Redlock, metrics

    dlm = Redlock(masters)
    metrics.instrument_prometheus(dlm)            # registers a collector (prometheus_client's REGISTRY)
    metrics.instrument_opentelemetry(dlm, meter)  # or: instruments on an OpenTelemetry meter

Both install a :class:`Recorder` as the client's ``on_event`` hook (chained after a hook that was
there already), which counts events and sorts their durations into histogram buckets; the masters'
counters and health are read from ``stats()`` when the metrics are collected. Nothing is recorded
until a client is instrumented: then each event costs one call and a few additions under a lock.

The names (Prometheus; OpenTelemetry uses dots: ``fastredlock.lock.events`` ...), every one with a
``client`` label (``client=`` argument, default ``"default"``):

- ``fastredlock_lock_events_total{kind}``: counter of events by kind (acquired, refused, extended,
  released, lost; see :mod:`fastredlock.events`);
- ``fastredlock_lock_releases_unconfirmed_total``: releases a quorum did not confirm;
- ``fastredlock_lock_wait_seconds``: histogram of the time ``acquire`` took (acquired and refused);
- ``fastredlock_lock_hold_seconds``: histogram of the time locks were held (released and lost);
- ``fastredlock_lock_attempts``: histogram of attempts per ``acquire``;
- per ``master``: ``fastredlock_master_replies_total``, ``..._timeouts_total``,
  ``..._connect_errors_total``, ``..._connection_errors_total``, ``..._error_replies_total``,
  ``..._protocol_errors_total``, ``..._skipped_total``, ``..._late_replies_total``,
  ``..._releases_not_held_total`` (counters from
  :class:`~fastredlock.MasterStats`), ``fastredlock_master_latency_avg_seconds``,
  ``fastredlock_master_latency_max_seconds``, ``fastredlock_master_cooling_down_seconds`` and
  ``fastredlock_master_failures_in_a_row`` (gauges).

``prometheus_client`` comes with the ``metrics`` extra, the OpenTelemetry API with ``otel``.
"""
from __future__ import annotations

import bisect
import threading
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from .events import ACQUIRED, KINDS, LOST, REFUSED, RELEASED, LockEvent

__all__ = [
    "DURATION_BUCKETS", "ATTEMPT_BUCKETS", "Histogram", "Recorder", "PrometheusCollector",
    "instrument_prometheus", "instrument_opentelemetry", "recorder_of",
]

#: Upper bounds (seconds) of the wait and hold histograms' buckets (+Inf is implied).
DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                    30.0, 60.0, 300.0)
#: Upper bounds of the attempts histogram's buckets.
ATTEMPT_BUCKETS = (1, 2, 3, 5, 10, 20, 50)

#: The ``stats()`` fields exported as counters, and as gauges.
_COUNTERS = ("replies", "timeouts", "connect_errors", "connection_errors", "error_replies", "protocol_errors",
             "skipped", "late_replies", "releases_not_held")
_GAUGES = (("latency_avg", "latency_avg_seconds"), ("latency_max", "latency_max_seconds"),
           ("cooling_down", "cooling_down_seconds"), ("failures_in_a_row", "failures_in_a_row"))


class Histogram:
    """Cumulative-ready bucket counts, a sum and a count (not thread-safe: the Recorder locks)."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: Iterable[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one: above every bound (+Inf)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        """Count ``value`` in its bucket and add it to the sum."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> List[Tuple[str, int]]:
        """``[(upper bound as Prometheus writes it, cumulative count), ..., ("+Inf", count)]``."""
        out, total = [], 0
        for bound, n in zip(self.bounds + (float("inf"),), self.counts):
            total += n
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), total))
        return out


class Recorder:
    """An ``on_event`` hook that aggregates a client's lock events (thread-safe; cheap)."""

    def __init__(self, then: Optional[Callable[[LockEvent], object]] = None) -> None:
        #: Events by kind.
        self.events: Dict[str, int] = dict.fromkeys(KINDS, 0)
        #: Releases that a quorum did not confirm.
        self.unconfirmed = 0
        self.wait = Histogram(DURATION_BUCKETS)
        self.hold = Histogram(DURATION_BUCKETS)
        self.attempts = Histogram(ATTEMPT_BUCKETS)
        #: Called with each event after it is counted (the hook the client had, OpenTelemetry's).
        self.listeners: List[Callable[[LockEvent], object]] = [then] if then is not None else []
        self._lock = threading.Lock()

    def __call__(self, event: LockEvent) -> None:
        kind = event.kind
        with self._lock:
            self.events[kind] += 1
            if kind == ACQUIRED or kind == REFUSED:
                self.wait.observe(event.seconds)
                self.attempts.observe(event.attempts)
            elif kind == RELEASED or kind == LOST:
                self.hold.observe(event.seconds)
                if kind == RELEASED and not event.ok:
                    self.unconfirmed += 1
        for listener in self.listeners:
            listener(event)

    def snapshot(self) -> Dict[str, Any]:
        """A consistent copy: ``events``, ``unconfirmed``, and each histogram as
        ``(cumulative buckets, sum, count)``."""
        with self._lock:
            return {
                "events": dict(self.events),
                "unconfirmed": self.unconfirmed,
                "wait": (self.wait.cumulative(), self.wait.sum, self.wait.count),
                "hold": (self.hold.cumulative(), self.hold.sum, self.hold.count),
                "attempts": (self.attempts.cumulative(), self.attempts.sum, self.attempts.count),
            }


def recorder_of(client: Any) -> Recorder:
    """The :class:`Recorder` on ``client``'s ``on_event`` hook, installing one (chained after the
    hook already there) if it has none yet: a client instrumented twice shares one recorder."""
    hook = client.on_event
    if isinstance(hook, Recorder):
        return hook
    recorder = Recorder(then=hook)
    client.on_event = recorder
    return recorder


# --- Prometheus ---------------------------------------------------------------------------------
class PrometheusCollector:
    """A ``prometheus_client`` collector of one client: its ``stats()`` and its :class:`Recorder`.

    Register it yourself (``REGISTRY.register(PrometheusCollector(dlm))``), or use
    :func:`instrument_prometheus`.
    """

    def __init__(self, client: Any, *, client_label: str = "default", prefix: str = "fastredlock") -> None:
        self.client = client
        self.recorder = recorder_of(client)
        self.client_label = client_label
        self.prefix = prefix

    def describe(self) -> List[Any]:
        """Describe nothing up front: an unchecked collector, since the masters are only known at collection."""
        return []  # unchecked collector: the masters are only known at collection

    def collect(self) -> Iterator[Any]:
        """Yield the metric families of one scrape: lock events, waits, holds, attempts and per-master stats."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        p, label = self.prefix, self.client_label
        snap = self.recorder.snapshot()
        events = CounterMetricFamily(f"{p}_lock_events", "Lock events by kind", labels=["client", "kind"])
        for kind in KINDS:
            events.add_metric([label, kind], snap["events"][kind])
        yield events
        unconfirmed = CounterMetricFamily(f"{p}_lock_releases_unconfirmed",
                                          "Releases a quorum did not confirm", labels=["client"])
        unconfirmed.add_metric([label], snap["unconfirmed"])
        yield unconfirmed
        for key, name, doc in (("wait", "lock_wait_seconds", "Time acquire() took (acquired and refused)"),
                               ("hold", "lock_hold_seconds", "Time locks were held (released and lost)"),
                               ("attempts", "lock_attempts", "Attempts per acquire()")):
            buckets, total, _count = snap[key]
            family = HistogramMetricFamily(f"{p}_{name}", doc, labels=["client"])
            family.add_metric([label], buckets, total)
            yield family
        stats = self.client.stats()
        for field in _COUNTERS:
            counter = CounterMetricFamily(f"{p}_master_{field}", f"MasterStats.{field}", labels=["client", "master"])
            for s in stats:
                counter.add_metric([label, s.master], getattr(s, field))
            yield counter
        for field, name in _GAUGES:
            gauge = GaugeMetricFamily(f"{p}_master_{name}", f"MasterStats.{field}", labels=["client", "master"])
            for s in stats:
                gauge.add_metric([label, s.master], getattr(s, field))
            yield gauge


def instrument_prometheus(client: Any, registry: Any = None, *, client_label: str = "default",
                          prefix: str = "fastredlock") -> PrometheusCollector:
    """Export ``client``'s metrics to Prometheus: a :class:`PrometheusCollector` registered on
    ``registry`` (default: ``prometheus_client.REGISTRY``); returns it (unregister it when the
    client is closed). Give each client of a process its own ``client_label``."""
    if registry is None:
        from prometheus_client import REGISTRY as registry  # noqa: N811
    collector = PrometheusCollector(client, client_label=client_label, prefix=prefix)
    registry.register(collector)
    return collector


# --- OpenTelemetry ------------------------------------------------------------------------------
def instrument_opentelemetry(client: Any, meter: Any = None, *, client_label: str = "default",
                             prefix: str = "fastredlock") -> Recorder:
    """Export ``client``'s metrics through an OpenTelemetry ``meter`` (default:
    ``opentelemetry.metrics.get_meter("fastredlock")``): a counter of events by kind and
    histograms of wait, hold and attempts fed by each event, and observable counters and gauges of
    the masters' ``stats()``. Returns the client's :class:`Recorder`."""
    if meter is None:
        from opentelemetry import metrics as otel_metrics

        meter = otel_metrics.get_meter("fastredlock")
    p = prefix
    base = {"client": client_label}
    events = meter.create_counter(f"{p}.lock.events", unit="{event}", description="Lock events by kind")
    unconfirmed = meter.create_counter(f"{p}.lock.releases_unconfirmed", unit="{release}",
                                       description="Releases a quorum did not confirm")
    wait = meter.create_histogram(f"{p}.lock.wait", unit="s", description="Time acquire() took")
    hold = meter.create_histogram(f"{p}.lock.hold", unit="s", description="Time locks were held")
    attempts = meter.create_histogram(f"{p}.lock.attempts", unit="{attempt}", description="Attempts per acquire()")
    by_kind = {kind: {"client": client_label, "kind": kind} for kind in KINDS}

    def on_event(event: LockEvent) -> None:
        kind = event.kind
        events.add(1, by_kind[kind])
        if kind == ACQUIRED or kind == REFUSED:
            wait.record(event.seconds, base)
            attempts.record(event.attempts, base)
        elif kind == RELEASED or kind == LOST:
            hold.record(event.seconds, base)
            if kind == RELEASED and not event.ok:
                unconfirmed.add(1, base)

    from opentelemetry.metrics import Observation

    def observe(field: str) -> Callable[[Any], List[Any]]:
        def callback(_options: Any) -> List[Any]:
            return [Observation(getattr(s, field), {"client": client_label, "master": s.master})
                    for s in client.stats()]
        return callback

    for field in _COUNTERS:
        meter.create_observable_counter(f"{p}.master.{field}", callbacks=[observe(field)],
                                        description=f"MasterStats.{field}")
    for field, name in _GAUGES:
        unit = "s" if name.endswith("_seconds") else "1"
        meter.create_observable_gauge(f"{p}.master.{name.replace('_seconds', '')}", callbacks=[observe(field)],
                                      unit=unit, description=f"MasterStats.{field}")
    recorder = recorder_of(client)
    recorder.listeners.append(on_event)
    return recorder
