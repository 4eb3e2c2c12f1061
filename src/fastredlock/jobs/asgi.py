"""A lock held for the length of a request: a FastAPI dependency, and a block for Starlette.

::

    from fastapi import Depends, FastAPI
    from fastredlock.jobs.asgi import LockDependency

    app = FastAPI(lifespan=...)           # the lifespan makes app.state.dlm, a fastredlock.asyncio.Redlock
    pay_lock = LockDependency(lambda request: request.app.state.dlm, "orders:{order_id}:pay", ttl=10)

    @app.post("/orders/{order_id}/pay")
    async def pay(order_id: int, lock=Depends(pay_lock)):
        ...                               # no other request pays order_id meanwhile, on any replica

The dependency acquires the lock before the endpoint runs, yields the held
:class:`fastredlock.asyncio.Lock`, and releases it when FastAPI runs the dependency's exit (after
the response, or when the endpoint raised, or the client went away: asyncio cancellation releases
it too). The lock is renewed by the client's watchdog while it is held, so a slow request keeps it.

When the name is held by another request: ``on_held="reject"`` (the default) answers at once with
``status_code`` (409 Conflict by default; 423 Locked, 429 or 503 if you prefer) and the endpoint
does not run; ``on_held="wait"`` waits up to ``wait`` seconds, then rejects the same way. No quorum
of masters reachable: 503 Service Unavailable. A lock lost while the request ran (a renewal could
not reach a quorum) cannot change a response already sent: it is logged (logger
``fastredlock.jobs``), counted by the ``lost`` event (:mod:`fastredlock.metrics`), and the lock's
:attr:`~fastredlock.asyncio.Lock.lost` says so to an endpoint that checks before it commits.

For Starlette without FastAPI's dependencies, ``async with pay_lock.hold(request) as lock:`` in the
endpoint does the same (rejection is an ``HTTPException``, which Starlette turns into the response).
"""
from __future__ import annotations

import inspect
import logging
import math
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Union

from starlette.exceptions import HTTPException
from starlette.requests import Request

from ..asyncio import Redlock as AsyncRedlock
from ..errors import LockLostError, LockNotOwnedError

__all__ = ["LockDependency", "REJECT", "WAIT"]

log = logging.getLogger("fastredlock.jobs")

#: ``on_held``: answer ``status_code`` at once.
REJECT = "reject"
#: ``on_held``: wait up to ``wait`` seconds, then answer ``status_code``.
WAIT = "wait"

_STATUS_CODES = (409, 423, 429, 503)


class LockDependency:
    """A FastAPI dependency (``Depends(LockDependency(...))``) that holds a lock for a request.

    :param dlm: a :class:`fastredlock.asyncio.Redlock`, or a callable taking the request and
        returning one (e.g. ``lambda request: request.app.state.dlm``, for a client made in the
        app's lifespan, on the server's event loop).
    :param name: the lock's name: a template filled from the request's path parameters
        (``"orders:{order_id}"``), or a callable (plain or ``async``) taking the request and
        returning the name. Keep it to what must not run twice at once.
    :param ttl: the lock's time to live, seconds (renewed every ``ttl / 3`` while held; the
        longest a killed server process keeps the name).
    :param on_held: ``"reject"`` (default) or ``"wait"`` (up to ``wait`` seconds, then reject).
    :param wait: with ``on_held="wait"`` (required there, only there): the longest wait, seconds.
    :param status_code: the answer when the name is held: 409 (default), 423, 429 or 503.
    :param detail: the rejection's detail (default: ``"<name> is in progress"``).
    """

    def __init__(self, dlm: Any, name: Union[str, Callable[[Request], Any]], *, ttl: float = 10.0,
                 on_held: str = REJECT, wait: Any = None, status_code: int = 409, detail: Any = None) -> None:
        if not isinstance(dlm, AsyncRedlock) and not callable(dlm):
            raise TypeError("dlm must be a fastredlock.asyncio.Redlock or a callable taking the request and "
                            f"returning one, not {type(dlm).__name__}")
        if not (isinstance(name, str) and name) and not callable(name):
            raise TypeError(f"name must be a non-empty str template or a callable, not {name!r}")
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not (math.isfinite(ttl) and ttl > 0):
            raise ValueError(f"ttl must be a finite number of seconds > 0, got {ttl!r}")
        if on_held not in (REJECT, WAIT):
            raise ValueError(f"on_held must be 'reject' or 'wait', got {on_held!r}")
        if on_held == WAIT:
            if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not (math.isfinite(wait) and wait > 0):
                raise ValueError(f"on_held='wait' needs wait= (a finite number of seconds > 0), got {wait!r}")
        elif wait is not None:
            raise ValueError("wait= applies to on_held='wait' only")
        if status_code not in _STATUS_CODES:
            raise ValueError(f"status_code must be one of {_STATUS_CODES}, got {status_code!r}")
        self.dlm = dlm
        self.name = name
        self.ttl = float(ttl)
        self.on_held = on_held
        self.wait = None if wait is None else float(wait)
        self.status_code = status_code
        self.detail = detail

    async def name_of(self, request: Request) -> str:
        """The lock's name for ``request`` (the template filled, or the callable's answer)."""
        if callable(self.name):
            name = self.name(request)
            if inspect.isawaitable(name):
                name = await name
        else:
            try:
                name = self.name.format(**request.path_params)
            except (KeyError, IndexError) as exc:
                raise LookupError(f"lock name {self.name!r}: the request has no path parameter {exc}") from None
        if not (isinstance(name, str) and name):
            raise TypeError(f"the lock name for this request must be a non-empty str, not {name!r}")
        return name

    def _client(self, request: Request) -> AsyncRedlock:
        dlm = self.dlm
        if not isinstance(dlm, AsyncRedlock):
            dlm = dlm(request)
            if not isinstance(dlm, AsyncRedlock):
                raise TypeError(f"the dlm callable returned a {type(dlm).__name__}, not a fastredlock.asyncio.Redlock")
        return dlm

    @asynccontextmanager
    async def hold(self, request: Request) -> AsyncIterator[Any]:
        """Hold the request's lock for the block (Starlette endpoints; the dependency uses it too):
        yields the held :class:`fastredlock.asyncio.Lock`; raises ``HTTPException`` when the name
        is held (``status_code``) or no quorum answers (503)."""
        name = await self.name_of(request)

        def lost(lock: Any) -> None:
            log.warning("fastredlock.jobs: the lock %r of a request was lost while the request ran", name)

        lock = self._client(request).lock(name, self.ttl, auto_extend=True, on_lost=lost)
        got = await (lock.acquire(timeout=self.wait) if self.on_held == WAIT else lock.acquire(blocking=False))
        if not got:
            outcomes = await lock.settled_outcomes()
            if any(o.outcome == "no" for o in outcomes):
                raise HTTPException(self.status_code, detail=self.detail or f"{name} is in progress")
            raise HTTPException(503, detail="the lock service is unavailable")
        try:
            yield lock
        finally:
            try:
                await lock.release()
            except (LockLostError, LockNotOwnedError):
                log.warning("fastredlock.jobs: the lock %r of a request had been lost when it was released", name)

    async def __call__(self, request: Request) -> AsyncIterator[Any]:
        """The dependency: yields the held lock for the request, released after it."""
        async with self.hold(request) as lock:
            yield lock

    def __repr__(self) -> str:
        return f"LockDependency(name={self.name!r}, ttl={self.ttl:g}, on_held={self.on_held!r}, status_code={self.status_code})"
