"""Cluster routing from tables: which node link carries a round's command, ``-MOVED``/``-ASK``
followed within the round, and when a slot map is asked again (no cluster, no server: the rules of
``protocol/cluster.py``'s ClusterRouting as the session applies them)."""
from __future__ import annotations

from fastredlock.io.masters import parse_master
from fastredlock.protocol.resp import encode_command

SET = 0
OK, NO, TIMEOUT, CONN_ERROR, ERROR_REPLY = range(5)
ROLE = b"# Replication\r\nrole:master\r\nmaster_replid:x\r\nsecond_repl_offset:-1\r\n"
A, B, REPLICA = ("127.0.0.1", 7101), ("127.0.0.1", 7102), ("127.0.0.1", 7111)


def _session(proto, n_plain=2):
    """Plain masters 0..n_plain-1, then one cluster (master ``n_plain``) whose map is learned:
    slots 0-8191 on A (replica REPLICA), 8192-16383 on B."""
    specs = [parse_master("redis://127.0.0.1:%d" % (7000 + i)) for i in range(n_plain)]
    specs.append(parse_master("redis+cluster://127.0.0.1:7100"))
    session = proto.session.Session(specs, 0.05, 0.1, 0.01)
    c = n_plain
    assert session.maps_stale and session.stale_routes(0.0) == [c]
    session.learned(c, [(0, 8191, A, [REPLICA]), (8192, 16383, B, [])], 0.0)
    assert not session.stale_routes(0.0) and not session.maps_stale
    return session, c


def _key(proto, low):
    """A key whose slot is on A (``low``) or on B."""
    for i in range(100):
        key = b"k%d" % i
        if (proto.cluster.key_slot(key) < 8192) == low:
            return key
    raise AssertionError


def _begin(session, keys, now=0.0):
    payload = b"".join(encode_command(b"SET", k, b"t", b"NX", b"PX", b"1000") for k in keys)
    session.begin(SET, len(keys), len(keys), payload, False, None, (1000,) * len(keys), True, now)
    for link in session.links:  # the twin: every open succeeds, every write goes out
        link.opening = link.connecting = False
        link.out = b""


def _hello(session, link, now):
    """Answer a new node connection's handshake (INFO replication: a primary)."""
    assert session.reply(link.index, ROLE, None, now)
    link.out = b""


def test_a_session_without_cluster_masters_has_no_routing(proto):
    specs = [parse_master("redis://127.0.0.1:%d" % (7000 + i)) for i in range(3)]
    session = proto.session.Session(specs, 0.05, 0.1, 0.01)
    assert session.routing is None and not session.maps_stale
    assert session.stale_routes(0.0) == [] and all(link.cmds is None for link in session.links)


def test_the_nodes_named_by_a_slot_map_become_links_of_the_clusters_vote(proto):
    session, c = _session(proto)
    assert [link.master for link in session.links] == [0, 1, c, c, c, c]
    assert [link.clock.address for link in session.links[3:]] == [A, REPLICA, B]
    assert session.add_node(c, B) == 5 and len(session.links) == 6  # known: not made again
    assert session.routing.links is session.links
    assert session.links[c].cmds == []  # the cluster's own link carries nothing


def test_each_command_goes_to_the_node_that_owns_its_slot(proto):
    session, c = _session(proto)
    low, high = _key(proto, True), _key(proto, False)
    _begin(session, [high, low])
    a, replica, b = session.links[3:]
    assert (a.cmds, replica.cmds, b.cmds) == ([1], [], [0])
    assert a.payload == encode_command(b"SET", low, b"t", b"NX", b"PX", b"1000")
    assert a.polled and b.polled and not replica.polled and not session.links[c].polled


def test_moved_resends_the_command_to_the_new_owner_within_the_round(proto):
    session, c = _session(proto)
    low = _key(proto, True)
    slot = proto.cluster.key_slot(low)
    _begin(session, [low])
    a, replica, b = session.links[3:]
    _hello(session, a, 0.001)
    assert session.reply(a.index, None, "MOVED %d %s:%d" % ((slot,) + B), 0.002)
    assert session.redirected and not session.maps_stale
    assert session.routing.route_of(c).slots[slot] == b.index  # the map is corrected at once
    assert b.cmds == [0] and b.polled and b.opening and b.deadline == 0.05 + 0.1
    b.opening = False
    _hello(session, b, 0.003)
    for i in (0, 1):
        assert session.reply(i, b"OK", None, 0.003)
    assert session.reply(b.index, b"OK", None, 0.004)
    (rnd,) = session.finish(0.004)
    assert rnd.outcomes[c] == OK


def test_ask_resends_the_command_once_behind_asking(proto):
    session, c = _session(proto)
    low = _key(proto, True)
    slot = proto.cluster.key_slot(low)
    _begin(session, [low])
    a, replica, b = session.links[3:]
    _hello(session, a, 0.001)
    b.open = True  # B's connection is open already: the command is written at once
    assert session.reply(a.index, None, "ASK %d %s:%d" % ((slot,) + B), 0.002)
    assert session.routing.route_of(c).slots[slot] == a.index  # ASK changes nothing for good
    assert b.cmds == [-1, 0]
    assert b.out == proto.cluster.ASKING + encode_command(b"SET", low, b"t", b"NX", b"PX", b"1000")
    assert session.next_kind(b.index) == -1  # ASKING's +OK is dropped
    assert session.reply(b.index, b"OK", None, 0.003)
    assert session.reply(b.index, b"OK", None, 0.003)
    (rnd,) = session.finish(0.003)
    assert rnd.outcomes[c] == OK


def test_an_unknown_owner_or_clusterdown_is_a_no_and_asks_the_map_again(proto):
    session, c = _session(proto)
    low = _key(proto, True)
    slot = proto.cluster.key_slot(low)
    _begin(session, [low])
    a = session.links[3]
    _hello(session, a, 0.001)
    assert session.reply(a.index, None, "MOVED %d 10.9.9.9:7000" % slot, 0.002)
    assert session.maps_stale and not session.redirected
    assert session.finish(0.002)[0].outcomes[c] == ERROR_REPLY
    assert session.stale_routes(0.002) == [] and session.maps_stale  # learned at 0.0: the rate limit
    assert session.stale_routes(0.1) == [c]
    session.refresh_tried(c, 0.1)  # no node answered: not before the rate limit again
    assert session.stale_routes(0.15) == [] and session.maps_stale
    assert session.stale_routes(0.2) == [c]

    session, c = _session(proto)
    _begin(session, [low])
    a = session.links[3]
    _hello(session, a, 0.001)
    assert session.reply(a.index, None, "CLUSTERDOWN The cluster is down", 0.002)
    assert session.maps_stale and session.finish(0.002)[0].outcomes[c] == ERROR_REPLY


def test_a_slot_no_known_node_serves_is_a_connection_error(proto):
    specs = [parse_master("redis+cluster://127.0.0.1:7100")]
    session = proto.session.Session(specs, 0.05, 0.1, 0.01)
    session.learned(0, [(0, 8191, A, [])], 0.0)
    assert not session.stale_routes(0.0)
    _begin(session, [_key(proto, False)], 1.0)
    assert session.maps_stale and session.stale_routes(1.0) == [0]
    (rnd,) = session.finish(1.0)
    assert rnd.outcomes == (CONN_ERROR,) and "no node known to serve it" in rnd.details[0]


def test_a_round_is_split_by_the_slot_of_each_commands_keys(proto):
    """Each command with the slot of its keys: SET's key, a script's declared keys (EVALSHA or
    eval, any case; none: -1), the arguments after them ignored; keys of two slots are refused."""
    c = proto.cluster
    key, tagged, other = b"lock:1", b"{lock:1}:wake", b"lock:2"
    assert c.key_slot(key) == c.key_slot(tagged) != c.key_slot(other)
    cmds = [
        encode_command(b"SET", key, b"t" * 40, b"NX", b"PX", b"10000"),
        encode_command(b"EVALSHA", b"f" * 40, b"1", other, b"token"),
        encode_command(b"eval", b"return 1", b"2", key, tagged, b"x" * 300),
        encode_command(b"EVAL", b"return 1", b"0", b"not-a-key"),
        encode_command(b"PING"),
        encode_command(b"GETSET", other, key),  # not a script: its first argument only
    ]
    assert c.split_commands(b"".join(cmds), len(cmds)) == [
        (cmds[0], c.key_slot(key)), (cmds[1], c.key_slot(other)), (cmds[2], c.key_slot(key)),
        (cmds[3], -1), (cmds[4], -1), (cmds[5], c.key_slot(other))]
    try:
        c.split_commands(encode_command(b"EVALSHA", b"f" * 40, b"2", key, other, b"t"), 1)
    except c.CrossSlotError as e:
        assert "lock:1" in str(e) and "lock:2" in str(e)
    else:
        raise AssertionError("keys of two slots in one script were not refused")
