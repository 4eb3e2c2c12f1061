"""Command kinds, and what a master's reply means for each: the outcome codes of one reply.

Every command a round sends has a *kind* that says how its reply is read. Error replies are
classified by the caller (they may call for the EVAL fallback); everything else goes through
:func:`classify`, or :func:`bits` for a batch release.
"""
from .outcomes import NAMES, NO, OK, PROTOCOL_ERROR

#: ``SET NX PX``: ``+OK`` means acquired, nil means taken.
KIND_SET = 0
#: An owner-checked script: ``:1`` means done, ``:0`` means not the owner; ``:2`` (a release
#: heard by waiters) means done, with the detail :data:`WOKE`.
KIND_SCRIPT = 1
#: The fenced acquisition script: ``:n >= 0`` means acquired with counter n, ``:-1`` means taken.
#: A counter above :data:`MAX_FENCE` is refused (a protocol error), by both cores alike.
KIND_FENCED = 2
#: The largest fence counter a master may report: the next fence (one more) must still be exact
#: where the scripts compare it (Lua numbers are doubles: integers are exact up to 2**53).
MAX_FENCE = 2**53 - 2
#: Like KIND_SCRIPT, but an acquisition (``lock_all``): restart-aware voting applies.
KIND_SCRIPT_ACQUIRE = 3
#: One script for K keys (``RELEASE_MANY``): a bulk reply of K characters, '1' done, '0' not the owner.
KIND_BITS = 4
#: A plain read (``inspect``: ``GET`` and ``PTTL``): any value is an answer. A bulk string or an
#: integer is OK with that value, nil is NO (no such key). Writes nothing, takes nothing: not an
#: acquisition (no early decision, no restart-aware voting).
KIND_READ = 5

#: A native owner-checked ``SET key token IFEQ token PX ttl`` (an extension where the master has
#: it, see :mod:`.handshake`): ``+OK`` means done, nil means not the owner (or no such key). Not an
#: acquisition. (The native owner-checked deletes, ``DELIFEQ`` and ``DELEX ... IFEQ``, answer
#: ``:1``/``:0`` as the release script does: they are read as KIND_SCRIPT.)
KIND_IFEQ = 6

#: A native owner-checked delete of a plain lock's release (``DELIFEQ key token`` or ``DELEX key
#: IFEQ token``) written with ``EXISTS`` of its wake mark right behind it: two replies per
#: command, read as one answer (see :meth:`.session.Session.reply`): ``:1`` deleted, ``:0`` not
#: the owner; where it deleted and the mark exists, the waiters' work follows (:data:`KIND_WAKE`).
KIND_NATIVE_DEL = 7
#: The waiters' work that follows a native release which found the wake mark (``WAKE_AFTER``):
#: ``:1``/``:2``/``:3`` as the release script's (the key was deleted already: never "not the
#: owner"); an error reply means only that nobody was woken.
KIND_WAKE = 8

#: The detail of a master that refuses scripts (an ACL without ``@scripting``, a server without
#: Lua, or ``scripts=False``) where the operation needs one; :func:`scripts_refused` finds it.
NO_SCRIPTS = "scripts refused"
#: The detail of a master where the client refused to acquire: it runs no scripts and has no
#: native owner-checked delete, so a lock there could not be released safely.
NO_SAFE_RELEASE = ("scripts refused and no DELIFEQ/DELEX: the client does not acquire where it could not "
                   "release safely (grant @scripting, or use Valkey >= 9.0 / Redis >= 8.4)")

#: The detail of a release's OK where its wake-up message reached a subscriber (someone waited):
#: the releaser then lets the woken waiters go first (see fastredlock.engine.wake).
WOKE = "woke waiters"
#: The detail of a release's OK (``:3``) where it gave the turn to a queued waiter and that
#: waiter's client heard it (see fastredlock.engine.wake, "Turns").
TURN = "gave the turn"


def is_acquisition(kind):
    """Whether commands of ``kind`` take locks (early decision and restart-aware voting apply)."""
    # KIND_SET, KIND_FENCED, KIND_SCRIPT_ACQUIRE (literals: C comparisons in the compiled hot path,
    # where the kinds are module globals; test_replies checks them against the names)
    return kind == 0 or kind == 2 or kind == 3


def classify(kind, reply):
    """Turn one non-error reply into ``(outcome, detail, value)`` for a command of ``kind``."""
    if kind == KIND_SET or kind == KIND_IFEQ:
        if reply == b"OK":
            return OK, None, None
        if reply is None:
            return NO, None, None
    elif kind == KIND_SCRIPT or kind == KIND_SCRIPT_ACQUIRE or kind == KIND_NATIVE_DEL or kind == KIND_WAKE:
        if isinstance(reply, int):
            if reply == 1:
                return OK, None, None
            if reply == 0:
                return NO, None, None
            if reply == 2 and (kind == KIND_SCRIPT or kind == KIND_WAKE):
                return OK, WOKE, None
            if reply == 3 and (kind == KIND_SCRIPT or kind == KIND_WAKE):
                return OK, TURN, None
    elif kind == KIND_READ:
        if reply is None:
            return NO, None, None
        if isinstance(reply, (bytes, int)):
            return OK, None, reply
    elif isinstance(reply, int):  # KIND_FENCED
        if 0 <= reply <= 9007199254740990:  # MAX_FENCE (a literal: a C comparison when compiled)
            return OK, None, reply
        if reply == -1:
            return NO, None, None
    return PROTOCOL_ERROR, unexpected(reply), None


def unexpected(reply):
    """The detail of a reply of the wrong shape (cut short: it came from a master)."""
    return "unexpected reply %s" % repr(reply)[:80]


def bits(reply, rows):
    """The per-key outcomes of a ``RELEASE_MANY`` reply (``b"1101..."``), or None if it is not one."""
    if not isinstance(reply, bytes) or len(reply) != rows or reply.strip(b"01"):
        return None
    return [OK if c == 49 else NO for c in reply]


def is_noscript(message):
    """Whether an error reply says the master's script cache lacks the script (send EVAL)."""
    return message.startswith("NOSCRIPT")


def is_unsupported(message):
    """Whether an error reply to a native command says the master does not run it for this user
    (unknown, a refused option, an ACL): the script does the same work."""
    return message.startswith(("ERR unknown command", "ERR syntax error", "ERR wrong number of arguments",
                               "ERR unknown subcommand", "NOPERM"))


def refuses_scripts(message):
    """Whether an error reply to ``SCRIPT``/``EVAL``/``EVALSHA`` says this master runs no
    scripts for this user: an ACL without the command (``NOPERM``, not a key it refused), or a
    server without them (an unknown command)."""
    if message.startswith("NOPERM"):
        return "key" not in message and "channel" not in message
    return message.startswith("ERR unknown command")


def refused_by_acl(message):
    """Whether an outcome's detail (an error reply) says the ACL refused the command or a key it
    touches (``NOPERM``; inside a script, Valkey's "ACL failure" and Redis 7's "can't access")."""
    return type(message) is str and (message.startswith("NOPERM") or "ACL failure" in message
                                      or refused_a_key(message))


def refused_a_key(detail):
    """Whether an outcome's ``detail`` (an error reply) says the ACL refused a key the command or
    its script touched (a key pattern such as ``~app:*`` leaves out a lock's derived keys)."""
    return type(detail) is str and ("permissions to access a key" in detail or "can't access at least one" in detail
                                    or (detail.startswith("NOPERM") and "key" in detail))


def scripts_refused(detail):
    """Whether an outcome's ``detail`` says the master refuses scripts (:data:`NO_SCRIPTS`, or
    :data:`NO_SAFE_RELEASE`)."""
    return type(detail) is str and detail.startswith(NO_SCRIPTS)


def what(code, detail):
    """``"timeout"``, or ``"connection error (refused)"``: an outcome as a health record says it."""
    name = NAMES.get(code, str(code))
    return "%s (%s)" % (name, detail) if detail else name
