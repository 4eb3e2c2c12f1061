"""The quickstart, as a newcomer runs it: its commands and code blocks, verbatim, after ``serve``.

docs/quickstart.md is read in order. Its ```bash blocks run in ``bash -e`` (``python`` is the
interpreter under test, first on ``PATH``), except ``pip install`` lines (the package under test is
installed already); the ``serve`` command starts in the background and the rest waits until it
says ``ready`` (bounded). Each ```python block then runs as a script of its own in a fresh
interpreter, with the library's defaults: nothing is injected, restart-aware voting included. The
one change to the text: ports 7001.. become a block of free ports (as every docs example does,
tests/docs/_doc_examples.py), so that parallel runs do not meet on 7001.

What must hold: every command and script exits 0, no script says "someone else has it" (the
refusal of masters that were just started, which ``serve`` waits out), nothing logs a warning,
and Ctrl-C (SIGINT to ``serve``'s process group, as a terminal sends it) stops the masters: their
ports refuse connections afterwards.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Tuple


from _doc_examples import ROOT, Example
from _bounded import hears_sigint
from _ports import ReadyLines, free_block, refused

QUICKSTART = ROOT / "docs" / "quickstart.md"
SRC = ROOT / "src"
#: serve waits until its masters have been up for the restart grace (10 s) plus the second Redis'
#: whole-second uptime may hide; the wait for "ready" is bounded well above it.
READY_LIMIT = 60.0
SCRIPT_LIMIT = 60.0

_FENCE = re.compile(r"^```(\S*)\s*$")


def _blocks(path: Path) -> List[Tuple[str, int, str]]:
    """``(info string, line of the opening fence, body)`` of every top-level fenced block, in order."""
    found = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        start, info, body = i, match.group(1), []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        i += 1
        found.append((info, start + 1, "\n".join(body) + "\n"))
    return found


def _env() -> dict:
    env = dict(os.environ)
    env.pop("FASTREDLOCK_MASTERS", None)  # the quickstart's own export line sets it
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    return env


def _bind(code: str, ports: List[int]) -> str:
    return Example(QUICKSTART, 0, code).bind(ports)


def test_quickstart_runs_verbatim_after_serve(tmp_path):
    blocks = _blocks(QUICKSTART)
    bash = [(line, body) for info, line, body in blocks if info == "bash"]
    serve_lines = [cmd for _, body in bash for cmd in body.splitlines() if " fastredlock serve " in f" {cmd} "]
    assert len(serve_lines) == 1, f"the quickstart should start its masters with one serve command: {serve_lines}"
    count = int(re.search(r"serve\s+(\d+)", serve_lines[0]).group(1))
    first = free_block(count)
    ports = list(range(first, first + count))
    env = _env()

    serve_cmd = _bind(serve_lines[0], ports).split("#", 1)[0].strip()
    serve = subprocess.Popen(["bash", "-c", f"exec {serve_cmd}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env, cwd=tmp_path, start_new_session=True, preexec_fn=hears_sigint)
    output = ReadyLines(serve.stdout)
    out = output.lines
    try:
        started = time.monotonic()
        assert output.ready.wait(READY_LIMIT), f"serve did not say ready within {READY_LIMIT}s: {''.join(out)}"
        assert serve.poll() is None, f"serve exited ({serve.returncode}): {''.join(out)}{serve.stderr.read()}"
        waited = time.monotonic() - started
        printed = "".join(out)
        for port in ports:
            assert f"redis://127.0.0.1:{port}" in printed
        assert f"export FASTREDLOCK_MASTERS={','.join(f'redis://127.0.0.1:{p}' for p in ports)}" in printed

        ran = []
        for info, line, body in blocks:
            where = f"quickstart.md:{line}"
            if info == "bash":
                commands = [c for c in body.splitlines()
                            if c.strip() and not c.lstrip().startswith(("pip install", "#"))
                            and " fastredlock serve " not in f" {c} "]
                if not commands:
                    continue
                done = subprocess.run(["bash", "-e", "-c", _bind("\n".join(commands), ports)], capture_output=True,
                                      text=True, env=env, cwd=tmp_path, timeout=SCRIPT_LIMIT)
            elif info == "python":
                script = tmp_path / f"quickstart_{line}.py"
                script.write_text(_bind(body, ports), encoding="utf-8")
                done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                                      cwd=tmp_path, timeout=SCRIPT_LIMIT)
            else:
                continue
            ran.append(where)
            assert done.returncode == 0, f"{where} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            assert "someone else has it" not in done.stdout, f"{where} was refused:\n{done.stdout}\n{done.stderr}"
            assert "fastredlock:" not in done.stderr, (
                f"{where} logged a warning:\n{done.stderr}")
            assert "refused by restart-aware voting" not in done.stderr, f"{where}:\n{done.stderr}"
        assert len(ran) >= 5, f"the quickstart's blocks were not found: {ran}"
        print(f"serve said ready after {waited:.1f}s; ran {len(ran)} blocks: {', '.join(ran)}")
    finally:
        # Ctrl-C in the terminal: SIGINT to the foreground process group (serve and its masters).
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGINT)
        try:
            serve.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait(10)
            raise AssertionError("serve did not stop within 30 s of Ctrl-C")
        output.thread.join(10)
        serve.stderr.close()
    assert serve.returncode == 0, f"serve exited {serve.returncode} after Ctrl-C"
    assert all(refused(p) for p in ports), "a master still listens after serve stopped"
    assert "stopped the masters" in "".join(out)
