"""Ask a Redis Cluster for its slot map: the I/O half, shared by both twins.

What the map means and how a round is routed over it is :mod:`fastredlock.protocol.cluster`'s;
this module only talks: a short blocking exchange (connect, ``AUTH`` when a password is set,
``CLUSTER SHARDS``, or ``CLUSTER SLOTS`` where the server lacks it) with one node after another,
the whole bounded by ``connect_timeout``. It runs when a core is made and then only when the map
proved wrong (a node failed, ``-MOVED`` to a node the client did not know, ``-CLUSTERDOWN``), at
most every 100 ms per cluster, before a round: off the hot path, which never comes here.

**What a client can see of a failover.** A replica promoted by the cluster (its primary failed) may
lack lock keys the old primary had acknowledged: replication is asynchronous. A client that was
connected sees the owner of the slots change (``-MOVED``, a refreshed map) and connects to the
promoted node; its ``INFO replication`` says ``role:master`` with ``second_repl_offset`` >= 0 (it
was a replica since it started). With restart-aware voting such a node counts as up only since
this client *first saw it promoted*: its OKs do not count for ``restart_grace``. A cluster exposes
no promotion time (``CLUSTER NODES`` has config epochs, which order failovers but carry no clock;
the replication offsets count bytes, not seconds), so a client that connects for the first time
long after a failover also waits ``restart_grace`` before the promoted node's OKs count (costing
availability, not safety); and a promotion followed by a restart of the promoted node
(``second_repl_offset`` back to -1) is covered by its uptime as for any restarted master.
"""
from __future__ import annotations

import socket
from time import monotonic
from typing import Any, List, Optional, Tuple

from fastredlock.io import reader as hiredis  # hiredis, or the pure reader where it is absent

from .sentinel import next_reply
from .tls import context_for
from ..protocol.cluster import parse_shards, parse_slots
from ..protocol.resp import encode_command

__all__ = ["MAX_MAP", "ClusterError", "ask_slots", "refresh"]

#: Most bytes read for one slot-map reply (``CLUSTER SHARDS`` of a large cluster is a few hundred
#: KB); a node that sends more is cut off and the next one asked.
MAX_MAP = 32 << 20


class ClusterError(Exception):
    """No node of the cluster told its slot map; ``str()`` says what each one did."""


def ask_slots(spec: Any, nodes: List[Tuple[str, int]], timeout: float) -> list:
    """The slot map (:func:`~fastredlock.protocol.cluster.parse_slots`) from the first of
    ``nodes`` that gives one covering some slot within ``timeout`` seconds; :class:`ClusterError`."""
    deadline = monotonic() + timeout
    problems = []
    for host, port in nodes:
        if deadline - monotonic() <= 0.0:
            problems.append(f"{host}:{port}: not asked, {timeout:g}s passed")
            continue
        try:
            ranges = _exchange(spec, (host, port), deadline)
        except (OSError, hiredis.ProtocolError, ValueError, IndexError, TypeError, KeyError, AttributeError,
                UnicodeError, RecursionError) as exc:
            problems.append(f"{host}:{port}: {getattr(exc, 'strerror', None) or exc or type(exc).__name__}")
            continue
        if ranges:
            return ranges
        problems.append(f"{host}:{port}: serves no slot")
    raise ClusterError("no node gave the slot map (" + "; ".join(problems) + ")")


def _exchange(spec: Any, address: Tuple[str, int], deadline: float) -> list:
    sock = socket.create_connection(address, timeout=max(0.001, deadline - monotonic()))
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if spec.tls is not None:
            sock = context_for(spec.tls).wrap_socket(sock, server_hostname=address[0])
        reader = hiredis.Reader()
        if spec.password is not None:
            login = [spec.username.encode()] if spec.username else []
            reply = _call(sock, reader, encode_command(b"AUTH", *login, spec.password.encode()), deadline)
            if isinstance(reply, hiredis.ReplyError):
                raise ConnectionError(f"AUTH failed: {reply}")
        reply = _call(sock, reader, encode_command(b"CLUSTER", b"SHARDS"), deadline)
        if not isinstance(reply, hiredis.ReplyError):
            return parse_shards(reply, address[0])
        reply = _call(sock, reader, encode_command(b"CLUSTER", b"SLOTS"), deadline)
        if isinstance(reply, hiredis.ReplyError):
            raise ConnectionError(str(reply))
        return parse_slots(reply, address[0])
    finally:
        sock.close()


def _call(sock: Any, reader: Any, request: bytes, deadline: float) -> Any:
    sock.sendall(request)
    return next_reply(sock, reader, deadline, "the node", MAX_MAP)


def refresh(session: Any, i: int) -> Optional[int]:
    """Ask cluster master ``i``'s nodes (the known primaries first, then its seeds) for the slot
    map and hand it to the session (which makes links for new nodes); return how many links the
    session has now, or None when no node answered (asked again after the rate limit)."""
    spec = session.links[i].spec
    route = session.routing.route_of(i)
    known = sorted(route.nodes, key=lambda a: route.nodes[a] not in route.slots)
    nodes = known + [s for s in spec.cluster.seeds if s not in route.nodes]
    try:
        ranges = ask_slots(spec, nodes, session.connect_timeout)
    except ClusterError:
        session.refresh_tried(i, monotonic())
        return None
    session.learned(i, ranges, monotonic())
    return len(session.links)
