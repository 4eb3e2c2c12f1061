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

Per name, with a ``name`` label as well as ``client`` (the acquire-wait, held, contention and lost
metrics that OpenCTI and opik chart for their locks):

- ``fastredlock_lock_acquire_wait_seconds{name,outcome}``: histogram of the time ``acquire`` took,
  ``outcome`` ``acquired`` or ``refused`` (OpenCTI's ``lock_acquire_wait``, opik's
  ``lock_acquire_wait_milliseconds``, in the base unit Prometheus asks for);
- ``fastredlock_lock_held{name}``: gauge of the locks this client holds now (acquired, not yet
  released; a lock lost while held counts until its holder releases it; opik's ``lock_held``);
- ``fastredlock_lock_contentions_total{name}``: acquisitions that did not get the lock at their first
  attempt: acquired after waiting, or refused (OpenCTI's ``lock_contentions``);
- ``fastredlock_lock_lost_total{name}``: locks lost while held (a renewal or an extension failed,
  validity ran out, or a release found the lock gone).

The ``name`` label is never the raw lock name (a label per order id would be a time series per
order): by default it is :func:`name_group` of the name (its part before the first ``:``, with
numbers, UUIDs and hex words that mix digits and letters replaced by ``*``: ``orders:42`` -> ``orders``,
``tenant-7f3a9c21d4e5`` -> ``tenant-*``); pass ``name_label=callable`` to choose yourself
(``lambda name: "all"`` for none). At most ``max_names`` (default 100) distinct values are kept;
past that, new ones are counted as ``other`` (and a warning is logged once).

``prometheus_client`` comes with the ``metrics`` extra, the OpenTelemetry API with ``otel``.
"""
from __future__ import annotations

import bisect
import logging
import re
import threading
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from .events import ACQUIRED, KINDS, LOST, REFUSED, RELEASED, LockEvent

__all__ = [
    "DURATION_BUCKETS", "ATTEMPT_BUCKETS", "Histogram", "Recorder", "PrometheusCollector",
    "instrument_prometheus", "instrument_opentelemetry", "recorder_of", "name_group", "MAX_NAMES", "OTHER",
]

log = logging.getLogger("fastredlock")

#: Default cap on the distinct values of the ``name`` label of one client's metrics.
MAX_NAMES = 100
#: The ``name`` label of every name past the cap.
OTHER = "other"
#: The ``outcome`` label values of the acquire-wait histogram.
_OUTCOMES = (ACQUIRED, REFUSED)
_VARIABLE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
                       r"|(?<![0-9A-Za-z])[0-9a-fA-F]*[0-9][0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*(?![0-9A-Za-z])"
                       r"|(?<![0-9A-Za-z])[0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*[0-9][0-9a-fA-F]*(?![0-9A-Za-z])"
                       r"|[0-9]+")
#: The longest ``name`` label kept (longer ones are cut).
_MAX_LABEL = 64
#: Names whose label is remembered (the cache is emptied when it grows past this).
_CACHE = 10000

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


def name_group(name: Any) -> str:
    """The default ``name`` label of a lock name: its part before the first ``:``, with UUIDs, hex
    runs that mix digits and letters, and numbers replaced by ``*``, cut at 64 characters
    (``"orders:42"`` -> ``"orders"``, ``"report-2026-11-27"`` -> ``"report-*-*-*"``; bytes are
    read as UTF-8)."""
    text = name.decode("utf-8", "replace") if isinstance(name, (bytes, bytearray)) else str(name)
    head = text.split(":", 1)[0]
    return _VARIABLE.sub("*", head)[:_MAX_LABEL] or "*"


class _NameStats:
    """What the recorder keeps per ``name`` label (under the recorder's lock)."""

    __slots__ = ("wait", "held", "contentions", "lost")

    def __init__(self) -> None:
        self.wait = {outcome: Histogram(DURATION_BUCKETS) for outcome in _OUTCOMES}
        self.held = 0
        self.contentions = 0
        self.lost = 0


class Recorder:
    """An ``on_event`` hook that aggregates a client's lock events (thread-safe; cheap).

    :param then: a hook to call with each event after it is counted.
    :param name_label: ``name_label(lock name) -> str``, the ``name`` label of the per-name
        metrics (default :func:`name_group`); keep its values few.
    :param max_names: the most distinct ``name`` labels kept; later ones count as :data:`OTHER`.
    """

    def __init__(self, then: Optional[Callable[[LockEvent], object]] = None, *,
                 name_label: Optional[Callable[[Any], str]] = None, max_names: int = MAX_NAMES) -> None:
        if name_label is not None and not callable(name_label):
            raise TypeError(f"name_label must be callable (lock name -> label), not {type(name_label).__name__}")
        if isinstance(max_names, bool) or not isinstance(max_names, int) or max_names < 1:
            raise ValueError(f"max_names must be an int >= 1, got {max_names!r}")
        #: The function that makes the ``name`` label of a lock name (None: :func:`name_group`).
        self.name_label = name_label
        self.max_names = max_names
        #: Per ``name`` label: acquire waits by outcome, locks held now, contentions, losses.
        self.names: Dict[str, _NameStats] = {}
        self._labels: Dict[Any, str] = {}
        self._capped = False
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
        label = self.label_of(event.name)
        with self._lock:
            self.events[kind] += 1
            per = self.names.get(label)
            if per is None:
                per = self.names[label] = _NameStats()
            if kind == ACQUIRED or kind == REFUSED:
                self.wait.observe(event.seconds)
                self.attempts.observe(event.attempts)
                per.wait[kind].observe(event.seconds)
                if kind == REFUSED or event.attempts > 1:
                    per.contentions += 1
                if kind == ACQUIRED:
                    per.held += 1
            elif kind == RELEASED or kind == LOST:
                self.hold.observe(event.seconds)
                if kind == RELEASED:
                    if per.held > 0:  # (a lock released by token here was acquired elsewhere)
                        per.held -= 1
                    if not event.ok:
                        self.unconfirmed += 1
                else:
                    per.lost += 1
        for listener in self.listeners:
            listener(event)

    def label_of(self, name: Any) -> str:
        """The ``name`` label of the lock name ``name`` (remembered; :data:`OTHER` past ``max_names``)."""
        label = self._labels.get(name)
        if label is not None:
            return label
        try:
            label = (self.name_label or name_group)(name)
        except Exception:
            log.exception("fastredlock: the metrics name_label function raised for %r", name)
            label = OTHER
        if not isinstance(label, str):
            label = str(label)
        with self._lock:
            if label not in self.names and len(self.names) >= self.max_names:
                if not self._capped:
                    self._capped = True
                    log.warning("fastredlock: more than %d distinct name labels in the lock metrics; later "
                                "ones are counted as %r (give instrument_*(name_label=...) fewer values)",
                                self.max_names, OTHER)
                label = OTHER
            if len(self._labels) >= _CACHE:
                self._labels.clear()
            self._labels[name] = label
        return label

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
                "names": {
                    label: {
                        "wait": {outcome: (h.cumulative(), h.sum, h.count) for outcome, h in per.wait.items()},
                        "held": per.held,
                        "contentions": per.contentions,
                        "lost": per.lost,
                    }
                    for label, per in self.names.items()
                },
            }


def recorder_of(client: Any, *, name_label: Optional[Callable[[Any], str]] = None,
                max_names: Optional[int] = None) -> Recorder:
    """The :class:`Recorder` on ``client``'s ``on_event`` hook, installing one (chained after the
    hook already there, with ``name_label`` and ``max_names``) if it has none yet: a client
    instrumented twice shares one recorder (``ValueError`` if the second asks for another
    ``name_label`` or ``max_names``)."""
    hook = client.on_event
    if isinstance(hook, Recorder):
        if name_label is not None and name_label is not hook.name_label:
            raise ValueError("this client's metrics already use another name_label function")
        if max_names is not None and max_names != hook.max_names:
            raise ValueError(f"this client's metrics already keep max_names={hook.max_names}")
        return hook
    recorder = Recorder(then=hook, name_label=name_label, max_names=MAX_NAMES if max_names is None else max_names)
    client.on_event = recorder
    return recorder


# --- Prometheus ---------------------------------------------------------------------------------
class PrometheusCollector:
    """A ``prometheus_client`` collector of one client: its ``stats()`` and its :class:`Recorder`.

    Register it yourself (``REGISTRY.register(PrometheusCollector(dlm))``), or use
    :func:`instrument_prometheus`.
    """

    def __init__(self, client: Any, *, client_label: str = "default", prefix: str = "fastredlock",
                 name_label: Optional[Callable[[Any], str]] = None, max_names: Optional[int] = None) -> None:
        self.client = client
        self.recorder = recorder_of(client, name_label=name_label, max_names=max_names)
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
        yield from self._per_name(snap["names"])
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


    def _per_name(self, names: Dict[str, Any]) -> Iterator[Any]:
        """The per-name families: acquire waits, locks held, contentions, losses."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        p, label = self.prefix, self.client_label
        wait = HistogramMetricFamily(f"{p}_lock_acquire_wait_seconds", "Time acquire() took, by name and outcome",
                                     labels=["client", "name", "outcome"])
        held = GaugeMetricFamily(f"{p}_lock_held", "Locks held now (acquired, not yet released)",
                                 labels=["client", "name"])
        contentions = CounterMetricFamily(f"{p}_lock_contentions", "Acquisitions that did not get the lock at "
                                          "their first attempt", labels=["client", "name"])
        lost = CounterMetricFamily(f"{p}_lock_lost", "Locks lost while held", labels=["client", "name"])
        for name, per in sorted(names.items()):
            for outcome, (buckets, total, _count) in per["wait"].items():
                wait.add_metric([label, name, outcome], buckets, total)
            held.add_metric([label, name], per["held"])
            contentions.add_metric([label, name], per["contentions"])
            lost.add_metric([label, name], per["lost"])
        yield from (wait, held, contentions, lost)


def instrument_prometheus(client: Any, registry: Any = None, *, client_label: str = "default",
                          prefix: str = "fastredlock", name_label: Optional[Callable[[Any], str]] = None,
                          max_names: Optional[int] = None) -> PrometheusCollector:
    """Export ``client``'s metrics to Prometheus: a :class:`PrometheusCollector` registered on
    ``registry`` (default: ``prometheus_client.REGISTRY``); returns it (unregister it when the
    client is closed). Give each client of a process its own ``client_label``. ``name_label``
    and ``max_names``: the ``name`` label of the per-name metrics (see the module docstring)."""
    if registry is None:
        from prometheus_client import REGISTRY as registry  # noqa: N811
    collector = PrometheusCollector(client, client_label=client_label, prefix=prefix, name_label=name_label,
                                    max_names=max_names)
    registry.register(collector)
    return collector


# --- OpenTelemetry ------------------------------------------------------------------------------
def instrument_opentelemetry(client: Any, meter: Any = None, *, client_label: str = "default",
                             prefix: str = "fastredlock", name_label: Optional[Callable[[Any], str]] = None,
                             max_names: Optional[int] = None) -> Recorder:
    """Export ``client``'s metrics through an OpenTelemetry ``meter`` (default:
    ``opentelemetry.metrics.get_meter("fastredlock")``): a counter of events by kind and
    histograms of wait, hold and attempts fed by each event, and observable counters and gauges of
    the masters' ``stats()``; per ``name`` label (see the module docstring): the histogram
    ``fastredlock.lock.acquire_wait`` (with ``outcome``), the counters
    ``fastredlock.lock.contentions`` and ``fastredlock.lock.lost``, and the observable
    up-down counter ``fastredlock.lock.held``. Returns the client's :class:`Recorder`."""
    recorder = recorder_of(client, name_label=name_label, max_names=max_names)
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
    acquire_wait = meter.create_histogram(f"{p}.lock.acquire_wait", unit="s",
                                          description="Time acquire() took, by name and outcome")
    contentions = meter.create_counter(f"{p}.lock.contentions", unit="{acquisition}",
                                       description="Acquisitions that did not get the lock at their first attempt")
    lost = meter.create_counter(f"{p}.lock.lost", unit="{lock}", description="Locks lost while held")
    by_kind = {kind: {"client": client_label, "kind": kind} for kind in KINDS}

    def on_event(event: LockEvent) -> None:
        kind = event.kind
        events.add(1, by_kind[kind])
        named = {"client": client_label, "name": recorder.label_of(event.name)}
        if kind == ACQUIRED or kind == REFUSED:
            wait.record(event.seconds, base)
            attempts.record(event.attempts, base)
            acquire_wait.record(event.seconds, {**named, "outcome": kind})
            if kind == REFUSED or event.attempts > 1:
                contentions.add(1, named)
        elif kind == RELEASED or kind == LOST:
            hold.record(event.seconds, base)
            if kind == RELEASED and not event.ok:
                unconfirmed.add(1, base)
            elif kind == LOST:
                lost.add(1, named)

    from opentelemetry.metrics import Observation

    def observe(field: str) -> Callable[[Any], List[Any]]:
        def callback(_options: Any) -> List[Any]:
            return [Observation(getattr(s, field), {"client": client_label, "master": s.master})
                    for s in client.stats()]
        return callback

    def held(_options: Any) -> List[Any]:
        with recorder._lock:
            counts = [(label, per.held) for label, per in recorder.names.items()]
        return [Observation(n, {"client": client_label, "name": label}) for label, n in counts]

    meter.create_observable_up_down_counter(f"{p}.lock.held", callbacks=[held], unit="{lock}",
                                            description="Locks held now (acquired, not yet released)")
    for field in _COUNTERS:
        meter.create_observable_counter(f"{p}.master.{field}", callbacks=[observe(field)],
                                        description=f"MasterStats.{field}")
    for field, name in _GAUGES:
        unit = "s" if name.endswith("_seconds") else "1"
        meter.create_observable_gauge(f"{p}.master.{name.replace('_seconds', '')}", callbacks=[observe(field)],
                                      unit=unit, description=f"MasterStats.{field}")
    recorder.listeners.append(on_event)
    return recorder
