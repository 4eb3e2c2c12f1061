"""``dlm.inspect(name)``: is a lock held, on which masters, by whom and for how long, without taking it.

    python -m fastredlock inspect [--json] [--prefix P] redis://a:6379 redis://b:6379 redis://c:6379 NAME
    (the command is :func:`fastredlock.cli.main.inspect_main`)

An inspection is one round that writes nothing: ``GET``, ``PTTL`` of the lock key and ``GET`` of
its fence counter, written back to back to every master at once (read-only commands: it works for
an ACL user limited to ``+get +pttl``). What the answers mean is the protocol's
(:func:`fastredlock.protocol.plans.inspect_summary`: held by a quorum, partially held, free, or
unknown when too few masters answered; how long a quorum keeps it, with the same drift allowance
as an acquisition's validity); this module turns them into :class:`LockInfo` and
:class:`MasterView`, shared by the sync and the asyncio client, and formats them for the ``inspect``
command.

What it never shows is the token: that is the secret that releases or extends the lock. A holder is
shown as :func:`fastredlock.holder_of` its token, a digest of the token's process id (the same
for every lock of one process), or ``"foreign"`` for values fastredlock did not make (another
library's, a compat shim's, a token chosen by the caller).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from ..engine.tokens import holder_of
from ..protocol.outcomes import NAMES, NO, OK
from ..protocol.family import RLOCK, RWLOCK, at_least_on_quorum, parts_of
from ..protocol.plans import (
    FREE, HELD, INSPECT_ROWS, PARTIAL, UNKNOWN, fence_value, inspect_summary, read_view,
)
from ..protocol.result import Round

__all__ = ["EXIT_STATUS", "FREE", "HELD", "PARTIAL", "UNKNOWN", "FamilyInfo", "LockInfo", "MasterView", "format_table"]

#: ``python -m fastredlock inspect``'s exit status per state (2 is bad usage, as argparse has it).
EXIT_STATUS = {FREE: 0, HELD: 1, PARTIAL: 3, UNKNOWN: 4}


class MasterView(NamedTuple):
    """One master's answer to an inspection."""

    #: The master as configured, e.g. ``"127.0.0.1:7001"``.
    master: str
    #: ``"held"`` (the key exists), ``"free"`` (it does not), or why the master did not say:
    #: ``"timeout"``, ``"connection error"``, ``"error reply"``, ``"cooling down"``, ...
    outcome: str
    #: Whether the key exists on this master.
    held: bool
    #: Seconds the key has left as the master counts them (``math.inf``: no expiry); None when
    #: not held.
    ttl_remaining: Optional[float]
    #: Who holds it: a digest of the holder's client prefix, or ``"foreign"``; None when not held.
    holder: Optional[str]
    #: The name's fence counter on this master (the last fence handed out), or None.
    fence: Optional[int]
    #: What went wrong, when the outcome is a failure (e.g. ``"Connection refused"``), else None.
    detail: Optional[str]


class LockInfo(NamedTuple):
    """What one inspection found: the lock's state on the whole, and each master's view.

    Times are seconds measured from the end of the inspection's round (``validity``,
    ``remaining``) or monotonic instants (``valid_until``, ``held_until``, comparable with
    ``time.monotonic()``); ``math.inf`` when a quorum holds the key without expiry; None when
    the lock is not held.
    """

    #: The lock's name, as given.
    name: Union[str, bytes]
    #: :data:`HELD` (a quorum holds one value), :data:`PARTIAL` (some masters hold the key, not a
    #: quorum), :data:`FREE` (none does), :data:`UNKNOWN` (no quorum holds it among the masters
    #: that answered, but the others could make one).
    state: str
    #: Who holds it on the most masters (see :class:`MasterView`), or None when no master does.
    holder: Optional[str]
    #: On how many masters that holder's value is.
    holders: int
    #: Masters that must agree: ``N // 2 + 1``.
    quorum: int
    #: Held: a quorum keeps it at least this long, unless it is released (conservative, computed
    #: like :attr:`fastredlock.Lock.validity`: less the round's duration and the drift allowance).
    validity: Optional[float]
    #: Held: a quorum keeps it at most this long, unless it is extended (plus the drift allowance).
    remaining: Optional[float]
    #: ``validity`` as a monotonic instant.
    valid_until: Optional[float]
    #: ``remaining`` as a monotonic instant: before it, an acquisition can succeed only if the
    #: holder releases the lock.
    held_until: Optional[float]
    #: The largest fence counter any master holds for the name (the last fence handed out), or None.
    fence: Optional[int]
    #: How long the round took, seconds.
    elapsed: float
    #: Each master's answer, in the order given.
    masters: Tuple[MasterView, ...]

    @property
    def held(self) -> bool:
        """Whether a quorum of masters holds the lock (``state == "held"``)."""
        return self.state == HELD

    @property
    def partial(self) -> bool:
        """Whether some masters hold the key but not a quorum (``state == "partial"``)."""
        return self.state == PARTIAL

    def to_dict(self) -> Dict[str, Any]:
        """The inspection as JSON-ready data (``math.inf`` becomes None: no expiry; a bytes name
        is decoded as UTF-8 with backslash escapes)."""
        data = self._asdict()
        name = self.name
        data["name"] = name.decode("utf-8", "backslashreplace") if isinstance(name, bytes) else name
        data["held"] = self.held
        for field in ("validity", "remaining", "valid_until", "held_until"):
            data[field] = _finite(data[field])
        data["masters"] = [dict(m._asdict(), ttl_remaining=_finite(m.ttl_remaining)) for m in self.masters]
        return data


def _finite(value: Optional[float]) -> Optional[float]:
    return None if value is None or math.isinf(value) else value


def _seconds(ms: float) -> float:
    return math.inf if ms < 0 else ms / 1000.0


def inspection(name: Union[str, bytes], labels: Sequence[str], rounds: Sequence[Any], quorum: int,
               drift_factor: float) -> LockInfo:
    """The :class:`LockInfo` of ``name`` from the :data:`~.protocol.plans.INSPECT_ROWS` Rounds of
    its inspection (``Core.inspect``); the front-ends call this, nothing else builds one."""
    get, pttl, fence_row = rounds[:INSPECT_ROWS]
    codes: List[int] = []
    values: List[Any] = []
    ttls: List[int] = []
    views = []
    get_details = get.details or (None,) * len(labels)
    pttl_details = pttl.details or (None,) * len(labels)
    holder = {}  # value -> holder_of(value): the masters mostly hold one value
    for i, label in enumerate(labels):
        code, value, ms = read_view(get.outcomes[i], get.values[i], pttl.outcomes[i], pttl.values[i])
        codes.append(code)
        values.append(value)
        ttls.append(ms)
        held = code == OK
        if held and value not in holder:
            holder[value] = holder_of(value)
        views.append(MasterView(
            label,
            "held" if held else "free" if code == NO else NAMES.get(code, str(code)),
            held,
            _seconds(ms) if held else None,
            holder[value] if held else None,
            fence_value(fence_row.outcomes[i], fence_row.values[i]),
            None if held or code == NO else get_details[i] or pttl_details[i],
        ))
    state, best, holders, low, high = inspect_summary(codes, values, ttls, quorum, get.elapsed, drift_factor)
    fences = [v.fence for v in views if v.fence is not None]
    end = get.started + get.elapsed
    validity = remaining = valid_until = held_until = None
    if state == HELD:
        validity, remaining = _seconds(low), _seconds(high)
        valid_until, held_until = end + validity, end + remaining
    return LockInfo(
        name, state, holder[best] if best is not None else None, holders, quorum, validity, remaining,
        valid_until, held_until, max(fences) if fences else None, get.elapsed, tuple(views),
    )


# --- the lock family --------------------------------------------------------------------------------
class FamilyInfo(NamedTuple):
    """What one inspection found of a reentrant lock, a read-write lock or a semaphore
    (``dlm.inspect(name, kind=...)``).

    ``parts`` are :class:`LockInfo` of the parts that have one holder each: the reentrant lock's
    owner, the read-write lock's writer, or each permit slot of the semaphore (in slot order);
    they read as a plain lock's inspection does (no fence).
    """

    #: The name as given.
    name: Union[str, bytes]
    #: ``"rlock"``, ``"rwlock"`` or ``"semaphore"``.
    kind: str
    #: The single-holder parts (see above).
    parts: Tuple[LockInfo, ...]
    #: rlock: how many times its owner entered (on most masters that answered), else None.
    count: Optional[int]  # type: ignore[assignment] # the public name shadows tuple.count, on purpose
    #: rwlock: reader shares that a quorum of masters hold at least (shares whose TTL ran out are
    #: counted until the next script on the name prunes them), else None.
    readers: Optional[int]
    #: rwlock: on how many masters a waiting writer's mark keeps new readers out, else None.
    writer_waiting: Optional[int]

    @property
    def holders(self) -> List[str]:
        """The holders of the parts a quorum holds (digests of client prefixes, or "foreign")."""
        return [part.holder for part in self.parts if part.held and part.holder is not None]

    @property
    def held(self) -> bool:
        """Whether anyone holds it on a quorum: a part, or (rwlock) reader shares."""
        return bool(self.holders) or bool(self.readers)

    @property
    def state(self) -> str:
        """``"held"`` (a part, or reader shares, on a quorum), else the most telling of the parts'
        states: ``"partial"``, ``"unknown"``, ``"free"`` (see :attr:`LockInfo.state`)."""
        if self.held:
            return HELD
        states = {part.state for part in self.parts}
        for state in (PARTIAL, UNKNOWN):
            if state in states:
                return state
        return FREE

    def to_dict(self) -> Dict[str, Any]:
        """The inspection as JSON-ready data (see :meth:`LockInfo.to_dict`)."""
        data = self._asdict()
        data["parts"] = [part.to_dict() for part in self.parts]
        data["name"] = data["parts"][0]["name"] if self.parts else self.name
        data["holders"], data["held"], data["state"] = self.holders, self.held, self.state
        return data


def family_inspection(name: Union[str, bytes], kind: str, limit: int, labels: Sequence[str],
                      rounds: Sequence[Any], quorum: int, drift_factor: float) -> FamilyInfo:
    """The :class:`FamilyInfo` of ``name`` from the Rounds of its reads
    (:func:`~.protocol.family.inspect_reads`, ``Core.reads``)."""
    n = len(labels)
    first = rounds[0]
    no_fence = Round(False, 0, 0.0, first.elapsed, first.started, (NO,) * n, None, (None,) * n)
    parts = tuple(inspection(name, labels, [rounds[2 * j], rounds[2 * j + 1], no_fence], quorum, drift_factor)
                  for j in range(parts_of(kind, limit)))
    count = readers = waiting = None
    if kind == RLOCK:
        counts = [int(v) for code, v in zip(rounds[2].outcomes, rounds[2].values or ()) if code == OK]
        count = max(set(counts), key=counts.count) if counts else 0
    elif kind == RWLOCK:
        shares = [v if code == OK else None for code, v in zip(rounds[2].outcomes, rounds[2].values)]
        readers = at_least_on_quorum(shares, quorum)
        waiting = sum(1 for code, v in zip(rounds[4].outcomes, rounds[4].values) if code == OK and v)
    return FamilyInfo(name, kind, parts, count, readers, waiting)


# --- the command ----------------------------------------------------------------------------------
def _when(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    return "no expiry" if math.isinf(seconds) else f"{seconds:.3f}s"


def format_table(info: LockInfo) -> str:
    """The inspection as text: one line per master, then the verdict."""
    rows = [("master", "outcome", "ttl left", "holder", "fence")]
    for m in info.masters:
        outcome = f"{m.outcome} ({m.detail})" if m.detail else m.outcome
        rows.append((m.master, outcome, _when(m.ttl_remaining), m.holder or "-",
                     "-" if m.fence is None else str(m.fence)))
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    lines = ["  ".join(r[c].ljust(widths[c]) for c in range(4)) + "  " + r[4] for r in rows]
    name = info.to_dict()["name"]
    n = len(info.masters)
    if info.state == HELD:
        verdict = (f"{name}: held by {info.holder} on {info.holders} of {n} masters (quorum {info.quorum}); "
                   f"held for at least {_when(info.validity)}, at most {_when(info.remaining)}")
    elif info.state == PARTIAL:
        verdict = (f"{name}: partially held: on {info.holders} of {n} masters, short of the quorum of {info.quorum} "
                   f"(the keys of a failed acquisition, or of a lock that lost masters, until they expire)")
    elif info.state == UNKNOWN:
        verdict = (f"{name}: unknown: no quorum holds it among the masters that answered, but too few answered "
                   f"to tell (quorum {info.quorum} of {n})")
    else:
        verdict = f"{name}: free on every master that answered"
    if info.fence is not None:
        verdict += f"; last fence {info.fence}"
    return "\n".join(lines + [verdict])


def format_family(info: FamilyInfo) -> str:
    """A lock family inspection as text: each single-holder part as :func:`format_table` shows a
    lock (the semaphore's free slots in one line), then the kind's counts and the verdict."""
    blocks = []
    free = []
    for i, part in enumerate(info.parts):
        label = f"slot {i}" if info.kind == "semaphore" else ("owner" if info.kind == "rlock" else "writer")
        if info.kind == "semaphore" and part.state == FREE:
            free.append(str(i))
            continue
        blocks.append(f"[{label}]\n" + format_table(part))
    if free:
        blocks.append(f"[free slots] {', '.join(free)}")
    name = info.to_dict()["name"]
    if info.kind == "rlock":
        extra = f"; entered {info.count} time(s)" if info.held else ""
    elif info.kind == "rwlock":
        extra = f"; {info.readers} reader share(s) on a quorum; a writer waits on {info.writer_waiting} master(s)"
    else:
        extra = f"; {len(info.holders)} of {len(info.parts)} permits held"
    blocks.append(f"{name} ({info.kind}): {info.state}{extra}")
    return "\n".join(blocks)
