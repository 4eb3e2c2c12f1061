"""What a new connection sends before its first command, and what the answers mean.

AUTH (when a password is set), SELECT (when db is not 0), ``INFO server`` (restart-aware voting)
and, for a Sentinel master or a cluster node, ``INFO replication`` (is it the master? was it
promoted? see :mod:`.sentinel` and :mod:`.cluster`) go first, alone: the round's commands follow only once every answer is in and good, so a failed
login or a refused INFO never lets a command of ours run on the wrong db or unchecked. That costs
one extra round trip, on connect only.

Then, written right before the first round's commands (not gated: no answer is waited for),
``SCRIPT LOAD`` of every script the client may run (:data:`PRELOADED`; the session drops their
replies unread): a master that restarted empty (or is new) knows them before that round's first
EVALSHA, which then never meets ``NOSCRIPT``. That matters because a round may be decided at
quorum before a slow master's ``NOSCRIPT`` comes back: its ``EVAL`` fallback is then never sent,
and that master would miss the write (a lock or a share held on one master fewer than it could
be). A refused ``SCRIPT LOAD`` (an ACL without ``SCRIPT``) costs nothing: the fallback still works.
"""
from .resp import encode_command
from .cluster import node_verified
from .family import PRELOADED_FAMILY
from .scripts import PRELOADED_PLAIN
from .sentinel import verified

HELLO_AUTH = 0
HELLO_SELECT = 1
HELLO_INFO = 2
#: A Sentinel master's role check (``INFO replication``); ``HELLO_ROLE_VOTE``: and its promotion
#: counts for restart-aware voting.
HELLO_ROLE = 3
HELLO_ROLE_VOTE = 4
#: A cluster node's role check (``INFO replication``; see :mod:`.cluster`); ``HELLO_NODE_VOTE``:
#: and its promotion counts for restart-aware voting.
HELLO_NODE = 5
HELLO_NODE_VOTE = 6

_NAMES = ("AUTH", "SELECT", "INFO", "INFO replication", "INFO replication", "INFO replication",
          "INFO replication")

#: Every script a client may send (the plain lock's and the lock family's), loaded on connect.
PRELOADED = PRELOADED_PLAIN + PRELOADED_FAMILY
#: What a new connection writes before its first commands (after the handshake's answers): one
#: ``SCRIPT LOAD`` per script of :data:`PRELOADED`, whose replies the session drops.
PRELOAD = b"".join([encode_command(b"SCRIPT", b"LOAD", script) for script in PRELOADED])


def handshake(spec, restart_aware):
    """Return the bytes sent before the first command on a new connection, and what each answers."""
    out = b""
    kinds = []
    if spec.password is not None:
        if spec.username:
            out += encode_command(b"AUTH", spec.username.encode(), spec.password.encode())
        else:
            out += encode_command(b"AUTH", spec.password.encode())
        kinds.append(HELLO_AUTH)
    if spec.db:
        out += encode_command(b"SELECT", b"%d" % spec.db)
        kinds.append(HELLO_SELECT)
    if restart_aware:
        out += encode_command(b"INFO", b"server")
        kinds.append(HELLO_INFO)
    if spec.sentinel is not None:
        out += encode_command(b"INFO", b"replication")
        kinds.append(HELLO_ROLE_VOTE if restart_aware else HELLO_ROLE)
    elif spec.cluster is not None and spec.host is not None:
        out += encode_command(b"INFO", b"replication")
        kinds.append(HELLO_NODE_VOTE if restart_aware else HELLO_NODE)
    return out, tuple(kinds)


def parse_info_server(info):
    """Return ``(run_id, uptime_in_seconds)`` from an ``INFO server`` reply (``None`` where absent)."""
    run_id = uptime = None
    for line in info.split(b"\r\n"):
        if line.startswith(b"run_id:"):
            run_id = line[7:]
        elif line.startswith(b"uptime_in_seconds:"):
            try:
                uptime = int(line[18:])
            except ValueError:
                pass
    return run_id, uptime


def hello_reply(clock, kind, reply, error, now):
    """Check one handshake answer (``error``: the error reply's message, else None) read at ``now``.

    Returns a problem to report (the connection is then failed as an error reply, or, for
    ``HELLO_ROLE``/``HELLO_ROLE_VOTE``, as a ``sentinel error``), or None. An ``INFO server``
    answer updates ``clock`` (a :class:`~.voting.MasterClock`), and so does a promotion.
    """
    if error is not None:
        hint = " (pass restart_aware=False where INFO is not allowed)" if kind == HELLO_INFO else ""
        return "%s failed: %s%s" % (_NAMES[kind], error, hint)
    if kind == HELLO_INFO:
        if not isinstance(reply, bytes):
            return "INFO server: unexpected reply"
        run_id, uptime = parse_info_server(reply)
        if uptime is None:
            return "INFO server: no uptime_in_seconds (pass restart_aware=False for this master)"
        clock.learned(run_id, uptime, now)
    elif kind == HELLO_ROLE or kind == HELLO_ROLE_VOTE:
        return verified(clock, reply, now, kind == HELLO_ROLE_VOTE)
    elif kind == HELLO_NODE or kind == HELLO_NODE_VOTE:
        return node_verified(clock, reply, now, kind == HELLO_NODE_VOTE)
    return None
