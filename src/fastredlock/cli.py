"""Command line: ``python -m fastredlock demo``, ``run``, ``audit``, ``inspect`` and ``bench``.

``run`` is :mod:`fastredlock.runner` (a command under a lock), ``audit`` is :mod:`fastredlock.audit`
(are these masters a safe Redlock deployment?), ``inspect`` is :mod:`fastredlock.lockinfo` (is this
lock held, where, by whom?), ``bench`` the comparison driver (:mod:`fastredlock.bench`).

The demo needs no Redis set up by hand: it starts five local masters (see :mod:`fastredlock.testing`),
walks through acquire, extend and release while printing what each master answered, shows a second
client being refused, then stops the masters.
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from . import CORE, LockNotAcquiredError, Redlock, __version__
from .testing import find_server, server_version, start_masters


def _show(title: str, lock) -> None:
    print(f"  {title}")
    for o in lock.outcomes:
        print(f"    {o}")


def demo(masters: int = 5, ttl: float = 5.0) -> int:
    """Run the demo on ``masters`` local masters; return a process exit code."""
    binary = find_server()
    print(f"fastredlock {__version__}, core: {CORE}; server: {server_version(binary)} ({binary})")
    print(f"starting {masters} local masters ...")
    with start_masters(masters, binary=binary) as local:
        print("  " + "  ".join(local.urls))
        # These masters were started a moment ago: restart-aware voting would rightly refuse to
        # trust them for a TTL (they could have forgotten locks). Fresh masters held no locks.
        print("(restart-aware voting is off: these masters are brand new and held no locks)")
        with Redlock(local.urls, restart_aware=False) as alice, \
                Redlock(local.urls, retry_count=0, restart_aware=False) as bob:
            print(f"quorum: {alice.quorum} of {len(local)}")
            lock = alice.lock("demo:orders:42", ttl=ttl)
            if not lock.acquire():
                print("could not acquire the lock", file=sys.stderr)
                return 1
            _show(f"alice acquired {lock.name!r}: validity {lock.validity:.3f}s of ttl {ttl:g}s, "
                  f"token {lock.token.decode()}", lock)

            rival = bob.lock("demo:orders:42", ttl=ttl)
            got = rival.acquire(blocking=False)
            _show(f"bob tries the same lock: {'ACQUIRED (this is a bug!)' if got else 'refused'}", rival)
            if got:
                return 1

            lock.extend(ttl * 2)
            _show(f"alice extended it: validity now {lock.validity:.3f}s", lock)

            lock.release()
            _show("alice released it", lock)

            try:
                with bob.lock("demo:orders:42", ttl=ttl) as second:
                    _show(f"bob acquired it now: validity {second.validity:.3f}s", second)
            except LockNotAcquiredError as exc:
                print(f"bob still could not acquire it: {exc}", file=sys.stderr)
                return 1
            left = sum(m.command("EXISTS", "demo:orders:42") for m in local)
            print(f"keys left on the masters after bob's release: {left}")
        print("stopping the masters")
    return 0


def bench(argv: List[str]) -> int:
    """Run the comparison driver (:mod:`fastredlock.bench`) with ``argv``."""
    from .bench.driver import main as driver_main

    return driver_main(argv)


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``python -m fastredlock`` and the ``fastredlock`` script."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # every option after it belongs to the driver
        return bench(argv[1:])
    if argv[:1] == ["run"]:  # so is every argument after "run" (the command's among them)
        from .runner import run

        return run(argv[1:])
    if argv[:1] == ["audit"]:
        from .audit import main as audit

        return audit(argv[1:])
    if argv[:1] == ["inspect"]:
        from .lockinfo import main as inspect

        return inspect(argv[1:])
    parser = argparse.ArgumentParser(prog="fastredlock", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("bench", add_help=False,
                   help="compare with other Redlock clients on local masters (see: bench --help)")
    sub.add_parser("run", add_help=False,
                   help="run a command while holding a lock, like flock for many machines (see: run --help)")
    sub.add_parser("audit", add_help=False,
                   help="check masters as a Redlock deployment: persistence, eviction, independence, clocks, "
                        "latency, ACLs (see: audit --help)")
    sub.add_parser("inspect", add_help=False,
                   help="show whether a lock is held, where, by whom and for how long, without taking it "
                        "(see: inspect --help)")
    p_demo = sub.add_parser("demo", help="acquire, extend and release a lock on local masters")
    p_demo.add_argument("--masters", type=int, default=5, help="how many local masters (default 5)")
    p_demo.add_argument("--ttl", type=float, default=5.0, help="lock TTL in seconds (default 5)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo(args.masters, args.ttl)
    return 2  # pragma: no cover - argparse rejects unknown commands
