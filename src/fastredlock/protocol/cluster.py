"""Redis Cluster masters: key slots, the slot map, redirections; written once for both cores.

A cluster is **one master** of the Redlock: it casts one vote per key, the answer of the node that
owns the key's slot. Its nodes are links of their own in the session (see :mod:`.session`), each
carrying only the commands of the keys it owns, all multiplexed in the round's one poll loop.

**Who owns what.** This module holds every routing rule: :class:`ClusterRoute` is one cluster's
slot map, and :class:`ClusterRouting` applies the maps to a round (it makes the node links,
splits the round's commands by slot, gives them to the nodes, follows redirections, says when a
map is asked again). The :class:`~.session.Session` owns one ClusterRouting (None without cluster
masters), calls it at the points of a round where a cluster differs, and keeps what the I/O
twins read (``maps_stale``, ``redirected``) and the methods they call (``add_node``,
``learned``, ``refresh_tried``, ``stale_routes``). Asking a node for the map is I/O:
:mod:`fastredlock.io.cluster`'s.

**Slots.** A key's slot is CRC16-XMODEM of the key (or of its hash tag: the bytes between the
first ``{`` and the next ``}``, when not empty) modulo 16384, as Redis defines it. The fence
counter's key carries the lock key's hash tag (see :mod:`.scripts`), so a script never spans
slots; ``lock_all`` over keys of different slots is refused (:class:`CrossSlotError`).

**The slot map** is learned with ``CLUSTER SHARDS`` (``CLUSTER SLOTS`` on servers without it) when
a core is made, and again (at most every :data:`REFRESH_EVERY` seconds) after a node failed, a
``-MOVED`` named a node the map does not know, or ``-CLUSTERDOWN``. The I/O (a short blocking
exchange) is :mod:`fastredlock.io.cluster`'s.

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
    return _slot_in(key, 0, len(key))


def _slot_in(data, start, end):
    """:func:`key_slot` of the key ``data[start:end]``, read in place."""
    i = start
    while i < end and data[i] != 123:  # b"{"
        i += 1
    if i < end:
        j = i + 1
        while j < end and data[j] != 125:  # b"}"
            j += 1
        if i + 1 < j < end:
            start = i + 1
            end = j
    crc = 0
    for p in range(start, end):
        crc = ((crc << 8) & 0xFF00) ^ _CRC[((crc >> 8) ^ data[p]) & 0xFF]
    return crc & 0x3FFF


def split_commands(payload, k):
    """The ``k`` RESP commands encoded back to back in ``payload`` (by this package: well formed):
    a list of ``(bytes, slot)``, the slot of the command's keys (-1: it names none).
    :class:`CrossSlotError` when one command's keys are in different slots.

    (Once per cluster round: the lengths are read in place; only the name (when it may be
    ``EVAL``/``EVALSHA``), a script's key count and the keys are sliced out.)"""
    out = []
    pos = 0
    for _ in range(k):
        begin = pos
        argc = 0
        pos += 1  # (the numbers after '*' and '$' are read in place: no tuple per argument)
        while payload[pos] != 13:  # b"\r"
            argc = argc * 10 + (payload[pos] - 48)
            pos += 1
        pos += 2
        first_key = 1  # where the keys begin (EVAL/EVALSHA: 3), and how many there are
        nkeys = 1
        first = -1  # where the first key begins (and its size: the message of a cross-slot error)
        first_size = 0
        slot = -1
        for a in range(argc):
            size = 0
            pos += 1
            while payload[pos] != 13:
                size = size * 10 + (payload[pos] - 48)
                pos += 1
            pos += 2
            if a == 0:
                # EVAL or EVALSHA, any case ('|32' folds exactly the two cases of a letter)
                if (size == 4 or size == 7) and (payload[pos] | 32) == 101 and (payload[pos + 1] | 32) == 118 \
                        and (payload[pos + 2] | 32) == 97 and (payload[pos + 3] | 32) == 108 and (
                        size == 4 or ((payload[pos + 4] | 32) == 115 and (payload[pos + 5] | 32) == 104
                                      and (payload[pos + 6] | 32) == 97)):
                    first_key = 3
                    nkeys = 0
            elif a == 2 and first_key == 3:
                for p in range(pos, pos + size):
                    nkeys = nkeys * 10 + (payload[p] - 48)
            elif first_key <= a < first_key + nkeys:
                s = _slot_in(payload, pos, pos + size)
                if first < 0:
                    first = pos
                    first_size = size
                elif s != slot:
                    raise CrossSlotError(_CROSS % (payload[first:first + first_size], payload[pos:pos + size],
                                                   slot, s))
                slot = s
            pos += size + 2
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
        slot, number = int(parts[1]), int(port)
    except ValueError:
        return None
    if not 0 <= slot < SLOTS or not 0 < number < 65536:
        return None  # not a redirection a cluster sends (-MOVED 99999 ...): an error reply
    return ask, slot, (host, number)


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


class ClusterRouting:
    """The cluster masters of one :class:`~.session.Session`: their routes, and the round's
    commands split by slot and given to the node links that own them.

    The session owns one (None when no master is a cluster) and calls it only where a link is a
    cluster's (``link.cmds`` is not None) or a round begins. It shares the session's list of
    links, to which it appends the node links it makes (with ``make_link``, the
    :class:`~.link.Link` class: :mod:`.link` imports :mod:`.handshake`, which imports this module,
    so this one imports neither). It sets none of the session's state: what the session must
    know comes back as a value (a command it could not route, a redirection followed, a slot
    map to ask again).
    """

    def __init__(self, links, make_link):
        #: The session's links (the same list): the N masters', then the cluster nodes'.
        self.links = links
        self.make_link = make_link
        #: Per cluster master, its :class:`ClusterRoute`.
        self.routes = []
        for link in links:
            if link.spec.cluster is not None:
                link.cmds = []  # the cluster's own link carries nothing: its nodes do
                self.routes.append(ClusterRoute(link.index))
        #: The round's commands as ``(bytes, slot)`` (see :func:`split_commands`), how many, and
        #: the redirections followed so far in the round.
        self.split = None
        self.k = 0
        self.redirects = 0

    def route_of(self, i):
        """The :class:`ClusterRoute` of cluster master ``i``."""
        for route in self.routes:
            if route.master == i:
                return route
        raise IndexError("master %d is not a cluster" % i)

    # --- the slot maps ------------------------------------------------------------------------
    def add_node(self, i, address, restart_aware, preload):
        """The index of the link of cluster master ``i``'s node at ``address`` (``(host, port)``),
        made (like the master's own, but at that address) and appended to the links if new."""
        route = self.route_of(i)
        index = route.nodes.get(address, -1)
        if index >= 0:
            return index
        base = self.links[i]
        link = self.make_link(len(self.links), base.spec._replace(host=address[0], port=address[1]), restart_aware,
                              preload)
        link.master = i
        link.cmds = []
        link.clock.address = address
        self.links.append(link)
        route.nodes[address] = link.index
        return link.index

    def learned(self, i, ranges, now, restart_aware, preload):
        """Cluster master ``i``'s slot map (:func:`parse_slots`); links are made for the nodes it
        names first."""
        for first, last, primary, replicas in ranges:
            self.add_node(i, primary, restart_aware, preload)
            for address in replicas:
                self.add_node(i, address, restart_aware, preload)
        self.route_of(i).learned(ranges, now)

    def refresh_tried(self, i, now):
        """Asking cluster master ``i``'s nodes for the slot map failed: not again before the rate limit."""
        route = self.route_of(i)
        route.stale = True
        route.refresh_at = now + _REFRESH_EVERY

    def failed(self, i, now):
        """Cluster master ``i``'s slot map proved wrong (or a node failed): ask it again soon."""
        self.route_of(i).failed(now)

    def due(self, now):
        """The cluster masters whose slot map should be asked again now."""
        due = []
        for route in self.routes:
            if route.due(now):
                due.append(route.master)
        return due

    def stale(self):
        """Whether some cluster's slot map is to be asked again (now or after the rate limit)."""
        for route in self.routes:
            if route.stale:
                return True
        return False

    # --- the round ----------------------------------------------------------------------------
    def split_round(self, payload, k):
        """A round of the ``k`` commands in ``payload`` begins: split them by slot
        (:class:`CrossSlotError` before anything changed)."""
        self.split = split_commands(payload, k)
        self.k = k
        self.redirects = 0

    def assign(self, now):
        """Give each node link the commands of the slots it owns (``link.cmds``). Returns None, or
        the commands no known node serves, as ``(command, master, detail)``: their slot maps are
        asked again, and the session records them as that master's connection error."""
        split = self.split
        unrouted = None
        for link in self.links:
            if link.cmds is not None:
                link.cmds = []
        for route in self.routes:
            slots = route.slots
            for j in range(self.k):
                slot = split[j][1]
                owner = slots[slot] if slot >= 0 else -1
                if owner >= 0:
                    link = self.links[owner]
                    link.cmds.append(j)
                else:
                    route.failed(now)
                    if unrouted is None:
                        unrouted = []
                    unrouted.append((j, route.master,
                                     "slot %d: no node known to serve it (the slot map is asked again)" % slot))
        return unrouted

    def payload(self, link, fallbacks):
        """The bytes of a node link's commands: their EVAL forms from ``fallbacks`` (one bytes per
        command of the round) unless it is None."""
        if len(link.cmds) == 1 and link.cmds[0] >= 0 and fallbacks is None:
            return self.split[link.cmds[0]][0]
        parts = []
        for j in link.cmds:
            if j < 0:
                parts.append(ASKING)
            elif fallbacks is not None:
                parts.append(fallbacks[j])
            else:
                parts.append(self.split[j][0])
        return b"".join(parts)

    def redirect(self, link, error, wait, io_deadline, connect_timeout, now):
        """An error reply to ``link``'s next command (a node's). ``-MOVED``/``-ASK``: resend the
        command where it is told, within the round's deadline (``io_deadline``; a node link it
        opens gets ``connect_timeout`` more; ``wait``: the round waits for its answer).

        Returns 1: the command was resent (the twin must serve the node link it went to); 0: the
        reply answers the command (an error reply); -1: the same, and the slot map is to be asked
        again (an owner the map does not know, too many redirections, ``-CLUSTERDOWN``).
        """
        where = parse_redirect(error)
        if where is None:
            if refreshes(error):
                self.failed(link.master, now)
                return -1
            return 0
        route = self.route_of(link.master)
        target = route.nodes.get(where[2], -1)
        if target < 0 or self.redirects >= MAX_REDIRECTS * self.k:
            route.failed(now)
            return -1
        self.redirects += 1
        j = link.cmds[link.pop_cmd()]
        ask = where[0]
        if not ask:
            route.slots[where[1]] = target  # MOVED: the owner changed for good
        node = self.links[target]
        data = self.split[j][0]
        if not node.polled:  # not (or no longer) waited for in this round
            node.expect(0)
            node.cmds = []
            node.best_effort = False
            node.waited = wait
            node.deadline = io_deadline
            node.polled = True
        if ask:
            data = ASKING + data
            node.cmds.append(-1)
            node.requeue(len(node.cmds) - 1)
        node.cmds.append(j)
        node.requeue(len(node.cmds) - 1)
        if not node.open:
            node.payload = data
            node.request_open(data)
            node.reused = False
            node.deadline = io_deadline + connect_timeout
        elif node.skip >= 0:
            node.payload += data  # written once the handshake is answered
        else:
            node.out += data
        return 1


def requeue_asking(link, j):
    """Command ``j`` of a node link's queue is sent again (as EVAL, after NOSCRIPT): if it came
    by ``-ASK``, its ``ASKING`` goes first again (the importing node takes it only right behind)."""
    if j > 0 and link.cmds[j - 1] < 0:
        link.requeue(j - 1)
        link.out += ASKING


def node_verified(clock, reply, now, vote):
    """Check a cluster node's handshake ``INFO replication`` answer; return a problem (the node
    is a replica now: the slot map is asked again) or None. With ``vote`` (restart-aware voting),
    a node promoted since it started counts as up only since this client first saw it so: a
    cluster tells no promotion time (see the module docstring of :mod:`fastredlock.io.cluster`)."""
    problem, second = role_checked(clock, reply, "the node", "primary", "the slot map is asked again")
    if problem is None and vote and second >= 0:
        if clock.promoted_run is None or clock.promoted_run != clock.run_id:
            clock.promoted_run = clock.run_id
            clock.promoted_at = now
        clock.promoted(clock.promoted_at)
    return problem
