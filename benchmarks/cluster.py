"""What routing over a Redis Cluster costs the client: a cluster master vs its nodes as plain masters.

Cluster mode costs the servers something by itself, so each figure compares the same client on the
same servers, in the same run, interleaved (A, B, A, B, ...):

- ``sequential``: lock+unlock of one name, one at a time: ``Redlock([cluster.url])`` (N=1 cluster)
  vs ``Redlock([owner.url])``, the node that owns the name given as a plain ``redis://`` master;
  and, for information, a standalone (non-cluster) master.
- ``batch``: ``acquire_many`` + ``release_many`` of 64 names spread over the slots of 3 primaries
  (one round: one write per node) vs the same per-node batches written to the cluster's nodes as
  plain ``redis://`` masters (three N=1 clients, one call each, one after the other; the same
  commands: the SETs, then one ``RELEASE`` per key, ``Core.release_each``, since a cluster node
  refuses a script over keys of several slots, ``CROSSSLOT``), and, for information, to 3
  standalone masters (where a batch release is one script per master).
- the server CPU per lock of each primary during the cluster batches (``INFO cpu``), and what it
  predicts for 3, 6 and 12 primaries on machines of their own.

Indicative on a shared machine; ``--seconds`` per measurement (default 2).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable, Dict, List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from fastredlock import Redlock  # noqa: E402
from fastredlock.testing import start_cluster, start_master  # noqa: E402


def rate(work: Callable[[], int], seconds: float) -> float:
    """Locks per second of ``work`` (which returns how many locks it took and gave back)."""
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        done += work()
    return done / (time.perf_counter() - started)


def interleaved(cases: Dict[str, Callable[[], int]], seconds: float, rounds: int = 4) -> Dict[str, float]:
    """Each case's best rate over ``rounds`` alternations of ``seconds / rounds`` each."""
    best = {name: 0.0 for name in cases}
    for _ in range(rounds):
        for name, work in cases.items():
            best[name] = max(best[name], rate(work, seconds / rounds))
    return best


def cycle(dlm: Redlock, name: str) -> Callable[[], int]:
    def work() -> int:
        lock = dlm.lock(name, ttl=10.0)
        if not lock.acquire(blocking=False):
            raise SystemExit(f"not acquired: {lock.outcomes}")
        lock.release()
        return 1
    return work


def batch(dlm: Redlock, names: List[str], count: List[int] = None) -> Callable[[], int]:
    def work() -> int:
        locks = dlm.acquire_many(names, ttl=10.0)
        if not all(locks):
            raise SystemExit("a batch was not acquired")
        dlm.release_many(locks)
        if count is not None:
            count[0] += len(names)
        return len(names)
    return work


def cpu(node) -> float:
    info = node.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def main(argv: List[str] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--core", default="cython", choices=("cython", "python"))
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per measurement")
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args(argv)
    opts = dict(core=args.core, restart_aware=False, retry_count=0, io_timeout=1.0)
    with start_cluster(3) as cluster:
        standalone = start_master()
        try:
            name = "bench:cluster"
            owner = cluster.primary_of(name)
            seq = interleaved({
                "cluster (N=1)": cycle(Redlock([cluster.url], **opts), name),
                "owning node as plain master": cycle(Redlock([owner.url], **opts), name),
                "standalone master": cycle(Redlock([standalone.url], **opts), name),
            }, args.seconds * 3)
            names = [f"bench:b:{i}" for i in range(args.batch)]
            per_node: Dict[int, List[str]] = {}
            for n in names:
                per_node.setdefault(cluster.primary_of(n).port, []).append(n)
            node_clients = [(Redlock([cluster.node_at(("127.0.0.1", port)).url], **opts), subset)
                            for port, subset in per_node.items()]

            def node_batches() -> int:
                done = 0
                for dlm, subset in node_clients:
                    locks = dlm.acquire_many(subset, ttl=10.0)
                    if not all(locks):
                        raise SystemExit("a per-node batch was not acquired")
                    with dlm.executor.core() as core:
                        rounds = core.release_each([lk.key for lk in locks], [lk.token for lk in locks])
                    if not all(r.ok for r in rounds):
                        raise SystemExit("a per-node batch was not released")
                    done += len(subset)
                return done

            plain_masters = [start_master() for _ in per_node]
            plain_batches = [batch(Redlock([m.url], **opts), subset)
                             for m, subset in zip(plain_masters, per_node.values())]
            cluster_locks = [0]
            cluster_batch = batch(Redlock([cluster.url], **opts), names, cluster_locks)
            before = {p.port: cpu(p) for p in cluster.primaries}
            bat = interleaved({
                "cluster, one batch": cluster_batch,
                "per-node batches to its nodes as plain": node_batches,
                "per-node batches to standalone masters": lambda: sum(work() for work in plain_batches),
            }, args.seconds * 2)
            spent = {p.port: cpu(p) - before[p.port] for p in cluster.primaries}
            for m in plain_masters:
                m.stop()
        finally:
            standalone.stop()
    print(f"core={args.core}; locks/s (lock+unlock pairs), best of 4 interleaved runs")
    for k, v in seq.items():
        print(f"  sequential  {k:<36} {v:10,.0f}")
    print(f"  ratio cluster / owning node as plain: {seq['cluster (N=1)'] / seq['owning node as plain master']:.2f}"
          f"   cluster / standalone: {seq['cluster (N=1)'] / seq['standalone master']:.2f}")
    for k, v in bat.items():
        print(f"  batch of {args.batch:<3} {k:<36} {v:10,.0f}")
    print(f"  ratio cluster / its nodes as plain masters: "
          f"{bat['cluster, one batch'] / bat['per-node batches to its nodes as plain']:.2f}"
          f"   cluster / per-node standalone: {bat['cluster, one batch'] / bat['per-node batches to standalone masters']:.2f}")
    # CPU per lock (lock+unlock) of a primary: its CPU during the cluster batches over the locks it
    # served in them (its share of each batch); the standalone masters' batches cost it nothing.
    share = max(len(v) for v in per_node.values()) / args.batch
    busiest = max(spent.values()) / (cluster_locks[0] * share)
    print(f"  server CPU per lock on the busiest primary: {busiest * 1e6:.1f} us "
          f"({cluster_locks[0]:,} locks; sys+user per node: " + ", ".join(f"{s:.2f}s" for s in spent.values()) + ")")
    for primaries in (3, 6, 12):
        print(f"  predicted ceiling, {primaries:>2} primaries on machines of their own: "
              f"{primaries / busiest:12,.0f} locks/s (servers only; clients scale out separately)")


if __name__ == "__main__":
    main()
