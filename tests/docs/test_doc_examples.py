"""Run every ```python block of README.md and docs/ against local masters (see _doc_examples.py).

Each example runs in this process, in a namespace of its own, with the ports 7001.. of its code
rewritten to the masters started once for the session. Masters started a moment ago would have
their votes refused by restart-aware voting for one TTL (they may have forgotten locks: the right
call in production, a stall in a test), so while an example runs, every client it builds gets
``restart_aware=False`` unless the example says otherwise. After each example the clients it built
are closed, and its masters must hold no key except the few that outlive a lock by design (fence
counters, turn queues, python-redis-lock's wake-up lists), each with a TTL; then they are flushed.
"""
from __future__ import annotations

import functools
import threading

import pytest

import fastredlock
import fastredlock.asyncio
from fastredlock import compat
from fastredlock.compat import _common as compat_common
from fastredlock.testing import start_masters

from _doc_examples import MAX_MASTERS, Example, all_examples

EXAMPLES = all_examples()

# Keys that a correct example may leave, by design, each with a TTL (suffix or prefix of the key).
BY_DESIGN_SUFFIXES = (b":fastredlock-fence", b":wait", b":next", b":wake")
BY_DESIGN_PREFIXES = (b"lock-signal:",)


@pytest.fixture(scope="module")
def doc_masters():
    """Enough local masters for the hungriest example, started once for all of them."""
    needed = max((e.masters for e in EXAMPLES if e.fragment is None), default=1)
    with start_masters(min(needed, MAX_MASTERS)) as masters:
        yield masters


@pytest.fixture
def clients(monkeypatch):
    """Record the clients an example builds, giving them ``restart_aware=False`` by default."""
    built = []

    def recording(cls):
        original = cls.__init__

        @functools.wraps(original)
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("restart_aware", False)
            original(self, *args, **kwargs)
            built.append(self)

        monkeypatch.setattr(cls, "__init__", __init__)

    recording(fastredlock.Redlock)
    recording(fastredlock.asyncio.Redlock)
    previous = compat.options()
    compat.configure(restart_aware=False)
    yield built
    compat_common.close_clients()
    compat.configure(**previous)
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
    masters = request.getfixturevalue("doc_masters")
    request.getfixturevalue("clients")
    ports = [m.port for m in list(masters)[: example.masters]]
    # Blank lines in front, so that a traceback's line numbers are the Markdown file's.
    source = "\n" * example.line + example.bind(ports)
    code = compile(source, str(example.path), "exec")
    threads_before = set(threading.enumerate())
    try:
        exec(code, {"__name__": "__doc_example__"})
    finally:
        leftovers = _leftovers(masters, example.masters)
    assert not leftovers, f"{example.id} left keys on its masters: {leftovers}"
    extra = [t for t in threading.enumerate() if t not in threads_before and not t.daemon and t.is_alive()]
    assert not extra, f"{example.id} left threads running: {extra}"
