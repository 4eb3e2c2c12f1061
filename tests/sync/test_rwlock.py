"""``dlm.rwlock``: many readers or one writer; writers not starved; shares expire on their TTL."""
from __future__ import annotations

import threading
import time

from _bounded import joined
from _family import eventually, family_keys, in_thread, no_key_without_ttl, tagged


def test_readers_share_and_exclude_writers(dlm, masters, name):
    r1, r2, w = dlm.rwlock(name, ttl=5), dlm.rwlock(name, ttl=5), dlm.rwlock(name, ttl=5)
    assert r1.read.acquire(blocking=False) and r2.read.acquire(blocking=False)
    assert eventually(lambda: [m.command("SCARD", tagged(name, ":readers")) for m in masters], [2] * 5) == [2] * 5
    assert no_key_without_ttl(masters, name)
    assert not w.write.acquire(blocking=False)
    r1.read.release()
    assert not w.write.acquire(blocking=False)
    r2.read.release()
    assert w.write.acquire(blocking=False)
    w.write.release()
    assert eventually(lambda: family_keys(masters, name), 0) == 0


def test_a_writer_excludes_readers_and_writers(dlm, masters, name):
    a, b = dlm.rwlock(name, ttl=5), dlm.rwlock(name, ttl=5)
    with a.write:
        assert not b.read.acquire(blocking=False)
        assert not b.write.acquire(blocking=False)
        assert no_key_without_ttl(masters, name)
    assert b.read.acquire(blocking=False)
    b.read.release()
    assert eventually(lambda: family_keys(masters, name), 0) == 0


def test_waiting_writer_keeps_new_readers_out_and_gives_up_cleanly(dlm, masters, name):
    reader, writer, late = dlm.rwlock(name, ttl=5), dlm.rwlock(name, ttl=5), dlm.rwlock(name, ttl=5)
    assert reader.read.acquire()
    out = []
    t = threading.Thread(target=lambda: out.append(writer.write.acquire(timeout=0.8)))
    t.start()
    time.sleep(0.3)  # refused by the reader: it left its mark, and waits
    marks = eventually(lambda: [m.command("EXISTS", tagged(name, ":writer-waiting")) for m in masters], [1] * 5)
    assert marks == [1] * 5
    assert not late.read.acquire(blocking=False)  # a new reader sees the waiting writer
    joined(t)
    assert out == [False]  # it gave up: its mark went
    marks = eventually(lambda: [m.command("EXISTS", tagged(name, ":writer-waiting")) for m in masters], [0] * 5)
    assert marks == [0] * 5
    assert late.read.acquire(blocking=False)
    late.read.release()
    reader.read.release()
    assert eventually(lambda: family_keys(masters, name), 0) == 0


def test_writer_not_starved_by_a_stream_of_readers(make_client, masters, name):
    dlm = make_client(masters.urls, retry_delay=0.02, retry_jitter=0.02)
    stop = threading.Event()
    reads = []

    def reader() -> None:
        lock = dlm.rwlock(name, ttl=5).read
        count = 0
        while not stop.is_set():
            if lock.acquire(timeout=0.5):
                time.sleep(0.03)
                lock.release()
                count += 1
        reads.append(count)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.2)  # the readers overlap: there is always one inside
    writer = dlm.rwlock(name, ttl=5).write
    started = time.monotonic()
    got = writer.acquire(timeout=3)
    waited = time.monotonic() - started
    if got:
        writer.release()
    stop.set()
    for t in threads:
        joined(t)
    assert got and waited < 1.0
    assert sum(reads) > 3


def test_last_reader_out_wakes_the_writer_and_the_writer_wakes_readers(make_client, masters, name):
    dlm = make_client(masters.urls, retry_delay=2.0, retry_jitter=0.0)
    reader, writer = dlm.rwlock(name, ttl=5), dlm.rwlock(name, ttl=5)
    assert reader.read.acquire()
    join = in_thread(lambda: writer.write.acquire(timeout=5), lambda: time.sleep(0.2) or writer.write.release())
    time.sleep(0.3)
    reader.read.release()
    time.sleep(0.1)
    start = time.monotonic()
    assert reader.read.acquire(timeout=5)  # waits for the writer, woken by its release
    assert time.monotonic() - start < 1.0
    reader.read.release()
    ok, waited = join()
    assert ok and waited < 1.0


def test_a_reader_wakes_nobody_unless_a_writer_waits(dlm, masters, name):
    """The last reader out publishes only where a writer's mark says one waits for readers (the
    common release runs one Lua call fewer)."""
    def publishes():
        return [m.command("INFO", "commandstats").decode().count("cmdstat_publish:") for m in masters]

    for m in masters:
        m.command("CONFIG", "RESETSTAT")
    reader = dlm.rwlock(name, ttl=5).read
    for _ in range(3):
        assert reader.acquire(blocking=False)
        reader.release()
    assert publishes() == [0] * 5
    assert reader.acquire(blocking=False)
    writer = dlm.rwlock(name, ttl=5).write
    assert not writer.acquire(blocking=False)  # refused by the reader: it leaves its mark
    reader.release()
    assert publishes() == [1] * 5
    assert writer.acquire(blocking=False)
    writer.release()
    assert eventually(lambda: family_keys(masters, name), 0) == 0


def test_a_reader_share_expires_on_its_own_ttl(dlm, masters, name):
    short, long_ = dlm.rwlock(name, ttl=0.3), dlm.rwlock(name, ttl=5)
    assert short.read.acquire() and long_.read.acquire()
    time.sleep(0.4)
    assert not short.read.locked()
    long_.read.release()  # the short share's expiry was pruned: the writer gets in at once
    writer = dlm.rwlock(name, ttl=5).write
    assert writer.acquire(blocking=False)
    writer.release()


def test_the_readers_set_outlives_its_longest_share(dlm, masters, name):
    readers = tagged(name, ":readers")
    long_, short = dlm.rwlock(name, ttl=5), dlm.rwlock(name, ttl=0.5)
    assert long_.read.acquire() and short.read.acquire()  # the shorter share must not cut the set short

    def pttls():
        return [m.command("PTTL", readers) for m in masters]

    assert all(4000 < left <= 5000 for left in pttls()), pttls()
    long_.read.extend(8)  # an extension pushes the set's expiry out (it raises if refused)
    assert all(7000 < left <= 8000 for left in pttls()), pttls()
    time.sleep(0.6)
    writer = dlm.rwlock(name, ttl=5).write
    assert not writer.acquire(blocking=False)  # the long share still holds after the short one ended
    assert not short.read.locked()  # (its share expired: it is not released)
    long_.read.release()
    assert writer.acquire(blocking=False)
    writer.release()
    assert eventually(lambda: family_keys(masters, name), 0) == 0
