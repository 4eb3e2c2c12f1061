"""A client process that holds a lock, is paused past its TTL by the test, then reports what it sees.

Usage: python _paused_holder.py [--unchecked] <core> <name> <ttl> <counter_port> <url>...
Prints "held" once the lock is held, waits for a line on stdin (the test pauses it before sending
one), then prints one JSON object: what ``locked()``, ``validity``, ``check()``, ``extend()`` and
``release()`` said, and ``inside``: what the independent counter answered when this holder entered
(``None`` if it never did). It enters only if ``check()`` passes; ``--unchecked`` is the negative
control, a holder that acts without asking, whom the counter must see beside the new holder.
"""
from __future__ import annotations

import json
import socket
import sys

from fastredlock.io import reader as hiredis  # hiredis, or the pure reader where it is absent

import fastredlock
from fastredlock.protocol.resp import encode_command


def _command(port: int, *args: bytes):
    """One command on a fresh blocking connection to the counter master (not the code under test)."""
    with socket.create_connection(("127.0.0.1", port), timeout=2.0) as sock:
        sock.sendall(encode_command(*args))
        reader = hiredis.Reader()
        while (reply := reader.gets()) is False:
            reader.feed(sock.recv(4096))
        return reply


def _outcome(fn) -> str:
    try:
        fn()
    except Exception as exc:  # the report says which error; the test decides which are acceptable
        return type(exc).__name__
    return "ok"


def main() -> None:
    args = sys.argv[1:]
    unchecked = args[0] == "--unchecked"
    core, name, ttl, counter_port, *urls = args[1:] if unchecked else args
    key = f"holders:{name}".encode()
    dlm = fastredlock.Redlock(urls, core=core, restart_aware=False, retry_count=0)
    lock = dlm.lock(name, ttl=float(ttl))
    assert lock.acquire()
    print("held", flush=True)
    sys.stdin.readline()  # paused (SIGSTOP) before this line arrives, resumed after the TTL
    report = {"locked": lock.locked(), "validity": lock.validity, "lost": lock.lost}

    def act() -> None:
        if not unchecked:
            lock.check()
        report["inside"] = _command(int(counter_port), b"INCR", key)  # only a holder that passed check() acts
        _command(int(counter_port), b"DECR", key)

    report["inside"] = None
    report["check"] = _outcome(act)
    report["extend"] = _outcome(lock.extend)
    report["release"] = _outcome(lock.release)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
