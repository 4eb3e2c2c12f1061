"""Run code against real and fake masters: local servers, and a fault kit to test your code (and
fastredlock) against masters that fail.

Everything here listens on loopback addresses only and is meant for tests, the demo and benchmarks,
never for production.

- Real masters (:mod:`.masters`): :func:`start_master` / :func:`start_masters` start ``redis-server``
  (or ``valkey-server``) processes on free loopback ports, with or without persistence; each
  :class:`LocalMaster` can be killed, paused, resumed and restarted. :func:`paused` (SIGSTOP/SIGCONT),
  :func:`restart` (kill -9 and start again, at once or after a delay: the "delayed restart" operators
  are told to use), :func:`pause_process` for any process (a client paused past its TTL).
  ``start_master(clock_rate=1.5)`` runs a master whose clock is 1.5 times too fast (libfaketime), so
  it expires keys early: the seeds' clock-drift fault.
- TLS masters: ``start_masters(5, tls=make_certs(d).server_tls())`` adds a ``rediss://`` port
  (``.tls_url``) beside the plain one; :func:`make_certs` (:mod:`.tls`) writes a CA, server and
  client certificates, a wrong CA, an expired and an other-host certificate with ``openssl``.
- Server binaries (:mod:`.servers`): :func:`find_server`, :func:`find_servers`, :func:`server_version`,
  :func:`server_name`/:func:`server_names` (``redis-7.0``, ``valkey-9.1``: the short names
  ``FASTREDLOCK_REDIS_SERVER`` also takes), :func:`faketime_library`.
- :class:`FaultProxy` (:mod:`.proxy`) sits between a client and a real master and can add latency,
  stall, blackhole, drop or reset connections (also in the middle of a reply), refuse new
  connections, and run a hook at the moment a request or a reply passes (to kill the master at an
  exact point of a round).
- :class:`FakeMaster` (:mod:`.fake`) is a tiny loopback server that answers every lock command with
  scripted bytes: garbage, truncated RESP, errors, wrong types, a 512 MB bulk length, a never-ending
  array, half a reply then a close. :data:`HOSTILE_REPLIES` names the classic ones.
- Cluster (:mod:`.cluster`): :func:`start_cluster` starts a Redis Cluster of ``primaries``
  primaries (``replicas`` replicas each) on free loopback ports (``.url`` is its ``redis+cluster://``
  URL); :meth:`LocalCluster.migrate_slot` reshards one slot (half-way too, for ``-ASK``),
  :meth:`LocalCluster.fail_over` kills a primary and waits for its replica's promotion.
- :func:`blackhole_address` (:mod:`.net`): an address where a TCP connect never completes.
- Safety runs, Jepsen style: :class:`HistoryRecorder` (:mod:`.history`) records every operation's
  invocation and completion on the shared monotonic clock as JSON lines, :func:`load_history` reads
  them back as :class:`Op` records; :func:`check_history` (:mod:`.checker`) finds overlaps of the
  intervals two clients each believed they held the lock, holds that interleaved at a protected
  resource, stale fenced writes it accepted (and those a fence check caught), fence inversions;
  :class:`FencedResource` (:mod:`.nemesis`) is such a resource; the nemeses inject master restarts,
  partitions, client pauses, clock jumps, slow links and kills; :func:`run_scenario` (:mod:`.scenarios`)
  runs K client processes per mode under one of them, and ``python -m fastredlock.testing.safety``
  writes the report (docs: Concepts, the safety report).
- Sentinel (:mod:`.sentinel`): :func:`start_sentinels` starts a master, a replica and three
  ``redis-server --sentinel`` processes watching it as one service (``.url`` is its
  ``redis+sentinel://`` URL); :meth:`SentinelGroup.failover` (``SENTINEL FAILOVER``) and
  :meth:`SentinelGroup.kill_master` fail it over and wait for the new master.

Example::

    from fastredlock import Redlock
    from fastredlock.testing import FaultProxy, start_masters

    with start_masters(3) as masters, FaultProxy(masters[0]) as proxy:
        dlm = Redlock([proxy.url] + masters.urls[1:], io_timeout=0.05)
        proxy.stall()                      # master 0 now answers nothing
        with dlm.lock("job", ttl=5) as lock:
            assert lock.outcomes[0].outcome == "timeout"
"""
from .fake import HOSTILE_REPLIES, Close, FakeMaster, HalfThenClose, Silent, Stream
from .masters import (
    PERSISTENCE_ARGS, LocalMaster, LocalMasters, pause_process, paused, restart, start_master, start_masters,
)
from .cluster import ClusterNode, LocalCluster, start_cluster
from .net import blackhole_address
from .proxy import FaultProxy
from .sentinel import LocalSentinel, SentinelGroup, start_sentinels
from .servers import faketime_library, find_server, find_servers, server_name, server_names, server_version
from .tls import Certs, ServerTls, make_certs
from .history import RESULTS, HistoryRecorder, Op, load_history, ops_from_records
from .checker import (
    CheckResult,
    Hold,
    ResourceWrite,
    check_history,
    fence_inversions,
    find_overlaps,
    held_intervals,
    late_writes,
    stale_writes,
    use_overlaps,
    writes_from_history,
)
from .nemesis import NEMESES, ClientSlot, Cluster, FencedResource, Nemesis, ResourceClient, clock_master
from .scenarios import KNOWN_LIMITS, MODES, SCENARIOS, recheck, render_markdown, run_safety, run_scenario

__all__ = [
    "Certs",
    "ServerTls",
    "make_certs",
    "FaultProxy",
    "FakeMaster",
    "Close",
    "ClusterNode",
    "LocalCluster",
    "HalfThenClose",
    "Silent",
    "Stream",
    "HOSTILE_REPLIES",
    "PERSISTENCE_ARGS",
    "LocalMaster",
    "LocalMasters",
    "LocalSentinel",
    "SentinelGroup",
    "blackhole_address",
    "faketime_library",
    "find_server",
    "find_servers",
    "pause_process",
    "paused",
    "restart",
    "server_name",
    "server_names",
    "server_version",
    "start_master",
    "start_cluster",
    "start_masters",
    "start_sentinels",
    "RESULTS",
    "HistoryRecorder",
    "Op",
    "load_history",
    "ops_from_records",
    "CheckResult",
    "Hold",
    "ResourceWrite",
    "check_history",
    "fence_inversions",
    "find_overlaps",
    "held_intervals",
    "stale_writes",
    "use_overlaps",
    "late_writes",
    "writes_from_history",
    "NEMESES",
    "ClientSlot",
    "Cluster",
    "FencedResource",
    "Nemesis",
    "ResourceClient",
    "clock_master",
    "MODES",
    "SCENARIOS",
    "render_markdown",
    "recheck",
    "KNOWN_LIMITS",
    "run_safety",
    "run_scenario",
]
