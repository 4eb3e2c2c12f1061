"""Bounded waits: no test waits for ever on a child process's pipe or on a thread.

Every wait in the suite has a bound (``timeout=`` on ``Popen.wait``/``communicate``, queue gets,
barriers, events); these helpers cover the two that have no ``timeout=`` of their own: a line from a
child's stdout, and a thread that must have ended. A bound that passes fails the test, saying what
it waited for, instead of hanging the run (pytest-timeout's suite-wide limit is the last resort).
"""
from __future__ import annotations

import queue
import subprocess
import threading

#: Seconds any single wait may take: far above what a healthy wait takes on a loaded machine.
BOUND = 60.0


def read_line(proc: subprocess.Popen, timeout: float = BOUND) -> str:
    """The next line ``proc`` writes to its stdout pipe (``''`` at its end), within ``timeout``
    seconds; otherwise ``proc`` is killed (which ends the read) and the test fails."""
    lines: "queue.Queue[str]" = queue.Queue()
    reader = threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True,  # type: ignore[union-attr]
                              name=f"read_line:{proc.pid}")
    reader.start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        proc.kill()
        proc.wait(timeout=timeout)
        raise AssertionError(f"process {proc.pid} ({proc.args!r:.200}) wrote no line within {timeout} s") from None


def joined(*threads: threading.Thread, timeout: float = BOUND) -> None:
    """Join ``threads``; fail the test naming those still alive after ``timeout`` seconds in all."""
    import time

    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    alive = [t.name for t in threads if t.is_alive()]
    assert not alive, f"threads still running after {timeout} s: {alive}"


def hears_sigint() -> None:
    """``preexec_fn`` of a child that must stop on Ctrl-C: SIGINT back to its default (a shell starts
    background jobs, and so this suite and its children, with SIGINT ignored; Python then installs
    no KeyboardInterrupt handler in the child)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
