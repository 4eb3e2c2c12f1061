"""A fence counter that a master reports too large is refused by both cores alike (security issue
39, item 9): the C core once read a 19-digit ``:n`` into a ``long long`` (a negative fence) where
the pure twin refused it. Above :data:`~fastredlock.protocol.replies.MAX_FENCE` (2**53 - 2: the
next fence must stay exact in the scripts' Lua numbers) the reply is a protocol error."""
from __future__ import annotations

import pytest

from fastredlock.protocol.replies import MAX_FENCE
from fastredlock.protocol.scripts import FENCE_WRITE_SHA, FENCED_ACQUIRE_SHA
from fastredlock.testing.fake import FakeMaster


def _fenced(counter: bytes):
    def answer(args):
        if args[0].upper() == b"EVALSHA" and args[1] == FENCED_ACQUIRE_SHA:
            return b":" + counter + b"\r\n"
        if args[0].upper() == b"EVALSHA" and args[1] == FENCE_WRITE_SHA:
            return b":1\r\n"
        return b":1\r\n"  # the release
    return answer


@pytest.mark.parametrize("counter, fence", [
    (b"41", 42),
    (b"%d" % MAX_FENCE, MAX_FENCE + 1),
    (b"%d" % (MAX_FENCE + 1), None),
    (b"99999999999999999", None),           # 17 digits: the C fast path's longest
    (b"9999999999999999999", None),         # 19 digits: overflowed a long long
    (b"9223372036854775807", None),         # 2**63 - 1
    (b"99999999999999999999999", None),     # beyond 64 bits
])
def test_fence_counter_beyond_the_limit_is_refused(make_client, name, counter, fence):
    with FakeMaster(_fenced(counter)) as fake:
        dlm = make_client([fake.url], retry_count=0, connect_timeout=0.5, io_timeout=0.5)
        lock = dlm.lock(name, ttl=5.0, fencing=True)
        acquired = lock.acquire(blocking=False)
        if fence is None:
            assert not acquired
            assert lock.outcomes[0].outcome == "protocol error", lock.outcomes
            assert lock.fence is None
        else:
            assert acquired, lock.outcomes
            assert lock.fence == fence
            lock.release()
