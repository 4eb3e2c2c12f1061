"""Sentinel-managed masters: what to ask the sentinels, what their answers mean, when to ask again.

Written once for both cores and kept off the hot path (only a connect of a Sentinel master, or an
error reply, comes here). The I/O (a short blocking exchange with one sentinel after another,
bounded by ``connect_timeout``) is :mod:`fastredlock.io.sentinel`'s.

**Resolution.** Before each connect of a Sentinel master the client sends one sentinel, in one
write, ``SENTINEL GET-MASTER-ADDR-BY-NAME <service>`` and ``SENTINEL MASTER <service>``: the first
gives the address, the second ``role-reported-time`` (milliseconds since this sentinel saw the
server take the master role: at a failover, when it switched to the promoted replica). The sentinel
that leads a failover names the promoted replica before its ``SENTINEL MASTER`` stops describing
the old master: then the promotion is happening now. The first
sentinel that answers decides; one that names no master for the service (a null reply) or refuses
is passed over. No answer at all, or only nulls, is outcome ``sentinel error``.

**Verification.** The connection's handshake asks the server ``INFO replication`` (beside the other
handshake steps, before any command of ours): ``role`` must be ``master``, otherwise the sentinels
named a server that is not (yet, or any longer) the master, and the connection fails with
``sentinel error`` (asked again at the next connect). ``second_repl_offset`` tells whether the
server was promoted since it started (it is -1 on a server that was never a replica since its
start).

**Asking again.** Every (re)connect asks afresh, so a connection error, a refused connect or a
failed verification lead to a new question at the next round. A ``-READONLY`` reply (the server
was demoted to a replica) or ``-LOADING`` (it restarted and loads its data) closes the connection
too (:func:`asks_again`), and so does a role change seen in the verification.

**Restart-aware voting after a failover.** A freshly promoted replica may lack lock keys the old
master had acknowledged (replication is asynchronous), exactly as a restarted master without
persistence lacks the ones it forgot. So a server whose ``second_repl_offset`` says it was promoted
counts as up only since its promotion, when the sentinels saw it (``role-reported-time``), for the
restart grace (see :meth:`~.voting.MasterClock.promoted`); when no sentinel said when, and this
client saw the service's address change, since this client saw it; failing both, since now.

What cannot be seen: when a master *that was never a replica since it started* took over the
service (it cannot: only promoted replicas lose keys that way, and a restarted one is covered by
its uptime); the exact moment of a promotion when the sentinels lost track of it (a sentinel that
restarted reports its own start instead, which only makes the grace longer); and a master
promoted by hand, outside Sentinel, at a fixed address (no sentinel, no verification step).
"""
from .resp import encode_command

#: The error replies after which a Sentinel master's connection is closed, so the next round asks
#: the sentinels again: the server was demoted (READONLY), restarts (LOADING), or is cut off from
#: its master as a replica that still serves (MASTERDOWN).
_ASK_AGAIN = ("READONLY", "LOADING", "MASTERDOWN")


def sentinel_query(spec):
    """The bytes sent to one sentinel for ``spec`` (a :class:`~fastredlock.io.masters.SentinelSpec`):
    AUTH when it has a password, then the address and the master's state; and how many replies."""
    service = spec.service.encode()
    out = b""
    replies = 2
    if spec.password is not None:
        if spec.username:
            out += encode_command(b"AUTH", spec.username.encode(), spec.password.encode())
        else:
            out += encode_command(b"AUTH", spec.password.encode())
        replies += 1
    out += encode_command(b"SENTINEL", b"GET-MASTER-ADDR-BY-NAME", service)
    out += encode_command(b"SENTINEL", b"MASTER", service)
    return out, replies


def master_address(reply):
    """``(host, port)`` from a ``GET-MASTER-ADDR-BY-NAME`` reply, or None (no master known)."""
    if not isinstance(reply, list) or len(reply) != 2:
        return None
    host, port = reply
    try:
        return (host.decode() if isinstance(host, bytes) else str(host)), int(port)
    except (TypeError, ValueError, UnicodeError):
        return None


def role_age_ms(reply, address):
    """How long ago (ms) the server at ``address`` took the master role by a ``SENTINEL MASTER``
    reply's ``role-reported-time``; 0 when that reply still describes another server (the sentinel
    leads a failover to ``address``, which it names already: the promotion is happening now); -1
    when it does not say (an error reply, a field missing, a role other than master)."""
    if not isinstance(reply, list):
        return -1
    fields = {}
    for i in range(0, len(reply) - 1, 2):
        fields[reply[i]] = reply[i + 1]
    try:
        if (fields[b"ip"].decode(), int(fields[b"port"])) != tuple(address):
            return 0
    except (KeyError, TypeError, ValueError, UnicodeError, AttributeError):
        return -1
    if fields.get(b"role-reported", b"master") != b"master":
        return -1
    try:
        return int(fields[b"role-reported-time"])
    except (KeyError, TypeError, ValueError):
        return -1


def resolved(clock, address, age_ms, now):
    """The sentinels named ``address`` at ``now``, saying it reported the master role ``age_ms``
    ago (-1: they did not say). Remember when it became master, for :func:`verified`."""
    if age_ms >= 0:
        since = now - age_ms / 1000.0
    elif clock.address is not None and clock.address != address:
        since = now  # a failover this client saw: it happened since the last connect, at the latest now
    else:
        since = -1.0
    clock.address = address
    clock.reported_since = since


def parse_info_replication(info):
    """``(role, second_repl_offset)`` from an ``INFO replication`` reply (None / -1 where absent)."""
    fields = dict(line.split(b":", 1) for line in info.split(b"\r\n") if b":" in line)
    try:
        second = int(fields.get(b"second_repl_offset", b"-1"))
    except ValueError:
        second = -1
    return fields.get(b"role"), second


def role_checked(clock, reply, server, wanted, then):
    """``(problem, second_repl_offset)`` of a handshake's ``INFO replication`` answer: a problem
    unless it says ``role:master`` (Sentinel masters and cluster nodes alike). The message names
    the server (``server`` without an address), what it should be (``wanted``) and what happens
    next (``then``)."""
    if not isinstance(reply, bytes):
        return "INFO replication: unexpected reply", -1
    role, second = parse_info_replication(reply)
    if role != b"master":
        where = "%s:%d" % clock.address if clock.address is not None else server
        return "%s is not a %s (role:%s); %s" % (
            where, wanted, "?" if role is None else role.decode("ascii", "replace"), then), second
    return None, second


def verified(clock, reply, now, vote):
    """Check the handshake's ``INFO replication`` answer of a Sentinel master; return a problem
    (the server is not a master: ``sentinel error``) or None. With ``vote`` (restart-aware
    voting), a server promoted since it started counts as up since its promotion."""
    problem, second = role_checked(clock, reply, "the server", "master", "the sentinels are asked again")
    if problem is None and vote and second >= 0:
        clock.promoted(clock.reported_since if clock.reported_since >= 0.0 else now)
    return problem


def asks_again(error):
    """Whether an error reply from a Sentinel master means the sentinels must be asked again."""
    return error.startswith(_ASK_AGAIN)
