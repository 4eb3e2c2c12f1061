"""A local Redis Cluster: ``redis-server --cluster-enabled yes`` processes on free loopback ports.

:func:`start_cluster` starts ``primaries`` nodes (and ``replicas`` replicas of each), spreads the
16384 slots evenly over the primaries, joins the nodes with ``CLUSTER MEET`` and ``CLUSTER
REPLICATE`` (from Python: no ``redis-cli`` needed) and waits until every node says
``cluster_state:ok`` and names the same owner for every slot. :class:`LocalCluster` then offers
what the cluster tests need: the ``redis+cluster://`` URL, the owner of a slot, a slot moved to
another primary (:meth:`LocalCluster.migrate_slot`, the ``SETSLOT MIGRATING``/``IMPORTING`` +
``MIGRATE`` + ``SETSLOT NODE`` steps of a resharding, also stoppable half-way for ``-ASK``), and
a primary killed until its replica is promoted (:meth:`LocalCluster.fail_over`).

The node timeout (``node_timeout_ms``, 5000 by default) is short enough for a failover test to see
a promotion within seconds (pass less for a faster one) and long enough that a loaded test machine
does not make the nodes suspect each other; production values are 15 s and more.
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import socket

from .masters import LocalMaster
from .net import HOST

__all__ = ["ClusterNode", "LocalCluster", "start_cluster"]

SLOTS = 16384


class ClusterNode(LocalMaster):
    """One cluster node (``.command`` talks to it; ``.node_id`` is its cluster id)."""

    def __init__(self, node_timeout_ms: int, binary: Optional[str] = None, extra_args: Sequence[str] = ()) -> None:
        super().__init__(binary, port=_cluster_port(), extra_args=extra_args)
        self.node_timeout_ms = node_timeout_ms
        self.node_id = ""

    def _args(self) -> List[str]:
        return super()._args() + [
            "--cluster-enabled", "yes", "--cluster-config-file", os.path.join(self.dir, "nodes.conf"),
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--cluster-require-full-coverage", "yes",
        ]

    def info(self, section: str) -> Dict[str, str]:
        """``INFO <section>`` (or ``CLUSTER INFO`` for "cluster") as a dict of str to str."""
        reply = self.command("CLUSTER", "INFO") if section == "cluster" else self.command("INFO", section)
        return dict(line.split(":", 1) for line in reply.decode().splitlines() if ":" in line)

    def owners(self) -> Dict[int, Tuple[str, int]]:
        """This node's view of the slot map: ``{first_slot: (host, port)}`` per range."""
        reply = self.command("CLUSTER", "SLOTS")
        if not isinstance(reply, list):
            return {}
        return {int(r[0]): (r[2][0].decode(), int(r[2][1])) for r in reply}


def _cluster_port() -> int:
    """A free loopback port whose cluster bus port (10000 higher) is free too (so at most 55535)."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((HOST, 0))
            port = s.getsockname()[1]
        if port > 55535:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((HOST, port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair (port, port + 10000) for a cluster node")


class LocalCluster:
    """The nodes of one local cluster; a context manager that stops them all on exit."""

    def __init__(self, primaries: List[ClusterNode], replicas: List[ClusterNode]) -> None:
        #: The nodes started as primaries, in slot order (after a failover, see :meth:`primary_of`).
        self.primaries = primaries
        #: The replicas, ``replicas[k]`` following ``primaries[k % len(primaries)]`` at the start.
        self.replicas = replicas

    @property
    def nodes(self) -> List[ClusterNode]:
        """Every node, primaries first."""
        return self.primaries + self.replicas

    @property
    def url(self) -> str:
        """``redis+cluster://h:p,h:p,...`` naming every node (the client learns the rest)."""
        return "redis+cluster://" + ",".join(f"{n.host}:{n.port}" for n in self.nodes)

    def live(self) -> List[ClusterNode]:
        """The nodes whose process runs."""
        return [n for n in self.nodes if n.running()]

    def node_at(self, address: Tuple[str, int]) -> ClusterNode:
        """The node listening at ``(host, port)``."""
        for n in self.nodes:
            if (n.host, n.port) == tuple(address):
                return n
        raise KeyError(address)

    def keyslot(self, key: Any) -> int:
        """``CLUSTER KEYSLOT key`` as a live node computes it."""
        return int(self.live()[0].command("CLUSTER", "KEYSLOT", key))

    def owner(self, slot: int) -> ClusterNode:
        """The primary that serves ``slot`` by a live node's ``CLUSTER SLOTS``."""
        for r in self.live()[0].command("CLUSTER", "SLOTS"):
            if int(r[0]) <= slot <= int(r[1]):
                return self.node_at((r[2][0].decode(), int(r[2][1])))
        raise KeyError(f"slot {slot} is not served")

    def primary_of(self, key: Any) -> ClusterNode:
        """The primary that serves ``key``."""
        return self.owner(self.keyslot(key))

    # --- resharding -----------------------------------------------------------------------------
    def migrate_slot(self, slot: int, to: ClusterNode, finish: bool = True) -> ClusterNode:
        """Move ``slot`` (and its keys) to primary ``to``; return the node it left.

        ``finish=False`` stops half-way: the source is MIGRATING, ``to`` IMPORTING, the keys are
        moved already (so the source answers ``-ASK`` for them); :meth:`finish_migration` ends it.
        """
        self.wait_agreed()  # the importing node must know the newest epoch before it bumps its own
        source = self.owner(slot)
        if source is to:
            return source
        to.command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
        source.command("CLUSTER", "SETSLOT", slot, "MIGRATING", to.node_id)
        while True:
            keys = source.command("CLUSTER", "GETKEYSINSLOT", slot, 100)
            if not keys:
                break
            reply = source.command("MIGRATE", to.host, to.port, "", 0, 5000, "KEYS", *keys)
            if not isinstance(reply, bytes):
                raise RuntimeError(f"MIGRATE of slot {slot} failed: {reply!r}")
        if finish:
            self.finish_migration(slot, source, to)
        return source

    def finish_migration(self, slot: int, source: ClusterNode, to: ClusterNode) -> None:
        """End a migration begun with ``finish=False``: every node learns that ``to`` owns ``slot``."""
        for node in (to, source):
            node.command("CLUSTER", "SETSLOT", slot, "NODE", to.node_id)
        for node in self.live():
            if node.info("replication").get("role") == "master" and node not in (to, source):
                node.command("CLUSTER", "SETSLOT", slot, "NODE", to.node_id)
        self.wait_agreed()

    # --- failures -------------------------------------------------------------------------------
    def fail_over(self, primary: ClusterNode, timeout: float = 20.0) -> ClusterNode:
        """Kill ``primary`` (SIGKILL) and wait until one of its replicas serves its slots; return it."""
        slots = [s for s, node in self._owners(self.live()[0]).items() if node == (primary.host, primary.port)]
        primary.kill()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                new = self.owner(slots[0])
            except (KeyError, OSError):
                new = None
            if new is not None and new is not primary and self._agreed():
                return new
            time.sleep(0.05)
        raise RuntimeError(f"no replica of {primary} was promoted within {timeout}s")

    def wait_agreed(self, timeout: float = 20.0) -> None:
        """Wait until every live node says ``cluster_state:ok`` and names the same slot owners."""
        deadline = time.monotonic() + timeout
        while not self._agreed():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster did not settle within {timeout}s: {self._disagreement()}")
            time.sleep(0.05)

    def _disagreement(self) -> str:
        """What each live node says where they differ (for the error of :meth:`wait_agreed`)."""
        parts, views = [], {}
        for node in self.live():
            try:
                info = node.info("cluster")
                views[node.port] = self._owners(node)
                parts.append(f"{node.port}: state {info.get('cluster_state')}, epoch "
                             f"{info.get('cluster_my_epoch')} of {info.get('cluster_current_epoch')}")
            except (OSError, ConnectionError, IndexError) as exc:
                parts.append(f"{node.port}: {exc!r}")
        if views:
            first = next(iter(views.values()))
            slots = sorted({s for v in views.values() for s in set(v) ^ set(first)}
                           | {s for v in views.values() for s in v if v.get(s) != first.get(s)})
            for s in slots[:3]:
                parts.append(f"slot {s}: " + ", ".join(f"{p} says {v.get(s)}" for p, v in views.items()))
        return "; ".join(parts)

    def _agreed(self) -> bool:
        try:
            views, epochs = [], set()
            for node in self.live():
                info = node.info("cluster")
                if info.get("cluster_state") != "ok":
                    return False
                epochs.add(info.get("cluster_current_epoch"))
                views.append(self._owners(node))
        except (OSError, ConnectionError):
            return False
        # Every node must know the newest epoch too: a node that bumps its epoch to take a slot
        # (SETSLOT NODE) from a stale one can lose the slot to its old owner's gossip, and then
        # both name the other as the owner for good.
        return all(v == views[0] for v in views) and len(views[0]) == SLOTS and len(epochs) == 1

    @staticmethod
    def _owners(node: ClusterNode) -> Dict[int, Tuple[str, int]]:
        owners: Dict[int, Tuple[str, int]] = {}
        for r in node.command("CLUSTER", "SLOTS"):
            for slot in range(int(r[0]), int(r[1]) + 1):
                owners[slot] = (r[2][0].decode(), int(r[2][1]))
        return owners

    def stop(self) -> None:
        """Stop every node."""
        for n in self.nodes:
            n.stop()

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<LocalCluster {self.url}>"


def start_cluster(primaries: int = 3, replicas: int = 0, *, binary: Optional[str] = None,
                  node_timeout_ms: int = 5000, extra_args: Sequence[str] = (),
                  timeout: float = 30.0) -> LocalCluster:
    """Start a local cluster of ``primaries`` primaries with ``replicas`` replicas each (slots
    spread evenly) and wait until it serves every slot; a :class:`LocalCluster`.

    ``binary``: a server built with cluster support (any Redis >= 3, Valkey); ``extra_args``: more
    server flags for every node. On failure the nodes already started are stopped.
    """
    if primaries < 1 or replicas < 0:
        raise ValueError("start_cluster: primaries must be >= 1 and replicas >= 0")
    started: List[ClusterNode] = []
    try:
        for _ in range(primaries * (1 + replicas)):
            started.append(ClusterNode(node_timeout_ms, binary, extra_args).start())
        for node in started:
            node.node_id = node.command("CLUSTER", "MYID").decode()
        prim, reps = started[:primaries], started[primaries:]
        for k, node in enumerate(prim):
            first, last = k * SLOTS // primaries, (k + 1) * SLOTS // primaries
            reply = node.command("CLUSTER", "ADDSLOTS", *range(first, last))
            if reply != b"OK":
                raise RuntimeError(f"CLUSTER ADDSLOTS on {node}: {reply!r}")
        for node in started[1:]:
            node.command("CLUSTER", "MEET", started[0].host, started[0].port)
        cluster = LocalCluster(prim, reps)
        deadline = time.monotonic() + timeout
        for k, node in enumerate(reps):
            target = prim[k % primaries]
            while node.command("CLUSTER", "REPLICATE", target.node_id) != b"OK":
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{node} could not become a replica of {target}")
                time.sleep(0.05)  # it does not know the primary yet: the MEET gossip is under way
        cluster.wait_agreed(max(1.0, deadline - time.monotonic()))
        for node in reps:
            while node.info("replication").get("master_link_status") != "up":
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{node} did not sync with its primary")
                time.sleep(0.05)
        return cluster
    except BaseException:
        for node in started:
            node.stop()
        raise
