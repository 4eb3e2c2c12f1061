"""Redis Cluster masters: key slots, the slot map, redirections; written once for both cores.

A cluster is **one master** of the Redlock: it casts one vote per key, the answer of the node that
owns the key's slot. Its nodes are links of their own in the session (see :mod:`.session`), each
carrying only the commands of the keys it owns, all multiplexed in the round's one poll loop.

**Slots.** A key's slot is CRC16-XMODEM of the key (or of its hash tag: the bytes between the
first ``{`` and the next ``}``, when not empty) modulo 16384, as Redis defines it. The fence
counter's key carries the lock key's hash tag (see :mod:`.scripts`), so a script never spans
slots; ``lock_all`` over keys of different slots is refused (:class:`CrossSlotError`).

**The slot map** is learned with ``CLUSTER SHARDS`` (``CLUSTER SLOTS`` on servers without it) when
a core is made, and again (at most every :data:`REFRESH_EVERY` seconds) after a node failed, a
``-MOVED`` named a node the map does not know, or ``-CLUSTERDOWN``. The I/O (a short blocking
exchange) is :mod:`fastredlock._cluster`'s.

**Redirections.** ``-MOVED slot host:port``: the slot's owner changed; the map is corrected at
once and the command resent to the new owner in the same round (same deadline). ``-ASK slot
host:port``: the slot is migrating; the command is resent once to the importing node, behind
``ASKING``. At most :data:`MAX_REDIRECTS` redirections per command and round; more, and an owner
the map does not know, are an error reply (that master's "no"). ``-TRYAGAIN`` and
``-CLUSTERDOWN`` are error replies too: that master's "no" for the round.
"""
from array import array

from .resp import encode_command
from .sentinel import role_checked

#: Slots of a Redis Cluster.
SLOTS = 16384
#: Redirections (MOVED or ASK) one command may follow within one round.
MAX_REDIRECTS = 5
#: A slot map is asked again at most this often (seconds), however often a node fails.
REFRESH_EVERY = 0.1
_REFRESH_EVERY = REFRESH_EVERY
#: The bytes sent before a command redirected by ``-ASK``.
ASKING = encode_command(b"ASKING")

_CROSS = ("lock_all: keys %r and %r are in different cluster slots (%d and %d); a cluster runs one "
          "script on one node only. Put them in one slot with a hash tag: {order:42}:a and "
          "{order:42}:b share the slot of 'order:42'")


class CrossSlotError(ValueError):
    """Keys that must go into one command (``lock_all``) are in different slots of a cluster."""


def _table():
    table = array("H", [0]) * 256
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
        table[i] = crc & 0xFFFF
    return table


_CRC = _table()


def key_slot(key):
    """The cluster slot of ``key`` (bytes): CRC16-XMODEM of its hash tag, or of the whole key."""
    start = 0
    end = len(key)
    i = key.find(b"{")
    if i >= 0:
        j = key.find(b"}", i + 1)
        if j > i + 1:
            start = i + 1
            end = j
    crc = 0
    for p in range(start, end):
        crc = ((crc << 8) & 0xFF00) ^ _CRC[((crc >> 8) ^ key[p]) & 0xFF]
    return crc & 0x3FFF


def _number(payload, pos):
    """The decimal number after the type byte at ``pos`` (``*3``, ``$5``) and where its line ends."""
    value = 0
    pos += 1
    while payload[pos] != 13:  # b"\r"
        value = value * 10 + (payload[pos] - 48)
        pos += 1
    return value, pos + 2


def split_commands(payload, k):
    """The ``k`` RESP commands encoded back to back in ``payload`` (by this package: well formed):
    a list of ``(bytes, slot)``, the slot of the command's keys (-1: it names none).
    :class:`CrossSlotError` when one command's keys are in different slots."""
    out = []
    pos = 0
    for _ in range(k):
        begin = pos
        argc, pos = _number(payload, pos)
        args = []
        for _ in range(argc):
            size, pos = _number(payload, pos)
            args.append(payload[pos:pos + size])
            pos += size + 2
        name = args[0].upper()
        if name == b"EVALSHA" or name == b"EVAL":
            keys = args[3:3 + int(args[2])]
        else:
            keys = args[1:2]
        slot = -1
        for key in keys:
            s = key_slot(key)
            if slot >= 0 and s != slot:
                raise CrossSlotError(_CROSS % (keys[0], key, slot, s))
            slot = s
        out.append((payload[begin:pos], slot))
    return out


def parse_redirect(error):
    """``(ask, slot, (host, port))`` from a ``MOVED``/``ASK`` error reply, or None (another error)."""
    if error.startswith("MOVED "):
        ask = False
    elif error.startswith("ASK "):
        ask = True
    else:
        return None
    parts = error.split()
    if len(parts) < 3:
        return None
    host, _, port = parts[2].rpartition(":")
    try:
        return ask, int(parts[1]), (host, int(port))
    except ValueError:
        return None


def refreshes(error):
    """Whether an error reply means the slot map must be asked again (the cluster changed)."""
    return error.startswith("CLUSTERDOWN") or error.startswith("MOVED")


def _text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def parse_slots(reply, asked):
    """Slot ranges from a ``CLUSTER SLOTS`` reply: ``[(first, last, (host, port), [replicas])]``.
    A node that does not know its own address (an empty host: a cluster of one node) is named by
    the host it was ``asked`` at."""
    ranges = []
    for entry in reply:
        nodes = [(_text(n[0]) or asked, int(n[1])) for n in entry[2:] if _text(n[0]) != "?"]
        if nodes:
            ranges.append((int(entry[0]), int(entry[1]), nodes[0], nodes[1:]))
    return ranges


def parse_shards(reply, asked):
    """Slot ranges from a ``CLUSTER SHARDS`` reply (as :func:`parse_slots`); nodes that are not
    ``online`` are left out (a failed primary is not named as the owner)."""
    ranges = []
    for shard in reply:
        fields = dict(zip(shard[::2], shard[1::2]))
        primary, replicas = None, []
        for node in fields.get(b"nodes", ()):
            nf = dict(zip(node[::2], node[1::2]))
            if nf.get(b"health", b"online") != b"online":
                continue
            host = _text(nf.get(b"ip") or nf.get(b"endpoint") or b"") or asked
            port = int(nf.get(b"port") or nf.get(b"tls-port") or 0)
            if not port:
                continue
            if nf.get(b"role") == b"master":
                primary = (host, port)
            else:
                replicas.append((host, port))
        slots = fields.get(b"slots", ())
        if primary is None:
            continue
        for p in range(0, len(slots) - 1, 2):
            ranges.append((int(slots[p]), int(slots[p + 1]), primary, replicas))
    return ranges


class ClusterRoute:
    """One cluster master's routing: which session link owns each slot."""

    def __init__(self, master):
        #: The master (vote) index of the cluster in the session.
        self.master = master
        #: Per slot: the index of the link of the node that owns it, or -1 (unknown).
        self.slots = array("i", [-1]) * SLOTS
        #: ``(host, port)`` -> link index, for every node the client knows (replicas too).
        self.nodes = {}
        #: The map must be asked again (a node failed, an unknown owner, CLUSTERDOWN).
        self.stale = True
        #: When it may next be asked (monotonic seconds).
        self.refresh_at = 0.0

    def learned(self, ranges, now):
        """A fresh slot map (:func:`parse_slots`); the nodes it names must all be in ``nodes``."""
        for s in range(SLOTS):
            self.slots[s] = -1
        for first, last, primary, _ in ranges:
            link = self.nodes[primary]
            for s in range(first, last + 1):
                self.slots[s] = link
        self.stale = False
        self.refresh_at = now + _REFRESH_EVERY

    def failed(self, now):
        """A node failed or the map proved wrong: ask again (not sooner than the rate limit)."""
        if not self.stale:
            self.stale = True
            if self.refresh_at < now:
                self.refresh_at = now

    def due(self, now):
        """Whether the map should be asked again now."""
        return self.stale and now >= self.refresh_at


def node_verified(clock, reply, now, vote):
    """Check a cluster node's handshake ``INFO replication`` answer; return a problem (the node
    is a replica now: the slot map is asked again) or None. With ``vote`` (restart-aware voting),
    a node promoted since it started counts as up only since this client first saw it so: a
    cluster tells no promotion time (see the module docstring of :mod:`fastredlock._cluster`)."""
    problem, second = role_checked(clock, reply, "the node", "primary", "the slot map is asked again")
    if problem is None and vote and second >= 0:
        if clock.promoted_run is None or clock.promoted_run != clock.run_id:
            clock.promoted_run = clock.run_id
            clock.promoted_at = now
        clock.promoted(clock.promoted_at)
    return problem
