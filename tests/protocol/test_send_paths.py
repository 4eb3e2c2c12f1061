"""Session._start's straight path for the usual case (every master healthy, an open plain link)
queues exactly what its general path (and _choose) queue.

The straight path is taken only where no master cools down (``Health.modes`` is None); where one
does, every link goes the general way. So two sessions in the same state, one of them with master
1 cooling down, must leave link 0 (healthy in both) with the same requests and round fields, for
every mix of what the choice depends on: the link open or not, its capabilities and the round's
native forms (in either order), scripts refused or off, SCRIPT LOADs answered, an owed NOSCRIPT
(``use_eval``), a round that waits or not, a script round or plain commands, leftovers of the last
round (requeued commands, waiters' work).
"""
from __future__ import annotations

import itertools

import pytest

from _drive import specs

FIELDS = ("kind", "native", "head", "end", "requeued", "got_data", "best_effort", "waited", "waking",
          "payload", "out", "skip", "reused", "deadline", "polled", "opening", "use_eval")


def _session(proto, cooling, n=3):
    health = proto.health.Health(n, cooldown=10.0)
    if cooling:
        health.failed(1, proto.outcomes.C_CONNECT_ERRORS, "refused", 0.0, True)
    return proto.session.Session(specs(n), 0.05, 0.1, 0.01, False, health, True)


def _set_link(link, opened, caps, noscripts, loaded, use_eval, leftovers):
    link.open = opened
    link.caps = caps
    link.noscripts = noscripts
    link.noscripts_why = "NOPERM no scripts" if noscripts else None
    link.loaded = loaded
    link.use_eval = use_eval
    link.requeued = [0] if leftovers else None
    link.waking = [0] if leftovers else None
    link.out = b""


def _queued(proto, cooling, state, kind, wait, script, native):
    session = _session(proto, cooling)
    _set_link(session.links[0], *state)
    fallbacks = (lambda: [b"<eval>"]) if script else None
    session.begin(kind, 1, 1, b"<evalsha>" if script else b"<set>", script, fallbacks, (1000,), wait, 1.0,
                  native)
    link = session.links[0]
    fields = {name: getattr(link, name) for name in FIELDS}
    details = session.details
    return fields, session.outcomes[0], None if details is None else details[0]


def _forms(proto, which):
    hs, rp = proto.handshake, proto.replies
    delifeq = (hs.CAP_DELIFEQ, b"<delifeq>", rp.KIND_NATIVE_DEL, (b"k",))
    delex = (hs.CAP_DELEX, b"<delex>", rp.KIND_NATIVE_DEL, (b"k",))
    return {"none": None, "empty": (), "delifeq-first": (delifeq, delex), "delex-only": (delex,)}[which]


@pytest.mark.parametrize("kind_name", ["KIND_SET", "KIND_SCRIPT"])
@pytest.mark.parametrize("native", ["none", "empty", "delifeq-first", "delex-only"])
def test_the_straight_path_queues_what_the_general_one_does(proto, kind_name, native):
    hs = proto.handshake
    kind = getattr(proto.replies, kind_name)
    forms = _forms(proto, native)
    checked = 0
    for opened, caps, noscripts, loaded, use_eval, leftovers, wait, script in itertools.product(
            (True, False), (0, hs.CAP_DELIFEQ, hs.CAP_DELEX, hs.CAP_DELIFEQ | hs.CAP_DELEX),
            (False, True), (False, True), (False, True), (False, True), (True, False), (True, False)):
        state = (opened, caps, noscripts, loaded, use_eval, leftovers)
        straight = _queued(proto, False, state, kind, wait, script, forms)
        general = _queued(proto, True, state, kind, wait, script, forms)
        assert straight == general, (state, wait, script)
        checked += 1
    assert checked == 2 * 4 * 2 ** 6
