"""Command line: ``python -m fastredlock`` (or ``fastredlock``) with ``serve``, ``demo``, ``run``,
``audit``, ``inspect`` and ``bench``.

``serve`` (:func:`serve`) starts local masters and keeps them until Ctrl-C (the quickstart's
first step); ``run`` is :mod:`fastredlock.cli.run` (a command under a lock), ``audit`` is
:mod:`fastredlock.cli.audit` (are these masters a safe Redlock deployment?), ``inspect`` is
:func:`inspect_main` over :mod:`fastredlock.handles.lockinfo` (is this lock held, where, by whom?),
``bench`` the comparison driver (:mod:`fastredlock.bench`).

Every command that talks to masters takes them as ``-m/--masters URL`` (repeatable, or
comma-separated) or from ``FASTREDLOCK_MASTERS``; ``--version`` prints the version. Help texts are
plain text (no reST).

The demo needs no Redis set up by hand: it starts five local masters (see :mod:`fastredlock.testing`),
walks through acquire, extend and release while printing what each master answered, shows a second
client being refused, then stops the masters.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import Any, List, Optional, Sequence

from .. import CORE, LockNotAcquiredError, Redlock, __version__
from ..testing import find_server, server_version, start_masters
from ..io.redact import redact

#: What ``fastredlock --help`` says the tool is (plain text).
DESCRIPTION = "fastredlock: a Redlock client's command line (local masters, a command under a lock, checks)."
#: Seconds ``serve`` waits by default before it says the masters are ready: the restart grace of
#: clients whose largest TTL is 10 s (the quickstart's), see :func:`serve`.
SERVE_GRACE = 10.0
#: Help of ``-m/--masters`` (every command that talks to masters).
MASTERS_HELP = ("a master: redis://[user:pass@]host:port[/db], rediss:// (TLS), unix:///path; repeat it, or "
                "separate URLs with commas (default: $FASTREDLOCK_MASTERS)")


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


def _uptimes(masters) -> List[int]:
    """Each master's ``uptime_in_seconds`` (INFO server)."""
    found = []
    for master in masters:
        reply = master.command("INFO", "server")
        text = reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)
        found.append(next(int(line.split(":", 1)[1]) for line in text.splitlines()
                          if line.startswith("uptime_in_seconds:")))
    return found


def _stop_on(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM, SIGHUP: leave as Ctrl-C does, stopping the masters


def serve(count: int = 3, port: Optional[int] = None, grace: float = SERVE_GRACE,
          binary: Optional[str] = None, persistent: bool = False) -> int:
    """Start ``count`` local masters (on ``port``, ``port + 1``... or free ports) and keep them
    until Ctrl-C, SIGTERM or SIGHUP; return a process exit code.

    It prints the URLs and an ``export FASTREDLOCK_MASTERS=...`` line once the masters have been up
    for longer than ``grace`` seconds: restart-aware voting (on by default in every client) does
    not count the vote of a master up for less than the client's restart grace (the largest TTL it
    uses), because a master that restarted may have forgotten locks, and a client cannot tell a
    new master from a restarted one. Waiting here means the clients' first ``acquire`` works as
    written; ``grace=0`` says ready at once (then clients refuse these masters' votes until
    they have been up long enough, and say so). Ports in use fail at once, naming the port (exit
    1). Every master is stopped (and reaped) before it returns; a master that dies meanwhile
    ends the command with status 1.
    """
    say = lambda text="": print(text, flush=True)  # noqa: E731 (a pipe reader sees each line at once)
    try:
        binary = find_server(binary)
    except FileNotFoundError as exc:
        print(f"fastredlock serve: {exc}", file=sys.stderr, flush=True)
        return 1
    ports = None if port is None else list(range(port, port + count))
    previous = {s: signal.signal(s, _stop_on) for s in (signal.SIGTERM, signal.SIGHUP)}
    local = None
    try:
        try:
            # die_with_parent: a serve killed with SIGKILL (no handler runs) still leaves no server
            local = start_masters(count, binary=binary, ports=ports, persistent=persistent, die_with_parent=True)
        except (OSError, RuntimeError) as exc:
            print(f"fastredlock serve: {exc}", file=sys.stderr, flush=True)
            return 1
        say(f"fastredlock {__version__}: {count} local master{'s' if count > 1 else ''} "
            f"({server_version(binary)}, {binary}), {'persistent' if persistent else 'no persistence'}")
        for master in local:
            say(f"  {master.url}  (pid {master.pid})")
        if grace > 0:
            say(f"waiting until they have been up for {grace:g}s: clients count the vote of a master only once "
                "it has been up for longer than their restart grace (the largest TTL they use), as it may have "
                "restarted and forgotten locks ...")
            while min(_uptimes(local)) < grace + 1:  # a reported n means up for at least n - 1 s
                time.sleep(0.2)
                for master in local:
                    if not master.running():
                        print(f"fastredlock serve: the master on port {master.port} exited", file=sys.stderr,
                              flush=True)
                        return 1
        say("command-line tools find them with:")
        say(f"export FASTREDLOCK_MASTERS={','.join(local.urls)}")
        say("ready; Ctrl-C stops them")
        while True:
            time.sleep(0.5)
            for master in local:
                if not master.running():
                    print(f"fastredlock serve: the master on port {master.port} exited", file=sys.stderr,
                          flush=True)
                    return 1
    except KeyboardInterrupt:
        return 0
    finally:
        if local is not None:
            local.stop()
            say("stopped the masters")
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _top_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastredlock", description=DESCRIPTION,
        epilog="Masters: every command that talks to masters takes -m/--masters URL (repeatable, or "
               "comma-separated) or reads FASTREDLOCK_MASTERS. Each command has its own --help.")
    parser.add_argument("--version", action="version", version=f"fastredlock {__version__} (core: {CORE})")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p_serve = sub.add_parser(
        "serve", help="start local masters and keep them until Ctrl-C (prints their URLs)",
        description="Start local masters (redis-server or valkey-server on PATH, or the server extra's) bound to "
                    "127.0.0.1, print their URLs and an export FASTREDLOCK_MASTERS=... line, and keep them until "
                    "Ctrl-C, SIGTERM or SIGHUP, which stop them. It says ready once they have been up for "
                    "--grace seconds, so that clients with restart-aware voting (the default) count their votes.",
        epilog="exit status: 0 stopped by a signal; 1 a master could not start (a port in use, no server "
               "binary) or exited; 2 bad usage.")
    p_serve.add_argument("count", type=int, nargs="?", default=3, help="how many masters (default 3)")
    p_serve.add_argument("--port", type=int, default=None,
                         help="the first master's port; the others take the next ones (default: free ports)")
    p_serve.add_argument("--grace", type=float, default=SERVE_GRACE, metavar="S",
                         help="say ready once the masters have been up for S seconds: your clients' restart grace, "
                              f"i.e. the largest TTL they use (default {SERVE_GRACE:g}; 0: at once)")
    p_serve.add_argument("--persistent", action="store_true",
                         help="appendonly yes, appendfsync always (default: no persistence)")
    p_serve.add_argument("--server", default=None, metavar="PATH", help="the server binary (default: found)")
    sub.add_parser("run", add_help=False,
                   help="run a command while holding a lock, like flock for many machines (see: run --help)")
    sub.add_parser("audit", add_help=False,
                   help="check masters as a Redlock deployment: persistence, eviction, independence, clocks, "
                        "latency, ACLs (see: audit --help)")
    sub.add_parser("inspect", add_help=False,
                   help="show whether a lock is held, where, by whom and for how long, without taking it "
                        "(see: inspect --help)")
    p_demo = sub.add_parser("demo", help="acquire, extend and release a lock on local masters it starts and stops")
    p_demo.add_argument("--masters", type=int, default=5, help="how many local masters (default 5)")
    p_demo.add_argument("--ttl", type=float, default=5.0, help="lock TTL in seconds (default 5)")
    sub.add_parser("bench", add_help=False,
                   help="compare with other Redlock clients on local masters (see: bench --help)")
    return parser


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
    parser = _top_parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo(args.masters, args.ttl)
    if args.command == "serve":
        if args.count < 1:
            parser.error("serve: count must be >= 1")
        if args.port is not None and not 0 < args.port <= 65536 - args.count:
            parser.error(f"serve: --port must leave room for {args.count} ports below 65536")
        if args.grace < 0:
            parser.error("serve: --grace must be >= 0")
        return serve(args.count, args.port, args.grace, args.server, args.persistent)
    return 2  # pragma: no cover - argparse rejects unknown commands


# --- inspect ------------------------------------------------------------------------------------
def _inspect_parser():
    p = argparse.ArgumentParser(
        prog="fastredlock inspect",
        usage="%(prog)s [-m URL ...] [options] NAME",
        description="Show whether a lock is held, on which masters, by whom and for how long, without "
                    "taking it (one round of GET and PTTL per master; nothing is written).",
        epilog="exit status: 0 free; 1 held by a quorum; 3 partially held (some masters, not a quorum); "
               "4 unknown (too few masters answered); 2 bad usage. The older form with the URLs before "
               "NAME still works, but is deprecated.",
    )
    p.add_argument("-m", "--masters", action="append", default=[], metavar="URL", help=MASTERS_HELP)
    p.add_argument("args", nargs="+", metavar="NAME", help="the lock's name")
    p.add_argument("--prefix", default="", help="the prefix your clients put before lock names (default none)")
    p.add_argument("--timeout", type=float, default=1.0, metavar="S",
                   help="per-master reply timeout and connect timeout, seconds (default 1)")
    p.add_argument("--core", choices=("cython", "python"), default=None,
                   help="force a core (default: the active one, fastredlock.CORE)")
    p.add_argument("--drift-factor", type=float, default=0.01, help="the clients' drift_factor (default 0.01)")
    p.add_argument("--kind", choices=("lock", "rlock", "rwlock", "semaphore"), default="lock",
                   help="what NAME is: a plain lock (default), or a kind of the lock family "
                        "(dlm.rlock, dlm.rwlock, dlm.semaphore: what dlm.inspect_family reads)")
    p.add_argument("--limit", type=int, default=0, metavar="N", help="--kind semaphore: its number of permits")
    p.add_argument("--json", action="store_true",
                   help="print JSON: {name, state, held, holder, holders, quorum, validity, remaining, fence, "
                        "masters: [{master, outcome, held, ttl_remaining, holder, fence, detail}], ...}")
    return p


def _urls(items: Sequence[str]) -> List[str]:
    """Every URL of ``items``, split as ``run`` and ``audit`` split them (a multi-host URL's commas kept)."""
    from ..io.masters import split_urls

    return [u for item in items for u in split_urls(item)]


def inspect_main(argv: Optional[List[str]] = None) -> int:
    """``python -m fastredlock inspect``: print the inspection; the exit status says the state
    (:data:`EXIT_STATUS`: 0 free, 1 held, 3 partial, 4 unknown; 2 bad usage)."""
    from ..sync.client import Redlock
    from ..handles.lockinfo import EXIT_STATUS, format_family, format_table

    parser = _inspect_parser()
    args = parser.parse_args(argv)
    *given, name = args.args
    if given:
        if args.masters:
            parser.error("give the masters either with -m/--masters or before the name, not both")
        print("fastredlock inspect: URLs before the name are deprecated; use -m URL (or FASTREDLOCK_MASTERS)",
              file=sys.stderr)
    urls = _urls(args.masters or given or [os.environ.get("FASTREDLOCK_MASTERS", "")])
    if not urls:
        parser.error("no masters: give -m URL (repeatable), or set FASTREDLOCK_MASTERS")
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
