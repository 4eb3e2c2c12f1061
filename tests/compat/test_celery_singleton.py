"""fastredlock.compat.celery_singleton with real Celery workers.

Our own tests of every behaviour celery-singleton's repository suite (tests/test_singleton.py,
test_config.py, test_backends.py at its 0.3.1 head) checks, written from reading it: duplicates
share an id, uniques do not, a success or an error frees the name, ``get_existing_task_id``, a
failed ``apply_async`` frees the name and re-raises, ``raise_on_duplicate`` (task and app
settings), ``clear_locks``, ``unique_on`` (positional, keyword, empty, a string, defaults),
``lock_expiry`` (task and app), the JSON encoder setting (class and path), the settings' defaults
and overrides, and the backend's lock/unlock/get/clear. Its tests that patch internals with mocks
(``util.generate_lock`` call arguments, ``RedisBackend.lock`` arguments, ``BaseTask.apply_async``)
are checked here by what those calls do on the servers instead. The backend-class tests with a
fake backend check a documented difference: only the Redis backend is served.

Then the issue's failure cases (SIGKILL, revoke, time limits) and a fleet mixing celery-singleton
0.3.1 and the drop-in on one broker.
"""
from __future__ import annotations

import json
import os
import random
import signal
import time
import uuid

import pytest

pytest.importorskip("celery")

from celery import Celery  # noqa: E402

from _celery_workers import RUN_TTL, trusted_masters, unique, wait_for  # noqa: E402,F401
from fastredlock.compat.celery_singleton import (  # noqa: E402
    Config, DuplicateTaskError, RedisBackend, Singleton, clear_locks, generate_lock,
)

RUN_PREFIX = "fastredlock-run:"
pytestmark = pytest.mark.usefixtures("trusted_masters")


class UUIDEncoder(json.JSONEncoder):
    def default(self, obj):
        if isinstance(obj, uuid.UUID):
            return str(obj)
        return super().default(obj)


def _app(**conf):
    app = Celery(set_as_current=False)
    app.conf.update(conf)
    return app


def _free(fleet, task, args):
    """Whether the name of ``task`` with ``args`` is free on every lock master (queue and run lock)."""
    key = task.generate_lock(task.name, args)
    return fleet.held(key) == 0 and fleet.held(RUN_PREFIX + key) == 0


# --- TestSimpleTask --------------------------------------------------------------------------------
def test_queue_duplicates_share_one_id(celery_fleet):
    t, name = celery_fleet.tasks, unique()
    results = [t.single_work.apply_async(args=[name, 0.5]) for _ in range(10)]
    assert len({r.id for r in results}) == 1 and results[0] == results[-1]
    results[0].get(timeout=20)
    assert celery_fleet.runs(name) == 1


def test_queue_multiple_uniques_get_different_ids(celery_fleet):
    t, name = celery_fleet.tasks, unique()
    results = [t.single_work.apply_async(args=[f"{name}-{i}"], queue="nobody") for i in range(5)]
    assert len({r.id for r in results}) == 5


def test_duplicate_after_success_or_error_is_a_new_task(celery_fleet):
    t, name = celery_fleet.tasks, unique()
    first = t.single_work.apply_async(args=[name])
    first.get(timeout=20)
    second = t.single_work.apply_async(args=[name])
    second.get(timeout=20)
    assert first != second
    failed = t.single_fails.apply_async(args=[name])
    with pytest.raises(Exception, match="fails on purpose"):
        failed.get(timeout=20)
    again = t.single_fails.apply_async(args=[name], queue="nobody")
    assert again != failed


def test_get_existing_task_id_reads_the_holder(celery_fleet):
    task = celery_fleet.tasks.single_work
    lock = task.generate_lock("simple_task", task_args=[unique()])
    assert task.aquire_lock(lock, "test_task_id")
    assert task.get_existing_task_id(lock) == "test_task_id"
    assert not task.aquire_lock(lock, "other_task_id")
    task.unlock(lock)
    assert task.get_existing_task_id(lock) is None


def test_apply_async_that_fails_frees_the_name_and_raises(celery_fleet, dead_port):
    import _celery_app

    t = _celery_app.build(celery_fleet.config)
    # the broker is a port nobody listens on: publishing fails for real
    t.app.conf.broker_url = f"redis://127.0.0.1:{dead_port}/1"
    t.app.conf.broker_transport_options = {"max_retries": 0}
    t.app.conf.task_publish_retry = False
    t.app.conf.broker_connection_retry = False
    t.app.conf.broker_connection_max_retries = 0
    name = unique()
    with pytest.raises(Exception) as info:
        t.single_work.apply_async(args=[name])
    assert "onnect" in repr(info.value) or "refused" in repr(info.value).lower()
    assert _free(celery_fleet, t.single_work, [name])


def test_raise_on_duplicate_raises_with_the_holders_id(celery_fleet):
    t, name = celery_fleet.tasks, unique()
    first = t.single_raising.apply_async(args=[name], queue="nobody")
    with pytest.raises(DuplicateTaskError) as info:
        t.single_raising.delay(name)
    assert info.value.task_id == first.id


# --- TestClearLocks ----------------------------------------------------------------------------------
def test_clear_locks_removes_every_lock_of_the_prefix(celery_fleet):
    import _celery_app

    t = _celery_app.build(celery_fleet.config)
    prefix = unique("prefix") + ":"
    t.app.conf.singleton_key_prefix = prefix
    for i in range(5):
        t.single_work.apply_async(args=[i], queue="nobody")
    assert sum(celery_fleet.masters[0].command("EXISTS", t.single_work.generate_lock(t.single_work.name, [i]))
               for i in range(5)) == 5
    clear_locks(t.app)
    assert all(m.command("KEYS", prefix + "*") == [] for m in celery_fleet.masters[:3])


# --- TestUniqueOn ----------------------------------------------------------------------------------
def test_unique_on_positional_and_keyword_arguments(celery_fleet):
    t, a = celery_fleet.tasks, unique()
    task = t.single_unique
    first = task.apply_async(args=[a, 3, 4, 5], kwargs={"seconds": 0.5})
    assert task.apply_async(args=[a, 9, 4], kwargs={"d": 7}) == first  # b and d do not count
    assert task.generate_lock(task.name, [a, 3, 4, 5]) == generate_lock(
        task.name, [], {"a": a, "c": 4}, key_prefix="SINGLETONLOCK_")
    other = task.apply_async(args=[a, 3, 5, 5])
    first.get(timeout=20)
    other.get(timeout=20)
    wait_for(lambda: _free(celery_fleet, task, [a, 3, 4, 5]), 5, "the worker to free the unique_on key")


def test_unique_on_empty_string_and_defaults(celery_fleet):
    t, a = celery_fleet.tasks, unique()
    none = t.single_unique_none
    assert none.generate_lock(none.name, [a], {"b": 9}) == generate_lock(none.name, [], {})
    first = none.apply_async(args=[a], queue="nobody")
    assert none.apply_async(args=[a + "x", 5], queue="nobody") == first  # the name only
    default = t.single_unique_default  # unique_on="d": a string, and d's default applies
    assert default.generate_lock(default.name, [a], {"b": 3, "c": 4}) == generate_lock(default.name, [], {"d": 4})
    result = default.apply_async(args=[a], kwargs={"b": 3, "c": 4, "seconds": 1.0})
    assert default.apply_async(args=[a + "y"], kwargs={"d": 4}, queue="nobody") == result
    result.get(timeout=20)
    wait_for(lambda: _free(celery_fleet, default, [a]), 5, "the worker to free the key")
    none.singleton_backend.unlock(none.generate_lock(none.name, [a]))


# --- TestRaiseOnDuplicateConfig, TestLockExpiry, TestCustomJSONEncoder, test_config ----------------------
def test_raise_on_duplicate_setting_and_its_override():
    app = _app(singleton_raise_on_duplicate=False)

    @app.task(base=Singleton, raise_on_duplicate=True)
    def overrides():
        pass

    @app.task(base=Singleton)
    def inherits():
        pass

    assert overrides._raise_on_duplicate is True and overrides.singleton_config.raise_on_duplicate is False
    assert inherits._raise_on_duplicate is False
    app.conf.singleton_raise_on_duplicate = True
    assert _app(singleton_raise_on_duplicate=True).conf.singleton_raise_on_duplicate is True

    app2 = _app(singleton_raise_on_duplicate=True)

    @app2.task(base=Singleton)
    def from_app():
        pass

    assert from_app._raise_on_duplicate is True
    app3 = _app()

    @app3.task(base=Singleton)
    def default():
        pass

    assert default._raise_on_duplicate is False


def test_lock_expiry_is_the_queued_locks_ttl(celery_fleet):
    t, name = celery_fleet.tasks, unique()
    task = t.single_expiring  # lock_expiry=1
    first = task.apply_async(args=[name], queue="nobody")
    key = task.generate_lock(task.name, [name])
    assert 0 < celery_fleet.masters[0].command("PTTL", key) <= 1000
    assert task.apply_async(args=[name], queue="nobody") == first
    wait_for(lambda: task.apply_async(args=[name], queue="nobody") != first, 3, "the expiry to free the name")
    app = _app(singleton_lock_expiry=60, singleton_backend_url=celery_fleet.lock_urls,
               broker_url=celery_fleet.broker + "/1")

    @app.task(base=Singleton)
    def from_app(x):
        pass

    assert Config(app).lock_expiry == 60 and Config(_app()).lock_expiry is None
    from_app.apply_async(args=[name], queue="nobody")
    assert 59000 < celery_fleet.masters[0].command("PTTL", from_app.generate_lock(from_app.name, [name])) <= 60000


@pytest.mark.parametrize("encoder", [UUIDEncoder, f"{__name__}.UUIDEncoder"], ids=["class", "path"])
def test_json_encoder_setting(celery_fleet, encoder):
    app = _app(singleton_backend_url=celery_fleet.lock_urls, broker_url=celery_fleet.broker + "/1")

    @app.task(base=Singleton, name=f"single.uuid.{unique()}")
    def with_uuids(*args):
        return args

    args = [uuid.uuid4(), uuid.uuid4()]
    with pytest.raises(TypeError, match=r"Object of type '?UUID'? is not JSON serializable"):
        with_uuids.apply_async(args=args, queue="nobody")
    app.conf.singleton_json_encoder_class = encoder
    with_uuids._singleton_config = None
    results = [with_uuids.apply_async(args=[random.choice([str, lambda v: v])(a) for a in args], queue="nobody")
               for _ in range(6)]
    assert len({r.id for r in results}) == 1  # UUIDs and their strings are the same key
    others = [with_uuids.apply_async(args=[uuid.uuid4()], queue="nobody") for _ in range(3)]
    assert len({r.id for r in others}) == 3


def test_settings_defaults_and_overrides():
    assert Config(_app(result_backend="redis://test_backend_url")).backend_url == "redis://test_backend_url"
    assert Config(_app(broker_url="redis://test_broker_url")).backend_url == "redis://test_broker_url"
    assert Config(_app(result_backend="rpc://", broker_url="redis://b")).backend_url == "redis://b"
    assert Config(_app(singleton_backend_url="redis://override_url")).backend_url == "redis://override_url"
    assert Config(_app()).key_prefix == "SINGLETONLOCK_"
    assert Config(_app(singleton_key_prefix="CUSTOM_KEY_PREFIX")).key_prefix == "CUSTOM_KEY_PREFIX"
    assert Config(_app(singleton_raise_on_duplicate=True)).raise_on_duplicate is True
    assert Config(_app(singleton_raise_on_duplicate=False)).raise_on_duplicate is False
    assert Config(_app()).raise_on_duplicate is None
    assert Config(_app()).backend_class is RedisBackend
    assert Config(_app(singleton_backend_class="celery_singleton.backends.redis.RedisBackend")).backend_class \
        is RedisBackend
    assert Config(_app(singleton_run_ttl=5)).run_ttl == 5 and Config(_app()).run_ttl == 30


def test_another_backend_class_is_refused():
    class FakeBackend:
        pass

    with pytest.raises(ValueError, match="only the Redis"):
        Config(_app(singleton_backend_class=FakeBackend)).backend_class
    with pytest.raises(ValueError, match="only the Redis"):
        Config(_app(singleton_backend_class="singleton_backends.fake.FakeBackend")).backend_class


# --- test_backends -----------------------------------------------------------------------------------
def test_backend_lock_unlock_get_and_clear(celery_fleet):
    backend = RedisBackend(celery_fleet.lock_urls)
    prefix = unique("SINGLETON_TEST_KEY_PREFIX") + "_"
    lock, task_id, other = prefix + uuid.uuid4().hex, str(uuid.uuid4()), str(uuid.uuid4())
    assert backend.lock(lock, task_id) is True
    assert backend.get(lock) == task_id
    assert backend.lock(lock, other) is False and backend.get(lock) == task_id
    backend.unlock(lock)
    assert backend.get(lock) is None
    locks = [prefix + uuid.uuid4().hex for _ in range(10)]
    for name in locks:
        backend.lock(name, str(uuid.uuid4()))
    backend.clear(prefix)
    assert all(backend.get(name) is None for name in locks)
    one = RedisBackend(celery_fleet.lock_urls[0])  # one URL: one master, as celery-singleton
    assert one.masters.quorum == 1 and one.lock(lock, task_id) and one.get(lock) == task_id
    one.unlock(lock)


# --- the done checks ----------------------------------------------------------------------
def test_twenty_enqueues_from_four_processes_run_once(celery_fleet):
    """20 enqueues at once from 4 processes (two per core), two worker processes: all get the same
    task id, it runs once, and the name is free afterwards."""
    name = unique()
    reports = celery_fleet.enqueue_from([{"core": "cython"}, {"core": "python"}] * 2, "single.work", [name, 0.5], 5)
    ids = {i for r in reports for i in r["ids"]}
    assert len(ids) == 1 and sum(len(r["ids"]) for r in reports) == 20, reports
    assert {r["core"] for r in reports} == celery_fleet.cores == celery_fleet.worker_cores()
    celery_fleet.tasks.app.AsyncResult(ids.pop()).get(timeout=20)
    assert celery_fleet.runs(name) == 1
    wait_for(lambda: _free(celery_fleet, celery_fleet.tasks.single_work, [name, 0.5]), 5, "the name to be free")


def test_retries_keep_the_name_and_are_queued(celery_fleet):
    t, name = celery_fleet.tasks, unique()
    # Each run takes 0.5 s: once the second has started, the name stays held for at least 1.3 s
    # more (the rest of it, the 0.3 s countdown, the third run), however late this test looks.
    result = t.single_retries.delay(name, 0.5)
    wait_for(lambda: celery_fleet.runs(name) >= 2, 15, "a retry to run")
    assert t.single_retries.delay(name, 0.5) == result  # still the same task
    assert result.get(timeout=20) == 2
    assert celery_fleet.runs(name) == 3 and celery_fleet.overlaps(name) == 0
    wait_for(lambda: _free(celery_fleet, t.single_retries, [name, 0.5]), 5, "the name to be free")


def test_sigkill_of_the_worker_frees_the_name_within_two_ttls(celery_fleet):
    worker = celery_fleet.kill_workers["single"]  # a solo worker: its task runs in the killed process
    try:
        t, name = celery_fleet.tasks, unique()
        first = t.single_work.apply_async(args=[name, 30], queue="kill-single")
        wait_for(lambda: celery_fleet.started(name), 15, "the task to start")
        assert not _free(celery_fleet, t.single_work, [name, 30])
        worker.proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        worker.proc.wait(timeout=10)
        wait_for(lambda: t.single_work.apply_async(args=[name, 30], queue="nobody") != first, 4 * RUN_TTL,
                 "the name to be free")
        freed = time.monotonic() - killed
    finally:
        worker.stop()
    assert freed <= 2 * RUN_TTL, f"freed after {freed:.2f} s"


@pytest.mark.parametrize("how", [
    "revoke-terminate", "revoke-queued", "hard-time-limit", "soft-time-limit", "pool-child-killed"])
def test_revoked_or_time_limited_task_releases_its_name(celery_fleet, how):
    """celery-singleton #29 (revoked) and #40 (hard time limit). These tasks' run TTL is 20 s
    (renewed every third of it): a name accepted again within 4 s (10 s when the worker's main
    process must first notice that its pool child died) was released, not expired."""
    t, name = celery_fleet.tasks, unique()
    task = {"hard-time-limit": t.single_hard_limit, "soft-time-limit": t.single_soft_limit}.get(how, t.single_long)
    seconds = 0.0 if how == "revoke-queued" else 30.0
    if how == "revoke-queued":
        result = task.apply_async(args=[name, seconds], countdown=1.0)
        result.revoke()
    else:
        result = task.delay(name, seconds)
        wait_for(lambda: celery_fleet.started(name), 15, "the task to start")
        if how == "revoke-terminate":
            result.revoke(terminate=True, signal="SIGKILL")
        elif how == "pool-child-killed":  # the worker's main process sees its pool child die
            os.kill(celery_fleet.started(name), signal.SIGKILL)
    start = time.monotonic()
    wait_for(lambda: task.apply_async(args=[name, seconds], queue="nobody") != result, 12, f"the name to be free ({how})")
    assert time.monotonic() - start < (10.0 if how == "pool-child-killed" else 4.0)
    assert celery_fleet.runs(name) == (0 if how == "revoke-queued" else 1)


# --- interop with celery-singleton 0.3.1 -------------------------------------------------------------
def test_celery_singleton_and_the_drop_in_never_run_a_task_twice(celery_fleet):
    """celery-singleton 0.3.1 processes and drop-in processes on one broker and one lock server:
    20 enqueues from 2 + 2 processes all get one task id, it runs once, the name is free after."""
    interop = celery_fleet.interop()
    name = unique()
    sides = [{"impl": "original", "originals": interop.originals, "locks": interop.locks},
             {"impl": "shim", "locks": interop.locks}] * 2
    reports = celery_fleet.enqueue_from(sides, "single.work", [name, 0.5], 5, queue="interop")
    assert len({i for r in reports for i in r["ids"]}) == 1, reports
    assert [r["module"].split(".")[0] for r in reports] == ["celery_singleton", "fastredlock"] * 2
    key = generate_lock("single.work", [name, 0.5], {})
    wait_for(lambda: celery_fleet.runs(name) == 1 and int(celery_fleet.probe.get(f"active:{name}") or 0) == 0
             and celery_fleet.held(key) == 0, 15, "the task to run and free its name")
    assert celery_fleet.overlaps(name) == 0


def test_each_kind_of_worker_frees_a_task_the_other_kind_queued(celery_fleet):
    """A drop-in worker runs a task celery-singleton queued and frees its name, and the other way
    round; while it runs, the other kind's enqueue is a duplicate."""
    celery_fleet.handed_across("single.work", lambda run: generate_lock("single.work", [run, 1.0], {}), unique())


def test_lock_expiry_bounds_a_running_task_too(celery_fleet):
    """celery-singleton's README: with ``lock_expiry`` shorter than the run, a new task is
    accepted once it has passed, while the first still runs (here 1 s, a 2 s run)."""
    t, name = celery_fleet.tasks, unique()
    first = t.single_expiring.delay(name, 2.0)
    wait_for(lambda: celery_fleet.started(name), 10, "the task to start")
    second = wait_for(lambda: (lambda r: r if r != first else None)(
        t.single_expiring.apply_async(args=[name, 2.0], queue="nobody")), 3, "the expiry to free the name")
    assert second != first and not first.ready()
    first.get(timeout=20)


def test_run_locks_renew_within_the_bound():
    from fastredlock.compat._celery import NEVER, Run

    assert Run.renewal(2.0, None) == Run.renewal(2.0, 0) == Run.renewal(2.0, NEVER)
    assert Run.renewal(2.0, None)["auto_extend"] and "max_hold" not in Run.renewal(2.0, None)
    assert Run.renewal(2.0, 1.0) == {"ttl": 1.0}  # shorter than run_ttl: one TTL, not renewed
    long = Run.renewal(2.0, 10.0)
    assert long["ttl"] == 2.0 and long["max_hold"] == 8.0  # the last renewal expires by 10 s
