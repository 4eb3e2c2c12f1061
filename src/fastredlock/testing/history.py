"""Histories of lock operations, Jepsen style: what each client asked for, when, and how it ended.

Every operation is recorded twice: when it is *invoked* and when it *completes*, each on the
machine-wide monotonic clock (``time.monotonic()``, CLOCK_MONOTONIC, shared by every process of one
machine). A completion says ``ok``, ``fail`` or ``unknown`` (the outcome cannot be known: an error
mid-flight); an invocation never completed (the process was killed) loads as ``unknown`` too.

:class:`HistoryRecorder` appends one JSON object per line to a file, flushed at once with a single
``write`` on an ``O_APPEND`` descriptor, so a process killed with SIGKILL loses nothing it recorded
and several processes may share one file. :func:`load_history` pairs the lines back into
:class:`Op` records for :func:`fastredlock.testing.check_history`.

Example::

    rec = HistoryRecorder("history.jsonl", process="c1")
    p = rec.invoke("acquire", name="job")
    if lock.acquire(timeout=2):
        rec.complete(p, "ok", token=lock.token.decode(), fence=lock.fence,
                     valid_until=time.monotonic() + lock.validity)
    else:
        rec.complete(p, "fail")
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

__all__ = ["Op", "HistoryRecorder", "load_history", "ops_from_records", "RESULTS"]

#: The outcomes an operation can end with.
RESULTS = ("ok", "fail", "unknown")

_KNOWN = ("name", "token", "fence", "valid_until", "hold", "accepted", "seq", "error")


class Op:
    """One operation of a history: who invoked what, when, and how it ended.

    :param process: the client that ran it (a string unique per process incarnation).
    :param index: its number within that process's history (unique per process).
    :param kind: ``"acquire"``, ``"release"``, ``"write"`` (a use of the protected resource), or a
        nemesis's action (``"restart"``, ``"pause"``...).
    :param invoke: monotonic time of the invocation.
    :param complete: monotonic time of the completion (``None``: never completed).
    :param result: ``"ok"``, ``"fail"`` or ``"unknown"``.

    The other attributes are ``None`` where they do not apply: ``name`` (the lock), ``token`` and
    ``fence`` (of an acquisition, carried by its writes and release), ``valid_until`` (an ``ok``
    acquire: the monotonic time at which its validity ends, measured by the client), ``hold`` (a
    write or release: the ``index`` of the acquire it belongs to), ``accepted`` (a write: whether the
    resource took it), ``seq`` (a write: its position in the resource's log), ``error`` (a text),
    and ``extra`` (anything else recorded).
    """

    __slots__ = ("process", "index", "kind", "invoke", "complete", "result") + _KNOWN + ("extra",)

    def __init__(self, process: str, index: int, kind: str, invoke: float, complete: Optional[float] = None,
                 result: str = "unknown", *, name: Optional[str] = None, token: Optional[str] = None,
                 fence: Optional[int] = None, valid_until: Optional[float] = None, hold: Optional[int] = None,
                 accepted: Optional[bool] = None, seq: Optional[int] = None, error: Optional[str] = None,
                 extra: Optional[Dict[str, Any]] = None) -> None:
        if result not in RESULTS:
            raise ValueError(f"result must be one of {RESULTS}, not {result!r}")
        self.process = process
        self.index = index
        self.kind = kind
        self.invoke = invoke
        self.complete = complete
        self.result = result
        self.name = name
        self.token = token
        self.fence = fence
        self.valid_until = valid_until
        self.hold = hold
        self.accepted = accepted
        self.seq = seq
        self.error = error
        self.extra = extra or {}

    @property
    def key(self) -> str:
        """``"process:index"``: the operation's identity across a history and a resource's log."""
        return f"{self.process}:{self.index}"

    def to_dict(self) -> Dict[str, Any]:
        """The operation as a JSON-ready dict (fields that are ``None`` left out)."""
        d: Dict[str, Any] = {"process": self.process, "index": self.index, "kind": self.kind,
                             "invoke": self.invoke, "complete": self.complete, "result": self.result}
        for k in _KNOWN:
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        d.update(self.extra)
        return d

    def __repr__(self) -> str:
        return f"<Op {self.key} {self.kind} {self.result} [{self.invoke:.3f}, {self.complete}]>"


class _Pending:
    __slots__ = ("index", "kind", "invoke")

    def __init__(self, index: int, kind: str, invoke: float) -> None:
        self.index = index
        self.kind = kind
        self.invoke = invoke


class HistoryRecorder:
    """Append a process's operations to a JSON-lines file as they are invoked and completed.

    :param path: the file (created if missing, appended to otherwise; several processes may share it).
    :param process: this process's name in the history; unique per process *incarnation* (a
        restarted client takes a new name, e.g. ``"c1.2"``).
    :param clock: the clock (default ``time.monotonic``, the one all processes of a machine share).

    :meth:`invoke` records the invocation and returns a handle; :meth:`complete` records its end.
    Each line is written and flushed before the call returns.
    """

    def __init__(self, path: Union[str, os.PathLike], process: str, clock: Any = time.monotonic) -> None:
        self.path = os.fspath(path)
        self.process = process
        self.clock = clock
        self._next = 0
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _write(self, record: Dict[str, Any]) -> None:
        os.write(self._fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())

    def invoke(self, kind: str, **fields: Any) -> _Pending:
        """Record that operation ``kind`` starts now; ``fields`` as :class:`Op`'s keyword arguments."""
        index, self._next = self._next, self._next + 1
        now = self.clock()
        self._write({"type": "invoke", "process": self.process, "index": index, "kind": kind, "time": now,
                     **fields})
        return _Pending(index, kind, now)

    def complete(self, pending: _Pending, result: str, **fields: Any) -> float:
        """Record that the operation ``pending`` ended now with ``result``; return the time recorded."""
        if result not in RESULTS:
            raise ValueError(f"result must be one of {RESULTS}, not {result!r}")
        now = self.clock()
        self._write({"type": "complete", "process": self.process, "index": pending.index, "time": now,
                     "result": result, **fields})
        return now

    def close(self) -> None:
        """Close the file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "HistoryRecorder":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _files(paths: Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]) -> List[str]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found: List[str] = []
    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            found.extend(sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".jsonl")))
        else:
            found.append(p)
    return found


def load_history(paths: Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]) -> List[Op]:
    """Read JSON-lines histories (files, or directories of ``*.jsonl``) into :class:`Op` records.

    An invocation and its completion become one :class:`Op`; an invocation never completed is an
    ``unknown`` operation with ``complete=None``. A torn last line (a process killed mid-write) is
    skipped. Operations are returned in invocation order.
    """
    lines: List[Dict[str, Any]] = []
    for path in _files(paths):
        with open(path, "rb") as f:
            for raw in f:
                try:
                    lines.append(json.loads(raw))
                except ValueError:
                    continue
    return ops_from_records(lines)


def ops_from_records(records: Iterable[Dict[str, Any]]) -> List[Op]:
    """Pair invoke/complete records (as :class:`HistoryRecorder` writes them) into :class:`Op` records."""
    ops: Dict[tuple, Op] = {}
    for r in records:
        key = (r["process"], r["index"])
        fields = {k: v for k, v in r.items() if k not in ("type", "process", "index", "kind", "time", "result")}
        known = {k: fields.pop(k) for k in _KNOWN if k in fields}
        if r["type"] == "invoke":
            ops[key] = Op(r["process"], r["index"], r["kind"], r["time"], extra=fields, **known)
        elif key in ops:
            op = ops[key]
            op.complete = r["time"]
            op.result = r.get("result", "unknown")
            for k, v in known.items():
                setattr(op, k, v)
            op.extra.update(fields)
    return sorted(ops.values(), key=lambda o: o.invoke)
