"""docs/security.md: its key table and ACL rules come from fastredlock.protocol.keyspace (the source
``fastredlock audit --name`` uses), and a user with exactly those rules can use every kind of lock."""
from __future__ import annotations

import os
import uuid

import pytest

from fastredlock.protocol.keyspace import LOCK_COMMANDS, acl_rules, markdown_table

PAGE = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "docs", "security.md")


def _page() -> str:
    with open(PAGE, encoding="utf-8") as f:
        return f.read()


def test_page_holds_the_current_table_and_rules():
    page = _page()
    assert markdown_table() in page, "regenerate the table: fastredlock.protocol.keyspace.markdown_table()"
    assert acl_rules(b"app:x") in page and LOCK_COMMANDS in page


def test_a_user_with_the_documented_rules_uses_every_kind_of_lock(masters, make_client, keys_on):
    if masters[0].command("ACL", "WHOAMI") != b"default":
        pytest.skip("this server has no ACLs (Redis < 6)")
    name = f"app:{uuid.uuid4().hex}"
    user = f"locker-{uuid.uuid4().hex[:8]}"
    for m in masters:
        m.command("ACL", "SETUSER", user, "on", ">pw", "resetkeys", "resetchannels",
                  *acl_rules(name.encode()).split(), *LOCK_COMMANDS.split())
    try:
        dlm = make_client([f"redis://{user}:pw@127.0.0.1:{m.port}" for m in masters], retry_count=3,
                          retry_delay=0.02)
        with dlm.lock(name, ttl=5.0, fencing=True) as lock:
            assert lock.fence is not None
            lock.extend()
        assert not dlm.lock(f"other:{name}").acquire(blocking=False)  # a name its keys do not cover
        with dlm.rlock(name, ttl=5.0):
            pass
        rw = dlm.rwlock(name, ttl=5.0)
        with rw.read:
            pass
        with rw.write:
            pass
        with dlm.semaphore(name, 2, ttl=5.0):
            pass
        waiter = dlm.lock(name, ttl=5.0)
        with dlm.lock(name, ttl=5.0):
            assert not waiter.acquire(timeout=0.05)  # waits (marks, queues) under the same rules
        assert waiter.acquire(timeout=2.0)
        waiter.release()
    finally:
        for m in masters:
            m.command("ACL", "DELUSER", user)
    assert keys_on(masters, name) == 0
