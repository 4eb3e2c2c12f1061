"""Check a lock history (and a fenced resource's log) for the violations that matter.

:func:`check_history` reports:

- **held overlaps** -- the lock's own promise. A client *believes* it holds the lock from the
  completion of an ``ok`` acquire until the earlier of the invocation of its release and the end of
  its validity (``valid_until``, measured by the client on the shared monotonic clock). Two such
  intervals of one lock name that intersect are an overlap: two clients held the lock at once by
  their own accounts. (A holder paused past its validity does *not* make one: by then it no longer
  holds, whatever it believes when it wakes.)
- **use overlaps** -- what the protected resource saw: the holds whose accepted writes interleave
  in the resource's log (hold A writes, hold B writes, hold A writes again). Read from the
  resource's own order, so no clock is involved. A holder that was paused past its TTL and writes
  when it wakes makes one, unless its write is refused.
- **stale writes accepted** -- writes the resource accepted with a fence lower than one it had
  already accepted (or equal to it, from another holder). With the fence check on this must be 0;
  :func:`stale_writes` with ``fence_check=False`` replays the same log as a resource that checks
  nothing would have run it, which counts the writes the check caught.
- **late writes** -- writes made by a hold after a hold that began later had already written to the
  resource (in the resource's order): a holder acting after its lock had passed on. Split into those
  the resource accepted (the damage) and refused; a refused write that was *not* late is the current
  holder's write refused (its fence was too low: a fence inversion's cost).
- **fence inversions** -- a hold whose fence is not larger than that of a hold which had ended
  before it began: fences that do not follow the lock's order (for example counters forgotten by a
  restarted master).

Everything here is pure: it reads records and never touches a server, so it can be tested on
planted histories (see ``tests/faults/test_safety_checker.py``).
"""
from __future__ import annotations

import json
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from .history import Op

__all__ = ["Hold", "ResourceWrite", "CheckResult", "check_history", "held_intervals", "find_overlaps",
           "use_overlaps", "stale_writes", "fence_inversions", "late_writes", "writes_from_history"]


class Hold:
    """One acquisition as the checker sees it: who held which lock, with which fence, and when.

    ``start`` is the completion of the ``ok`` acquire; ``end`` the earlier of the release's
    invocation and ``valid_until`` (``valid_until`` alone when no release was invoked).
    """

    __slots__ = ("process", "index", "name", "token", "fence", "start", "end", "valid_until", "released_at")

    def __init__(self, process: str, index: int, name: Optional[str], token: Optional[str], fence: Optional[int],
                 start: float, valid_until: float, released_at: Optional[float]) -> None:
        self.process = process
        self.index = index
        self.name = name
        self.token = token
        self.fence = fence
        self.start = start
        self.valid_until = valid_until
        self.released_at = released_at
        self.end = valid_until if released_at is None else min(released_at, valid_until)

    @property
    def key(self) -> str:
        """``"process:index"`` of the acquire."""
        return f"{self.process}:{self.index}"

    def to_dict(self) -> Dict[str, Any]:
        """The hold as a JSON-ready dict."""
        return {k: getattr(self, k) for k in self.__slots__}

    def __repr__(self) -> str:
        return f"<Hold {self.key} fence={self.fence} [{self.start:.3f}, {self.end:.3f}]>"


class ResourceWrite:
    """One write as the protected resource logged it, in the resource's order (``seq``).

    ``process``/``op`` name the history's write operation (``Op.process``, ``Op.index``), ``hold``
    the index of the acquire it was made under; ``fence`` is ``None`` for a lock without fencing.
    """

    __slots__ = ("seq", "name", "process", "op", "hold", "token", "fence", "accepted")

    def __init__(self, seq: int, name: str, process: str, op: int, hold: int, token: str, fence: Optional[int],
                 accepted: bool) -> None:
        self.seq = seq
        self.name = name
        self.process = process
        self.op = op
        self.hold = hold
        self.token = token
        self.fence = fence
        self.accepted = accepted

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "ResourceWrite":
        """Build one from a dict with the same keys (a line of a resource log)."""
        fence = d.get("fence")
        return cls(int(d["seq"]), d["name"], d["process"], int(d["op"]), int(d["hold"]), d["token"],
                   None if fence in (None, "") else int(fence), bool(d["accepted"]))

    def to_dict(self) -> Dict[str, Any]:
        """The write as a JSON-ready dict."""
        return {k: getattr(self, k) for k in self.__slots__}

    def __repr__(self) -> str:
        return f"<ResourceWrite #{self.seq} {self.process}:{self.op} fence={self.fence} accepted={self.accepted}>"


def held_intervals(ops: Iterable[Op]) -> List[Hold]:
    """The believed-held intervals of a history: one :class:`Hold` per ``ok`` acquire."""
    ops = list(ops)
    releases: Dict[Tuple[str, int], float] = {}
    for op in ops:
        if op.kind == "release" and op.hold is not None:
            k = (op.process, op.hold)
            releases[k] = min(op.invoke, releases.get(k, op.invoke))
    holds = []
    for op in ops:
        if op.kind == "acquire" and op.result == "ok":
            if op.complete is None or op.valid_until is None:
                raise ValueError(f"{op!r}: an ok acquire needs its completion time and valid_until")
            holds.append(Hold(op.process, op.index, op.name, op.token, op.fence, op.complete, op.valid_until,
                              releases.get((op.process, op.index))))
    return sorted(holds, key=lambda h: h.start)


def find_overlaps(holds: Sequence[Hold]) -> List[Tuple[Hold, Hold]]:
    """Pairs of holds of the same lock name whose intervals intersect (each pair once)."""
    found: List[Tuple[Hold, Hold]] = []
    by_name: Dict[Any, List[Hold]] = {}
    for h in holds:
        by_name.setdefault(h.name, []).append(h)
    for group in by_name.values():
        group = sorted(group, key=lambda h: h.start)
        active: List[Hold] = []
        for h in group:
            active = [a for a in active if a.end > h.start]
            found.extend((a, h) for a in active if h.end > h.start and a.end > a.start)
            active.append(h)
    return found


def use_overlaps(writes: Sequence[ResourceWrite]) -> List[Tuple[str, str]]:
    """Pairs of holds (``"process:index"`` keys) whose *accepted* writes interleave in the resource's log."""
    spans: Dict[Tuple[str, str], List[int]] = {}
    for w in writes:
        if w.accepted:
            span = spans.setdefault((w.name, f"{w.process}:{w.hold}"), [w.seq, w.seq])
            span[0], span[1] = min(span[0], w.seq), max(span[1], w.seq)
    found: List[Tuple[str, str]] = []
    by_name: Dict[str, List[Tuple[int, int, str]]] = {}
    for (name, hold), (lo, hi) in spans.items():
        by_name.setdefault(name, []).append((lo, hi, hold))
    for group in by_name.values():
        group.sort()
        active: List[Tuple[int, int, str]] = []
        for lo, hi, hold in group:
            active = [a for a in active if a[1] > lo]
            found.extend((a[2], hold) for a in active)
            active.append((lo, hi, hold))
    return found


def stale_writes(writes: Sequence[ResourceWrite], fence_check: bool = True) -> List[ResourceWrite]:
    """Writes a resource accepted although their fence was stale, in the resource's order.

    A fence is stale when it is lower than the largest fence accepted before it, or equal to it but
    from another holder (another token). ``fence_check=True`` reads the log as the resource ran it
    (only writes it accepted count, and only they raise the largest fence): with a working fence
    check the result is empty. ``fence_check=False`` replays the log as a resource that accepts
    every write: the stale writes it returns are what fencing is there to catch. Writes without a
    fence are ignored.
    """
    stale = []
    top: Optional[int] = None
    top_token: Optional[str] = None
    for w in sorted(writes, key=lambda w: w.seq):
        if w.fence is None or (fence_check and not w.accepted):
            continue
        if top is not None and (w.fence < top or (w.fence == top and w.token != top_token)):
            stale.append(w)
        elif top is None or w.fence > top:
            top, top_token = w.fence, w.token
    return stale


def writes_from_history(ops: Iterable[Op]) -> List[ResourceWrite]:
    """The resource's log rebuilt from a history's ``write`` operations (those whose reply gave a ``seq``).

    For a resource that keeps no log of its own: each write op must carry ``name``, ``hold``,
    ``token``, ``fence``, and in its completion ``accepted`` and ``seq`` (the write's position in the
    resource's order). Writes whose reply never came are left out.
    """
    return sorted((ResourceWrite(op.seq, op.name or "", op.process, op.index, op.hold if op.hold is not None else -1,
                                 op.token or "", op.fence, bool(op.accepted))
                   for op in ops if op.kind == "write" and op.seq is not None), key=lambda w: w.seq)


def late_writes(writes: Sequence[ResourceWrite], holds: Sequence[Hold]) -> List[ResourceWrite]:
    """Writes made after a hold that began later (by the holds' start times) had written, in log order.

    Writes of holds missing from ``holds`` are never late, and never make another write late.
    """
    start = {h.key: h.start for h in holds}
    newest: Dict[str, float] = {}
    late = []
    for w in sorted(writes, key=lambda w: w.seq):
        s = start.get(f"{w.process}:{w.hold}")
        if s is None:
            continue
        if newest.get(w.name, s) > s:
            late.append(w)
        newest[w.name] = max(newest.get(w.name, s), s)
    return late


def _fence(h: Hold) -> int:
    assert h.fence is not None
    return h.fence


def fence_inversions(holds: Sequence[Hold]) -> List[Tuple[Hold, Hold]]:
    """Pairs ``(earlier, later)``: ``later`` began after ``earlier`` ended, yet its fence is not larger.

    Each later hold is reported once, against the largest fence of the holds ended before it.
    """
    found: List[Tuple[Hold, Hold]] = []
    by_name: Dict[Any, List[Hold]] = {}
    for h in holds:
        if h.fence is not None:
            by_name.setdefault(h.name, []).append(h)
    for group in by_name.values():
        by_end = sorted(group, key=lambda h: h.end)
        i, best = 0, None  # best: the largest fence among the holds ended so far
        for h in sorted(group, key=lambda h: h.start):
            while i < len(by_end) and by_end[i].end <= h.start:
                if best is None or _fence(by_end[i]) > _fence(best):
                    best = by_end[i]
                i += 1
            if best is not None and _fence(h) <= _fence(best):
                found.append((best, h))
    return found


class CheckResult:
    """What :func:`check_history` found; ``ok`` is true when nothing unsafe was found.

    Counts: ``operations`` (per kind and result), ``holds``, ``refused_current``; lists:
    ``held_overlaps``, ``use_overlaps``, ``stale_accepted`` (with the resource's fence check as it
    ran), ``stale_unchecked`` (the same log replayed without a fence check: what fencing caught, or
    would have caught), ``late_accepted`` and ``late_refused`` (see :func:`late_writes`),
    ``fence_inversions``.
    """

    def __init__(self, operations: Dict[str, Dict[str, int]], holds: List[Hold],
                 held_overlaps: List[Tuple[Hold, Hold]], use_overlaps: List[Tuple[str, str]],
                 stale_accepted: List[ResourceWrite], stale_unchecked: List[ResourceWrite],
                 fence_inversions: List[Tuple[Hold, Hold]], writes: int, fenced: bool,
                 late: Sequence[ResourceWrite] = (), refused: int = 0) -> None:
        self.operations = operations
        self.holds = holds
        self.held_overlaps = held_overlaps
        self.use_overlaps = use_overlaps
        self.stale_accepted = stale_accepted
        self.stale_unchecked = stale_unchecked
        self.fence_inversions = fence_inversions
        self.writes = writes
        self.fenced = fenced
        self.late_accepted = [w for w in late if w.accepted]
        self.late_refused = [w for w in late if not w.accepted]
        #: refused writes that were not late: the current holder refused (a fence inversion's cost)
        self.refused_current = refused - len(self.late_refused)

    @property
    def ok(self) -> bool:
        """No held overlap, no use overlap, no stale write accepted, no fence inversion."""
        return not (self.held_overlaps or self.use_overlaps or self.stale_accepted or self.fence_inversions)

    def summary(self) -> Dict[str, Any]:
        """The counts, as a JSON-ready dict."""
        total = sum(sum(r.values()) for r in self.operations.values())
        return {
            "operations": total,
            "acquired": self.operations.get("acquire", {}).get("ok", 0),
            "by_kind": self.operations,
            "writes_logged": self.writes,
            "held_overlaps": len(self.held_overlaps),
            "use_overlaps": len(self.use_overlaps),
            "stale_accepted": len(self.stale_accepted) if self.fenced else None,
            "stale_unchecked": len(self.stale_unchecked) if self.fenced else None,
            "fence_inversions": len(self.fence_inversions) if self.fenced else None,
            "late_accepted": len(self.late_accepted),
            "late_refused": len(self.late_refused),
            "refused_current": self.refused_current,
        }

    def to_dict(self, examples: int = 5) -> Dict[str, Any]:
        """The summary plus up to ``examples`` of each kind of violation."""
        d = self.summary()
        d["examples"] = {
            "held_overlaps": [[a.to_dict(), b.to_dict()] for a, b in self.held_overlaps[:examples]],
            "use_overlaps": [list(p) for p in self.use_overlaps[:examples]],
            "stale_accepted": [w.to_dict() for w in self.stale_accepted[:examples]],
            "stale_unchecked": [w.to_dict() for w in self.stale_unchecked[:examples]],
            "fence_inversions": [[a.to_dict(), b.to_dict()] for a, b in self.fence_inversions[:examples]],
            "late_accepted": [w.to_dict() for w in self.late_accepted[:examples]],
        }
        return d

    def __repr__(self) -> str:
        return f"<CheckResult {json.dumps(self.summary(), default=str)}>"


def check_history(ops: Iterable[Op], writes: Optional[Iterable[ResourceWrite]] = None) -> CheckResult:
    """Check a history (``ops``, e.g. from :func:`load_history`) and the resource's log (``writes``).

    Without ``writes`` the log is rebuilt from the history's write operations
    (:func:`writes_from_history`). Nemesis operations in the history are counted but not checked.
    """
    ops = list(ops)
    writes = sorted(writes_from_history(ops) if writes is None else writes, key=lambda w: w.seq)
    counts: Dict[str, Dict[str, int]] = {}
    for op in ops:
        per = counts.setdefault(op.kind, {})
        per[op.result] = per.get(op.result, 0) + 1
    holds = held_intervals(ops)
    fenced = any(w.fence is not None for w in writes) or any(h.fence is not None for h in holds)
    return CheckResult(counts, holds, find_overlaps(holds), use_overlaps(writes), stale_writes(writes, True),
                       stale_writes(writes, False), fence_inversions(holds), len(writes), fenced,
                       late_writes(writes, holds), sum(1 for w in writes if not w.accepted))
