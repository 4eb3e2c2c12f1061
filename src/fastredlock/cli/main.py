"""Command line: ``python -m fastredlock demo``, ``run``, ``audit``, ``inspect`` and ``bench``.

``run`` is :mod:`fastredlock.cli.run` (a command under a lock), ``audit`` is :mod:`fastredlock.cli.audit`
(are these masters a safe Redlock deployment?), ``inspect`` is :func:`inspect_main` over
:mod:`fastredlock.handles.lockinfo` (is this lock held, where, by whom?), ``bench`` the comparison driver
(:mod:`fastredlock.bench`).

The demo needs no Redis set up by hand: it starts five local masters (see :mod:`fastredlock.testing`),
walks through acquire, extend and release while printing what each master answered, shows a second
client being refused, then stops the masters.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, List, Optional

from .. import CORE, LockNotAcquiredError, Redlock, __version__
from ..testing import find_server, server_version, start_masters
from ..io.redact import redact


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
    from ..bench.driver import main as driver_main

    return driver_main(argv)


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``python -m fastredlock`` and the ``fastredlock`` script."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # every option after it belongs to the driver
        return bench(argv[1:])
    if argv[:1] == ["run"]:  # so is every argument after "run" (the command's among them)
        from .run import run

        return run(argv[1:])
    if argv[:1] == ["audit"]:
        from .audit import main as audit

        return audit(argv[1:])
    if argv[:1] == ["inspect"]:
        return inspect_main(argv[1:])
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


# --- inspect ------------------------------------------------------------------------------------
def _inspect_parser():
    p = argparse.ArgumentParser(
        prog="fastredlock inspect",
        usage="%(prog)s [options] [URL ...] NAME",
        description="Show whether a lock is held, on which masters, by whom and for how long, without "
                    "taking it (one round of GET and PTTL per master; nothing is written).",
        epilog="exit status: 0 free; 1 held by a quorum; 3 partially held (some masters, not a quorum); "
               "4 unknown (too few masters answered); 2 bad usage.",
    )
    p.add_argument("args", nargs="+", metavar="URL... NAME",
                   help="the masters (redis://[user:pass@]host:port[/db], rediss://, unix:///path; commas "
                        "separate URLs too; default: $FASTREDLOCK_MASTERS), then the lock's name")
    p.add_argument("--prefix", default="", help="the prefix your clients put before lock names (default none)")
    p.add_argument("--timeout", type=float, default=1.0, metavar="S",
                   help="per-master reply timeout and connect timeout, seconds (default 1)")
    p.add_argument("--core", choices=("cython", "python"), default=None,
                   help="force a core (default: the active one, fastredlock.CORE)")
    p.add_argument("--drift-factor", type=float, default=0.01, help="the clients' drift_factor (default 0.01)")
    p.add_argument("--kind", choices=("lock", "rlock", "rwlock", "semaphore"), default="lock",
                   help="what NAME is: a plain lock (default), or a kind of the lock family "
                        "(dlm.rlock, dlm.rwlock, dlm.semaphore: dlm.inspect_family's reads)")
    p.add_argument("--limit", type=int, default=0, metavar="N", help="--kind semaphore: its number of permits")
    p.add_argument("--json", action="store_true",
                   help="print JSON: {name, state, held, holder, holders, quorum, validity, remaining, fence, "
                        "masters: [{master, outcome, held, ttl_remaining, holder, fence, detail}], ...}")
    return p


def inspect_main(argv: Optional[List[str]] = None) -> int:
    """``python -m fastredlock inspect``: print the inspection; the exit status says the state
    (:data:`EXIT_STATUS`: 0 free, 1 held, 3 partial, 4 unknown; 2 bad usage)."""
    from ..sync.client import Redlock
    from ..handles.lockinfo import EXIT_STATUS, format_family, format_table

    parser = _inspect_parser()
    args = parser.parse_args(argv)
    *given, name = args.args
    from ..io.masters import split_urls  # (as run and audit split them: a multi-host URL's commas kept)

    urls = [u for item in (given or [os.environ.get("FASTREDLOCK_MASTERS", "")]) for u in split_urls(item)]
    if not urls:
        parser.error("no masters: give URLs before the name, or set FASTREDLOCK_MASTERS")
    try:
        # No restart-aware handshake (INFO): an inspection takes nothing, so there is no vote to weigh.
        dlm = Redlock(urls, io_timeout=args.timeout, connect_timeout=args.timeout, drift_factor=args.drift_factor,
                      prefix=args.prefix, restart_aware=False, cooldown=0.0, same_server_ok=True, core=args.core)
    except (TypeError, ValueError) as exc:
        parser.error(redact(exc))
    with dlm:
        if args.kind == "lock":
            info: Any = dlm.inspect(name)
        else:
            try:
                info = dlm.inspect_family(name, args.kind, limit=args.limit)
            except ValueError as exc:
                parser.error(redact(exc))
    if args.json:
        print(json.dumps(info.to_dict(), indent=2))
    else:
        print(format_table(info) if args.kind == "lock" else format_family(info))
    return EXIT_STATUS[info.state]
