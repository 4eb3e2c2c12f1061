"""``Lock``: one named lock handle — acquire with retries, extend, release, context manager.

Every public method validates, then makes its rounds through a core borrowed from the client. No
path leaves keys behind: a failed or interrupted acquisition releases on every master that may hold
its token, and a failed extension releases everywhere and reports the lock lost.
"""
from __future__ import annotations

import random
import time
from time import monotonic
from typing import TYPE_CHECKING, List, Optional, Union

from . import _outcomes as oc
from ._tokens import new_token
from .errors import LockError, LockNotAcquiredError, LockNotOwnedError, MasterOutcome

if TYPE_CHECKING:
    from .client import Redlock

__all__ = ["Lock"]


class Lock:
    """A handle on the lock called ``name``; get one from :meth:`Redlock.lock`.

    A handle holds at most one acquisition at a time. It is not meant to be shared between threads
    (share the :class:`Redlock` client instead and take one handle per thread).
    """

    __slots__ = ("_client", "name", "key", "ttl", "_ttl_ms", "token", "_valid_until", "_last")

    def __init__(self, client: "Redlock", name: Union[str, bytes], ttl: float) -> None:
        self._client = client
        #: The name as given.
        self.name = name
        #: The key written on the masters (the client's prefix + the name, as bytes).
        self.key: bytes = client._key(name)
        self._ttl_ms = client._ttl_ms(ttl)
        #: Time to live in seconds requested for each acquisition (and default for :meth:`extend`).
        self.ttl = float(ttl)
        #: The token of the current acquisition (bytes), or ``None`` when not held.
        self.token: Optional[bytes] = None
        self._valid_until = 0.0
        self._last = None

    # --- state ------------------------------------------------------------------------------
    @property
    def validity(self) -> float:
        """Seconds this handle can still rely on holding the lock (0.0 when not held).

        Conservative: measured on the monotonic clock from before the acquiring (or extending)
        round was sent, minus the round's duration and the clock-drift allowance.
        """
        if self.token is None:
            return 0.0
        return max(0.0, self._valid_until - monotonic())

    def locked(self) -> bool:
        """Return whether this handle holds the lock with validity left (a local check, no I/O)."""
        return self.token is not None and monotonic() < self._valid_until

    @property
    def outcomes(self) -> List[MasterOutcome]:
        """What each master answered in this handle's last round (empty before the first)."""
        return self._client._outcomes(self._last) if self._last is not None else []

    # --- operations -------------------------------------------------------------------------
    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Try to acquire the lock; return whether it is now held.

        ``blocking=False`` makes exactly one attempt. With ``timeout`` (seconds), attempts go on
        until it has passed; without, up to ``1 + retry_count`` attempts are made. Between attempts
        the handle sleeps ``retry_delay`` plus a random jitter of up to ``retry_jitter``.
        """
        if self.token is not None:
            raise LockError("this handle already holds the lock; release it first", self.name)
        client = self._client
        deadline = None
        if timeout is not None:
            if not blocking:
                raise ValueError("timeout cannot be used with blocking=False")
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
                raise ValueError(f"timeout must be a number >= 0 or None, got {timeout!r}")
            deadline = monotonic() + timeout
        attempts = 0
        while True:
            attempts += 1
            if self._attempt():
                return True
            if not blocking:
                return False
            delay = client.retry_delay + random.uniform(0.0, client.retry_jitter)
            if deadline is None:
                if attempts > client.retry_count:
                    return False
            else:
                remaining = deadline - monotonic()
                if remaining <= 0:
                    return False
                delay = min(delay, remaining)
            time.sleep(delay)

    def _attempt(self) -> bool:
        """One acquisition round; on failure release wherever our token may have landed."""
        client = self._client
        token = new_token()
        core = client._checkout()
        clean = False
        try:
            rnd = core.acquire(self.key, token, self._ttl_ms)
            self._last = rnd
            if rnd.ok:
                self.token = token
                self._valid_until = rnd.started + rnd.elapsed + rnd.validity
                clean = True
                return True
            # A master that answered anything but a clear "no" may hold our key (an OK outside a
            # quorum, or a SET that landed after its timeout): release on all of them.
            if any(code != oc.NO for code in rnd.outcomes):
                core.release(self.key, token)
            clean = True
            return False
        except BaseException:
            # Interrupted mid-round (KeyboardInterrupt, a bug): our SET may have landed anywhere.
            core.close()
            try:
                core.release(self.key, token)
            except Exception:  # pragma: no cover - best effort while another error propagates
                pass
            raise
        finally:
            client._checkin(core, clean)

    def release(self) -> None:
        """Release the lock on every master.

        Raises :class:`LockNotOwnedError` if fewer than a quorum of masters still held this
        acquisition's token (it expired, or another client took it); the handle is released either way.
        """
        token = self._require_token()
        client = self._client
        core = client._checkout()
        clean = False
        try:
            rnd = core.release(self.key, token)
            clean = True
        finally:
            client._checkin(core, clean)
            self.token = None
            self._valid_until = 0.0
        self._last = rnd
        if not rnd.ok:
            raise LockNotOwnedError(
                f"lock {self.name!r} was no longer held on a quorum ({rnd.successes}/{client.quorum} needed) "
                "when released",
                self.name,
                client._outcomes(rnd),
            )

    def extend(self, ttl: Optional[float] = None) -> None:
        """Reset the lock's time to live to ``ttl`` seconds (default: the handle's ``ttl``).

        Succeeds only if a quorum still held the token and the recomputed validity is positive.
        Otherwise the lock is lost: it is released on every master and :class:`LockNotOwnedError`
        is raised.
        """
        token = self._require_token()
        client = self._client
        ttl_ms = self._ttl_ms if ttl is None else client._ttl_ms(ttl)
        core = client._checkout()
        clean = False
        try:
            rnd = core.extend(self.key, token, ttl_ms)
            self._last = rnd
            if rnd.ok:
                self._valid_until = rnd.started + rnd.elapsed + rnd.validity
                if ttl is not None:
                    self.ttl, self._ttl_ms = float(ttl), ttl_ms
                clean = True
                return
            self.token = None
            self._valid_until = 0.0
            core.release(self.key, token)
            clean = True
        finally:
            client._checkin(core, clean)
        raise LockNotOwnedError(
            f"lock {self.name!r} could not be extended on a quorum ({rnd.successes}/{client.quorum} needed); "
            "it is lost and was released",
            self.name,
            client._outcomes(rnd),
        )

    def _require_token(self) -> bytes:
        if self.token is None:
            raise LockError(f"lock {self.name!r} is not held by this handle", self.name)
        return self.token

    # --- context manager --------------------------------------------------------------------
    def __enter__(self) -> "Lock":
        if not self.acquire():
            raise LockNotAcquiredError(
                f"could not acquire lock {self.name!r}", self.name, self.outcomes
            )
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self.release()
        except LockNotOwnedError:
            if exc_type is None:
                raise  # the body ran without the lock for part of its time: say so
            # the body's own exception is the one to see; the lost lock rides along as context

    def __repr__(self) -> str:
        state = f"held, validity={self.validity:.3f}s" if self.token is not None else "not held"
        return f"<Lock {self.name!r} ttl={self.ttl:g}s {state}>"
