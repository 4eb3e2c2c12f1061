"""What the suite's server can do, asked of a running master (never read from which binary was found).

A test that needs a capability (a native command, TLS, a command Redis 6.2 lacks) asks here and
adapts, or skips saying why: the suite runs on whichever server ``FASTREDLOCK_REDIS_SERVER`` (or
PATH, or the ``server`` extra) gives it, Redis 6.2 and 7.0, Valkey 8.1 and 9.1 alike.
"""
from __future__ import annotations

from typing import Dict, NamedTuple, Tuple

_PROBE_KEY = "fastredlock:tests:capability-probe"  # never exists: the probes change nothing


class Capabilities(NamedTuple):
    """A master's answers: its kind and version, and the commands this suite cares about."""

    kind: str  # "redis" or "valkey"
    version: Tuple[int, ...]
    set_ifeq: bool  # SET key value IFEQ value (Valkey >= 8.1, Redis >= 8.4)
    delifeq: bool  # DELIFEQ key value (Valkey >= 9.0)
    delex: bool  # DELEX key IFEQ value (Redis >= 8.4)

    @property
    def name(self) -> str:
        return f"{self.kind} {'.'.join(map(str, self.version))}"

    @property
    def native_delete(self) -> bool:
        """An owner-checked delete without a script (DELIFEQ or DELEX ... IFEQ)."""
        return self.delifeq or self.delex


_cache: Dict[int, Capabilities] = {}


def capabilities(master) -> Capabilities:
    """Ask ``master`` (a :class:`~fastredlock.testing.LocalMaster`) what it is and runs (cached by port)."""
    if master.port in _cache:
        return _cache[master.port]
    info = master.command("INFO", "server")
    fields = dict(line.split(":", 1) for line in info.decode().splitlines() if ":" in line)
    kind = "valkey" if fields.get("server_name") == "valkey" or "valkey_version" in fields else "redis"
    version = tuple(int(x) for x in fields.get("valkey_version" if kind == "valkey" else "redis_version",
                                                 fields["redis_version"]).split("."))
    caps = Capabilities(
        kind, version,
        set_ifeq=master.command("SET", _PROBE_KEY, "x", "IFEQ", "y") is None,
        delifeq=master.command("DELIFEQ", _PROBE_KEY, "x") == 0,
        delex=master.command("DELEX", _PROBE_KEY, "IFEQ", "x") == 0,
    )
    _cache[master.port] = caps
    return caps
