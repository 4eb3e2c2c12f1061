"""The per-name lock metrics (acquire wait, held, contentions, lost) of ``fastredlock.metrics``,
fed by single-run jobs on real masters and read back through prometheus_client's text format and
the OpenTelemetry SDK's in-memory reader. Both cores."""
from __future__ import annotations

import threading

import pytest

from fastredlock import jobs, metrics
from fastredlock.events import LockEvent

prometheus_client = pytest.importorskip("prometheus_client")


def _families(registry):
    from prometheus_client.parser import text_string_to_metric_families

    text = prometheus_client.generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(families, family, suffix="", **labels):
    fam = families[family]
    for s in fam.samples:
        if s.name == fam.name + suffix and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise KeyError((family, suffix, labels))


def test_prometheus_per_name_metrics_of_jobs(jobs_client, drop_key, until):
    registry = prometheus_client.CollectorRegistry()
    dlm = jobs_client()
    metrics.instrument_prometheus(dlm, registry, client_label="workers")
    seen = {}

    @jobs.single_run(dlm, name="reports", key_args="day", ttl=5)
    def report(day):
        seen["held"] = _value(_families(registry), "fastredlock_lock_held", client="workers", name="reports")
        seen["again"] = report(day)  # the same key, held: skipped (a contention)
        return day

    for day in ("d1", "d2", "d3"):
        assert report(day) == day
    assert seen == {"held": 1.0, "again": jobs.SKIPPED}
    fams = _families(registry)
    assert _value(fams, "fastredlock_lock_held", client="workers", name="reports") == 0
    assert _value(fams, "fastredlock_lock_contentions", "_total", name="reports") == 3
    assert _value(fams, "fastredlock_lock_acquire_wait_seconds", "_count", name="reports", outcome="acquired") == 3
    assert _value(fams, "fastredlock_lock_acquire_wait_seconds", "_count", name="reports", outcome="refused") == 3
    assert _value(fams, "fastredlock_lock_lost", "_total", name="reports") == 0
    names = {s.labels["name"] for s in fams["fastredlock_lock_held"].samples}
    assert names == {"reports"}  # never the raw names ('reports:{"day":"d1"}', ...)

    # A wait that gets the lock after its first attempt failed counts as a contention too.
    holder = dlm.lock("reports:held", ttl=5)
    assert holder.acquire()
    timer = threading.Timer(0.2, holder.release)
    timer.start()
    with jobs.single_run(dlm, "reports:held", on_held="wait", wait=5):
        pass
    timer.join(5)
    fams = _families(registry)
    assert _value(fams, "fastredlock_lock_contentions", "_total", name="reports") == 4

    # A lock lost while a job holds it.
    @jobs.single_run(dlm, name="reports:lost", ttl=0.3, on_lost="report")
    def loses():
        drop_key("reports:lost")
        until(lambda: jobs.current().lost, 3, "the watchdog to find the lock lost")
        return "done"

    assert loses() == "done"
    fams = _families(registry)
    assert _value(fams, "fastredlock_lock_lost", "_total", name="reports") == 1
    assert _value(fams, "fastredlock_lock_held", name="reports") == 0


def test_name_label_function_and_cap(jobs_client):
    registry = prometheus_client.CollectorRegistry()
    dlm = jobs_client()
    metrics.instrument_prometheus(dlm, registry, name_label=lambda name: name.upper(), max_names=2)
    for name in ("a", "b", "c", "d"):
        with dlm.lock(name, ttl=5):
            pass
    fams = _families(registry)
    labels = {s.labels["name"] for s in fams["fastredlock_lock_held"].samples}
    assert labels == {"A", "B", metrics.OTHER}
    assert _value(fams, "fastredlock_lock_acquire_wait_seconds", "_count", name=metrics.OTHER, outcome="acquired") == 2


def test_opentelemetry_per_name_metrics(jobs_client):
    sdk_metrics = pytest.importorskip("opentelemetry.sdk.metrics")
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = sdk_metrics.MeterProvider(metric_readers=[reader])
    dlm = jobs_client()
    metrics.instrument_opentelemetry(dlm, provider.get_meter("test"), client_label="jobs")
    held_inside = []

    def points():
        out = {}
        for rm in reader.get_metrics_data().resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    out[m.name] = list(m.data.data_points)
        return out

    @jobs.single_run(dlm, name="sync:orders", ttl=5)
    def job():
        held_inside.append({p.attributes["name"]: p.value for p in points()["fastredlock.lock.held"]})
        assert job() is jobs.SKIPPED

    job()
    data = points()
    assert held_inside == [{"sync": 1}]
    assert {p.attributes["name"]: p.value for p in data["fastredlock.lock.held"]} == {"sync": 0}
    waits = {(p.attributes["name"], p.attributes["outcome"]): p.count for p in data["fastredlock.lock.acquire_wait"]}
    assert waits == {("sync", "acquired"): 1, ("sync", "refused"): 1}
    assert [(p.attributes, p.value) for p in data["fastredlock.lock.contentions"]] == [({"client": "jobs", "name": "sync"}, 1)]
    assert "fastredlock.lock.lost" not in data or all(p.value == 0 for p in data["fastredlock.lock.lost"])


def test_recorder_held_gauge_and_lost_from_events():
    rec = metrics.Recorder()
    for kind, attempts, ok in (("acquired", 1, True), ("acquired", 3, True), ("lost", 0, False),
                               ("released", 0, False), ("refused", 2, False), ("released", 0, True),
                               ("released", 0, True)):  # the last: a lock acquired elsewhere (by token)
        rec(LockEvent(kind, b"orders:7", 0.01, attempts, ok))
    per = rec.snapshot()["names"]["orders"]
    assert (per["held"], per["lost"], per["contentions"]) == (0, 1, 2)
    assert per["wait"]["acquired"][2] == 2 and per["wait"]["refused"][2] == 1


def test_bad_metrics_arguments(one_dlm):
    with pytest.raises(TypeError, match="name_label must be callable"):
        metrics.Recorder(name_label="orders")
    with pytest.raises(ValueError, match="max_names"):
        metrics.Recorder(max_names=0)
    metrics.instrument_prometheus(one_dlm, prometheus_client.CollectorRegistry(), name_label=str)
    with pytest.raises(ValueError, match="another name_label"):
        metrics.instrument_prometheus(one_dlm, prometheus_client.CollectorRegistry(), name_label=repr)
