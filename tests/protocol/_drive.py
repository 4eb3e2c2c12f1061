"""A sans-I/O twin for the tables: plays the I/O twin's part against a protocol ``Session``.

Every open a link requests succeeds at once and every write is sent whole (``link.out = b""``,
``link.opening = False``); what a link asked for is kept in :attr:`Drive.written`, :attr:`Drive.opened`
and :attr:`Drive.closed`. Replies, failures and deadlines are fed at the times a case gives. This is
the one place that calls the Session's methods, so a change of their signatures is fixed here.
"""
from __future__ import annotations

from fastredlock.io.masters import parse_master

#: The replies a master gives, per command kind: what "ok" and "no" look like on the wire.
WORDS = {
    0: {"ok": b"OK", "no": None},  # KIND_SET
    1: {"ok": 1, "no": 0},  # KIND_SCRIPT
    2: {"ok": 7, "no": -1},  # KIND_FENCED (fence counter 7)
    3: {"ok": 1, "no": 0},  # KIND_SCRIPT_ACQUIRE
}


def specs(n, url="redis://127.0.0.1:%d"):
    """``n`` master specs (parsed, never connected to)."""
    return [parse_master(url % (7000 + i) if "%d" in url else url) for i in range(n)]


class Drive:
    """One Session driven by hand; ``now`` is whatever time the case says."""

    def __init__(self, proto, n=5, io_timeout=0.05, connect_timeout=0.1, drift_factor=0.01,
                 restart_aware=False, health=None, early=True, url="redis://127.0.0.1:%d"):
        self.proto = proto
        self.session = proto.session.Session(specs(n, url), io_timeout, connect_timeout, drift_factor,
                                             restart_aware, health, early)
        self.links = self.session.links
        self.n = n
        self.written = [b""] * n
        self.opened = [0] * n
        self.closed = [0] * n
        self.kind = 0

    # --- the twin's duties --------------------------------------------------------------------
    def sync(self):
        """Obey every link: close, open (it succeeds), write everything asked for."""
        for link in self.links:
            i = link.index
            if link.closing:
                link.closing = False
                self.closed[i] += 1
            if link.opening:
                link.opening = False
                link.connecting = False
                self.opened[i] += 1
            if link.out:
                self.written[i] += link.out
                link.out = b""

    def begin(self, kind=0, ttl_ms=1000, rows=1, k=1, wait=True, now=0.0, payload=None, fallbacks=None, native=None):
        """Begin a round of ``k`` commands for ``rows`` keys; ``fallbacks``: the EVAL forms (a script);
        ``native``: the round's native forms (``Session.begin``'s)."""
        self.kind = kind
        self.written = [b""] * self.n
        if payload is None:
            payload = b"".join(b"<cmd%d>" % j for j in range(k))
        make = None if fallbacks is None else (lambda: list(fallbacks))
        self.session.begin(kind, k, rows, payload, fallbacks is not None, make,
                           (ttl_ms,) * rows, wait, now, native)
        self.sync()

    def over(self):
        """Whether the twin would stop waiting (no deadline left to wait for)."""
        return self.session.next_deadline() < 0.0

    # --- what the masters do ------------------------------------------------------------------
    def reply(self, i, reply, now, error=None):
        """One reply, read alone (the twin then finds its reader drained)."""
        alive = self.session.reply(i, reply, error, now)
        if alive:
            self.session.drained(i, False, now)
        self.sync()
        return alive

    def say(self, i, word, now):
        """Master ``i`` answers ``"ok"`` or ``"no"`` in the current round's kind."""
        return self.reply(i, WORDS[self.kind][word], now)

    def error(self, i, message, now):
        return self.reply(i, None, now, error=message)

    def answer(self, i, code, now, value=None):
        """The twin's fast parser read OK or NO."""
        alive = self.session.answer(i, code, None, value, now)
        if alive:
            self.session.drained(i, False, now)
        self.sync()
        return alive

    def io_failed(self, i, now, stale=True, detail="connection reset"):
        self.session.io_failed(i, detail, stale, now)
        self.sync()

    def connect_failed(self, i, now, detail="connection refused"):
        self.session.connect_failed(i, detail, now)
        self.sync()

    def received(self, i, data, now):
        ok = self.session.received(i, data, 0, len(data), now) == len(data)
        if not ok:
            self.session.refused(i, now)
        self.sync()
        return ok

    def expire(self, now):
        self.session.expire_due(now)
        self.sync()

    def finish(self, now):
        rounds = self.session.finish(now)
        self.sync()
        return rounds

    def tidy(self, now):
        for i in range(self.n):
            self.session.tidy(i, now)
        self.sync()

    # --- a whole round from a script of events ----------------------------------------------------
    def play(self, events, end=None):
        """Feed ``events`` (``(i, "ok"|"no", t)``, ``(i, "err:<message>", t)``, ``(None, "expire", t)``)
        until the round is over, then finish it. Returns ``(rounds, fed, t)``: how many events were
        fed and the time it returned. ``end``: finish at this time if the events run out first."""
        fed, t = 0, 0.0
        for i, what, when in events:
            if self.over():
                break
            fed, t = fed + 1, when
            if what == "expire":
                self.expire(when)
            elif what.startswith("err:"):
                self.error(i, what[4:], when)
            else:
                self.say(i, what, when)
        if not self.over() and end is not None:
            t = end
        return self.finish(t), fed, t
