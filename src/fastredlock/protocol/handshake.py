"""What a new connection sends before its first command, and what the answers mean.

AUTH (when a password is set), SELECT (when db is not 0), ``INFO server`` (restart-aware voting)
and, for a Sentinel master or a cluster node, ``INFO replication`` (is it the master? was it
promoted? see :mod:`.sentinel` and :mod:`.cluster`) go first, alone: the round's commands follow only once every answer is in and good, so a failed
login or a refused INFO never lets a command of ours run on the wrong db or unchecked. That costs
one extra round trip, on connect only.

Then, in the same write as the handshake (the probing links of plain masters; a cluster's node
links write them behind its answers, ungated), ``SCRIPT LOAD`` of every script the client may run
(:data:`PRELOADED`): a master that restarted empty (or is new) knows them before the first
EVALSHA, which then never meets ``NOSCRIPT``. That matters because a round may be decided at
quorum before a slow master's ``NOSCRIPT`` comes back: its ``EVAL`` fallback is then never sent,
and that master would miss the write. A ``SCRIPT LOAD`` refused because this user may run no
scripts (``NOPERM`` for the command, or an unknown command) marks the link as one that refuses
scripts (``Link.noscripts``): from then on it gets native commands only, and a round that needs a
script, or an acquisition on a master that could not release without one, is refused there before
anything is sent (see ``Session._choose``). Other refusals cost only the EVAL fallback.

Behind them, three probes (:data:`PROBE`) ask whether this master, for this connection's user,
runs the native owner-checked commands that replace a script: ``SET key token IFEQ token PX ttl``
(Valkey >= 8.1, Redis >= 8.4) for an extension, ``DELIFEQ key token`` (Valkey >= 9.0) or ``DELEX
key IFEQ token`` (Redis >= 8.4, Valkey >= 9.2) for a release (:func:`native_releases`) and the
cleanup of a failed attempt (:func:`native_deletes`). Each runs on a key of its own that never
exists (so it changes nothing), and only the documented answer (nil, ``:0``, ``:0``) counts: a
server without the command or the option, an ACL that refuses it, a proxy or a fake that answers
otherwise, all leave the link on the scripts (:func:`probe_answer`). Trying the commands, rather
than reading a version, also finds them on forks and managed services, and never believes a
command that is renamed or refused. The answers set the link's capabilities (:data:`CAP_SET_IFEQ`,
:data:`CAP_DELIFEQ`, :data:`CAP_DELEX`).

A probing link's first commands wait for all these answers (``Link.gated``), so they are chosen
knowing what the master allows: the handshake, the loads and the probes go in one write, and the
commands follow once the last answer is in (with a handshake, as many round trips on connect as
before; without one, a round trip more).
"""
from .replies import KIND_IFEQ, KIND_NATIVE_DEL, KIND_SCRIPT
from .resp import encode_command
from .cluster import node_verified
from .family import PRELOADED_FAMILY, wake_mark
from .scripts import PRELOADED_PLAIN, WAKE_AFTER, WAKE_AFTER_SHA
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

#: The link's capabilities (bits of ``Link.caps``): ``SET ... IFEQ ... PX``; ``DELIFEQ``; ``DELEX ... IFEQ``.
CAP_SET_IFEQ = 1
CAP_DELIFEQ = 2
CAP_DELEX = 4
#: The probes' key (never set by them: each acts only where it holds :data:`PROBE_VALUE`).
PROBE_KEY = b"fastredlock:probe"
PROBE_VALUE = b"fastredlock probe, never stored"
#: Per probe, in the order written: the capability it finds, and the one answer that says so.
_PROBES = (
    (CAP_SET_IFEQ, encode_command(b"SET", PROBE_KEY, PROBE_VALUE, b"IFEQ", PROBE_VALUE, b"PX", b"1"), None),
    (CAP_DELIFEQ, encode_command(b"DELIFEQ", PROBE_KEY, PROBE_VALUE), 0),
    (CAP_DELEX, encode_command(b"DELEX", PROBE_KEY, b"IFEQ", PROBE_VALUE), 0),
)
#: What a new connection writes after :data:`PRELOAD`: the probes, whose answers set its capabilities.
PROBE = b"".join([probe[1] for probe in _PROBES])
#: How many answers :data:`PROBE` brings.
PROBES = len(_PROBES)
#: Written behind :data:`PROBE` (not by a client that sends no scripts): may this user run
#: scripts at all? ``EVALSHA`` of a script no server has runs nothing: ``NOSCRIPT`` says yes; a
#: refusal of the command (``NOPERM``, an unknown command: :func:`~.replies.refuses_scripts`) says
#: no. (A refused ``SCRIPT LOAD`` alone does not: an ACL may refuse ``SCRIPT`` and allow ``EVAL``.)
SCRIPT_PROBE = encode_command(b"EVALSHA", b"0" * 40, b"0")


def native_deletes(keys, tokens):
    """The native forms of an owner-checked delete of each ``keys[j]`` holding ``tokens[j]`` that
    needs nothing else (no turn, no wake: the cleanup of a failed attempt), for :meth:`.Session.begin`:
    ``DELEX key IFEQ token`` or ``DELIFEQ key token``, both read as the script's ``:1``/``:0``."""
    return ((CAP_DELEX, b"".join([encode_command(b"DELEX", k, b"IFEQ", t) for k, t in zip(keys, tokens)]), KIND_SCRIPT,
             None),
            (CAP_DELIFEQ, b"".join([encode_command(b"DELIFEQ", k, t) for k, t in zip(keys, tokens)]), KIND_SCRIPT,
             None))


def native_releases(keys, tokens):
    """The native forms of the plain lock's release of each ``keys[j]`` holding ``tokens[j]`` (keys
    that can queue: each has a wake mark, :func:`~.family.wake_mark`), for :meth:`.Session.begin`.

    Per key, ``DELEX key IFEQ token`` (or ``DELIFEQ key token``) and ``EXISTS <mark>`` go out back
    to back in the round's one write; the session reads the two replies as one answer
    (:data:`~.replies.KIND_NATIVE_DEL`). In the common case (nobody waits: no mark) that is the
    whole release: no script runs. Where the delete deleted and found the mark, the session writes
    :func:`wake_after` (the waiters' work: a turn or a message, and the mark again) and reads its
    answer as the release's. Between the two another client's commands may run; ``WAKE_AFTER``
    (:mod:`.scripts`) says why that is safe: a key taken again meanwhile is left to its new
    holder's release (the mark stays for it), a release that did the work already took or renewed
    the mark or gave a turn, and nothing here decides who holds the lock (only ``SET NX``, and
    ``ACQUIRE_QUEUED`` on a free key, do). A client that releases by script (an older one) finds
    the same mark and does the same work. The last element is the keys (for the follow-up)."""
    marks = [wake_mark(k) for k in keys]
    return ((CAP_DELEX, b"".join([encode_command(b"DELEX", k, b"IFEQ", t) + encode_command(b"EXISTS", m)
                                  for k, t, m in zip(keys, tokens, marks)]), KIND_NATIVE_DEL, keys),
            (CAP_DELIFEQ, b"".join([encode_command(b"DELIFEQ", k, t) + encode_command(b"EXISTS", m)
                                    for k, t, m in zip(keys, tokens, marks)]), KIND_NATIVE_DEL, keys))


#: ``b"%d" % n`` for the lengths a key or token usually has (the hot path formats none).
_LENS = [b"%d" % n for n in range(512)]


def _len_of(n):
    return _LENS[n] if n < 512 else b"%d" % n


def native_release(key, token, tagged):
    """:func:`native_releases` of one key (the hot path: built by joining, no formatting).
    ``tagged``: the key has a hash tag (its mark is ``key:wake``; else ``{key}:wake``), as
    :func:`~.family.lean_release` says."""
    lk = len(key)
    if tagged:
        exists = b"".join((b"\r\n*2\r\n$6\r\nEXISTS\r\n$", _len_of(lk + 5), b"\r\n", key, b":wake\r\n"))
    else:
        exists = b"".join((b"\r\n*2\r\n$6\r\nEXISTS\r\n$", _len_of(lk + 7), b"\r\n{", key, b"}:wake\r\n"))
    lkb = _len_of(lk)
    ltb = _len_of(len(token))
    keys = (key,)
    return ((CAP_DELEX, b"".join((b"*4\r\n$5\r\nDELEX\r\n$", lkb, b"\r\n", key, b"\r\n$4\r\nIFEQ\r\n$", ltb,
                                  b"\r\n", token, exists)), KIND_NATIVE_DEL, keys),
            (CAP_DELIFEQ, b"".join((b"*3\r\n$7\r\nDELIFEQ\r\n$", lkb, b"\r\n", key, b"\r\n$", ltb, b"\r\n", token,
                                    exists)), KIND_NATIVE_DEL, keys))


def wake_after(key, whole):
    """The waiters' work after a native release of ``key`` found its wake mark: ``EVALSHA`` of
    ``WAKE_AFTER`` (loaded on connect), or its ``EVAL`` form (``whole``: after ``NOSCRIPT``)."""
    if whole:
        return encode_command(b"EVAL", WAKE_AFTER, b"1", key)
    return encode_command(b"EVALSHA", WAKE_AFTER_SHA, b"1", key)


def native_extends(keys, tokens, ttls_ms):
    """The native form of an owner-checked extension of each ``keys[j]`` holding ``tokens[j]`` to
    ``ttls_ms[j]``, for :meth:`.Session.begin`: ``SET key token IFEQ token PX ttl`` (``+OK`` done,
    nil not the owner: :data:`~.replies.KIND_IFEQ`)."""
    return ((CAP_SET_IFEQ, b"".join([encode_command(b"SET", k, t, b"IFEQ", t, b"PX", b"%d" % ttl)
                                     for k, t, ttl in zip(keys, tokens, ttls_ms)]), KIND_IFEQ, None),)


def probe_answer(n, reply, error):
    """The capability the answer to probe ``n`` (0-based; ``error``: an error reply's message)
    shows, or 0: only the documented answer counts (an error, or anything else, means "use the
    script")."""
    cap, _command, expected = _PROBES[n]
    if error is not None or type(reply) is not type(expected) or reply != expected:
        return 0
    return cap


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
