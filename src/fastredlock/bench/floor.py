"""Build and run ``floor.c``, the C floor of the benchmarks: the syscalls of a Redlock cycle, nothing else.

    python -m fastredlock.bench.floor -m 127.0.0.1:6379[,127.0.0.1:6380...] [-n CYCLES] [-b 64] [-t TTL_MS] [-W]

builds the binary if needed and prints its JSON line. The comparison driver runs it as the configuration
``ref-c-floor``, and ``bench_lock.py`` drives the same source built as a shared library through
ctypes. The binary is compiled with the system compiler (``$CC``, else ``cc``) and ``-O2`` into
``~/.cache/fastredlock/floor`` (``$XDG_CACHE_HOME`` honoured), named by a hash of the source and
the compiler, so checkouts with different ``floor.c`` never share a stale binary. The release
scripts it loads are the project's own (``fastredlock.protocol.scripts``), written next to it.
Only loopback masters are accepted, here and again in the C code.
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "floor.c")
CFLAGS = ["-O2"]


class FloorUnavailable(RuntimeError):
    """No C compiler, or floor.c does not build here: the floor is skipped with this reason."""


def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fastredlock", "floor")


def compiler() -> Optional[str]:
    cc = os.environ.get("CC") or "cc"
    return shutil.which(cc) or shutil.which("gcc") or shutil.which("clang")


def compiler_version() -> str:
    cc = compiler()
    if cc is None:
        return ""
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return cc
    return out.splitlines()[0].strip() if out else cc


def build_floor(shared: bool = False) -> str:
    """Path of the compiled floor (``shared``: the ``.so`` for ctypes), compiling it first if needed."""
    return build_c(SOURCE, "libfloor" if shared else "floor", shared)


def build_c(source: str, stem: str, shared: bool = False) -> str:
    """Path of ``source`` compiled with ``cc -O2`` into the cache as ``<stem>-<hash>`` (``shared``:
    a ``.so``), compiling it first if needed. The hash covers the source, the compiler and the flags."""
    cc = compiler()
    if cc is None:
        raise FloorUnavailable("no C compiler (cc, gcc or clang) on PATH")
    with open(source, "rb") as f:
        src = f.read()
    flags = CFLAGS + (["-shared", "-fPIC"] if shared else [])
    digest = hashlib.sha1(src + b"\0" + cc.encode() + b"\0" + " ".join(flags).encode()).hexdigest()[:12]
    out_dir = cache_dir()
    path = os.path.join(out_dir, f"{stem}-{digest}.so" if shared else f"{stem}-{digest}")
    if os.path.exists(path):
        return path
    os.makedirs(out_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".build-")
    os.close(fd)
    try:
        proc = subprocess.run([cc, *flags, "-o", tmp, source], capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise FloorUnavailable(f"{os.path.basename(cc)} {' '.join(flags)} {os.path.basename(source)} failed: "
                                   + " | ".join(proc.stderr.strip().splitlines()[-3:])[-400:])
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)  # atomic: a concurrent build of the same source is harmless
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def scripts() -> Tuple[bytes, bytes]:
    """The project's RELEASE and RELEASE_MANY scripts (what fastredlock's cores send: RELEASE is the
    plain release of a key without a hash tag, as the floor's keys are)."""
    from fastredlock.protocol.scripts import RELEASE, RELEASE_MANY

    return RELEASE, RELEASE_MANY


def script_files() -> Tuple[str, str]:
    """RELEASE and RELEASE_MANY written to the cache (named by their SHA), for the binary's -r / -R."""
    out_dir = cache_dir()
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for name, text in zip(("release", "release-many"), scripts()):
        path = os.path.join(out_dir, f"{name}-{hashlib.sha1(text).hexdigest()}.lua")
        if not os.path.exists(path):
            fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".lua-")
            with os.fdopen(fd, "wb") as f:
                f.write(text)
            os.replace(tmp, path)
        paths.append(path)
    return paths[0], paths[1]


def master_list(urls: Sequence[str]) -> str:
    """``redis://host:port`` URLs (or ``host:port``) as the binary's ``-m`` list; loopback only."""
    out = []
    for url in urls:
        rest = url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
        host, _, port = rest.rpartition(":")
        bare = host.strip("[]")
        if bare != "localhost":
            try:
                loopback = ipaddress.ip_address(bare).is_loopback
            except ValueError:
                loopback = False
            if not loopback:
                raise ValueError(f"refusing {url}: the C floor targets loopback addresses only")
        out.append(f"{host}:{int(port)}")
    return ",".join(out)


def run_floor(urls: Sequence[str], cycles: int, batch: int = 1, ttl_ms: int = 10000,
              duration: Optional[float] = None, warmup: int = 100, timeout: float = 300.0,
              nowait: bool = False) -> Dict[str, Any]:
    """Run the floor binary: ``cycles`` lock+unlock cycles (fewer if ``duration`` seconds pass first).
    ``nowait``: ``-W``, the release is not waited for (its replies are read with the next cycle's).

    Returns its JSON result (cycles_per_s, locks_per_s, cycle_p50_us, ...); raises RuntimeError
    with the binary's message if it fails (a master that does not answer, a refused address).
    """
    binary = build_floor()
    release, release_many = script_files()
    cmd = [binary, "-n", str(cycles), "-m", master_list(urls), "-b", str(batch), "-t", str(ttl_ms),
           "-w", str(warmup), "-r", release, "-R", release_many]
    if duration:
        cmd += ["-d", f"{duration:g}"]
    if nowait:
        cmd.append("-W")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"floor exited with {proc.returncode}: {proc.stderr.strip()[-400:]}")
    result: Dict[str, Any] = json.loads(lines[-1])
    result["binary"] = binary
    return result


def as_sample(r: Dict[str, Any]) -> Dict[str, Any]:
    """A floor result in the shape of ``worker.summarize`` (rate and CPU per lock, latencies per
    round), so that the driver's tables take the floor like any other configuration."""
    locks = r["locks"] or 1
    wall = r["wall_s"] or 1e-9
    out = {
        "cycles": r["locks"], "wall_s": r["wall_s"], "rate": r["locks_per_s"],
        "acq_p50_us": r["acq_p50_us"], "acq_p99_us": r["acq_p99_us"],
        "rel_p50_us": r["rel_p50_us"], "rel_p99_us": r["rel_p99_us"],
        "user_ms_per_1000": r["user_s"] * 1e6 / locks, "sys_ms_per_1000": r["sys_s"] * 1e6 / locks,
        "cpu_util": (r["user_s"] + r["sys_s"]) / wall,
        "fails": r["fails"], "errors": {"not released": r["unreleased"]} if r["unreleased"] else {},
        "floor": r,
    }
    if r["batch"] > 1:
        out["batch"] = r["batch"]
    return out


class FloorLib:
    """The floor as a shared library, one ``cycle()`` per call: for pytest-benchmark, which times a
    Python callable (a ctypes call adds well under a microsecond to a cycle of tens)."""

    def __init__(self, urls: Sequence[str], batch: int = 1, ttl_ms: int = 10000) -> None:
        lib = ctypes.CDLL(build_floor(shared=True))
        lib.floor_open.restype = ctypes.c_void_p
        lib.floor_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_char_p,
                                   ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
        lib.floor_cycle.argtypes = [ctypes.c_void_p]
        lib.floor_cycle.restype = ctypes.c_int
        lib.floor_error.argtypes = [ctypes.c_void_p]
        lib.floor_error.restype = ctypes.c_char_p
        lib.floor_close.argtypes = [ctypes.c_void_p]
        lib.floor_close.restype = None
        release, release_many = scripts()
        err = ctypes.create_string_buffer(256)
        handle = lib.floor_open(master_list(urls).encode(), batch, ttl_ms, release, release_many, err, 256)
        if not handle:
            raise RuntimeError(f"floor_open: {err.value.decode(errors='replace')}")
        self._lib, self._handle, self.batch = lib, handle, batch

    def cycle(self) -> int:
        """One lock+unlock cycle; returns the number of keys held (batch when all went well)."""
        held = self._lib.floor_cycle(self._handle)
        if held < 0:
            raise RuntimeError(f"floor_cycle: {self._lib.floor_error(self._handle).decode(errors='replace')}")
        return held

    def close(self) -> None:
        if self._handle:
            self._lib.floor_close(self._handle)
            self._handle = None


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fastredlock.bench.floor", description="Build (if needed) and run the C floor.")
    p.add_argument("-m", "--masters", required=True, help="host:port[,host:port...] (loopback only)")
    p.add_argument("-n", "--cycles", type=int, default=20000)
    p.add_argument("-b", "--batch", type=int, default=1)
    p.add_argument("-t", "--ttl", type=int, default=10000, help="TTL in milliseconds")
    p.add_argument("-d", "--duration", type=float, help="stop after this many seconds")
    p.add_argument("-w", "--warmup", type=int, default=100)
    p.add_argument("-W", "--nowait", action="store_true", help="do not wait for the release (read its reply "
                   "with the next cycle's)")
    a = p.parse_args(argv)
    try:
        r = run_floor(a.masters.split(","), a.cycles, a.batch, a.ttl, a.duration, a.warmup, nowait=a.nowait)
    except (FloorUnavailable, RuntimeError, ValueError) as exc:
        print(f"fastredlock.bench.floor: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
