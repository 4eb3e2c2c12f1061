"""Refusals that say why, and down is not held (sync client, both cores, real servers on loopback).

- With nothing listening, README's first example (``with dlm.lock("orders:42", ttl=10.0)``, the
  client's defaults) logs one warning at once and raises :class:`QuorumUnreachableError` naming
  the masters within 10 s; ``unreachable_timeout`` sets the bound, ``None`` waits as before, and a
  ``timeout=`` that ends first returns False as before.
- Masters that answer "held" keep ``threading.Lock``'s semantics: the waiter waits past
  ``unreachable_timeout`` and gets the lock when it is released (a minority down changes nothing).
- Masters younger than the restart grace: ``acquire()`` returns False after one warning naming
  them and the seconds left; ``LockNotAcquiredError``'s text leads with restart-aware voting.
"""
from __future__ import annotations

import errno
import logging
import socket
import threading
import time

import pytest

import fastredlock
from fastredlock import LockNotAcquiredError, QuorumUnreachableError
from fastredlock.testing import FaultProxy, start_masters

from _checks import gone_within, library_warnings
from _ports import refused


def test_readme_example_raises_naming_unreachable_masters(dead_urls, core, caplog):
    """README's first example, with the client's defaults, and nothing listening."""
    caplog.set_level(logging.WARNING, logger="fastredlock")
    dlm = fastredlock.Redlock(dead_urls, core=core)
    started = time.monotonic()
    started_wall = time.time()  # (log records carry wall-clock times)
    try:
        with pytest.raises(QuorumUnreachableError) as caught:
            with dlm.lock("orders:42", ttl=10.0):
                pass  # pragma: no cover - never held
    finally:
        dlm.close()
    took = time.monotonic() - started
    assert took < 10.0
    assert took >= dlm.unreachable_timeout == 5.0
    error = caught.value
    assert isinstance(error, LockNotAcquiredError)
    labels = [u[len("redis://"):] for u in dead_urls]
    assert error.unreachable == tuple(labels)
    for label in labels:
        assert label in str(error)
    assert "no quorum of masters was reachable" in str(error)
    warned = library_warnings(caplog)
    assert len(warned) == 1, [r.getMessage() for r in warned]
    message = warned[0].getMessage()
    assert "no quorum of masters is reachable" in message and "connection error" in message
    assert all(label in message for label in labels)
    # logged at the first attempt, not at the end
    assert warned[0].created - started_wall < 1.0
    print(f"[{core}] nothing listening: QuorumUnreachableError after {took:.2f}s")


def test_dead_urls_stay_refused_while_the_test_runs(dead_urls):
    """The fixture holds its ports for the test: a server started meanwhile (another test's or
    another xdist worker's, on a port from ``bind(0)``, with ``SO_REUSEADDR`` as redis-server sets
    it) cannot take one and answer. A CI run saw that: a "dead" master answered during the wait,
    and the error rightly did not name it."""
    for url in dead_urls:
        port = int(url.rsplit(":", 1)[1])
        assert refused(port)
        for reuse in (False, True):
            with socket.socket() as server, pytest.raises(OSError) as caught:
                if reuse:
                    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                server.bind(("127.0.0.1", port))
            assert caught.value.errno == errno.EADDRINUSE


def test_a_master_whose_answer_is_still_due_when_the_attempt_is_decided_is_named(dead_urls, masters, core, name):
    """The raising attempt is decided at once (two masters refuse: no quorum possible) while the
    third, behind a proxy that now drops its replies, still owes its answer: the error waits for
    that answer's deadline (``io_timeout``) and names all three; message and ``unreachable`` agree.
    (Raised without that wait, the third was ``pending`` and left out: the race CI was thought to hit.)"""
    with FaultProxy(masters[0]) as proxy:
        urls = dead_urls[:2] + [proxy.url]
        dlm = fastredlock.Redlock(urls, core=core, unreachable_timeout=0, io_timeout=0.2, restart_aware=False)
        try:
            assert dlm.lock(name, ttl=2.0).acquire(blocking=False) is False  # the third's connection is up
            proxy.blackhole("down")
            started = time.monotonic()
            with pytest.raises(QuorumUnreachableError) as caught:
                dlm.lock(name, ttl=2.0).acquire()
            took = time.monotonic() - started
        finally:
            dlm.close()
        gone_within(masters[:1], dlm.lock(name).key, 2.0)  # (while the proxy runs)
    assert 0.1 <= took < 3.0  # it waited for the third master's deadline
    error = caught.value
    labels = tuple(u[len("redis://"):] for u in urls)
    assert error.unreachable == labels
    assert error.outcomes[2].outcome == "timeout"
    assert f"3 of 3 masters unreachable: {', '.join(labels)};" in str(error)


def test_unreachable_timeout_sets_the_bound_and_a_timeout_ending_first_returns_false(dead_urls, make_client,
                                                                                      caplog):
    caplog.set_level(logging.WARNING, logger="fastredlock")
    dlm = make_client(dead_urls, unreachable_timeout=0.3, retry_delay=0.05, retry_jitter=0.0)
    lock = dlm.lock("orders:42", ttl=10.0)
    started = time.monotonic()
    with pytest.raises(QuorumUnreachableError):
        lock.acquire()
    assert 0.3 <= time.monotonic() - started < 3.0
    # a timeout shorter than the bound: False, as before (after one warning)
    caplog.clear()
    started = time.monotonic()
    assert lock.acquire(timeout=0.2) is False
    assert time.monotonic() - started < 2.0
    assert len(library_warnings(caplog)) == 1
    # a single attempt does not wait, so it does not raise either
    assert lock.acquire(blocking=False) is False
    # retry_count that runs out first: False
    counted = make_client(dead_urls, unreachable_timeout=5.0, retry_count=1, retry_delay=0.01, retry_jitter=0.0)
    assert counted.lock("orders:42", ttl=10.0).acquire() is False


def test_unreachable_timeout_none_waits_for_the_masters(dead_urls, make_client):
    """unreachable_timeout=None: the wait goes on past any bound (here cut by the caller's timeout)."""
    dlm = make_client(dead_urls, unreachable_timeout=None, retry_delay=0.05, retry_jitter=0.0)
    started = time.monotonic()
    assert dlm.lock("orders:42", ttl=10.0).acquire(timeout=0.6) is False
    assert time.monotonic() - started >= 0.6


def test_unreachable_timeout_is_checked(one_core, dead_urls):
    with pytest.raises(ValueError, match="unreachable_timeout"):
        fastredlock.Redlock(dead_urls, core=one_core, unreachable_timeout=-1)
    with pytest.raises(TypeError, match="unreachable_timeout"):
        fastredlock.Redlock(dead_urls, core=one_core, unreachable_timeout="5")


def test_held_lock_is_waited_for_past_the_unreachable_bound(masters, make_client, name, caplog):
    """Down is not held, and held is not down: a waiter on a held lock waits as threading.Lock does."""
    caplog.set_level(logging.WARNING, logger="fastredlock")
    holder = make_client(masters.urls)
    waiter_client = make_client(masters.urls, unreachable_timeout=0.2, retry_delay=0.05, retry_jitter=0.0)
    held = holder.lock(name, ttl=30.0)
    assert held.acquire()
    result = {}

    def wait_for_it():
        lock = waiter_client.lock(name, ttl=5.0)
        try:
            result["acquired"] = lock.acquire()
            lock.release()
        except BaseException as exc:  # pragma: no cover - the failure this test looks for
            result["error"] = exc

    waiter = threading.Thread(target=wait_for_it, daemon=True)
    waiter.start()
    waiter.join(1.0)  # five times the unreachable bound: the waiter must still be waiting
    assert waiter.is_alive(), f"the waiter stopped waiting on a held lock: {result}"
    held.release()
    waiter.join(10.0)
    assert not waiter.is_alive()
    assert result == {"acquired": True}
    assert not library_warnings(caplog)


def test_minority_down_is_waited_for(masters, make_client, name, dead_urls):
    """Two of five masters down and the lock held on the others: no quorum is impossible because of
    the down masters alone, so the waiter waits (its timeout ends it with False, no error)."""
    urls = masters.urls[:3] + dead_urls[:2]
    holder = make_client(masters.urls[:3])  # a quorum of those five: holds on the three live ones
    holder_lock = holder.lock(name, ttl=30.0)
    assert holder_lock.acquire()
    try:
        waiter = make_client(urls, unreachable_timeout=0.1, retry_delay=0.05, retry_jitter=0.0)
        assert waiter.lock(name, ttl=5.0).acquire(timeout=0.5) is False
    finally:
        holder_lock.release()


def test_restart_refusal_is_logged_once_and_leads_the_error(core, caplog):
    """Masters started a moment ago: one warning per acquisition naming them and the seconds left;
    LockNotAcquiredError's message starts with restart-aware voting."""
    caplog.set_level(logging.WARNING, logger="fastredlock")
    with start_masters(3) as fresh:
        dlm = fastredlock.Redlock(fresh.urls, core=core, retry_delay=0.05, retry_jitter=0.0)
        try:
            lock = dlm.lock("orders:42", ttl=10.0)
            assert lock.acquire(timeout=0.4) is False  # several attempts, one warning
            warned = library_warnings(caplog)
            assert len(warned) == 1, [r.getMessage() for r in warned]
            message = warned[0].getMessage()
            assert "refused by restart-aware voting" in message
            assert "its vote counts in" in message and "restart grace of 10s" in message
            named = [m.port for m in fresh if f"127.0.0.1:{m.port}" in message]
            assert len(named) >= dlm.quorum
            caplog.clear()
            assert lock.acquire(blocking=False) is False
            assert len(library_warnings(caplog)) == 1

            bounded = fastredlock.Redlock(fresh.urls, core=core, retry_count=0)
            try:
                with pytest.raises(LockNotAcquiredError) as caught:
                    with bounded.lock("orders:42", ttl=10.0):
                        pass  # pragma: no cover
            finally:
                bounded.close()
            assert str(caught.value).startswith("lock 'orders:42' refused by restart-aware voting: ")
            assert not isinstance(caught.value, QuorumUnreachableError)
        finally:
            dlm.close()


def test_plain_contention_logs_nothing(masters, make_client, name, caplog):
    """A refusal because someone holds the lock is not voting's, and not down: no warning."""
    caplog.set_level(logging.WARNING, logger="fastredlock")
    dlm = make_client(masters.urls, retry_delay=0.02, retry_jitter=0.0)
    holder = dlm.lock(name, ttl=10.0)
    assert holder.acquire()
    try:
        assert dlm.lock(name, ttl=10.0).acquire(timeout=0.1) is False
    finally:
        holder.release()
    assert not library_warnings(caplog)
