"""The batch operations as plans, for both front-ends: ``acquire_many``, ``lock_all``, ``release_many``.

Each is written once here as a plan (a generator of :mod:`fastredlock.engine.steps`, like a lock's
operations in :mod:`fastredlock.handles.lock`); ``Redlock.acquire_many`` and its siblings, sync and
asyncio, only hand it to their driver. Their rounds run as a :class:`~fastredlock.engine.steps.Batch`
(calls on one core alone; what a caller who is gone leaves behind is released by the driver) and a
batch release not waited for as an :class:`~fastredlock.engine.steps.ReleaseUnwaited`.
"""
from __future__ import annotations

from typing import Any, Generator, List, Optional, Sequence, Type, Union

from ..engine.steps import Batch, Call, ReleaseUnwaited
from ..engine.tokens import new_token, new_tokens
from ..protocol.plans import left_behind, left_behind_of

__all__ = ["acquire_many_plan", "lock_all_plan", "release_many_plan"]

Plan = Generator[Any, Any, Any]


def _listed(value: Any) -> List[Any]:
    """A core's answer as a list of rounds (the asyncio driver hands a job one round alone)."""
    return value if isinstance(value, list) else [value]


def acquire_many_plan(cls: Type[Any], client: Any, names: Sequence[Union[str, bytes]], ttl: float) -> Plan:
    """``Redlock.acquire_many``: K pipelined ``SET NX PX`` per master in one round; per name, a held
    handle of ``cls`` or None. A name whose attempt failed but may have landed is released behind
    its SETs (not awaited)."""
    names, keys, ttl_ms = client._batch_args(names, ttl)
    tokens = new_tokens(len(keys))
    rounds, carriers = yield Batch(_acquire_many_calls(keys, tokens, ttl_ms), (keys, tokens))
    return cls.held(client, names, keys, float(ttl), ttl_ms, tokens, rounds, carriers)


def _acquire_many_calls(keys: List[bytes], tokens: List[bytes], ttl_ms: int) -> Plan:
    rounds = _listed((yield Call("acquire_many", keys, tokens, ttl_ms)))
    failed = left_behind_of(rounds)
    if failed:  # written behind the SETs on each connection, not awaited
        yield Call("release_many_nowait", [keys[j] for j in failed], [tokens[j] for j in failed])
    return rounds


def lock_all_plan(cls: Type[Any], client: Any, names: Sequence[Union[str, bytes]], ttl: float) -> Plan:
    """``Redlock.lock_all``: one script per master sets every key or none; the held handles of
    ``cls`` (one per name, one token and one validity), or None."""
    names, keys, ttl_ms = client._batch_args(names, ttl)
    tokens = [new_token()] * len(keys)
    rounds, carriers = yield Batch(_lock_all_calls(keys, tokens, ttl_ms), (keys, tokens))
    if not rounds[0].ok:
        return None
    held = cls.held(client, names, keys, float(ttl), ttl_ms, tokens, rounds, carriers)
    return [lock for lock in held if lock is not None]  # (all of them: the round held every key)


def _lock_all_calls(keys: List[bytes], tokens: List[bytes], ttl_ms: int) -> Plan:
    rnd = _listed((yield Call("acquire_all", keys, tokens[0], ttl_ms)))[0]
    if left_behind(rnd):
        yield Call("release_many_nowait", keys, tokens)
    return [rnd] * len(keys)  # one round decides every key


def release_many_plan(cls: Type[Any], client: Any, locks: Sequence[Any], wait: Optional[bool]) -> Plan:
    """``Redlock.release_many``: one round releases every held lock; per lock, whether a quorum
    still held it. Every handle holds nothing afterwards. Not waited for (``wait``, else the
    client's ``wait_release``): written, None, each lock reported once its answers are in."""
    held, keys, tokens, carriers = cls.release_args_of(locks)  # raises if a handle holds nothing
    if not held:
        return []
    for lock in held:
        lock._unwatch()
    if not client.executor.release_waits(wait):
        on_done, acquired_at = cls.unwaited_args_of(held)
        cls.released_all(held, None, False)
        yield ReleaseUnwaited(keys, tokens, carriers, on_done, acquired_at, lambda rounds: cls.took_rounds(held, rounds))
        return None
    rounds = None
    try:
        rounds, _carriers = yield Batch(_release_many_calls(keys, tokens), None, carriers)
    finally:
        cls.released_all(held, rounds)
    return [bool(rnd.ok) for rnd in rounds]


def _release_many_calls(keys: List[bytes], tokens: List[bytes]) -> Plan:
    return _listed((yield Call("release_many", keys, tokens)))
