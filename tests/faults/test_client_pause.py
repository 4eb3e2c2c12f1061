"""A client process paused past its TTL (a GC pause, swap, SIGSTOP) finds out when it wakes up.

Another client takes the lock meanwhile. The paused one then sees ``locked()`` False and validity
0, ``check()`` raises, ``extend()`` and ``release()`` raise :class:`LockNotOwnedError` (as
``LockLostError``) — never a silent success — and neither touches the new holder's key.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from fastredlock.testing import pause_process

from _bounded import BOUND, read_line
from _checks import bound, gone_within, timed

HOLDER = os.path.join(os.path.dirname(__file__), "_paused_holder.py")
TTL = 1.0


def _pause_past_ttl(core, make_client, masters, name, counter, *flags):
    """Start the holder, pause it past its TTL while another client takes the lock and enters the
    counter, resume it; return ``(its report, the other lock)``. The counter is left entered."""
    holder = subprocess.Popen(
        [sys.executable, HOLDER, *flags, core, name, str(TTL), str(counter.master.port), *masters.urls],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert read_line(holder).strip() == "held"
        taken_at = time.monotonic()
        with pause_process(holder.pid):
            other = make_client(masters.urls, retry_count=0).lock(name, ttl=10.0)
            assert other.acquire(blocking=False) is False  # still held by the paused process
            time.sleep(max(0.0, taken_at + TTL + 0.05 - time.monotonic()))
            assert timed(other.acquire, bound(1))  # its keys expired: the lock is free
            assert counter.enter() == 1
        holder.stdin.write("go\n")
        holder.stdin.flush()
        report = json.loads(read_line(holder))
        assert holder.wait(10) == 0
    finally:
        holder.kill()
        holder.wait(timeout=BOUND)
    return report, other


def test_client_paused_past_ttl_finds_out_and_never_reports_success(
    core, make_client, masters, name, counter
):
    report, other = _pause_past_ttl(core, make_client, masters, name, counter)
    assert report["locked"] is False and report["validity"] == 0.0 and report["lost"] is True
    assert report["check"] == "LockLostError"  # it did not act: the counter was not bumped
    assert report["inside"] is None
    assert report["extend"] == "LockLostError"
    assert report["release"] == "LockLostError"  # a LockNotOwnedError: never a silent success
    assert counter.peak == 1  # this process's entries only: the holder's answer is report["inside"]
    # the new holder's lock is untouched on every master
    assert all(m.command("GET", name) == other.token for m in masters)
    counter.leave()
    other.release()
    gone_within(masters, name, bound(1))


def test_client_paused_past_ttl_that_acts_unchecked_is_seen_beside_the_new_holder(
    core, make_client, masters, name, counter
):
    # The negative control of the check above: a holder that skips check() enters the counter
    # while the new holder is inside, and the counter says so.
    report, other = _pause_past_ttl(core, make_client, masters, name, counter, "--unchecked")
    assert report["check"] == "ok" and report["inside"] == 2
    counter.leave()
    other.release()
