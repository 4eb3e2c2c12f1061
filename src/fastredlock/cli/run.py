"""``fastredlock run``: a command under a lock held on N masters — ``flock`` for many machines.

    python -m fastredlock run --masters redis://a:6379 --masters redis://b:6379 ... \\
        [--ttl 30] [--wait 60] nightly-report -- ./make_report.sh --day today

The lock is acquired (waiting up to ``--wait`` seconds; by default for as long as it takes, as
``flock`` does), kept alive by the client's watchdog while the command runs, and released when
it ends; ``run`` exits with the command's status (128 + the signal's number if a signal ended it,
as shells report it). The masters come from ``--masters`` (repeatable, or comma-separated) or from
``FASTREDLOCK_MASTERS``.

Why a separate process group: the command runs in a process group of its own, as ``timeout(1)``
runs it, so that the signals ``run`` receives (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1,
SIGUSR2) reach the command and its children exactly once (forwarded by ``run``), and so that a lost
lock can stop the whole job: if a renewal fails and the lock is lost while the command runs, the
group gets SIGTERM, then SIGKILL after ``--kill-after`` seconds, and ``run`` exits with
:data:`EXIT_LOST`. A command that reads from the terminal is therefore not in its foreground.

If ``run`` itself dies (SIGKILL, the OOM killer, a crash), the command does not outlive it: a small
guard process, started beside the command in a session of its own, holds the reading end of a
pipe only ``run`` writes to. When that pipe closes without ``run`` saying it ended normally, the guard
sends the command's process group SIGTERM, then SIGKILL :data:`ORPHAN_GRACE` seconds later (the
command's children and grandchildren included: they are in its group unless they left it). What
remains possible: a job that left its process group (``setsid``, a daemon), and the host itself
dying (power, kernel panic) or the guard being killed together with ``run``: then nothing stops the
command, and the lock ends with its TTL (the TTL is the bound, as for any holder that stops renewing).

What the command finds in its environment: ``FASTREDLOCK_NAME`` (the lock's name) and
``FASTREDLOCK_FENCE`` (the fencing token of this acquisition, an integer larger than every earlier
holder's; pass it to the resource so it can refuse a late writer; ``--no-fence`` skips the extra
round and the variable).

Exit statuses of ``run`` itself (distinct from the usual statuses of commands; see ``--help``):
:data:`EXIT_BUSY` (75) the lock is held by someone else and ``--wait`` ran out (``--wait 0``: at
once, like ``flock -n``); :data:`EXIT_UNAVAILABLE` (69) no quorum of masters could be reached;
:data:`EXIT_LOST` (70) the lock was lost while the command ran, or its release found it no longer
held (the command may have run unprotected for part of its time); 2: bad usage; 127/126: the
command was not found / could not be run.
"""
from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import threading
from time import monotonic
from typing import List, Optional, Sequence

from .. import __version__
from ..engine.checks import MAX_WAIT
from ..io.masters import split_urls
from ..errors import LockError, QuorumUnreachableError
from ..io.redact import redact

__all__ = ["EXIT_BUSY", "EXIT_LOST", "EXIT_UNAVAILABLE", "FORWARDED_SIGNALS", "main", "run"]

#: The lock is held by someone else (``--wait`` ran out); sysexits' EX_TEMPFAIL.
EXIT_BUSY = 75
#: No quorum of masters answered (down, refused, timed out); sysexits' EX_UNAVAILABLE.
EXIT_UNAVAILABLE = 69
#: The lock was lost while the command ran (it was stopped), or was no longer held at release.
EXIT_LOST = 70
#: The signals ``run`` passes on to the command's process group.
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)

_PROG = "fastredlock run"

#: Seconds the guard leaves between SIGTERM and SIGKILL when ``run`` died while its command ran.
ORPHAN_GRACE = 0.5

# The guard (``python -S -c``, in a session of its own so that signals sent to run's group spare it):
# it reads the command's group id, then waits for the pipe to close. ``run`` writes "done" before it
# closes the pipe at a normal end; an end without it means ``run`` died: the group is stopped.
_GUARD = """
import os, signal, sys, time
fd, grace = int(sys.argv[1]), float(sys.argv[2])
data = b""
while True:
    chunk = os.read(fd, 64)
    if not chunk:
        break
    data += chunk
words = data.split()
if not words or not words[0].isdigit() or b"done" in words:
    sys.exit(0)
group = int(words[0])
try:
    os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        time.sleep(0.02)
        os.killpg(group, 0)
    os.killpg(group, signal.SIGKILL)
except (ProcessLookupError, PermissionError):
    pass
"""


def _say(message: str) -> None:
    print(f"{_PROG}: {redact(message)}", file=sys.stderr, flush=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=_PROG,
        description="Run a command while holding a lock on N masters: flock for many machines.",
        epilog=f"exit statuses: the command's own; {EXIT_BUSY} lock held by someone else (--wait ran out); "
               f"{EXIT_UNAVAILABLE} no quorum of masters reachable; {EXIT_LOST} lock lost while the command ran "
               "(the command was stopped) or not held at release; 2 bad usage; 127 command not found.",
    )
    p.add_argument("--masters", "-m", action="append", default=[], metavar="URL",
                   help="a master (redis://host:port[/db]); repeat it, or separate URLs with commas "
                        "(default: $FASTREDLOCK_MASTERS)")
    p.add_argument("--ttl", type=_seconds, default=30.0,
                   help="the lock's time to live in seconds; it is renewed every ttl/3 while the command "
                        "runs (default 30)")
    p.add_argument("--wait", type=_seconds, default=None, metavar="S",
                   help="wait at most S seconds for the lock (0: one attempt, like flock -n); "
                        "default: wait until it is free")
    p.add_argument("--kill-after", type=_seconds, default=5.0, metavar="S",
                   help="if the lock is lost, SIGKILL the command this long after SIGTERM (default 5)")
    p.add_argument("--max-hold", type=_seconds, default=None, metavar="S",
                   help="stop renewing the lock S seconds after acquiring it (it is then lost at its TTL)")
    p.add_argument("--no-fence", action="store_true",
                   help="take no fencing token (one round fewer; FASTREDLOCK_FENCE is not set)")
    p.add_argument("--no-restart-aware", action="store_true",
                   help="turn restart-aware voting off (only for masters that persist every write, or "
                        "that you just started and that held no locks)")
    p.add_argument("--core", choices=("cython", "python"), default=None, help="the engine's core (default: best)")
    p.add_argument("--version", action="version", version=f"fastredlock {__version__}")
    p.add_argument("name", help="the lock's name")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- the command and its arguments")
    return p


def _seconds(text: str) -> float:
    """A duration option: a finite number of seconds (``inf`` and ``nan`` are refused: no wait is
    endless, and a NaN compares false with every bound)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds, not {text!r} "
                                         "(leave --wait out to wait until the lock is free)")
    return value


def _masters_of(given: Sequence[str]) -> List[str]:
    urls: List[str] = []
    for item in list(given) or [os.environ.get("FASTREDLOCK_MASTERS", "")]:
        urls.extend(split_urls(item))
    return urls


class _Job:
    """The command's process group and what happens to it: signals forwarded, stopped when lost."""

    def __init__(self, kill_after: float) -> None:
        self.proc: Optional[subprocess.Popen] = None
        self.kill_after = kill_after
        self.lost = threading.Event()
        self._lock = threading.Lock()
        self._pending: List[int] = []
        self._guard: Optional[int] = None  # the writing end of the guard's pipe
        self._guard_proc: Optional[subprocess.Popen] = None

    def start(self, argv: List[str], env: dict) -> None:
        """Start the command in a process group of its own; signals that arrived while it was being
        started are passed on to it now."""
        self._start_guard()
        # start_new_session (setsid) rather than Popen(process_group=0): Python 3.9 and 3.10 too
        proc = subprocess.Popen(argv, env=env, start_new_session=True)
        if self._guard is not None:
            os.write(self._guard, b"%d\n" % proc.pid)  # the group id: the command leads its session
        with self._lock:
            self.proc = proc
            pending, self._pending = self._pending, []
        for signum in pending:
            self.signal(signum)

    def _start_guard(self) -> None:
        """Start the guard that stops the command's group if ``run`` dies (see the module docstring);
        without one (no interpreter to start) the command runs as before, unguarded."""
        read, write = os.pipe()  # not inheritable: the command never holds the writing end
        try:
            self._guard_proc = subprocess.Popen(
                [sys.executable, "-S", "-c", _GUARD, str(read), str(ORPHAN_GRACE)], pass_fds=(read,),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # holds none of the caller's pipes open
                start_new_session=True)
        except OSError:
            os.close(write)
        else:
            self._guard = write
        finally:
            os.close(read)

    def finish(self) -> None:
        """Tell the guard that ``run`` ends normally (the command has ended): it stops nothing."""
        if self._guard is not None:
            try:
                os.write(self._guard, b"done\n")
            finally:
                os.close(self._guard)
                self._guard = None
        if self._guard_proc is not None:
            try:
                self._guard_proc.wait(timeout=1.0)  # it ends at once; else it is left to the OS
            except subprocess.TimeoutExpired:
                pass

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the command's process group (if it still runs; kept for it if it is
        being started)."""
        with self._lock:
            proc = self.proc
            if proc is None:
                self._pending.append(signum)
                return
            if proc.returncode is not None:
                return
            try:
                os.killpg(proc.pid, signum)
            except ProcessLookupError:
                pass

    def on_lost(self, _lock: object) -> None:
        """The watchdog lost the lock (its thread): stop the command, SIGKILL after the grace."""
        if self.lost.is_set():
            return
        self.lost.set()
        _say("the lock was lost while the command ran; stopping it (SIGTERM)")
        self.signal(signal.SIGTERM)
        timer = threading.Timer(self.kill_after, self.signal, (signal.SIGKILL,))
        timer.daemon = True
        timer.start()

    def wait(self) -> int:
        """Wait for the command; its status as a shell reports it (128 + signal if killed)."""
        assert self.proc is not None
        code = self.proc.wait()
        return 128 - code if code < 0 else code


def _acquire(lock, wait: Optional[float]) -> bool:
    """Acquire, waiting ``wait`` seconds at most (None: until acquired)."""
    if wait is not None:
        return lock.acquire(blocking=wait > 0, timeout=wait if wait > 0 else None)
    while not lock.acquire(timeout=MAX_WAIT):
        pass
    return True


def _leave(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _busy(outcomes) -> bool:
    """Whether a failed attempt was refused because someone holds the lock (some master said no),
    rather than because the masters could not be reached."""
    return any(o.outcome == "no" for o in outcomes)


def run(argv: Optional[Sequence[str]] = None) -> int:
    """``fastredlock run`` with ``argv`` (the arguments after ``run``); returns the exit status."""
    from ..sync.client import Redlock  # imported here: the CLI's other commands do not need a client

    parser = _parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (NAME -- CMD ARGS...)")
    masters = _masters_of(args.masters)
    if not masters:
        parser.error("no masters: give --masters URL (repeatable) or set FASTREDLOCK_MASTERS")
    if args.wait is not None and args.wait < 0:
        parser.error("--wait must be >= 0")
    if args.kill_after < 0:
        parser.error("--kill-after must be >= 0")
    try:
        client = Redlock(masters, core=args.core, restart_aware=not args.no_restart_aware)
    except (TypeError, ValueError) as exc:
        parser.error(redact(exc))
    job = _Job(args.kill_after)
    with client:
        try:
            lock = client.lock(args.name, ttl=args.ttl, auto_extend=True, max_hold=args.max_hold,
                               on_lost=job.on_lost, fencing=not args.no_fence)
        except (TypeError, ValueError) as exc:
            parser.error(redact(exc))
        started = monotonic()
        # SIGTERM/SIGHUP while waiting: leave through an exception, so that an attempt in flight is
        # cleaned up on the masters (the default action would end the process at once).
        waiting = {s: signal.signal(s, _leave) for s in (signal.SIGTERM, signal.SIGHUP)}
        try:
            acquired = _acquire(lock, args.wait)
        except QuorumUnreachableError as exc:  # down is not held: no waiting for ever
            _say(str(exc))
            return EXIT_UNAVAILABLE
        finally:
            for signum, handler in waiting.items():
                signal.signal(signum, handler)
        if not acquired:
            outcomes = lock.outcomes
            if _busy(outcomes):
                _say(f"lock {args.name!r} is held by someone else (waited {monotonic() - started:.1f}s)")
                return EXIT_BUSY
            _say("could not reach a quorum of masters: " + ", ".join(str(o) for o in outcomes))
            return EXIT_UNAVAILABLE
        return _run_holding(lock, job, command, args.name)


def _run_holding(lock, job: _Job, command: List[str], name: str) -> int:
    """Run ``command`` while ``lock`` is held; release it at the end whatever happens."""
    env = dict(os.environ, FASTREDLOCK_NAME=name)
    if lock.fence is not None:
        env["FASTREDLOCK_FENCE"] = str(lock.fence)
    previous = {}
    status = None
    try:
        for signum in FORWARDED_SIGNALS:
            previous[signum] = signal.signal(signum, lambda s, _frame: job.signal(s))
        try:
            job.start(command, env)
        except FileNotFoundError:
            _say(f"command not found: {command[0]}")
            status = 127
        except PermissionError:
            _say(f"command cannot be run: {command[0]}")
            status = 126
        else:
            status = job.wait()
    finally:
        job.finish()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        released = _release(lock, job)
    if job.lost.is_set():
        _say(f"the command ended with status {status} after the lock was lost")
        return EXIT_LOST
    if not released:
        return EXIT_LOST
    return status


def _release(lock, job: _Job) -> bool:
    """Release; False (with a message) if the lock was lost or no longer held by a quorum."""
    try:
        lock.release()
    except LockError as exc:
        if not job.lost.is_set():  # (a lost lock was released when it was lost, and said so)
            _say(f"the lock was not held to the end; the command may have run unprotected: {exc}")
        return False
    return True


def main() -> None:  # pragma: no cover - the console entry; tests call run()
    sys.exit(run())
