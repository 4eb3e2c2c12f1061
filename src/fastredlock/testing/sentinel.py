"""Sentinel-managed masters: a master, its replica and three ``redis-server --sentinel`` processes.

:func:`start_sentinels` starts, on free loopback ports, a master, ``replicas`` replicas of it and
``count`` sentinels watching it as one service, and waits until the group is ready for a failover
(every sentinel knows the replicas and the other sentinels). :meth:`SentinelGroup.failover` forces
one (``SENTINEL FAILOVER``); :meth:`SentinelGroup.kill_master` kills the master so that the sentinels
fail over on their own. Both wait until every sentinel names the new master, it serves as one, and
the old one (if alive) was demoted to a replica.

The sentinels' timers are short (``down_after_ms`` 500, ``failover_timeout_ms`` 2000) so a test
sees a failover within a few seconds; production values are tens of seconds.
"""
from __future__ import annotations

import os
import time
from typing import Any, List, Optional, Tuple

from .masters import LocalMaster, start_master
from .net import HOST
from .servers import find_server
from .tls import ServerTls

__all__ = ["LocalSentinel", "SentinelGroup", "start_sentinels"]


class LocalSentinel(LocalMaster):
    """One ``redis-server <conf> --sentinel`` process watching one service (``.command`` talks to it)."""

    def __init__(self, master: LocalMaster, service: str, quorum: int, down_after_ms: int,
                 failover_timeout_ms: int, binary: Optional[str] = None, tls: Optional[ServerTls] = None) -> None:
        super().__init__(binary, tls=tls)
        self.service = service
        #: The master is watched on its TLS port (``tls-replication yes``) when it has one and the
        #: sentinel has TLS settings: a ``rediss+sentinel://`` deployment, TLS end to end.
        self._tls_master = tls is not None and master.tls_port is not None
        port = master.tls_port if self._tls_master else master.port
        self._monitor = (master.host, port, quorum, down_after_ms, failover_timeout_ms)

    def _args(self) -> List[str]:
        host, port, quorum, down_after, failover_timeout = self._monitor
        conf = os.path.join(self.dir, "sentinel.conf")
        if not os.path.exists(conf):  # a restarted sentinel keeps the state it rewrote there
            with open(conf, "w") as f:
                f.write(
                    f"port {self.port}\nbind {HOST}\ndaemonize no\ndir {self.dir}\nlogfile \"\"\n"
                    f"loglevel warning\n"
                    f"sentinel monitor {self.service} {host} {port} {quorum}\n"
                    f"sentinel down-after-milliseconds {self.service} {down_after}\n"
                    f"sentinel failover-timeout {self.service} {failover_timeout}\n"
                    f"sentinel parallel-syncs {self.service} 1\n"
                )
        args = [self.binary, conf, "--sentinel"]
        if self.tls is not None:  # a TLS port beside the plain one (which .command keeps using)
            args += self.tls.args(self.tls_port)  # type: ignore[arg-type]
            if self._tls_master:
                args += ["--tls-replication", "yes"]
        return args

    def master_address(self) -> Optional[Tuple[str, int]]:
        """``SENTINEL GET-MASTER-ADDR-BY-NAME``: the address this sentinel names, or None."""
        reply = self.command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
        if not isinstance(reply, list):
            return None
        return reply[0].decode(), int(reply[1])

    def master_info(self) -> dict:
        """``SENTINEL MASTER <service>`` as a dict of str to str."""
        reply = self.command("SENTINEL", "MASTER", self.service)
        if not isinstance(reply, list):
            raise RuntimeError(f"SENTINEL MASTER {self.service}: {reply!r}")
        return {reply[i].decode(): reply[i + 1].decode() for i in range(0, len(reply), 2)}


class SentinelGroup:
    """A master, its replicas and the sentinels watching them as ``service``; a context manager."""

    def __init__(self, service: str, servers: List[LocalMaster], sentinels: List[LocalSentinel]) -> None:
        self.service = service
        #: Every data server (the master first at the start; see :attr:`master` for the current one).
        self.servers = servers
        self.sentinels = sentinels

    # --- addresses -------------------------------------------------------------------------------
    @property
    def addresses(self) -> List[Tuple[str, int]]:
        """The sentinels' ``(host, port)``."""
        return [(s.host, s.port) for s in self.sentinels]

    @property
    def url(self) -> str:
        """``redis+sentinel://h:p,h:p,h:p/<service>``."""
        return "redis+sentinel://" + ",".join(f"{h}:{p}" for h, p in self.addresses) + f"/{self.service}"

    @property
    def tls_addresses(self) -> List[Tuple[str, int]]:
        """The sentinels' TLS ``(host, port)`` (sentinels started with ``tls=...`` only)."""
        return [(s.host, s.tls_port) for s in self.sentinels]  # type: ignore[misc]

    @property
    def master(self) -> LocalMaster:
        """The data server the sentinels name as master now."""
        return self._server_at(self._named())

    @property
    def replicas(self) -> List[LocalMaster]:
        """The data servers that are not the current master (running or not)."""
        master = self.master
        return [s for s in self.servers if s is not master]

    def _named(self) -> Tuple[str, int]:
        for sentinel in self.sentinels:
            if sentinel.running():
                try:
                    address = sentinel.master_address()
                except OSError:
                    continue
                if address is not None:
                    return address
        raise RuntimeError("no sentinel names a master")

    def _server_at(self, address: Tuple[str, int]) -> LocalMaster:
        for server in self.servers:
            if (server.host, server.port) == address or (server.host, server.tls_port) == address:
                return server
        raise RuntimeError(f"the sentinels name {address}, which is not a server of this group")

    # --- failovers -------------------------------------------------------------------------------
    def failover(self, timeout: float = 30.0, demoted: bool = True) -> LocalMaster:
        """Force a failover (``SENTINEL FAILOVER``) and return the new master once it serves
        (and, with ``demoted``, once the old one is a replica: the sentinels take up to ten
        seconds to reconfigure it, see :meth:`wait_master`)."""
        old = self.master
        deadline = time.monotonic() + timeout
        while True:
            reply = self.sentinels[0].command("SENTINEL", "FAILOVER", self.service)
            if reply == b"OK":
                break
            # -NOGOODSLAVE while the replicas still sync after a previous failover; -INPROG
            if time.monotonic() > deadline or not str(reply).startswith(("NOGOODSLAVE", "INPROG")):
                raise RuntimeError(f"SENTINEL FAILOVER {self.service}: {reply!r}")
            time.sleep(0.1)
        return self.wait_master(old, max(1.0, deadline - time.monotonic()), demoted)

    def kill_master(self, timeout: float = 30.0) -> LocalMaster:
        """SIGKILL the master; wait until the sentinels promoted a replica and return it."""
        old = self.master
        old.kill()
        return self.wait_master(old, timeout)

    def wait_master(self, old: LocalMaster, timeout: float = 30.0, demoted: bool = True) -> LocalMaster:
        """Wait until every running sentinel names a master other than ``old`` and it says
        ``role:master``; with ``demoted``, also until ``old``, if it runs, is a replica (until
        then it still accepts writes: the window the Sentinel guide's "Failover" section describes).
        Return the new master."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                named = {s.master_address() for s in self.sentinels if s.running()}
                if len(named) == 1 and None not in named:
                    new = self._server_at(named.pop())  # type: ignore[arg-type]
                    if (new is not old and new.command("ROLE")[0] == b"master"
                            and (not demoted or not old.running() or old.command("ROLE")[0] == b"slave")):
                        return new
            except (OSError, RuntimeError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"no failover of {self.service} within {timeout}s")
            time.sleep(0.05)

    def wait_ready(self, timeout: float = 20.0, failover: bool = True) -> "SentinelGroup":
        """Wait until every sentinel knows the master's replicas and the other sentinels (a
        failover needs both: a few seconds); ``failover=False``: until each one names the master."""
        deadline = time.monotonic() + timeout
        want_replicas, want_others = len(self.servers) - 1, len(self.sentinels) - 1
        if not failover:
            want_replicas = want_others = 0
        while True:
            try:
                infos = [s.master_info() for s in self.sentinels]
                if all(int(i["num-slaves"]) >= want_replicas and int(i["num-other-sentinels"]) >= want_others
                       for i in infos):
                    return self
            except (OSError, RuntimeError, KeyError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the sentinels of {self.service} did not find each other within {timeout}s")
            time.sleep(0.05)

    # --- lifecycle -------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop the sentinels, then the servers."""
        for process in [*self.sentinels, *self.servers]:
            process.stop()

    def __enter__(self) -> "SentinelGroup":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<SentinelGroup {self.url}>"


def _wait_synced(master: LocalMaster, replicas: List[LocalMaster], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        info = master.command("INFO", "replication").decode()
        synced = info.count(",state=online,")
        if synced >= len(replicas):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the replicas of {master} did not sync within {timeout}s")
        time.sleep(0.02)


def start_sentinels(service: str = "mymaster", *, count: int = 3, replicas: int = 1, quorum: int = 2,
                    down_after_ms: int = 500, failover_timeout_ms: int = 2000,
                    binary: Optional[str] = None, master_args: Tuple[str, ...] = (),
                    failover_ready: bool = True, timeout: float = 20.0,
                    sentinel_tls: Optional[ServerTls] = None, master_tls: Optional[ServerTls] = None) -> SentinelGroup:
    """Start a master, ``replicas`` replicas and ``count`` sentinels watching it as ``service``
    (``quorum`` of them agree that it is down), all on free loopback ports; return the
    :class:`SentinelGroup` once a failover is possible (it is a context manager that stops every
    process on exit). ``binary``: the server (default :func:`~.servers.find_server`; it must
    support ``--sentinel``, as Debian's redis-server 7.0.15 does). ``master_args``: more flags for
    every data server (the replicas are started with ``--replicaof`` on top).
    ``failover_ready=False`` returns as soon as every sentinel names the master (about a second
    sooner than the several seconds the sentinels take to find each other).
    ``sentinel_tls``: the sentinels also listen on a TLS port (``tls_port``, see
    :attr:`SentinelGroup.tls_addresses`; the binary must be built with TLS). ``master_tls`` (with
    ``sentinel_tls``, ``replicas=0``): the master has a TLS port too, and the sentinels watch it and
    name it there (``tls-replication yes``): a ``rediss+sentinel://`` deployment.
    """
    binary = find_server(binary)
    # a replica syncs at once (not after the default 5 s wait for more replicas)
    master_args = ("--repl-diskless-sync-delay", "0", *master_args)
    started: List[LocalMaster] = []
    try:
        if master_tls is not None and replicas:
            raise ValueError("start_sentinels: master_tls is for a group without replicas")
        master = start_master(binary=binary, extra_args=master_args, tls=master_tls)
        started.append(master)
        copies = []
        for _ in range(replicas):
            copies.append(start_master(binary=binary,
                                       extra_args=(*master_args, "--replicaof", master.host, str(master.port))))
            started.append(copies[-1])
        _wait_synced(master, copies, timeout)
        sentinels: List[LocalSentinel] = []
        for _ in range(count):
            sentinel = LocalSentinel(master, service, quorum, down_after_ms, failover_timeout_ms, binary,
                                     tls=sentinel_tls)
            started.append(sentinel)
            sentinels.append(sentinel.start())
        return SentinelGroup(service, [master, *copies], sentinels).wait_ready(timeout, failover_ready)
    except BaseException:
        for process in started:
            process.stop()
        raise
