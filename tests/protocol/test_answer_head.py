"""Session.answer_head (the C core's one call for the usual reply) leaves a session exactly as the
general path does: answer(), then drained() when the reply was the read's last."""
from __future__ import annotations

import pytest

from _drive import Drive

SET, SCRIPT, FENCED = 0, 1, 2
OK, NO = 0, 1

# (kind, ttl_ms, k, early, replies: (master, code, fence value or None, last of its read, time))
CASES = {
    "set-quorum-early": (SET, 1000, 1, True, [(0, OK, None, True, .001), (3, NO, None, True, .002), (1, OK, None, True, .003),
                                              (4, OK, None, True, .004), (2, NO, None, True, .005)]),
    "set-no-early": (SET, 1000, 1, False, [(i, OK if i % 2 else NO, None, True, .001 * (i + 1)) for i in range(5)]),
    "fenced-values": (FENCED, 1000, 1, True, [(i, OK, 40 + i, True, .001 * (i + 1)) for i in range(4)] + [(4, NO, None, True, .006)]),
    "release": (SCRIPT, 0, 1, True, [(i, NO if i == 2 else OK, None, True, .001 * (i + 1)) for i in range(5)]),
    "two-commands-one-read": (SCRIPT, 0, 2, True, [(i, OK, None, j == 1, .001 * (i + 1)) for i in range(5) for j in range(2)]),
    "two-commands-two-reads": (SCRIPT, 0, 2, True, [(i, OK if j else NO, None, True, .001 * (i + j + 1)) for i in range(5)
                                                    for j in range(2)]),
}


def _state(d, now):
    s = d.session
    links = [(link.head, link.end, link.requeued, link.polled, link.got_data) for link in s.links]
    return (list(s.outcomes), s.details, s.values, s.decided, s.decided_at, s.undecided, links,
            s.health.snapshot(now), s.next_deadline())


def _rounds(rounds):
    return [(r.ok, r.successes, r.validity, r.elapsed, r.outcomes, r.details, r.values) for r in rounds]


def _play(proto, case, head, untrusted=None, retried=None):
    kind, ttl_ms, k, early, replies = CASES[case]
    d = Drive(proto, 5, early=early)
    d.session.restart_grace_ms = 10000.0
    if untrusted is not None:  # that master came up as the round began: its OK does not count
        d.links[untrusted].clock.up_since = 0.0
    d.begin(kind=kind, ttl_ms=ttl_ms, k=k, rows=k, now=0.0)  # (one command per key)
    if retried is not None:  # its commands went again on a reopened connection: "no" may be ours
        d.links[retried].retried = True
    states, now = [], 0.0
    for i, code, value, last, now in replies:
        if d.over():
            break
        link = d.links[i]
        if head:
            # the conditions under which the C core calls it (link.pxd's _head_kind)
            assert link.head < link.end and link.cmds is None and link.skip < 0 and not link.owed
            assert link.preloads == 0 and link.probes == 0 and not link.half
            d.session.answer_head(link, code, value, last, now)
        else:
            assert d.session.answer(i, code, None, value, now)
            if last:
                d.session.drained(i, False, now)
        d.sync()
        states.append(_state(d, now))
    return states, _rounds(d.finish(now + 0.001))


@pytest.mark.parametrize("case", sorted(CASES))
def test_answer_head_is_answer_then_drained(proto, case):
    general = _play(proto, case, head=False)
    assert _play(proto, case, head=True) == general
    assert general[1]  # (the case did play a round)


@pytest.mark.parametrize("untrusted,retried", [(1, None), (None, 4), (3, 2)])
def test_answer_head_applies_restart_aware_voting_and_resent_commands(proto, untrusted, retried):
    general = _play(proto, "set-no-early", head=False, untrusted=untrusted, retried=retried)
    assert _play(proto, "set-no-early", head=True, untrusted=untrusted, retried=retried) == general
    outcomes = general[1][0][4]
    UNTRUSTED, CONN_ERROR = 6, 3
    if untrusted is not None:
        assert outcomes[untrusted] == UNTRUSTED  # (masters 1 and 3 say OK)
    if retried is not None:
        assert outcomes[retried] == CONN_ERROR  # (masters 2 and 4 say no)
