"""The round state machine: N links, one round at a time, every rule of a round written once.

A round runs K commands on every master in one write each. The I/O twin calls :meth:`Session.begin`
with the encoded commands and the time; then it obeys each link's requests (open, write ``out``,
close, poll) and reports what happens: :meth:`connect_failed`, :meth:`io_failed`, :meth:`received`
(the raw bytes, for the reply guard), :meth:`reply` / :meth:`answer` (one reply, parsed by hiredis
or by the twin's fast parser), :meth:`partial`, :meth:`drained`; it waits until
:meth:`next_deadline`, calls :meth:`expire_due` when it passes, and :meth:`finish` builds the
result. Time is always passed in.

**Early decision.** An acquisition stops waiting as soon as every key is decided: a quorum
answered OK (validity is measured at that instant), or so many masters answered anything else that
a quorum has become impossible. ``early=False`` waits for every master instead (up to its
deadline). Releases, extensions and fence writes wait for every master that is not cooling down;
a round begun with ``wait=False`` (the cleanup of a failed acquisition) only writes. The masters
that had not answered when a round returned are *stragglers*: their outcome is ``PENDING`` and their
commands are owed replies of the connection (see :mod:`.link`).

**Master health.** Acquisitions skip a master that cools down (outcome ``SKIPPED``). Releases and
extensions still reach it, without waiting for it when it timed out: they are written behind the
SETs on its open connection (or skipped if that connection is closed); a master that refused
connections is simply tried again, which costs no waiting. Reads (``inspect``) wait for every
master they ask, like releases, and skip one that timed out while it cools down.

**Restart-aware voting.** An OK from a master up for less than :attr:`Session.restart_grace_ms`
is ``UNTRUSTED`` (see :mod:`.voting`).

**Sentinel masters.** The twin asks the sentinels before it opens such a link and reports the
answer (:meth:`Session.resolved`, or :meth:`Session.sentinel_failed`); the handshake verifies the
role; a ``-READONLY``/``-LOADING`` reply closes the link so the next connect asks again (see
:mod:`.sentinel`).

**Cluster masters.** A cluster is one master (one vote per key) whose nodes are extra links, past
the N masters' own (``link.master`` is the vote a link casts); each node link carries only the
commands of the slots it owns (``link.cmds``), in one write. The routing rules (splitting a
round's commands by slot, giving them to node links, following ``-MOVED``/``-ASK``, when a slot
map is asked again) are :class:`.cluster.ClusterRouting`'s: :attr:`Session.routing` holds one, and
the session calls it where a link is a cluster's or a round begins; the methods the twins call
(:meth:`Session.add_node`, :meth:`~Session.learned`, :meth:`~Session.refresh_tried`,
:meth:`~Session.stale_routes`; the flags :attr:`~Session.maps_stale` and
:attr:`~Session.redirected`) stay the session's and delegate. A session without cluster masters
never looks at any of this (``routing`` is None).
"""
from array import array

try:
    import cython  # (compiled: unchecked casts of the links; interpreted, a cast is the value itself)
except ImportError:  # pragma: no cover - a pure install without Cython
    from ._nocython import cython

from .handshake import CAP_DELEX, CAP_DELIFEQ, HELLO_ROLE, PROBE, PROBES, hello_reply, probe_answer, wake_after
from .health import HEALTHY, TIMED_OUT, Health
from .link import Link, Owed
from .outcomes import (
    C_CONNECT_ERRORS, C_CONNECTION_ERRORS, C_ERROR_REPLIES, C_LATE, C_PROTOCOL_ERRORS, C_SKIPPED, C_TIMEOUTS, CONN_ERROR, ERROR_REPLY, NO, OK, PENDING, PROTOCOL_ERROR, SENTINEL_ERROR, SKIPPED, TIMEOUT, TLS_ERROR,
)
from .replies import (
    KIND_BITS, KIND_FENCED, KIND_NATIVE_DEL, KIND_READ, KIND_SCRIPT, KIND_SET, KIND_WAKE, NO_SAFE_RELEASE, NO_SCRIPTS, bits,
    classify, is_acquisition, is_noscript, is_unsupported, refuses_scripts, unexpected, what,
)
from .result import decide, set_outcome, settle_sink
from .cluster import ClusterRouting, requeue_asking
from .sentinel import asks_again, resolved as sentinel_resolved


#: The outcome codes' int objects by code (compiled, _record takes them from here).
_CODES = tuple(range(SENTINEL_ERROR + 1))

#: :meth:`Session.pace`: the round is over; deadlines passed and were expired.
PACE_OVER = -1.0
PACE_EXPIRED = -2.0


def _cmd(link, p):
    """The round's command at position ``p`` of ``link``'s queue (-1: an ``ASKING``)."""
    return p if link.cmds is None else link.cmds[p]


def _waits_for(link, decided):
    """Whether a round still waits for ``link``: commands to write (unless best effort), or
    answers it needs (until the round is ``decided``)."""
    return link.polled and ((link.waited and not decided) or (not link.best_effort and link.unsent()))


class Session:
    """N links and the round that drives them. Not thread-safe: one per concurrent caller."""

    def __init__(self, specs, io_timeout, connect_timeout, drift_factor, restart_aware=False,
                 health=None, early=True, preload=False):
        #: Whether new connections load the client's scripts first (:mod:`.handshake`).
        self.preload = preload
        self.links = [Link(i, spec, restart_aware, preload) for i, spec in enumerate(specs)]
        self.n = len(self.links)
        #: The cluster masters' routing (:class:`~.cluster.ClusterRouting`, sharing ``links``);
        #: None: no master is a cluster.
        self.routing = None
        for link in self.links:
            if link.spec.cluster is not None:
                self.routing = ClusterRouting(self.links, Link)
                break
        #: Some cluster's slot map may be due to be asked again (the twin then calls stale_routes).
        self.maps_stale = self.routing is not None
        #: A command was redirected to another node since the twin last looked (it syncs them all).
        self.redirected = False
        self.quorum = self.n // 2 + 1
        self.io_timeout = io_timeout
        self.connect_timeout = connect_timeout
        self.drift_factor = drift_factor
        #: Whether new connections read the master's uptime (restart-aware voting).
        self.restart_aware = restart_aware
        #: An OK from a master up for less than this many milliseconds does not count (UNTRUSTED).
        self.restart_grace_ms = 0
        #: The masters' health, shared with the other sessions of the client.
        self.health = health if health is not None else Health(self.n)
        #: Whether acquisitions return as soon as every key is decided.
        self.early = bool(early)
        self.in_round = False
        # the round in progress (see begin); between rounds, an empty one
        self.kind, self.k, self.rows, self.wait, self.acquisition = KIND_SCRIPT, 0, 0, False, False
        self.early_now = self.decided = False
        self.decided_at = self.started = self.io_deadline = 0.0
        #: The deadline a read of what had arrived already met (see pace).
        self.swept = -1.0
        self.payload, self.fallbacks, self.make_fallbacks, self.ttls_ms = b"", None, None, ()
        #: The round's native forms, or None (see begin).
        self.native = None
        #: Some link learned a capability (:mod:`.handshake`'s probes): a twin then offers the
        #: native forms of the rounds that have them (until then, it never builds them).
        self.caps_seen = False
        #: Every capability some link learned (the union: a twin builds only the forms it may use).
        self.caps_any = 0
        self.outcomes, self.details, self.values, self.modes = [], None, None, None
        self.oks = array("i")  # per key: OKs so far (early decision), and other outcomes so far
        self.bad = array("i")
        self.undecided = 0
        #: What the last round left to the twin's tidying (set as it ends): 1, some link owes
        #: replies; 2, some link asks the twin for something (close, open, bytes to write); 0, neither.
        self.left = 0

    def no_scripts(self):
        """The client sends no scripts (``scripts=False``): new connections load none, and every
        link acts as a master that refuses them (native commands only; what needs a script is
        refused before it is sent). Not for cluster masters (their commands go as scripts)."""
        if self.routing is not None:
            raise ValueError("scripts=False does not work with cluster masters (their commands go as scripts)")
        for link in self.links:
            link.scripts_off = True
            link.preload = b""
            if link.probe:
                link.probe = PROBE  # (no script probe either)
            link.noscripts = True
            link.noscripts_why = "the client option scripts=False"

    # --- the round -------------------------------------------------------------------------
    def begin(self, kind, k, rows, payload, script, make_fallbacks, ttls_ms, wait, now, native=None):
        """Start a round of ``k`` commands (``payload``, encoded back to back) for ``rows`` keys.

        ``script``: the commands are EVALSHA, and ``make_fallbacks()`` returns their EVAL forms,
        one bytes per command (asked for only when a master needs them). ``ttls_ms[j]`` > 0 asks
        for validity of key j. ``wait=False``: write only. ``native``: None, or the round's native
        forms, ``((capability, payload, reply kind), ...)`` in order of preference: a link whose
        master runs one (``link.caps``; not a cluster's) is sent that payload instead, its replies
        read as that kind; an answer saying the command is not there after all
        (:func:`~.replies.is_unsupported`) sends the EVAL form instead and drops the capability.
        Afterwards every link says what the twin must do (see :mod:`.link`).
        """
        n = self.n
        if self.routing is not None:
            self.routing.split_round(payload, k)  # CrossSlotError before anything changed
        self.kind = kind
        self.k = k
        self.rows = rows
        self.wait = wait
        self.acquisition = is_acquisition(kind)
        self.early_now = wait and self.early and self.acquisition
        self.decided = not wait
        self.in_round = True
        self.payload = payload
        self.fallbacks = None
        self.make_fallbacks = make_fallbacks if script else None
        self.native = native
        self.ttls_ms = ttls_ms
        outcomes = self.outcomes
        if len(outcomes) == rows * n:  # (the last round's shape: its list is reused, nobody else holds it)
            pending = PENDING
            for idx in range(rows * n):
                outcomes[idx] = pending
        else:
            self.outcomes = [PENDING] * (rows * n)
        self.details = None
        # the fence counters, or what a read returned
        self.values = [None] * (rows * n) if kind == KIND_FENCED or kind == KIND_READ else None
        if self.early_now:
            if len(self.oks) < rows:
                self.oks = array("i", [0]) * rows
                self.bad = array("i", [0]) * rows
            for j in range(rows):
                self.oks[j] = 0
                self.bad[j] = 0
            self.undecided = rows
        self.started = now
        self.swept = -1.0
        self.decided_at = now
        self.io_deadline = now + self.io_timeout
        self.modes = None if not self.health.n_cooling else self.health.modes(now)  # (modes' own first test)
        fresh_deadline = self.io_deadline + self.connect_timeout
        if self.routing is not None:
            self._route(now)
        links = self.links
        for idx in range(len(links)):  # (indexed: one reference taken per link, compiled)
            link = cython.cast(Link, links[idx])  # (unchecked when compiled: links holds Links only)
            link.retried = False
            link.fallback_sent = 0
            self._start(link, fresh_deadline)
        self._stamp(now)

    # --- cluster masters (the rules: .cluster.ClusterRouting) --------------------------------------
    def add_node(self, i, address):
        """The link of cluster master ``i``'s node at ``address`` (``(host, port)``), made if new."""
        return self.routing.add_node(i, address, self.restart_aware, self.preload)

    def learned(self, i, ranges, now):
        """Cluster master ``i``'s slot map (:func:`.cluster.parse_slots`); links are made for the
        nodes it names first (the twin then opens them as for any link)."""
        self.routing.learned(i, ranges, now, self.restart_aware, self.preload)

    def refresh_tried(self, i, now):
        """Asking cluster master ``i``'s nodes for the slot map failed: not again before the rate limit."""
        self.routing.refresh_tried(i, now)

    def stale_routes(self, now):
        """The cluster masters whose slot map should be asked again now (the twin asks only while
        :attr:`maps_stale`)."""
        if self.routing is None:
            self.maps_stale = False
            return []
        due = self.routing.due(now)
        self.maps_stale = self.routing.stale()
        return due

    def _map_failed(self, i, now):
        """Cluster master ``i``'s slot map proved wrong (or a node failed): ask it again soon."""
        self.routing.failed(i, now)
        self.maps_stale = True

    def _route(self, now):
        """Give each cluster node link the commands of the slots it owns; a command no known node
        serves is that cluster's connection error."""
        unrouted = self.routing.assign(now)
        if unrouted is not None:
            self.maps_stale = True
            for j, i, detail in unrouted:
                self._record_cmd(j, i, CONN_ERROR, detail)

    def _fallback_payload(self):
        if self.fallbacks is None:
            self.fallbacks = self.make_fallbacks()
        return self.fallbacks

    def _start(self, link, deadline):
        """Queue this round's commands on one link (opening it if needed), or skip it."""
        if link.open and link.cmds is None and self.modes is None:
            # The usual case: a plain master, every one healthy, its connection open, sent the
            # round's first native form (its master runs it) or the round's own commands (no
            # EVAL). What the general path below (and _choose) does there, in fewer steps.
            if self.native is not None and link.caps:
                usual = self._first_form(link)
            elif not link.noscripts and (self.make_fallbacks is None
                                         or ((self.wait or link.loaded) and not link.use_eval)):
                link.kind = self.kind
                link.native = 0
                link.payload = self.payload
                usual = True
            else:
                usual = False
            if usual:
                link.head = 0  # (link.expect(k))
                link.end = self.k
                if link.requeued is not None:
                    link.requeued = None
                link.got_data = False
                link.best_effort = False
                link.waited = self.wait
                if link.waking is not None:
                    link.waking = None
                link.out = link.payload
                link.skip = -1
                link.reused = True
                link.deadline = self.io_deadline
                link.polled = True
                return
        mode = HEALTHY if self.modes is None else self.modes[link.master]
        cmds = link.cmds
        link.kind = self.kind
        link.native = 0
        if cmds is not None and not cmds:  # a cluster node with nothing to do (or the cluster's own link)
            link.expect(0)
            link.polled = False
            return
        link.expect(self.k if cmds is None else len(cmds))
        link.got_data = False
        if mode != HEALTHY and (self.acquisition or (mode == TIMED_OUT and (not link.open or self.kind == KIND_READ))):
            # Cooling down: acquisitions do not ask it. A release or an extension goes to a master
            # that refused connections (it may be back: a refusal costs no waiting), and to one
            # that timed out if its connection is open (behind the SETs there), without waiting.
            # A read goes where a release waits for the answer: an answer nobody waits for
            # would tell it nothing.
            why = self.health.why(link.master)
            link.expect(0)
            if cmds is None:
                for j in range(self.rows):
                    self._record(j, link.index, SKIPPED, why, None)
            else:
                for j in cmds:
                    if j >= 0:
                        self._record_cmd(j, link.master, SKIPPED, why)
            self.health.count(link.master, C_SKIPPED)
            return
        link.best_effort = mode == TIMED_OUT
        link.waited = self.wait and not link.best_effort
        link.waking = None
        if not link.open:
            link.payload = b""
            link.request_open(b"")
            if not link.gated:  # (a cluster's node: its commands follow the handshake, chosen now)
                self._choose(link)
                link.out = link.preloaded(link.payload) if link.skip < 0 else link.out
            link.reused = False
            link.deadline = deadline
        else:
            if not self._choose(link):
                return
            link.out = link.payload
            link.skip = -1
            link.reused = True
            link.deadline = self.io_deadline
        link.polled = True

    def _first_form(self, link):
        """Where ``link``'s master runs the round's first native form (what :meth:`_choose` would
        then send), choose it: True. False: nothing chosen."""
        native = self.native
        if not native:
            return False
        form = native[0]
        cap = form[0]
        if not link.caps & cap:
            return False  # (another form, or none: _choose looks at them all)
        link.payload = form[1]
        link.kind = form[2]
        link.native = cap
        return True

    def _choose(self, link):
        """Choose what this round writes on ``link`` (its master's capabilities known, or not yet:
        the scripts): the native form, EVALSHA or EVAL; or nothing, where the master refuses
        scripts and the round needs one, or refuses them and could not release what an
        acquisition would take (the outcomes then say so). False: nothing is written."""
        cmds = link.cmds
        link.kind = self.kind
        link.native = 0
        native = self.native
        if native is not None and link.caps and link.open and cmds is None:
            for f in range(len(native)):  # (indexed: no iterator object, compiled)
                form = native[f]
                cap = form[0]
                if link.caps & cap:
                    # The master runs it natively: no script, no NOSCRIPT (nor EVAL where nobody waits).
                    link.payload = form[1]
                    link.kind = form[2]
                    link.native = cap
                    return True
        if link.noscripts:
            if self.make_fallbacks is not None:
                self._refuse(link, "%s (%s): this operation needs @scripting (EVAL, EVALSHA, SCRIPT)"
                             % (NO_SCRIPTS, link.noscripts_why))
                return False
            if self.acquisition and not link.caps & (CAP_DELIFEQ | CAP_DELEX) and not link.gated:
                self._refuse(link, "%s (%s)" % (NO_SAFE_RELEASE, link.noscripts_why))
                return False
        if self.make_fallbacks is None or ((link.waited or link.loaded) and not link.use_eval):
            # (Not waited for, EVALSHA still goes where this connection's SCRIPT LOADs were all
            # answered: a release that does not wait costs the master no script text.)
            link.payload = self.payload if cmds is None else self.routing.payload(link, None)
        else:
            # Nobody waits for this answer, so a NOSCRIPT could not be answered with EVAL (on a
            # connection whose scripts are not known to be loaded); or the master said NOSCRIPT
            # too late last time (its script cache is empty): send EVAL.
            link.payload = (b"".join(self._fallback_payload()) if cmds is None
                            else self.routing.payload(link, self._fallback_payload()))
            link.use_eval = False
        return True

    def _refuse(self, link, detail):
        """Write nothing of this round on ``link``: every key's outcome there is an error reply
        saying ``detail`` (the master refuses what the round needs; it was not asked)."""
        link.expect(0)
        link.polled = False
        link.payload = b""
        for j in range(self.rows):
            self._record(j, link.master, ERROR_REPLY, detail, None)

    def _ungate(self, link, now):
        """A gated link has its answers: write this round's commands, chosen now (or none)."""
        link.gated = False
        if self.in_round and link.waiting() and link.payload == b"" and self._choose(link):
            link.out += link.payload
        self._stamp(now)

    def _record(self, j, i, code, detail, value):
        """Set master ``i``'s outcome of key ``j``; decide the round early when it can be."""
        n = self.n
        idx = j * n + i
        if not (cython.compiled and _put_code(self.outcomes, idx, code)):  # (compiled: no int lookup)
            self.outcomes[idx] = code
        if detail is not None:
            if self.details is None:
                self.details = [None] * (self.rows * n)
            self.details[idx] = detail
        if value is not None and self.values is not None:
            self.values[idx] = value
        if self.early_now and not self.decided:
            if code == OK:
                self.oks[j] += 1
                if self.oks[j] == self.quorum:
                    self.undecided -= 1
            else:
                self.bad[j] += 1
                if self.bad[j] == n - self.quorum + 1:
                    self.undecided -= 1
            if self.undecided == 0:
                self.decided = True
                self.decided_at = -1.0  # stamped by the next call that knows the time

    def _record_cmd(self, j, i, code, detail):
        """Set master ``i``'s outcome of every key command ``j`` answers for (all, for KIND_BITS)."""
        if self.kind == KIND_BITS:
            for row in range(self.rows):
                self._record(row, i, code, detail, None)
        else:
            self._record(j, i, code, detail, None)

    def _stamp(self, now):
        if self.decided_at < 0.0:
            self.decided_at = now

    def next_deadline(self):
        """The earliest deadline of a link the round still waits for, or -1.0: the round is over."""
        first = -1.0
        decided = self.decided
        soonest = self.io_deadline  # no link's deadline in a round comes sooner (see _start): none to look for past it
        links = self.links
        for idx in range(len(links)):  # (indexed: one reference taken per link, compiled)
            link = cython.cast(Link, links[idx])  # (unchecked when compiled: links holds Links only)
            if _waits_for(link, decided) and (first < 0.0 or link.deadline < first):
                first = link.deadline
                if first <= soonest:
                    break
        return first

    def pace(self, first, now):
        """The I/O twin's next move in the round it drives (both twins' loop, written once), given
        the round's :meth:`next_deadline` ``first`` (the twin stops when it is negative: the round
        is over, ``PACE_OVER``, and reads the clock only otherwise) and the time: how many
        milliseconds to wait for readiness (0.0: do not wait, read what already arrived), or
        ``PACE_EXPIRED`` (-2.0): deadlines passed and their masters were called late; carry out
        what the links now ask for, then ask again.

        A deadline that passes is first met by one read of what already arrived (the thread may
        have been descheduled past it), and only then are the masters still missing called late.
        """
        if first < 0.0:
            return -1.0  # PACE_OVER (literals: no module-global lookup in the compiled hot loop)
        if first > now:
            return (first - now) * 1000.0
        if self.swept != first:
            self.swept = first
            return 0.0
        self.expire_due(now)
        return -2.0  # PACE_EXPIRED

    def expire_due(self, now):
        """Deadlines passed (the twin read what had arrived first): call those masters late."""
        decided = self.decided  # as the sweep began: a timeout in it may decide the round
        links = self.links
        for idx in range(len(links)):  # (indexed: one reference taken per link, compiled)
            link = cython.cast(Link, links[idx])  # (unchecked when compiled: links holds Links only)
            if link.deadline <= now and _waits_for(link, decided):
                self._timeout(link, now)

    def finish(self, now):
        """End the round: the list of :class:`~.result.Round`, one per key; the replies still
        missing become owed replies of their connections. The twin then tidies the links that owe."""
        elapsed = self._end(now)
        if self.rows == 1:  # (one key, the common case: a list of one, built at once)
            rounds = [self._decide_row(0, elapsed)]
        else:
            rounds = []
            for j in range(self.rows):
                rounds.append(self._decide_row(j, elapsed))
        self._owe_missing(rounds, None)
        return rounds

    def finish_one(self, now):
        """:meth:`finish` of a one-key round: its :class:`~.result.Round` itself."""
        elapsed = self._end(now)
        rnd = self._decide_row(0, elapsed)
        self._owe_missing([rnd] if self.kind == KIND_BITS else None, rnd)
        return rnd

    def _end(self, now):
        """The round ends at ``now``: a best-effort master not written to is a stalled one; how
        long the round took (to its decision)."""
        self._stamp(now)
        if self.modes is None:  # no master cools down: no link of this round is best effort (see _start)
            return (self.decided_at if self.decided else now) - self.started
        links = self.links
        for idx in range(len(links)):  # (indexed: one reference taken per link, compiled)
            link = cython.cast(Link, links[idx])  # (unchecked when compiled: links holds Links only)
            if link.polled and link.best_effort and link.unsent():  # its socket buffer is full: a stalled master
                self._fail(link, TIMEOUT, "not written: the connection does not take more", C_TIMEOUTS, True, now)
        return (self.decided_at if self.decided else now) - self.started

    def _owe_missing(self, rounds, one):
        """The replies still missing become owed replies of their connections, filling in
        ``rounds`` (a list, one Round per key) when they come, or ``one``, a one-key round's
        Round, where not None (``rounds`` is then None, but for KIND_BITS); the round is over."""
        links = self.links
        left = 0
        for idx in range(len(links)):  # (indexed: one reference taken per link, compiled)
            link = cython.cast(Link, links[idx])  # (unchecked when compiled: links holds Links only)
            while link.waiting():
                kind = self._kind_next(link)
                j = _cmd(link, link.pop_cmd())
                if j < 0:
                    link.owe(KIND_SET, link.deadline, None, False)  # an ASKING's +OK
                else:
                    link.owe(kind, link.deadline, rounds if self.kind == KIND_BITS
                             else one if one is not None else rounds[j], False)
                    if kind == KIND_NATIVE_DEL:
                        entry = link.owed[len(link.owed) - 1]  # (compiled without wraparound)
                        entry.key = self.native[0][3][j]
            link.polled = False
            if link.after is not None:
                self._write_after(link)
            if link.owed:
                left |= 1
            if link.closing or link.opening or link.out:
                left |= 2
        self.left = left
        self.in_round = False

    def _decide_row(self, j, elapsed):
        """The :class:`~.result.Round` of key ``j`` of the round, which took ``elapsed`` seconds."""
        n = self.n
        details = self.details
        values = self.values
        drow = None
        if details is not None:
            drow = tuple(details[j * n:(j + 1) * n])
            if drow.count(None) == n:
                drow = None
        return decide(
            tuple(self.outcomes) if self.rows == 1 else tuple(self.outcomes[j * n:(j + 1) * n]),
            self.ttls_ms[j], elapsed, self.started,
            self.quorum, self.drift_factor, drow,
            tuple(values[j * n:(j + 1) * n]) if values is not None else None,
        )

    def _kind_next(self, link):
        """How the reply to ``link``'s next command of this round is read."""
        if link.head < link.end:
            return link.kind
        if link.waking is not None and link.requeued is not None and link.requeued[0] in link.waking:
            return KIND_WAKE
        return self.kind

    def _write_after(self, link):
        """Write the waiters' work that owed native releases found in a round (it goes behind the
        round's commands, so its replies are owed behind theirs)."""
        after = link.after
        link.after = None
        if not link.open:
            return
        for cmd, entry in after:
            link.out += cmd
            link.owed.append(entry)

    # --- what the twin reports ---------------------------------------------------------------
    def connect_failed(self, i, detail, now):
        """A connection could not be opened (or its connect failed)."""
        self._fail(self.links[i], CONN_ERROR, detail, C_CONNECT_ERRORS, True, now)

    def tls_failed(self, i, detail, now):
        """The TLS handshake (or a record) failed; ``detail`` is OpenSSL's reason."""
        self._fail(self.links[i], TLS_ERROR, detail, C_CONNECT_ERRORS, True, now)

    def sentinel_failed(self, i, detail, now):
        """A Sentinel master could not be resolved (no sentinel answered, unknown service)."""
        self._fail(self.links[i], SENTINEL_ERROR, detail, C_CONNECT_ERRORS, True, now)

    def resolved(self, i, address, age_ms, now):
        """The sentinels named ``address`` (``(host, port)``) for master ``i``, which took the
        master role ``age_ms`` ago by their account (-1: unknown); the twin connects there next."""
        sentinel_resolved(self.links[i].clock, address, age_ms, now)

    def blocked(self, i, spent):
        """The twin spent ``spent`` seconds asking master ``i``'s sentinels (a blocking exchange
        before its connect). The other masters' deadlines in this round move by as much: their
        replies waited for the twin, not the twin for them (a NOSCRIPT answered with EVAL, a
        handshake, still need their round trip). Validity still counts that time."""
        if not self.in_round:
            return
        self.io_deadline += spent
        for link in self.links:
            if link.index != i and link.polled:
                link.deadline += spent

    def io_failed(self, i, detail, stale, now):
        """send/recv failed (``stale``: EPIPE, ECONNRESET and the like), or the master closed the
        connection (``stale`` too). A reused connection that breaks before any reply is stale:
        it is reopened and the commands resent once; otherwise the master failed."""
        link = cython.cast(Link, self.links[i])
        if stale and link.waiting() and link.reused and not link.retried and not link.got_data:
            link.retried = True
            link.request_close()
            link.drop_owed(CONN_ERROR, "connection broke before the reply")
            self.health.count(link.master, C_CONNECTION_ERRORS)
            self._start(link, self.io_deadline + self.connect_timeout)
        else:
            self._fail(link, CONN_ERROR, detail, C_CONNECTION_ERRORS, False, now)

    def received(self, i, data, start, end, now):
        """Bytes read (``data[start:end]``): pass them through the reply guard. Returns ``end`` if
        it let them all through; else where the last whole reply before the first bad byte ends:
        the twin hands the replies before it on, then calls :meth:`refused` (the link is closed).
        So a reply counts alike whether the bad bytes after it came in the same read or the next.
        Every byte read goes through it, except the exact expected replies a twin's fast parser
        recognized at the front of a read on a clean connection: those are well-formed by
        definition and leave the guard where it was, between replies."""
        guard = self.links[i].guard
        if guard.check(data, start, end) is None:
            return end
        return guard.good

    def refused(self, i, now):
        """The guard refused what link ``i`` read (after the replies :meth:`received` let by)."""
        link = cython.cast(Link, self.links[i])
        self._fail(link, PROTOCOL_ERROR, link.guard.problem, C_PROTOCOL_ERRORS, False, now)

    def parse_failed(self, i, detail, now):
        """The twin's parser refused the bytes (hiredis.ProtocolError and the like)."""
        self._fail(self.links[i], PROTOCOL_ERROR, detail, C_PROTOCOL_ERRORS, False, now)

    def next_kind(self, i):
        """The kind of the next reply this link expects with a clean reader, or -1 (the twin's fast
        parser may settle it; not while the handshake is answered)."""
        return self._next_kind(cython.cast(Link, self.links[i]))

    def _next_kind(self, link):
        if link.skip >= 0 or link.preloads > 0 or link.probes > 0 or link.half:
            return -1  # (half: the second reply of a native release's pair, read by reply())
        if link.owed:
            entry = link.owed[0]
            return entry.kind
        if link.waiting():
            if link.cmds is not None and link.cmds[link.next_cmd()] < 0:
                return -1  # an ASKING's reply: parsed and dropped by reply()
            return self._kind_next(link)  # (a requeued command: its EVAL, or the waiters' work)
        return -1

    def partial(self, i):
        """The twin's reader holds part of a reply: if it is one of this round's, the master spoke."""
        self._partial(cython.cast(Link, self.links[i]))

    def _partial(self, link):
        if not link.owed:
            link.got_data = True

    def drained(self, i, leftover, now):
        """The twin's reader has no complete reply left. ``leftover``: it still holds bytes."""
        self._drained(cython.cast(Link, self.links[i]), leftover, now)

    def _drained(self, link, leftover, now):
        if link.expecting() or link.skip >= 0:
            if leftover:
                self._partial(link)
        elif leftover:
            self._fail(link, PROTOCOL_ERROR, "unexpected bytes after the last reply", C_PROTOCOL_ERRORS, False, now)
        else:
            if self.in_round and self.k and link.polled:
                self.health.timed(link.master, now - self.started)
            link.polled = False

    def reply(self, i, reply, error, now):
        """One reply parsed by the twin (``error``: an error reply's message, ``reply`` unused).

        Returns False if it closed the link. May queue bytes in ``link.out`` (the commands after a
        completed handshake, or EVAL after NOSCRIPT).
        """
        link = cython.cast(Link, self.links[i])
        if link.skip >= 0:
            link.got_data = True
            kind = link.hello_kinds[link.skip]
            problem = hello_reply(link.clock, kind, reply, error, now)
            if problem is not None:
                if kind >= HELLO_ROLE and error is None and link.cmds is not None:  # a replica now
                    self._map_failed(link.master, now)
                    self._fail(link, ERROR_REPLY, problem, C_ERROR_REPLIES, False, now)
                elif kind >= HELLO_ROLE and error is None:  # the sentinels named a server that is no master
                    self._fail(link, SENTINEL_ERROR, problem, C_CONNECT_ERRORS, True, now)
                else:
                    self._fail(link, ERROR_REPLY, problem, C_ERROR_REPLIES, False, now)
                return False
            link.skip += 1
            if link.skip == len(link.hello_kinds):
                link.skip = -1
                if link.gated:
                    if link.ungated():
                        self._ungate(link, now)
                else:
                    link.out = link.preloaded(link.payload)
            return True
        if link.preloads > 0:
            # A SCRIPT LOAD's answer (a refusal, by an ACL, costs only the EVAL fallback; one that
            # says scripts are refused to this user makes the link send none). Like an owed reply
            # it is no answer of this round: got_data stays (a stale connection that fails next
            # is still retried).
            link.preloads -= 1
            if error is not None:
                link.load_failed = True
            if link.preloads == 0:
                link.loaded = not link.load_failed
            if link.ungated():
                self._ungate(link, now)
            return True
        if link.probes > 0:
            # A probe's answer (:mod:`.handshake`): a capability, or none; the script probe's:
            # whether this user may run scripts at all.
            n = link.probes_written() - link.probes
            link.probes -= 1
            if n < PROBES:
                cap = probe_answer(n, reply, error)
                if cap:
                    link.caps |= cap
                    self.caps_seen = True
                    self.caps_any |= cap
            elif error is not None and refuses_scripts(error) and not link.noscripts:
                link.noscripts = True
                link.noscripts_why = error[:160]
            if link.ungated():
                self._ungate(link, now)
            return True
        if link.owed:
            return self._owed_reply(link, reply, error, now)
        if not link.waiting():
            self._fail(link, PROTOCOL_ERROR, "unexpected bytes after the last reply", C_PROTOCOL_ERRORS, False, now)
            return False
        link.got_data = True  # (owed replies do not count: they only say the master was alive)
        if link.cmds is not None and link.cmds[link.next_cmd()] < 0:
            link.pop_cmd()  # ASKING's +OK (or its error: the command after it answers for itself)
            return True
        if link.head < link.end:
            if link.kind == KIND_NATIVE_DEL:
                # A native release: the delete's reply, then its wake mark's (read as one answer).
                pair = self._pair(link, reply, error)
                if pair is None:
                    return True
                mark, reply, error = pair
                if mark < 0:
                    return self._settle_cmd(link, PROTOCOL_ERROR, unexpected(reply), None, now)
                if error is None and mark == 1 and reply == 1:
                    # Deleted, and waiters marked the name: their work follows, and its answer
                    # is this release's (see handshake.native_releases).
                    j = link.pop_cmd()
                    link.requeue(j)
                    if link.waking is None:
                        link.waking = [j]
                    else:
                        link.waking.append(j)
                    link.out += wake_after(self.native[0][3][j], link.use_eval)
                    return True
        elif link.waking is not None and link.next_cmd() in link.waking:
            # The waiters' work after a native release: the key was deleted already; an error
            # (a flushed script cache, an ACL) only means nobody was woken by it.
            if error is not None:
                if is_noscript(error):
                    link.use_eval = True
                return self._settle_cmd(link, OK, None, None, now)
            code, detail, value = classify(KIND_SCRIPT, reply)
            return self._settle_cmd(link, OK if code == NO else code, detail, value, now)
        if error is not None:
            if link.native and link.head < link.end and is_unsupported(error) and link.fallback_sent < self.k:
                # The native form is not there after all (renamed, refused by an ACL changed
                # since the probe): this command, and this link from now on, use the script.
                link.caps = 0
                j = link.pop_cmd()
                link.fallback_sent += 1
                link.requeue(j)
                link.out += self._fallback_payload()[j]
                return True
            if self.make_fallbacks is not None and is_noscript(error) and link.fallback_sent < self.k:
                # The script cache is empty (a restart or SCRIPT FLUSH): send the script itself.
                link.loaded = False
                j = link.pop_cmd()
                link.fallback_sent += 1
                if link.cmds is not None:
                    requeue_asking(link, j)  # if it came by -ASK, ASKING goes first again
                link.requeue(j)
                link.out += self._fallback_payload()[_cmd(link, j)]
                return True
            if link.cmds is not None:
                moved = self.routing.redirect(link, error, self.wait, self.io_deadline, self.connect_timeout, now)
                if moved > 0:
                    self.redirected = True  # the twin serves the node links it went to
                    return True
                if moved < 0:
                    self.maps_stale = True
            if link.spec.sentinel is not None and asks_again(error):
                # Demoted (READONLY) or restarting (LOADING): ask the sentinels at the next connect.
                self._fail(link, ERROR_REPLY, error, C_ERROR_REPLIES, False, now)
                return False
            return self._settle_cmd(link, ERROR_REPLY, error, None, now)
        if self.kind == KIND_BITS:
            codes = bits(reply, self.rows)
            if codes is None:
                return self._settle_cmd(link, PROTOCOL_ERROR, unexpected(reply), None, now)
            link.pop_cmd()
            self.health.answered(link.master)
            for row in range(self.rows):
                self._record(row, link.master, codes[row], None, None)
            return True
        code, detail, value = classify(link.kind if link.head < link.end else self.kind, reply)
        return self._settle_cmd(link, code, detail, value, now)

    def _pair(self, link, reply, error):
        """A reply of a native release's pair (the delete's, then ``EXISTS`` of its wake mark),
        in a round or owed. The first is kept: None. The second joins it: ``(mark, reply,
        error)``, the delete's ``reply`` / ``error`` and the mark: 1 there, 0 not (or refused: an
        ACL whose key patterns leave out the mark only loses the waking), -1 a reply of the wrong
        shape."""
        if not link.half:
            link.half = True
            link.half_reply = reply
            link.half_error = error
            return None
        link.half = False
        if error is not None:
            mark = 0
        elif type(reply) is int and (reply == 0 or reply == 1):
            mark = reply
        else:
            mark = -1
        pair = (mark, link.half_reply, link.half_error)
        link.half_reply = link.half_error = None
        return pair

    def answer(self, i, code, detail, value, now):
        """The next reply on link ``i`` (owed, or this round's) was read by the twin's fast parser
        as ``code`` (OK or NO, with a fence ``value``). Returns False if it closed the link."""
        return self._answer(cython.cast(Link, self.links[i]), code, detail, value, now)

    def _answer(self, link, code, detail, value, now):
        if link.owed:
            return self._owed_answer(link, code, detail, value, now)
        link.got_data = True
        return self._settle_cmd(link, code, detail, value, now)

    def answer_last(self, i, code, value, now):
        """:meth:`answer` (no detail), then :meth:`drained` with nothing left over, in one call: the
        last reply of a read, settled by the twin's fast parser. Returns False if it closed the
        link (then not drained, as the twin does not call drained after such an answer)."""
        return self._answer_last(cython.cast(Link, self.links[i]), code, value, now)

    def _answer_last(self, link, code, value, now):
        if not self._answer(link, code, None, value, now):
            return False
        self._drained(link, False, now)
        return True

    def answer_head(self, link, code, value, last, now):
        """The C twin's fast parser read ``link``'s next reply as ``code`` (OK or NO, with a fence
        ``value`` or None) where it is the usual one: this round's command at the head of the
        queue (``link.head < link.end``), no node commands (``cmds`` None), past the handshake,
        SCRIPT LOADs and probes, nothing owed, not the second of a native release's pair (link.pxd's
        ``_head_kind``). :meth:`_answer`, then, if ``last`` (the read's last reply), :meth:`_drained`
        with nothing left over, in one call. Such an answer never closes the link."""
        i = link.master
        j = link.head
        link.head = j + 1  # (pop_cmd)
        link.got_data = True
        detail = None
        if self.acquisition and self._voting_says(link, code, link.retried, now):
            code, detail = link.clock.acquisition_outcome(code, detail, link.retried, now, self.restart_grace_ms)
        if last and link.head >= link.end and link.requeued is None:  # drained: every command answered
            if self.in_round and self.k and link.polled:
                self.health.answered_timed(i, now - self.started)
            else:
                self.health.answered(i)
            link.polled = False
        else:
            self.health.answered(i)
        if self.kind == KIND_BITS:
            self._record_cmd(j, i, code, detail)
        else:
            self._record(j, i, code, detail, value)
        self._stamp(now)

    def _voting_says(self, link, code, retried, now):
        """Whether restart-aware voting has a say in this answer to an acquisition on ``link``: an
        OK from a master not trusted yet, or a NO to a SET sent again (``retried``); its
        ``acquisition_outcome`` then gives the outcome."""
        return (code == OK and link.clock.untrusted(now, self.restart_grace_ms)) or (code == NO and retried)

    def _settle_cmd(self, link, code, detail, value, now):
        """Record the answer to this round's next command on ``link``; False if it closed the link."""
        i = link.master
        j = link.pop_cmd()
        if link.cmds is not None:
            j = link.cmds[j]
        if self.acquisition and self._voting_says(link, code, link.retried, now):
            code, detail = link.clock.acquisition_outcome(code, detail, link.retried, now, self.restart_grace_ms)
        if code == PROTOCOL_ERROR:
            # A reply of the wrong shape: the connection is out of step with its requests.
            self._record_cmd(j, i, code, detail)
            self._fail(link, code, detail, C_PROTOCOL_ERRORS, False, now)
            return False
        if code == ERROR_REPLY:
            self.health.count(i, C_ERROR_REPLIES)
        self.health.answered(i)
        if self.kind == KIND_BITS:
            self._record_cmd(j, i, code, detail)  # an error reply: the same for every key
        else:
            self._record(j, i, code, detail, value)
        self._stamp(now)
        return True

    def _owed_reply(self, link, reply, error, now):
        """Settle the oldest owed reply with one parsed reply; False if it closed the link."""
        entry = link.owed[0]
        if entry.kind == KIND_NATIVE_DEL:
            # A native release's pair (see reply): the delete's answer, then its wake mark's.
            pair = self._pair(link, reply, error)
            if pair is None:
                return True
            mark, reply, error = pair
            if mark < 0:
                return self._owed_answer(link, PROTOCOL_ERROR, unexpected(reply), None, now)
            if error is None and mark == 1 and reply == 1 and not entry.expired and entry.key is not None:
                # Deleted, and waiters marked the name: their work follows (behind this round's
                # commands if one is in flight here), and its answer is this release's.
                del link.owed[0]
                wake = Owed.__new__(Owed)
                wake.key = None
                wake.kind = KIND_WAKE
                wake.deadline = now + self.io_timeout
                wake.sink = entry.sink
                wake.retried = entry.retried
                wake.expired = False
                cmd = wake_after(entry.key, link.use_eval)
                if self.in_round and link.waiting():
                    if link.after is None:
                        link.after = [(cmd, wake)]
                    else:
                        link.after.append((cmd, wake))
                else:
                    link.out += cmd
                    link.owed.append(wake)
                return True
        elif entry.kind == KIND_WAKE:
            if error is not None:
                if is_noscript(error):
                    link.use_eval = True
                return self._owed_answer(link, OK, None, None, now)
            code, detail, value = classify(KIND_SCRIPT, reply)
            return self._owed_answer(link, OK if code == NO else code, detail, value, now)
        if error is not None:
            # No EVAL fallback here: the round that sent it has returned (its outcome says so; an
            # acquisition must not land after its own cleanup). The next script round sends EVAL.
            if is_noscript(error):
                link.use_eval = True
                link.loaded = False  # the cache was flushed: EVAL from now on where nobody waits
            elif link.caps and is_unsupported(error):
                link.caps = 0  # a native form sent behind a round that returned: scripts from now on
            elif link.spec.sentinel is not None and asks_again(error):
                self._owed_answer(link, ERROR_REPLY, error, None, now)
                self._fail(link, ERROR_REPLY, error, C_ERROR_REPLIES, False, now)
                return False
            return self._owed_answer(link, ERROR_REPLY, error, None, now)
        if entry.kind == KIND_BITS:
            sink = entry.sink
            rows = len(sink) if isinstance(sink, list) else len(reply) if isinstance(reply, bytes) else 0
            codes = bits(reply, rows)
            if codes is None:
                return self._owed_answer(link, PROTOCOL_ERROR, unexpected(reply), None, now)
            del link.owed[0]
            if entry.expired:
                self.health.count(link.master, C_LATE)
                return True
            self.health.answered(link.master)
            if sink is not None:
                for row in range(len(sink)):
                    set_outcome(sink[row], link.master, codes[row], None, None)
            return True
        code, detail, value = classify(entry.kind, reply)
        return self._owed_answer(link, code, detail, value, now)

    def _owed_answer(self, link, code, detail, value, now):
        owed = link.owed
        entry = owed[0]
        del owed[0]  # compiled: a C call (pop(0) is a method call)
        i = link.master
        if is_acquisition(entry.kind) and self._voting_says(link, code, entry.retried, now):
            code, detail = link.clock.acquisition_outcome(code, detail, entry.retried, now, self.restart_grace_ms)
        if code == PROTOCOL_ERROR:
            settle_sink(entry.sink, i, code, detail, None)
            self._fail(link, code, detail, C_PROTOCOL_ERRORS, False, now)
            return False
        if entry.expired:
            self.health.count(i, C_LATE)
            return True
        self.health.answered(i)
        if code == ERROR_REPLY:
            self.health.count(i, C_ERROR_REPLIES)
        settle_sink(entry.sink, i, code, detail, value)
        return True

    # --- failures and deadlines ---------------------------------------------------------------
    def _fail(self, link, code, detail, counter, strike, now):
        """Close this master's connection; every reply it still owes or has not sent gets ``code``."""
        link.request_close()
        while link.waiting():
            j = _cmd(link, link.pop_cmd())
            if j >= 0:
                self._record_cmd(j, link.master, code, detail)
        link.drop_owed(code, detail)
        if link.cmds is not None and code != ERROR_REPLY:
            self._map_failed(link.master, now)  # a node failed: has its slot moved?
        self.health.failed(link.master, counter, what(code, detail), now, strike)
        self._stamp(now)

    def _timeout(self, link, now):
        """The master's deadline passed. Keep a connection that carries all our commands open."""
        if link.unsent():
            # Not all of this round's commands went out: nothing would keep their order; drop it.
            self._fail(link, TIMEOUT, None, C_TIMEOUTS, True, now)
            return
        link.polled = False
        link.expire(now, True)
        while link.waiting():
            kind = self._kind_next(link)
            j = _cmd(link, link.pop_cmd())
            if j >= 0:
                self._record_cmd(j, link.master, TIMEOUT, None)
            link.owe(kind if j >= 0 else KIND_SET, link.deadline, None, True)
        self.health.failed(link.master, C_TIMEOUTS, "timeout", now, True)
        self._stamp(now)

    def tidy(self, i, now):
        """After a round or while settling, and after reading what arrived: expire owed replies
        past their deadline, and close a connection that owes too much or too long."""
        self._tidy_link(cython.cast(Link, self.links[i]), now, True)

    def _tidy_link(self, link, now, due):
        """:meth:`tidy`; ``due`` False: no owed reply is past its deadline (nothing to expire)."""
        if due and link.expire(now, False):
            self.health.failed(link.master, C_TIMEOUTS, "timeout", now, True)
        if link.stale(now):
            link.drop_owed(TIMEOUT, None)
            link.request_close()

    def close(self):
        """Every connection is being closed: the replies they owe will never come."""
        for link in self.links:
            link.drop_owed(CONN_ERROR, "the connection was closed before the reply")
            link.request_close()

    # --- state -----------------------------------------------------------------------------------
    def owed(self):
        """How many replies the connections still owe to rounds that already returned."""
        count = 0
        for link in self.links:
            count += len(link.owed)
        return count

    def pending(self):
        """How many of those would still fill in a PENDING outcome (not yet past their deadline)."""
        count = 0
        for link in self.links:
            count += link.pending()
        return count

    def first_owed_deadline(self):
        """The earliest deadline of an owed reply someone waits for, or -1.0 (settling is over)."""
        first = -1.0
        for link in self.links:
            d = link.first_owed_deadline()
            if d >= 0.0 and (first < 0.0 or d < first):
                first = d
        return first

    def settle_wait(self, end):
        """Settling (reading what earlier rounds are owed): poll the links that owe replies; return
        when to stop waiting (the earliest owed deadline, or ``end`` if sooner and not -1.0), or
        -1.0 when nobody waits for a reply any more."""
        first = self.first_owed_deadline()
        if first < 0.0:
            self.settle_done()
            return -1.0
        for link in self.links:
            link.polled = link.open and bool(link.owed)
        return first if end < 0.0 or first < end else end

    def settle_done(self):
        """Settling is over: no link is polled."""
        for link in self.links:
            link.polled = False

    def owing(self):
        """Whether some link owes replies (only then may :meth:`tidy_owed` find anything to do)."""
        links = self.links
        for idx in range(len(links)):  # (indexed: one reference taken per link, compiled)
            link = cython.cast(Link, links[idx])  # (unchecked when compiled: links holds Links only)
            if link.owed:
                return True
        return False

    def tidy_owed(self, now):
        """:meth:`tidy` every link that owes replies, but those whose owed replies are overdue at
        ``now`` on an open connection: their indices are returned (None: there are none, almost
        always); the twin reads what already arrived on them (a reply in their socket is not
        late), then calls :meth:`tidy` for each."""
        due = None
        links = self.links
        for idx in range(len(links)):  # (indexed: one reference taken per link, compiled)
            link = cython.cast(Link, links[idx])  # (unchecked when compiled: links holds Links only)
            if not link.owed:
                continue
            overdue = link.overdue(now)
            if overdue and link.open:
                if due is None:
                    due = [link.index]
                else:
                    due.append(link.index)
            else:
                self._tidy_link(link, now, overdue)
        return due

    def master_states(self):
        """Per master: ``(run_id, up_since, restarts seen)`` as learned by restart-aware voting."""
        states = []
        for link in self.links[:self.n]:
            states.append(link.clock.state())
        return states
