"""``python -m fastredlock inspect URL... NAME`` as a shell script sees it: real processes on real
masters, both cores (``--core``). The exit status tells the state (0 free, 1 held, 3 partially
held, 4 unknown, 2 bad usage); ``--json`` parses; the masters come from ``FASTREDLOCK_MASTERS`` too;
the holder's token never appears in the output."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from fastredlock import holder_of
from fastredlock.engine.tokens import new_token
from fastredlock.handles.lockinfo import EXIT_STATUS

SRC = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "src")


def _env(**extra):
    env = dict(os.environ, **extra)
    # the process imports the fastredlock under test (a checkout's, not another install's)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.abspath(SRC), env.get("PYTHONPATH")) if p)
    return env


def _inspect(core, *args, env=None):
    return subprocess.run([sys.executable, "-m", "fastredlock", "inspect", "--core", core, "--timeout", "0.3", *args],
                          capture_output=True, text=True, timeout=60, env=env or _env())


def test_exit_status_says_free_held_partial(masters, core, name, make_client):
    assert EXIT_STATUS == {"free": 0, "held": 1, "partial": 3, "unknown": 4}
    done = _inspect(core, *masters.urls, name)
    assert done.returncode == 0, done.stderr
    assert "free on every master" in done.stdout
    dlm = make_client(masters.urls)
    lock = dlm.lock(name, ttl=5)
    assert lock.acquire()
    token = lock.token.decode()
    done = _inspect(core, *masters.urls, name)
    assert done.returncode == 1, done.stderr
    assert f"held by {holder_of(token)} on 5 of 5 masters" in done.stdout
    assert token.split(":")[0] not in done.stdout + done.stderr
    lock.release()
    stale = new_token()
    for m in masters[:2]:
        m.command("SET", name, stale, "PX", 5000)
    try:
        done = _inspect(core, *masters.urls, name)
        assert done.returncode == 3 and "partially held: on 2 of 5" in done.stdout
    finally:
        for m in masters[:2]:
            m.command("DEL", name)


def test_json_and_masters_from_the_environment(masters, core, name, make_client):
    dlm = make_client(masters.urls, prefix="app:")
    lock = dlm.lock(name, ttl=5, fencing=True)
    assert lock.acquire()
    done = _inspect(core, "--json", "--prefix", "app:", name, env=_env(FASTREDLOCK_MASTERS=",".join(masters.urls)))
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert data["state"] == "held" and data["held"] and data["holder"] == holder_of(lock.token)
    assert data["name"] == name and data["fence"] == lock.fence and data["quorum"] == 3
    assert 4 < data["validity"] <= data["remaining"] < 5.1
    assert [m["outcome"] for m in data["masters"]] == ["held"] * 5
    assert set(data["masters"][0]) == {"master", "outcome", "held", "ttl_remaining", "holder", "fence", "detail"}
    lock.release()


def test_unknown_when_too_few_masters_answer(masters, core, name, dead_port):
    dead = [f"redis://127.0.0.1:{dead_port}/0", f"redis://127.0.0.1:{dead_port}/1"]
    done = _inspect(core, "--json", masters.urls[0], *dead, name)
    assert done.returncode == 4, done.stdout  # 1 of 3 answered: the other two could make a quorum
    data = json.loads(done.stdout)
    assert data["state"] == "unknown" and data["masters"][1]["outcome"] == "connection error"
    assert data["masters"][1]["detail"]


def test_bad_usage(one_core):
    done = _inspect(one_core, env=_env(FASTREDLOCK_MASTERS=""))
    assert done.returncode == 2
    done = _inspect(one_core, "only-a-name", env=_env(FASTREDLOCK_MASTERS=""))
    assert done.returncode == 2 and "no masters" in done.stderr


def test_a_read_only_acl_user_can_inspect(masters, core, name, make_client):
    user = f"reader-{os.getpid()}"
    for m in masters:
        assert m.command("ACL", "SETUSER", user, "on", ">pw", "~*", "-@all", "+get", "+pttl") == b"OK"
    try:
        lock = make_client(masters.urls).lock(name, ttl=5)
        assert lock.acquire()
        urls = [f"redis://{user}:pw@{m.host}:{m.port}" for m in masters]
        done = _inspect(core, *urls, name)
        assert done.returncode == 1, done.stdout + done.stderr
        lock.release()
    finally:
        for m in masters:
            m.command("ACL", "DELUSER", user)


def test_family_kinds_are_inspected_with_kind_and_limit(masters, core, name, make_client):
    dlm = make_client(masters.urls)
    done = _inspect(core, "--kind", "semaphore", "--limit", "3", *masters.urls, name)
    assert done.returncode == 0, done.stderr
    assert "[free slots] 0, 1, 2" in done.stdout and "0 of 3 permits held" in done.stdout
    permit = dlm.semaphore(name, 3, ttl=5)
    assert permit.acquire()
    done = _inspect(core, "--kind", "semaphore", "--limit", "3", *masters.urls, name)
    assert done.returncode == 1, done.stderr
    assert f"[slot {permit.slot}]" in done.stdout and "1 of 3 permits held" in done.stdout
    assert holder_of(permit.token) in done.stdout and permit.token.decode() not in done.stdout
    permit.release()
    reader = dlm.rwlock(name, ttl=5).read
    assert reader.acquire()
    done = _inspect(core, "--kind", "rwlock", "--json", *masters.urls, name)
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert data["kind"] == "rwlock" and data["readers"] == 1 and data["state"] == "held" and data["held"]
    reader.release()
    rlock = dlm.rlock(name, ttl=5)
    assert rlock.acquire() and rlock.acquire()
    done = _inspect(core, "--kind", "rlock", *masters.urls, name)
    assert done.returncode == 1 and "entered 2 time(s)" in done.stdout, done.stdout + done.stderr
    rlock.release()
    rlock.release()
    done = _inspect(core, "--kind", "rlock", *masters.urls, name)
    assert done.returncode == 0 and "(rlock): free" in done.stdout, done.stdout + done.stderr
    done = _inspect(core, "--kind", "semaphore", *masters.urls, name)  # no --limit
    assert done.returncode == 2 and "limit" in done.stderr


def test_multi_host_urls_are_split_as_run_splits_them(one_core, masters, name, dead_port):
    # a Sentinel URL names several sentinels with commas: inspect keeps it whole (it split it at
    # every comma, into a sentinel URL and a "127.0.0.1:port/service" that is no URL)
    from fastredlock.testing import start_sentinels

    with start_sentinels("inspected", count=1, replicas=0, failover_ready=False) as group:
        (host, port), = group.addresses
        url = f"redis+sentinel://127.0.0.1:{dead_port},{host}:{port}/inspected"
        done = _inspect(one_core, f"{url},{masters.urls[0]}", masters.urls[1], name)
        assert done.returncode == 0, done.stderr
        assert "free on every master" in done.stdout and "sentinel:inspected" in done.stdout
