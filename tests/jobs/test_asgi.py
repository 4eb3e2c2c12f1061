"""``fastredlock.jobs.asgi.LockDependency`` in a real FastAPI app under real uvicorn servers: two
server processes (one per core; one on uvloop, one on asyncio's loop) on free loopback ports, the same lock names, concurrent requests
from threads. No two requests for one name overlap (counted in a shared Redis), waiting requests
all get through, rejected ones get the status asked for, and no lock key is left."""
from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import fastredlock
from fastredlock.testing import start_masters

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

HERE = os.path.dirname(os.path.abspath(__file__))
#: The two servers: (the core of the app's client, uvicorn's event loop); the pure core for both
#: where the C build is off (FASTREDLOCK_NO_EXTENSIONS) or absent.
SERVERS = (("cython" if fastredlock.CORE == "cython" else "python", "uvloop"), ("python", "asyncio"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(port: int, method: str, path: str, timeout: float = 15.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()


@pytest.fixture(scope="module")
def servers(masters, tmp_path_factory):
    """Two uvicorn servers of tests/jobs/_asgi_app.py (see SERVERS) and their overlap broker."""
    with start_masters(1) as broker:
        procs, ports = [], []
        try:
            for core, loop in SERVERS:
                port = _free_port()
                log = tmp_path_factory.mktemp("uvicorn") / f"{core}.log"
                env = dict(os.environ, JOBS_MASTERS=",".join(masters.urls), JOBS_CORE=core,
                           JOBS_BROKER=broker[0].url, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
                with open(log, "wb") as err:  # (the server keeps its own descriptor)
                    procs.append(subprocess.Popen(
                        [sys.executable, "-m", "uvicorn", "_asgi_app:app", "--host", "127.0.0.1", "--port", str(port),
                         "--loop", loop, "--log-level", "warning"], env=env, cwd=HERE, stdout=subprocess.DEVNULL,
                        stderr=err))
                procs[-1].log = log
                ports.append(port)
            deadline = time.monotonic() + 20
            for proc, port in zip(procs, ports):
                while True:
                    if proc.poll() is not None:
                        pytest.fail(f"uvicorn exited: {proc.log.read_text(errors='replace')}")
                    try:
                        if _request(port, "GET", "/health", timeout=1)[0] == 200:
                            break
                    except OSError:
                        pass
                    if time.monotonic() > deadline:
                        pytest.fail("uvicorn did not answer within 20 s")
                    time.sleep(0.05)
            yield ports, broker[0]
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:  # pragma: no cover
                    proc.kill()
                    proc.wait(5)


def _burst(ports, path_of, count):
    """``count`` concurrent requests, spread over both servers; their (status, body) answers."""
    with ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(_request, ports[i % len(ports)], "POST", path_of(i)) for i in range(count)]
        return [f.result(timeout=30) for f in futures]


def test_waiting_requests_never_overlap(servers, keys_on, masters):
    ports, broker = servers
    answers = _burst(ports, lambda i: f"/wait/item{i % 2}", 20)
    assert [status for status, _ in answers] == [200] * 20, answers
    assert {(body["core"], body["loop"]) for _, body in answers} == set(SERVERS), answers  # both served
    for item in ("item0", "item1"):
        assert int(broker.command("GET", f"overlaps:{item}") or 0) == 0
        assert int(broker.command("GET", f"active:{item}")) == 0
        assert keys_on(masters, f"work:{item}") == 0


def test_held_requests_are_rejected_with_the_status_asked_for(servers, keys_on, masters):
    ports, broker = servers
    answers = _burst(ports, lambda i: "/reject/hot", 20)
    statuses = [status for status, _ in answers]
    assert set(statuses) <= {200, 423} and 200 in statuses and 423 in statuses, answers
    rejected = [body for status, body in answers if status == 423]
    assert rejected[0] == {"detail": "work:hot is in progress"}
    assert int(broker.command("GET", "overlaps:hot") or 0) == 0
    assert keys_on(masters, "work:hot") == 0


def test_without_the_dependency_requests_do_overlap(servers):
    """The negative control: the same work without the lock overlaps, so the counter can see it."""
    ports, broker = servers
    answers = _burst(ports, lambda i: "/free/control", 20)
    assert [status for status, _ in answers] == [200] * 20
    assert int(broker.command("GET", "overlaps:control") or 0) > 0
