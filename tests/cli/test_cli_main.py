"""The command line as a shell sees it (real processes, real masters on loopback): ``serve`` keeps
local masters until SIGTERM/Ctrl-C and leaves no server behind, fails clearly on a port in use;
``--version``; plain-text help; ``-m/--masters`` in every command that talks to masters (the old
positional URLs still work, with a deprecation note); ``run`` exits 69 when no quorum is reachable.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

import fastredlock
from fastredlock.testing import start_master
from _bounded import hears_sigint
from _ports import ReadyLines, free_block, refused

SRC = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "src")
LIMIT = 60  # seconds any one process may take


def _env(**extra):
    env = dict(os.environ, **extra)
    env.pop("FASTREDLOCK_MASTERS", None)
    env.update(extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.abspath(SRC), env.get("PYTHONPATH")) if p)
    return env


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "fastredlock", *args], capture_output=True, text=True,
                          timeout=LIMIT, env=env or _env())


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie is gone for our purpose only once reaped: serve reaps its masters itself
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] == "Z"


class _Serve:
    """``serve`` in the background: its output lines, collected as they come."""

    def __init__(self, argv, new_session=False):
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                                     start_new_session=new_session, preexec_fn=hears_sigint)
        self.output = ReadyLines(self.proc.stdout)
        self.lines = self.output.lines
        self.ready = self.output.ready

    def wait_ready(self):
        assert self.ready.wait(LIMIT), f"serve did not say ready: {self.lines}"
        assert self.proc.poll() is None, f"serve exited {self.proc.returncode}: {self.lines} {self.proc.stderr.read()}"
        return "".join(self.lines)

    def finish(self):
        try:
            code = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError("serve did not stop within 30 s")
        self.output.thread.join(10)
        self.proc.stderr.close()
        return code


@pytest.mark.parametrize("entry", ["module", "script"])
def test_serve_keeps_masters_until_sigterm_and_leaves_none(entry):
    if entry == "script":
        script = shutil.which("fastredlock", path=os.path.dirname(sys.executable))
        if script is None:
            pytest.skip("no fastredlock entry point next to this interpreter (not installed as a package)")
        argv = [script]
    else:
        argv = [sys.executable, "-m", "fastredlock"]
    first = free_block(2)
    serve = _Serve(argv + ["serve", "2", "--port", str(first), "--grace", "0"])
    try:
        printed = serve.wait_ready()
        urls = [f"redis://127.0.0.1:{first}", f"redis://127.0.0.1:{first + 1}"]
        assert f"export FASTREDLOCK_MASTERS={','.join(urls)}" in printed
        pids = [int(p) for p in re.findall(r"\(pid (\d+)\)", printed)]
        assert len(pids) == 2
        with fastredlock.Redlock(urls, restart_aware=False) as dlm:  # they serve, and stay up
            with dlm.lock("serve-test", ttl=5.0):
                pass
        assert serve.proc.poll() is None
    finally:
        if serve.proc.poll() is None:
            serve.proc.send_signal(signal.SIGTERM)
    assert serve.finish() == 0
    assert "stopped the masters" in "".join(serve.lines)
    assert refused(first) and refused(first + 1)
    assert all(_gone(pid) for pid in pids), "a master outlived serve"


def test_serve_ctrl_c_stops_the_masters():
    """Ctrl-C in a terminal: SIGINT to the whole foreground process group, masters included."""
    first = free_block(1)
    serve = _Serve([sys.executable, "-m", "fastredlock", "serve", "1", "--port", str(first), "--grace", "0"],
                   new_session=True)
    try:
        printed = serve.wait_ready()
        pid = int(re.search(r"\(pid (\d+)\)", printed).group(1))
    finally:
        if serve.proc.poll() is None:
            os.killpg(serve.proc.pid, signal.SIGINT)
    assert serve.finish() == 0
    assert refused(first) and _gone(pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_serve_killed_with_sigkill_leaves_no_master():
    first = free_block(2)
    serve = _Serve([sys.executable, "-m", "fastredlock", "serve", "2", "--port", str(first), "--grace", "0"])
    try:
        printed = serve.wait_ready()
        pids = [int(p) for p in re.findall(r"\(pid (\d+)\)", printed)]
    finally:
        serve.proc.kill()  # no handler runs: the masters hear of it from the kernel
    serve.finish()
    deadline = time.monotonic() + 10.0
    while not (refused(first) and refused(first + 1)):
        assert time.monotonic() < deadline, "a master outlived serve's SIGKILL"
        time.sleep(0.05)
    for pid in pids:  # reparented and reaped by init (or a subreaper): gone or a zombie
        while not _gone(pid):
            assert time.monotonic() < deadline, f"master {pid} outlived serve's SIGKILL"
            time.sleep(0.05)


def test_serve_fails_clearly_on_a_port_in_use():
    first = free_block(2)
    taken = start_master(port=first + 1)  # serve's second port
    try:
        started = time.monotonic()
        done = _cli("serve", "2", "--port", str(first), "--grace", "0")
        assert done.returncode == 1, done.stdout + done.stderr
        assert time.monotonic() - started < 20
        assert f"port {first + 1}" in done.stderr and "in use" in done.stderr
        assert taken.running() and taken.command("PING") == b"PONG"  # the server that had it is untouched
        assert refused(first)  # and serve started nothing
    finally:
        taken.stop()


def test_serve_waits_for_the_grace_it_is_given():
    """``--grace S``: ready only once the masters report being up for more than S seconds."""
    serve = _Serve([sys.executable, "-m", "fastredlock", "serve", "1", "--grace", "1"])
    started = time.monotonic()
    try:
        printed = serve.wait_ready()
        waited = time.monotonic() - started
        url = re.search(r"redis://127\.0\.0\.1:\d+", printed).group(0)
        with fastredlock.Redlock([url], restart_grace=1.0) as dlm:  # restart-aware, and counted at once
            assert dlm.lock("grace-test", ttl=1.0).acquire(blocking=False)
    finally:
        if serve.proc.poll() is None:
            serve.proc.send_signal(signal.SIGTERM)
    assert serve.finish() == 0
    assert waited >= 1.0


def test_version_from_the_module_and_the_script():
    done = _cli("--version")
    assert done.returncode == 0 and done.stdout.startswith(f"fastredlock {fastredlock.__version__}")
    script = shutil.which("fastredlock", path=os.path.dirname(sys.executable))
    if script is not None:
        done = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=LIMIT, env=_env())
        assert done.returncode == 0 and fastredlock.__version__ in done.stdout


@pytest.mark.parametrize("command", [[], ["serve"], ["demo"], ["run"], ["inspect"], ["audit"]])
def test_help_is_plain_text(command):
    done = _cli(*command, "--help")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "``" not in text and not re.search(r":(class|func|mod|data|meth|attr):`", text), text
    if command in (["run"], ["inspect"], ["audit"]):
        assert re.search(r"-m URL, --masters URL|--masters URL, -m URL", text) and "FASTREDLOCK_MASTERS" in text


def test_run_exits_69_when_no_quorum_is_reachable():
    started = time.monotonic()
    done = _cli("run", "-m", "redis://127.0.0.1:1", "job", "--", "echo", "x")
    took = time.monotonic() - started
    assert done.returncode == 69, done.stdout + done.stderr
    assert took < 10.0
    assert "x" not in done.stdout.split()
    assert "127.0.0.1:1" in done.stderr and "no quorum of masters" in done.stderr
    print(f"run with nothing listening: exit {done.returncode} after {took:.2f}s")


def test_inspect_and_audit_take_masters_with_m(masters, name):
    urls = masters.urls[:3]
    done = _cli("inspect", "--timeout", "0.5", "-m", urls[0], "--masters", ",".join(urls[1:]), name)
    assert done.returncode == 0, done.stderr
    assert "free on every master" in done.stdout and not done.stderr
    old = _cli("inspect", "--timeout", "0.5", *urls, name)  # the deprecated form still works
    assert old.returncode == 0 and "deprecated" in old.stderr and "-m URL" in old.stderr
    both = _cli("inspect", "-m", urls[0], urls[1], name)
    assert both.returncode == 2
    done = _cli("audit", "--clock-seconds", "0.1", "--samples", "2", "--no-restart-aware", "-m", urls[0])
    assert done.returncode in (0, 1), done.stderr
    assert f"127.0.0.1:{masters[0].port}" in done.stdout and "deprecated" not in done.stderr
    old = _cli("audit", "--clock-seconds", "0.1", "--samples", "2", "--no-restart-aware", urls[0])
    assert old.returncode in (0, 1) and "deprecated" in old.stderr
    assert f"127.0.0.1:{masters[0].port}" in old.stdout
