"""The keys and channels a lock of one name touches, the names they reserve, and the ACL rules that
allow them: one source for the name check (:func:`fastredlock.engine.checks.key_of`), ``fastredlock
audit --name`` and the security page's table (``docs/security.md``, checked by tests/docs).

A lock's key is its name (with the client's prefix). What a lock derives beside it lives under the
key's hash tag: ``{key}<suffix>`` if the key has no hash tag, else ``key<suffix>``
(:func:`fastredlock.protocol.family.tagged`). A *derived key* can therefore never be a lock's own
name: a lock called ``{job}:wake`` would be the wake mark of the lock ``job``, whose release deletes
it without an owner check (two holders at once). :func:`reserved_by` says which names are derived
keys; the front-ends refuse them with a ``ValueError``.

Two names share their derived keys when one is the other in braces (``job`` and ``{job}``: both
derive ``{job}:wake``...): their plain locks stay two locks (``job`` and ``{job}``), and their
family locks (rlock, rwlock, semaphore) are one lock with two names. Neither gives two holders.
"""
from __future__ import annotations

from .scripts import TURN_PREFIX, WAKE_PREFIX

__all__ = ["DERIVED", "VARIABLE", "KINDS", "LOCK_COMMANDS", "beside", "derived_keys", "reserved_by", "acl_rules",
           "acl_glob", "has_tag", "markdown_table"]

#: The lock kinds, as ``fastredlock audit --kind`` and the docs name them.
KINDS = ("lock", "rlock", "rwlock", "semaphore")

#: Every fixed suffix a lock derives from its key: (suffix, the kinds that touch it, its name, what
#: it holds).
DERIVED = (
    (b":wake", ("lock",), "wake mark", "set while waiters listen for the next release"),
    (b":wait", ("lock",), "waiters' queue", "the queued waiters, in order (turns)"),
    (b":next", ("lock",), "turn", "the waiter whose turn it is (turns)"),
    (b":fastredlock-fence", ("lock",), "fence counter", "the last fence given (fenced locks)"),
    (b":rlock", ("rlock",), "reentrant lock", "owner token and count"),
    (b":write", ("rwlock",), "write key", "the writer's token"),
    (b":readers", ("rwlock",), "readers' set", "the readers' tokens"),
    (b":writer-waiting", ("rwlock",), "writer's mark", "set while a writer waits for readers to leave"),
    (b":semaphore", ("semaphore",), "semaphore wake key", "never written; its scripts declare it"),
)
#: The suffixes followed by a variable part: (suffix, what follows, kinds, its name, what it holds).
VARIABLE = (
    (b":permit:", "<slot>", ("semaphore",), "permit slot", "a permit's token (slots 0 to limit - 1)"),
    (b":read:", "<token>", ("rwlock",), "reader's share", "one reader's token"),
)


def has_tag(key):
    """Whether ``key`` has a hash tag (a ``{``, then a ``}`` after it with something between), as
    Redis Cluster reads it."""
    left = key.find(b"{")
    if left == -1:
        return False
    right = key.find(b"}", left + 1)
    return right > left + 1


def _base_of(head):
    """The key whose derived keys start with ``head`` (``head`` + a suffix), or None."""
    if len(head) > 2 and head[:1] == b"{" and head[-1:] == b"}" and not has_tag(head[1:-1]):
        return head[1:-1]
    if has_tag(head):
        return head
    return None


def reserved_by(key):
    """If ``key`` is a key some lock derives, return ``(base, description)``: the key of the lock
    that derives it and what it is there; else None. Every derived key has a ``{``: a key without
    one costs one look."""
    if b"{" not in key:
        return None
    for suffix, _kinds, what, _holds in DERIVED:
        if key.endswith(suffix):
            base = _base_of(key[:-len(suffix)])
            if base is not None:
                return base, what
    for suffix, _part, _kinds, what, _holds in VARIABLE:
        at = key.find(suffix)
        while at != -1:
            rest = key[at + len(suffix):]
            if rest and (suffix != b":permit:" or rest.isdigit()):
                base = _base_of(key[:at])
                if base is not None:
                    return base, what
            at = key.find(suffix, at + 1)
    return None


def beside(key, suffix):
    """The key ``suffix`` beside ``key``, under its hash tag (as :func:`fastredlock.protocol.family.tagged`)."""
    return key + suffix if has_tag(key) else b"{" + key + b"}" + suffix


_tagged = beside


def derived_keys(key, kind="lock"):
    """The keys a lock of ``kind`` on ``key`` touches, as (key or pattern, its name, what it holds):
    its own key (plain locks) and every derived key (variable parts shown as ``<slot>``/``<token>``)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    rows = [(key, "lock key", "the holder's token")] if kind == "lock" else []
    rows += [(_tagged(key, s), what, holds) for s, kinds, what, holds in DERIVED if kind in kinds]
    rows += [(_tagged(key, s) + part.encode(), what, holds)
             for s, part, kinds, what, holds in VARIABLE if kind in kinds]
    return rows


def acl_glob(raw):
    """``raw`` with the characters an ACL glob pattern gives a meaning (``* ? [ ] \\``) escaped."""
    out = bytearray()
    for b in raw:
        if b in b"*?[]\\":
            out += b"\\"
        out.append(b)
    return bytes(out)


def acl_rules(key):
    """The ACL selectors a user needs for every lock (of every kind) on ``key``, as one text: its
    key, the keys under its tag beside it, and the channels its releases publish on (waking; without
    them locks still work, waiters then find a free lock by their backoff)."""
    base = acl_glob(key)
    beside = acl_glob(_tagged(key, b":")) + b"*"
    channels = (b"&" + acl_glob(WAKE_PREFIX + key), b"&" + acl_glob(WAKE_PREFIX + _tagged(key, b":")) + b"*",
                b"&" + acl_glob(TURN_PREFIX) + b"*")
    return b" ".join((b"~" + base, b"~" + beside) + channels).decode("utf-8", "backslashreplace")


def markdown_table(name=b"app:x"):
    """The security page's table of the keys each kind of lock on ``name`` touches (what
    ``fastredlock audit --name`` checks), as Markdown: docs/security.md holds this text, and
    tests/docs/test_security_page.py checks that it is current."""
    rows = ["| Kind | Key | What | Holds |", "| --- | --- | --- | --- |"]
    for kind in KINDS:
        for key, what, holds in derived_keys(name, kind):
            rows.append(f"| {kind} | `{key.decode('utf-8', 'backslashreplace')}` | {what} | {holds} |")
    return "\n".join(rows) + "\n"


#: The commands a lock user needs, as ACL rules: what the clients send and what their scripts call
#: (every kind of lock, waking and turns, inspection). ``+delifeq`` (Valkey >= 9.0) and ``+delex``
#: (Redis >= 8.4) are for the native release where the server has them (older servers refuse a rule
#: naming a command they lack). The security page shows this text; its test runs a user with exactly
#: these rules and :func:`acl_rules` through every kind of lock.
LOCK_COMMANDS = ("-@all +set +get +del +exists +pexpire +pttl +mget +hget +hset +sadd +srem +sismember "
                 "+smembers +scard +zadd +zpopmin +zrem +time +publish +subscribe +unsubscribe +eval "
                 "+evalsha +script|load +info +select +ping")
