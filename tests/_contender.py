"""Worker of the contention test: lock, check an independent counter, unlock, for a few seconds."""
from __future__ import annotations

import time

import hiredis
import socket

from fastredlock import Redlock
from fastredlock._core_py import encode_command


class _Counter:
    """A blocking connection to the counter master: independent of the code under test."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.reader = hiredis.Reader()

    def call(self, *args: bytes):
        self.sock.sendall(encode_command(*args))
        while True:
            reply = self.reader.gets()
            if reply is not False:
                return reply
            self.reader.feed(self.sock.recv(4096))


def contend(urls, core, name, counter_port, seconds, result_queue, ready_queue=None, go=None) -> None:
    counter = _Counter(counter_port)
    dlm = Redlock(urls, core=core, retry_delay=0.002, retry_jitter=0.004, restart_aware=False)
    if go is not None:  # start together: process start-up on a loaded machine takes seconds
        ready_queue.put(1)
        go.wait(60)
    held = overlaps = errors = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        lock = dlm.lock(name, ttl=2.0)
        try:
            if not lock.acquire(timeout=0.5):
                continue
        except Exception:
            errors += 1
            continue
        try:
            if counter.call(b"INCR", b"holders") != 1:
                overlaps += 1
            time.sleep(0.0005)
            counter.call(b"DECR", b"holders")
            held += 1
        finally:
            lock.release()
    dlm.close()
    result_queue.put((held, overlaps, errors))
