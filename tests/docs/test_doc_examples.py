"""Run every ```python block of README.md and docs/ against local masters (see _doc_examples.py).

Each example runs in this process, in a namespace of its own, with the ports 7001.. of its code
rewritten to the masters started once for the module, and with the library's defaults, as users
run it: nothing is injected into the clients it builds. Restart-aware voting (on by default)
refuses the votes of a master that has been up for less than the client's restart grace (by
default the largest TTL the client used), so before the first example the masters are given time
to be up for longer than :data:`MAX_EXAMPLE_TTL`, the largest TTL an example may use on them
(tests/docs/test_doc_examples_convention.py checks the examples against it); the Celery drop-ins,
whose clients wait 60 s, are the one exception (``LONG_GRACE_SHIMS``). After each example
the clients it built are closed, and its masters must hold no key except the few that outlive a
lock by design (fence counters, turn queues, python-redis-lock's wake-up lists), each with a TTL;
then they are flushed.
"""
from __future__ import annotations

import functools
import threading
import time

import pytest

import fastredlock
import fastredlock.asyncio
from fastredlock import compat
from fastredlock.compat import _common as compat_common
from fastredlock.testing import find_server, server_version, start_masters
from fastredlock.testing.tls import tls_unsupported

from _doc_examples import MAX_EXAMPLE_TTL, MAX_MASTERS, Example, all_examples

EXAMPLES = all_examples()

# Keys that a correct example may leave, by design, each with a TTL (suffix or prefix of the key).
BY_DESIGN_SUFFIXES = (b":fastredlock-fence", b":wait", b":next", b":wake")
BY_DESIGN_PREFIXES = (b"lock-signal:",)


# The one exception to "the library's defaults": the Celery drop-ins' clients trust a restarted master
# only after 60 s (their task locks live for minutes to hours), longer than the examples' masters are
# made to wait; their examples run with restart-aware voting off (fastredlock.compat.configure).
LONG_GRACE_SHIMS = ("fastredlock.compat.celery_once", "fastredlock.compat.celery_singleton")

# Redis reports uptime in whole seconds and the client takes a reported n as n - 1 (see
# docs/concepts/restart-aware-voting.md): a master counts once it reports more than the grace.
MASTERS_AGE = MAX_EXAMPLE_TTL + 1.5
# The wait is bounded: a master that does not report its uptime growing fails the module.
AGE_WAIT_LIMIT = MASTERS_AGE + 20.0


def _uptime(master) -> int:
    info = master.command("INFO", "server")
    text = info.decode() if isinstance(info, bytes) else str(info)
    for line in text.splitlines():
        if line.startswith("uptime_in_seconds:"):
            return int(line.split(":", 1)[1])
    raise AssertionError(f"{master.port}: INFO server has no uptime_in_seconds")


@pytest.fixture(scope="module")
def doc_masters():
    """Enough local masters for the hungriest example, started once for all of them, and up for
    longer than any example's restart grace before the first example runs (bounded wait)."""
    needed = max((e.masters for e in EXAMPLES if e.fragment is None), default=1)
    started = time.monotonic()
    with start_masters(min(needed, MAX_MASTERS)) as masters:
        deadline = started + AGE_WAIT_LIMIT
        while min(_uptime(m) for m in masters) < MASTERS_AGE:
            assert time.monotonic() < deadline, (
                f"the examples' masters did not report {MASTERS_AGE} s of uptime within {AGE_WAIT_LIMIT} s")
            time.sleep(0.25)
        yield masters


@pytest.fixture
def clients(monkeypatch):
    """Record the clients an example builds (to close them after it); their options are the example's."""
    built = []

    def recording(cls):
        original = cls.__init__

        @functools.wraps(original)
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            built.append(self)

        monkeypatch.setattr(cls, "__init__", __init__)

    recording(fastredlock.Redlock)
    recording(fastredlock.asyncio.Redlock)
    yield built
    compat_common.close_clients()
    for client in built:
        if isinstance(client, fastredlock.Redlock):
            client.close()


def _leftovers(masters, count):
    """Return a description of each key an example should not have left; flush the masters."""
    problems = []
    for master in list(masters)[:count]:
        for key in master.command("KEYS", "*") or []:
            ttl = master.command("PTTL", key)
            by_design = key.endswith(BY_DESIGN_SUFFIXES) or key.startswith(BY_DESIGN_PREFIXES)
            if not by_design:
                problems.append(f"{master.port}: {key!r} (pttl {ttl})")
            elif ttl == -1:
                problems.append(f"{master.port}: {key!r} has no TTL")
        master.command("FLUSHALL")
    return problems


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_example_runs(example: Example, request):
    """The example runs to its end without an exception and leaves no lock behind."""
    if example.fragment is not None:
        pytest.skip(f"{example.id} is a fragment: {example.fragment}")
    if "tls=" in example.code:  # it starts TLS masters of its own, on the server the suite runs
        binary = find_server()
        reason = tls_unsupported(binary, request.getfixturevalue("certs"))
        if reason is not None:
            pytest.skip(f"{example.id} starts TLS masters; {server_version(binary)} ({binary}) serves no TLS: {reason}")
    masters = request.getfixturevalue("doc_masters")
    request.getfixturevalue("clients")
    ports = [m.port for m in list(masters)[: example.masters]]
    # Blank lines in front, so that a traceback's line numbers are the Markdown file's.
    source = "\n" * example.line + example.bind(ports)
    code = compile(source, str(example.path), "exec")
    threads_before = set(threading.enumerate())
    previous = compat.options()
    if any(shim in example.code for shim in LONG_GRACE_SHIMS):
        compat.configure(restart_aware=False)
    try:
        exec(code, {"__name__": "__doc_example__"})
    finally:
        compat.configure(**previous)
        leftovers = _leftovers(masters, example.masters)
    assert not leftovers, f"{example.id} left keys on its masters: {leftovers}"
    extra = [t for t in threading.enumerate() if t not in threads_before and not t.daemon and t.is_alive()]
    assert not extra, f"{example.id} left threads running: {extra}"
