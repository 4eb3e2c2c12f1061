"""``fastredlock.metrics``: a client's events and ``stats()`` as Prometheus metrics (read back with
prometheus_client's own text parser) and as OpenTelemetry metrics (read with the SDK's in-memory
reader). Real masters, both cores."""
from __future__ import annotations

import pytest

from fastredlock import metrics

prometheus_client = pytest.importorskip("prometheus_client")  # the `metrics` extra (in `test`)


def _families(registry):
    from prometheus_client.parser import text_string_to_metric_families

    text = prometheus_client.generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(family, suffix="", **labels):
    for s in family.samples:
        if s.name == family.name + suffix and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise KeyError((family.name, suffix, labels))


def test_prometheus(make_client, masters, dead_port, name):
    registry = prometheus_client.CollectorRegistry()
    urls = masters.urls[:4] + [f"redis://127.0.0.1:{dead_port}"]
    earlier = []
    dlm = make_client(urls, on_event=earlier.append, retry_count=0)
    metrics.instrument_prometheus(dlm, registry, client_label="orders")
    for _ in range(3):
        with dlm.lock(name, ttl=5):
            pass
    holder = dlm.lock(name, ttl=5)
    assert holder.acquire()
    assert not dlm.lock(name, ttl=5).acquire()
    holder.release()

    fams = _families(registry)
    events = fams["fastredlock_lock_events"]
    assert _value(events, "_total", kind="acquired", client="orders") == 4
    assert _value(events, "_total", kind="refused") == 1
    assert _value(events, "_total", kind="released") == 4
    assert _value(events, "_total", kind="lost") == 0
    assert _value(fams["fastredlock_lock_releases_unconfirmed"], "_total") == 0
    wait = fams["fastredlock_lock_wait_seconds"]
    assert _value(wait, "_count") == 5 and _value(wait, "_bucket", le="+Inf") == 5
    assert 0 < _value(wait, "_sum") < 5
    assert _value(fams["fastredlock_lock_hold_seconds"], "_count") == 4
    assert _value(fams["fastredlock_lock_attempts"], "_bucket", le="1.0") == 5
    replies = fams["fastredlock_master_replies"]
    assert _value(replies, "_total", master=masters[0].url.split("//")[1]) >= 9
    errors = fams["fastredlock_master_connect_errors"]
    assert _value(errors, "_total", master=f"127.0.0.1:{dead_port}") >= 1
    assert "fastredlock_master_cooling_down_seconds" in fams
    assert len(earlier) == 9  # the hook the client had still gets every event


def test_opentelemetry(make_client, masters, name):
    sdk_metrics = pytest.importorskip("opentelemetry.sdk.metrics")
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = sdk_metrics.MeterProvider(metric_readers=[reader])
    dlm = make_client(masters.urls)
    metrics.instrument_opentelemetry(dlm, provider.get_meter("test"), client_label="jobs")
    metrics.instrument_prometheus(dlm, prometheus_client.CollectorRegistry())  # both at once: one recorder
    for _ in range(2):
        with dlm.lock(name, ttl=5) as lock:
            lock.extend()
    data = reader.get_metrics_data()
    points = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                points[m.name] = list(m.data.data_points)
    by_kind = {p.attributes["kind"]: p.value for p in points["fastredlock.lock.events"]}
    assert by_kind == {"acquired": 2, "extended": 2, "released": 2}
    assert points["fastredlock.lock.hold"][0].count == 2
    assert points["fastredlock.lock.wait"][0].attributes == {"client": "jobs"}
    replies = {p.attributes["master"]: p.value for p in points["fastredlock.master.replies"]}
    assert len(replies) == 5 and all(v >= 6 for v in replies.values())
    assert "fastredlock.master.latency_avg" in points


def test_the_recorder_is_shared_and_histograms_are_cumulative():
    rec = metrics.Recorder()
    from fastredlock.events import LockEvent

    for seconds in (0.0001, 0.003, 0.003, 100.0, 1000.0):
        rec(LockEvent("released", "x", seconds, 0, True))
    buckets, total, count = rec.snapshot()["hold"]
    as_dict = dict(buckets)
    assert count == 5 and as_dict["+Inf"] == 5 and as_dict["0.0005"] == 1 and as_dict["0.005"] == 3
    assert as_dict["300.0"] == 4 and total == pytest.approx(1100.0061)
