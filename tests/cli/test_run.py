"""``fastredlock run``: a command under a lock, as a shell job sees it — real ``run`` processes
(``python -m fastredlock run``) on real masters, both cores (``--core``).

What is checked: the command's status is passed through; a second ``run`` on the same name fails at
once with ``--wait 0`` and waits with ``--wait S``; the lock is released at the end (no key left);
signals sent to ``run`` reach the command; a lost lock (the masters flushed under it) stops the
command, with SIGKILL for one that ignores SIGTERM, and ``run`` says so in its status; the fence
reaches the command and grows; the masters come from ``FASTREDLOCK_MASTERS`` too; bad usage and
unreachable masters each have their own status.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from fastredlock.cli.run import EXIT_BUSY, EXIT_LOST, EXIT_UNAVAILABLE

SRC = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "src")


def _env(**extra):
    env = dict(os.environ, **extra)
    # the run processes import the fastredlock under test (a checkout's, not another install's)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.abspath(SRC), env.get("PYTHONPATH")) if p)
    return env


def _argv(urls, core, *args):
    opts = []
    for url in urls:
        opts += ["--masters", url]
    # the test masters were started a moment ago and held no locks
    return [sys.executable, "-m", "fastredlock", "run", *opts, "--core", core, "--no-restart-aware", *args]


def _run(urls, core, *args, timeout=30, env=None):
    return subprocess.run(_argv(urls, core, *args), capture_output=True, text=True, timeout=timeout,
                          env=env or _env())


def _start(urls, core, *args, env=None):
    return subprocess.Popen(_argv(urls, core, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env or _env())


def _wait_for_file(path, timeout=15.0):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_status_passes_through_and_no_key_is_left(masters, core, name, keys_on):
    done = _run(masters.urls, core, name, "--", "sh", "-c", "exit 7")
    assert done.returncode == 7, done.stderr
    ok = _run(masters.urls, core, name, "--", "true")
    assert ok.returncode == 0, ok.stderr
    assert keys_on(masters, name) == 0


def test_a_second_run_fails_at_once_or_waits(masters, core, name, tmp_path, keys_on):
    flag, done = tmp_path / "holding", tmp_path / "done"
    # the holder's command runs until the test says so (bounded: 30 s), not for a guessed time
    first = _start(masters.urls, core, name, "--", "sh", "-c",
                   f"touch {flag}; i=0; while [ ! -e {done} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done")
    later = None
    try:
        _wait_for_file(flag)
        busy = _run(masters.urls, core, "--wait", "0", name, "--", "true")
        assert busy.returncode == EXIT_BUSY, busy.stderr
        assert "held by someone else" in busy.stderr
        assert keys_on(masters, name) == 5  # the refused attempt did not touch the holder's keys

        waited = _run(masters.urls, core, "--wait", "0.3", name, "--", "true")
        assert waited.returncode == EXIT_BUSY, waited.stderr

        later = _start(masters.urls, core, "--wait", "20", name, "--", "sh", "-c", "exit 3")
        assert first.poll() is None and later.poll() is None  # the first still holds: the later one waits
        done.touch()
        assert later.wait(30) == 3, later.stderr.read()  # it got the lock once the first one ended
    finally:
        done.touch()
        first.wait(30)
        if later is not None and later.poll() is None:
            later.kill()
            later.wait(10)
    assert first.returncode == 0, first.stderr.read()
    assert keys_on(masters, name) == 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signals_reach_the_command_and_the_lock_is_released(masters, core, name, tmp_path, keys_on, signum):
    ready, got = tmp_path / "ready", tmp_path / "got"
    script = (
        "import signal, sys, time, pathlib\n"
        f"def on(s, f): pathlib.Path({str(got)!r}).write_text(str(s)); sys.exit(5)\n"
        "signal.signal(signal.SIGTERM, on); signal.signal(signal.SIGINT, on)\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(30)\n"
    )
    proc = _start(masters.urls, core, name, "--", sys.executable, "-c", script)
    _wait_for_file(ready)
    proc.send_signal(signum)
    assert proc.wait(20) == 5, proc.stderr.read()
    assert got.read_text() == str(int(signum))  # delivered once, to the command
    assert keys_on(masters, name) == 0


def test_a_lost_lock_stops_the_command(fault_masters, core, name, tmp_path):
    ready = tmp_path / "ready"
    proc = _start(fault_masters.urls, core, "--ttl", "0.6", name, "--", "sh", "-c", f"touch {ready}; sleep 30")
    _wait_for_file(ready)
    t0 = time.monotonic()
    for m in fault_masters:
        m.command("FLUSHALL")  # the key vanishes under the holder: the next renewal is refused
    assert proc.wait(15) == EXIT_LOST
    assert time.monotonic() - t0 < 5.0  # by the next renewal (ttl/3), not after the sleep
    assert "lost" in proc.stderr.read()


def test_a_command_that_ignores_sigterm_is_killed_after_the_grace(fault_masters, core, name, tmp_path):
    ready = tmp_path / "ready"
    proc = _start(fault_masters.urls, core, "--ttl", "0.6", "--kill-after", "0.5", name, "--",
                  "sh", "-c", f"trap '' TERM; touch {ready}; sleep 30")
    _wait_for_file(ready)
    t0 = time.monotonic()
    for m in fault_masters:
        m.command("FLUSHALL")
    assert proc.wait(15) == EXIT_LOST
    assert time.monotonic() - t0 < 6.0


def test_the_fence_reaches_the_command_and_grows(masters, core, name):
    fences = []
    for _ in range(3):
        done = _run(masters.urls, core, name, "--", "sh", "-c", 'echo "$FASTREDLOCK_NAME $FASTREDLOCK_FENCE"')
        assert done.returncode == 0, done.stderr
        got_name, fence = done.stdout.split()
        assert got_name == name
        fences.append(int(fence))
    assert fences == sorted(fences) and len(set(fences)) == 3
    plain = _run(masters.urls, core, "--no-fence", name, "--", "sh", "-c", 'echo "${FASTREDLOCK_FENCE-unset}"')
    assert plain.stdout.strip() == "unset"


def test_masters_from_the_environment(masters, core, name):
    env = _env(FASTREDLOCK_MASTERS=",".join(masters.urls))
    argv = [sys.executable, "-m", "fastredlock", "run", "--core", core, "--no-restart-aware", name, "--", "true"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env)
    assert done.returncode == 0, done.stderr


def test_unreachable_masters_and_bad_usage(dead_port, name, one_core):
    down = _run([f"redis://127.0.0.1:{dead_port}"], one_core, "--wait", "0", name, "--", "true")
    assert down.returncode == EXIT_UNAVAILABLE, down.stderr
    assert "quorum" in down.stderr
    env = _env(FASTREDLOCK_MASTERS="")
    for args, message in (((name,), "no command"), ((name, "--", "true"), "no masters")):
        argv = [sys.executable, "-m", "fastredlock", "run", *args]
        bad = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env)
        assert bad.returncode == 2 and message in bad.stderr, bad.stderr


def test_a_command_that_cannot_be_found(masters, one_core, name, keys_on):
    done = _run(masters.urls, one_core, name, "--", "/nonexistent/command")
    assert done.returncode == 127 and "not found" in done.stderr
    assert keys_on(masters, name) == 0


def _gone(pid):
    """Whether process ``pid`` has ended (a zombie nobody reaped yet counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_run_killed_takes_its_command_and_children_with_it(masters, core, name, tmp_path, keys_on):
    """SIGKILL to ``run``: the command and its children are gone within 1 s; a second ``run`` takes
    the lock only after that (when the TTL ends: nobody renews it, nobody released it)."""
    pids, second = tmp_path / "pids", tmp_path / "second"
    script = f"sleep 60 & echo $$ $! > {pids}.tmp; mv {pids}.tmp {pids}; wait"
    first = _start(masters.urls, core, "--ttl", "2", name, "--", "sh", "-c", script)
    later = shell = None
    try:
        _wait_for_file(str(pids))
        shell, child = map(int, pids.read_text().split())
        first.kill()
        first.wait(timeout=10)
        killed = time.monotonic()
        later = _start(masters.urls, core, "--ttl", "2", "--wait", "20", name, "--", "sh", "-c",
                       f"touch {second}")
        while not (_gone(shell) and _gone(child)):
            assert time.monotonic() - killed < 1.0, "the command outlived run by 1 s"
            time.sleep(0.01)
        gone = time.monotonic()
        assert not second.exists()  # the lock is still the first run's: the second waits for its TTL
        assert later.wait(timeout=20) == 0, later.stderr.read()
        assert second.exists() and time.monotonic() - gone > 0.5
    finally:
        for proc in (first, later):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        if shell is not None and not _gone(shell):  # (a failed run of this test: leave nothing behind)
            os.killpg(shell, signal.SIGKILL)
    assert keys_on(masters, name) == 0


@pytest.mark.parametrize("option", ["--wait", "--ttl", "--kill-after", "--max-hold"])
@pytest.mark.parametrize("value", ["inf", "nan", "-inf", "1e400", "Infinity"])
def test_infinite_and_nan_durations_are_refused(option, value, capsys, dead_port):
    import importlib

    run_cli = importlib.import_module("fastredlock.cli.run")
    with pytest.raises(SystemExit) as info:
        run_cli.run(["-m", f"redis://127.0.0.1:{dead_port}", f"{option}={value}", "job", "--", "true"])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert f"argument {option}: must be a finite number of seconds" in err and "Traceback" not in err
