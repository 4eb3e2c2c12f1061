"""``LockDependency`` without a server: its ``hold()`` block on real masters with a Starlette
``Request`` built from an ASGI scope (both cores, both loops): the name from a template or a
callable, 423 when held, 503 when no quorum answers, release when the block raises; and the errors
for bad arguments."""
from __future__ import annotations

import socket

import pytest

pytest.importorskip("starlette")
from starlette.exceptions import HTTPException  # noqa: E402
from starlette.requests import Request  # noqa: E402

from fastredlock.jobs.asgi import LockDependency  # noqa: E402


def _request(**path_params):
    return Request({"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b"",
                    "path_params": path_params})


def test_hold_names_holds_rejects_and_releases(arun, aclient, masters, name, keys_left):
    async def main():
        dlm = aclient(masters.urls)
        dep = LockDependency(dlm, name + ":{order}", ttl=5, status_code=423)
        key = f"{name}:42"
        async with dep.hold(_request(order=42)) as lock:
            assert lock.locked() and keys_left(key) == 5
            with pytest.raises(HTTPException) as info:
                async with dep.hold(_request(order=42)):
                    pytest.fail("entered while held")
            assert info.value.status_code == 423 and info.value.detail == f"{key} is in progress"
            async with dep.hold(_request(order=43)):  # another name: held side by side
                assert keys_left(f"{name}:43") == 5
        assert keys_left(key) == 0 and keys_left(f"{name}:43") == 0

        async def by_callable(request):
            return f"{name}:user-{request.path_params['user']}"

        dep = LockDependency(lambda request: dlm, by_callable, ttl=5)
        with pytest.raises(ZeroDivisionError):
            async with dep.hold(_request(user=7)):
                assert keys_left(f"{name}:user-7") == 5
                1 / 0
        assert keys_left(f"{name}:user-7") == 0
        with pytest.raises(LookupError, match="no path parameter"):
            async with LockDependency(dlm, "{missing}").hold(_request()):
                pass
        await dlm.aclose()

    arun(main())


def test_no_quorum_is_503(arun, aclient):
    ports = []
    for _ in range(3):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])

    async def main():
        dlm = aclient([f"redis://127.0.0.1:{p}" for p in ports])
        with pytest.raises(HTTPException) as info:
            async with LockDependency(dlm, "x").hold(_request()):
                pytest.fail("held without a quorum")
        assert info.value.status_code == 503
        await dlm.aclose()

    arun(main())


def test_bad_arguments(masters, one_core):
    from fastredlock.asyncio import Redlock

    dlm = Redlock(masters.urls, core=one_core)
    for exc, message, args, kwargs in [
        (TypeError, "dlm must be", (object(), "x"), {}),
        (TypeError, "name must be", (dlm, ""), {}),
        (ValueError, "ttl must be", (dlm, "x"), {"ttl": 0}),
        (ValueError, "on_held must be", (dlm, "x"), {"on_held": "skip"}),
        (ValueError, "needs wait=", (dlm, "x"), {"on_held": "wait"}),
        (ValueError, "wait= applies", (dlm, "x"), {"wait": 1}),
        (ValueError, "status_code must be", (dlm, "x"), {"status_code": 500}),
    ]:
        with pytest.raises(exc, match=message):
            LockDependency(*args, **kwargs)
