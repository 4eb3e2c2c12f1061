"""fork(): a child that inherited a client and a held lock cannot release or extend the parent's
lock by accident, and talks to the masters over connections of its own."""
from __future__ import annotations

import multiprocessing
import os

from _bounded import BOUND
from _checks import bound, gone_within, warm


def in_child(fn):
    """Run ``fn`` in a fork child (multiprocessing's "fork" start method, as many users do) and
    return what it returned, or ``"raised <Name>"``."""
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)

    def target() -> None:
        try:
            send.send(fn())
        except BaseException as exc:
            send.send(f"raised {type(exc).__name__}")

    child = ctx.Process(target=target)
    child.start()
    assert receive.poll(BOUND), "the forked child sent no result"
    result = receive.recv()
    child.join(10)
    return result


def test_fork_child_cannot_release_or_extend_parents_lock(make_client, masters, name):
    dlm = make_client(masters.urls, retry_count=0)
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire()
    assert in_child(lock.release) == "raised LockError"
    assert in_child(lock.extend) == "raised LockError"
    assert in_child(lambda: dlm.lock(name, ttl=5.0).acquire(blocking=False)) is False
    assert all(m.command("GET", name) == lock.token for m in masters)  # untouched
    assert lock.locked()
    lock.release()
    assert [o.outcome for o in lock.outcomes] == ["ok"] * 5
    gone_within(masters, name, bound(1))


def test_fork_child_opens_fresh_connections_and_parent_keeps_its_own(proxied_client, proxies, masters, name):
    dlm = proxied_client()
    warm(dlm, name)
    assert [p.connections for p in proxies] == [1] * 5
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire()

    def child() -> bytes:
        with dlm.lock(name + ":child", ttl=5.0) as other:
            ok = [o.outcome for o in other.outcomes] == ["ok"] * 5
        dlm.close()  # closing the child's copies must not disturb the parent's connections
        return ok

    assert in_child(child) is True
    assert [p.connections for p in proxies] == [2] * 5  # the child opened its own
    lock.extend()  # the parent's pooled connections still work and carry only its own replies
    lock.release()
    assert [o.outcome for o in lock.outcomes] == ["ok"] * 5
    assert [p.connections for p in proxies] == [2] * 5  # ... and they were reused, not reopened
    gone_within(masters, name, bound(1))


def test_fork_child_leaving_with_block_keeps_its_own_exception(make_client, masters, name):
    """``with lock: if fork() == 0: sys.exit(0)`` runs ``__exit__`` in the child too.

    The child must not release the parent's lock there, and its own SystemExit must not be replaced.
    """
    dlm = make_client(masters.urls, retry_count=0)
    parent = os.getpid()
    r, w = os.pipe()
    try:
        with dlm.lock(name, ttl=5.0) as lock:
            pid = os.fork()
            if pid == 0:
                raise SystemExit(0)  # leaves the with block in the child
            os.close(w)
            os.waitpid(pid, 0)
            seen = os.read(r, 100)
            assert all(m.command("GET", name) == lock.token for m in masters)  # still the parent's
    except BaseException as exc:
        if os.getpid() != parent:  # pragma: no cover - the child reports how it left the block
            os.write(w, type(exc).__name__.encode())
            os._exit(0)
        raise
    os.close(r)
    assert seen == b"SystemExit"
    gone_within(masters, name, bound(1))

