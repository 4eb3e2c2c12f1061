"""What a core does around its I/O, written once for both twins: the round's drive and the stepped API.

A core (:mod:`fastredlock.io.core_c` in C, :mod:`fastredlock.io.core_py` in Python) is a
:class:`Driver` that adds the I/O: sockets, ``poll``, parsing. Everything else a core does is
here, in terms of a handful of I/O methods each twin provides:

* :meth:`Driver.carry_out` (close, open, write what link ``i`` asks for), :meth:`Driver.receive`
  (read what arrived on link ``i``, non-blocking, and hand it to the session),
  :meth:`Driver.serve` (its socket is readable and/or writable), :meth:`Driver.wait_and_serve`
  (wait until a polled socket is ready, or a time passed, and serve it), :meth:`Driver.is_open`,
  :meth:`Driver.writing`, :meth:`Driver.asks_sentinels`, :meth:`Driver.refresh_routes`, the
  clock (:meth:`Driver.clock`) and the rounds of a script or of reads encoded the twin's way
  (:meth:`Driver.run_script`, :meth:`Driver.run_reads`);
* the replies a reader parsed, handed to the session one by one (:meth:`Driver.hand_replies`);
  the operations whose commands both twins build alike (``release_signal``, ``acquire_all``,
  ``script``, ``inspect``, ``reads``);
* the round (:meth:`Driver.run_round`): begin it in the session, send its commands (Sentinel
  masters last), then until the session says it is over, serve the redirected node links, wait
  for the next deadline and serve what is ready; finish it and tidy the owed replies;
* the same round driven by the caller's event loop (:meth:`~Driver.start`, :meth:`~Driver.watched`,
  :meth:`~Driver.ready`, :meth:`~Driver.overdue`, :meth:`~Driver.finish`), settling owed replies
  between rounds (:meth:`~Driver.settle`, :meth:`~Driver.tidy`) and the settings and state a core
  exposes.

Nothing here does I/O or reads a clock (both are the twin's); the C build compiles this module
(``driver.pxd``), so the C twin calls it and is called back as C, through the virtual methods.
"""
try:
    import cython  # (compiled: unchecked casts of the links; interpreted, a cast is the value itself)
except ImportError:  # pragma: no cover - a pure install without Cython
    from ._nocython import cython

from .link import Link
from .plans import inspect_args
from .replies import KIND_SCRIPT, KIND_SCRIPT_ACQUIRE
from .scripts import ACQUIRE_ALL, ACQUIRE_ALL_SHA, RELEASE_SIGNAL, RELEASE_SIGNAL_SHA
from .session import PACE_EXPIRED, Session

#: :meth:`Driver.ready`'s answer bits: the round is over; the watch list changed or a socket waits
#: to be written; no round is in progress.
READY_OVER, READY_WATCH, READY_IDLE = 1, 2, 4

_PACE_EXPIRED = PACE_EXPIRED  # a C double when compiled


class Driver:
    """N links driven by one protocol :class:`~.session.Session`, and everything a core does but
    its I/O (which a subclass, an I/O twin, provides). Not thread-safe."""

    def __init__(self, masters, io_timeout, connect_timeout, drift_factor, restart_aware=False,
                 health=None, early=True):
        self._session = Session(masters, io_timeout, connect_timeout, drift_factor, restart_aware,
                                health, early, True)
        self._links = self._session.links
        self.n = self._session.n
        self.quorum = self._session.quorum
        self.restart_aware = bool(restart_aware)
        self._grace = 0
        #: Some master is a Sentinel one (a round then writes to it last: see :meth:`_send_round`);
        #: the twin sets it once it knows its links.
        self._sentinels = False
        self._stepped = False  # start(): begin the round and return; the caller drives it
        self._opened = 0       # sockets opened or closed so far (the caller's watch list changes)
        self._seen = 0         # _opened when watched() last told the caller
        #: The twin's last wait found a socket ready: its next wait looks without blocking first
        #: (the C twin keeps the GIL for that look). False as a round's commands are sent.
        self._warm = False
        #: ``on_close(i, fd)``: called before master ``i``'s socket is closed (an event loop that
        #: watches the fd must forget it first: a closed fd's number is reused at once).
        self.on_close = None

    def no_scripts(self):
        """Send no scripts from now on (the client's ``scripts=False``; see
        :meth:`.session.Session.no_scripts`). Call before the first round."""
        self._session.no_scripts()

    # --- the I/O, provided by the twin ------------------------------------------------------------
    def clock(self):
        """The clock of the deadlines (monotonic seconds)."""
        raise NotImplementedError

    def carry_out(self, i):
        """Carry out what link ``i`` asks for: close its socket, open one, write its ``out``."""
        raise NotImplementedError

    def receive(self, i):
        """Read what arrived on link ``i``'s open socket (non-blocking); hand it to the session."""
        raise NotImplementedError

    def serve(self, i, readable, writable):
        """Link ``i``'s open socket can be written and/or read: finish a connect, write, read."""
        raise NotImplementedError

    def wait_and_serve(self, wait_ms):
        """Wait until a polled link's socket can be written or read (or ``wait_ms`` passed) and
        serve it."""
        raise NotImplementedError

    def is_open(self, i):
        """Whether link ``i`` has a socket."""
        raise NotImplementedError

    def writing(self):
        """The links whose open socket the round waits to write to (a connect, bytes not taken
        yet), as a tuple: empty almost always."""
        raise NotImplementedError

    def any_writing(self):
        """Whether some link's open socket waits to be written to (``writing()`` is not empty);
        a twin may answer without building the tuple."""
        return len(self.writing()) != 0

    def asks_sentinels(self, i):
        """Whether link ``i`` asks its sentinels where its master is before it connects."""
        raise NotImplementedError

    def refresh_routes(self, now):
        """Ask the clusters whose slot map is due (none, almost always) for it again."""
        raise NotImplementedError

    def run_script(self, kind, sha, script, args, ttl_ms, wait):
        """A round of ``EVALSHA sha *args`` (``EVAL script`` where a master lacks it): see :meth:`script`."""
        raise NotImplementedError

    def run_reads(self, commands):
        """A round of read commands (argument tuples of bytes) that writes nothing: one Round each."""
        raise NotImplementedError

    # --- operations whose commands are the same for both twins -----------------------------------
    def release_signal(self, key, signal, token, signal_ms):
        """Owner-checked delete that also pushes to the list ``signal`` (lasting ``signal_ms``) where
        it deleted, in the same script (``RELEASE_SIGNAL``): waiters in ``BLPOP signal`` wake."""
        args = (b"2", key, signal, token, b"%d" % signal_ms)
        return self.run_script(KIND_SCRIPT, RELEASE_SIGNAL_SHA, RELEASE_SIGNAL, args, 0, True)

    def acquire_all(self, keys, token, ttl_ms):
        """Set every key to ``token`` on each master, or none of them there (one script per master)."""
        args = (b"%d" % len(keys), *keys, token, b"%d" % ttl_ms)
        return self.run_script(KIND_SCRIPT_ACQUIRE, ACQUIRE_ALL_SHA, ACQUIRE_ALL, args, ttl_ms, True)

    def script(self, kind, sha, script, args, ttl_ms=0, wait=True):
        """``EVALSHA sha *args`` on all masters in one round (``EVAL script`` where a master lacks
        it), its replies read as ``kind`` says (:mod:`.replies`); ``ttl_ms``: the validity an
        acquisition or extension earns (0: none). ``wait=False``: written, not waited for (every
        outcome PENDING), as for ``release_many_nowait``."""
        return self.run_script(kind, sha, script, args, ttl_ms, wait)

    def inspect(self, keys, fence_keys):
        """Read each key's value and PTTL and its fence counter on all masters, in one round that
        writes nothing: the commands of :func:`~.plans.inspect_args`, one Round each."""
        return self.run_reads(inspect_args(keys, fence_keys))

    def reads(self, commands):
        """Plain read commands (argument tuples of bytes, e.g. ``(b"HGET", key, b"owner")``) on
        all masters, in one round that writes nothing: one Round each, as for :meth:`inspect`."""
        return self.run_reads(commands)

    def hand_replies(self, i, reader, reply_error, now):
        """Hand the replies complete in ``reader`` (fed what link ``i`` read) to the session, one
        by one, carrying out what the link asks after each (``reply_error``: the reader's error
        reply type). Returns False if the link failed or was closed meanwhile."""
        session = self._session
        link = self._links[i]
        while link.expecting():
            try:
                reply = reader.gets()
            except Exception as exc:  # hiredis.ProtocolError, or MemoryError on absurd headers
                session.parse_failed(i, f"{type(exc).__name__}: {exc}", now)
                self.carry_out(i)
                return False
            if reply is False:
                break
            if isinstance(reply, reply_error):
                alive = session.reply(i, None, str(reply), now)
            else:
                alive = session.reply(i, reply, None, now)
            self.carry_out(i)
            if not alive or not self.is_open(i):
                return False
        return True

    # --- the round ----------------------------------------------------------------------------------
    def run_round(self, kind, k, rows, payload, script, make_fallbacks, ttls_ms, wait, native):
        """Run ``k`` encoded commands (``payload``) on every master for ``rows`` keys (the
        arguments of :meth:`.session.Session.begin`): until the session says the round is over,
        wait and serve what is ready; return its Rounds, one per key. Under :meth:`start`, return
        once the commands are sent (``[None] * rows``): the caller drives the round."""
        if not self._drive(kind, k, rows, payload, script, make_fallbacks, ttls_ms, wait, native):
            return [None] * rows
        rounds = self._session.finish(self.clock())
        if self._session.left:  # (0, mostly: no link owes replies or asks for anything)
            self._tidy()
        return rounds

    def run_round1(self, kind, k, payload, script, make_fallbacks, ttl_ms, wait, native):
        """:meth:`run_round` for one key (``ttl_ms`` a tuple of one): its Round itself (None under
        :meth:`start`)."""
        if not self._drive(kind, k, 1, payload, script, make_fallbacks, ttl_ms, wait, native):
            return None
        rnd = self._session.finish_one(self.clock())
        if self._session.left:  # (0, mostly: no link owes replies or asks for anything)
            self._tidy()
        return rnd

    def _drive(self, kind, k, rows, payload, script, make_fallbacks, ttls_ms, wait, native):
        """Begin the round and send its commands; then, unless under :meth:`start` (returns
        False), wait and serve what is ready until the session says it is over."""
        session = self._session
        if session.maps_stale:
            self.refresh_routes(self.clock())
        session.begin(kind, k, rows, payload, script, make_fallbacks, ttls_ms, wait, self.clock(), native)
        self._send_round()
        if self._stepped:
            return False
        self._warm = False  # (no reply can be there yet: the first wait blocks at once)
        while True:
            if session.redirected:
                self._serve_redirected()
            first = session.next_deadline()
            if first < 0.0:  # PACE_OVER: the round is over
                break
            wait_ms = session.pace(first, self.clock())
            if wait_ms == _PACE_EXPIRED:
                self._carry_out_all()
                continue
            self.wait_and_serve(wait_ms)
        return True

    def _send_round(self):
        """Send the round's commands: carry out what every link asks for. Where some masters are
        Sentinel ones, the others' commands go out first, then the Sentinel masters that must
        connect ask their sentinels (a blocking exchange, up to connect_timeout) while the
        others' replies come in."""
        links = self._links
        if not self._sentinels:
            for i in range(len(links)):
                self.carry_out(i)
            return
        for i in range(len(links)):
            link = links[i]
            if not link.opening or not self.asks_sentinels(i):
                self.carry_out(i)
        for i in range(len(links)):
            link = links[i]
            if link.opening:
                self.carry_out(i)

    def _serve_redirected(self):
        """A cluster round: carry out what node links ask for that were not being served (a
        command redirected to a node opens or writes to it)."""
        links = self._links
        self._session.redirected = False
        for i in range(len(links)):
            link = links[i]
            if link.closing or link.opening or link.out:  # the link asks for something
                self.carry_out(i)

    def _carry_out_all(self):
        """Carry out what every link asks for."""
        for i in range(len(self._links)):
            self.carry_out(i)

    def _tidy(self):
        """Read what already arrived on the links whose owed replies are overdue, then let the
        session expire what is still missing; carry out what the links then ask for."""
        session = self._session
        links = self._links
        if session.owing():  # (replies the early decision did not wait for: nothing overdue yet, mostly)
            now = self.clock()
            due = session.tidy_owed(now)
            if due is not None:
                for i in due:
                    self.receive(i)  # non-blocking: whatever already arrived is not late
                for i in due:
                    session.tidy(i, now)
        for i in range(len(links)):
            link = cython.cast(Link, links[i])  # (unchecked when compiled)
            if link.closing or link.opening or link.out:  # the link asks for something
                self.carry_out(i)

    # --- rounds driven by the caller (asyncio: the event loop instead of poll) --------------------
    def start(self, op, *args):
        """Begin operation ``op`` (the name of one of the core's operations, with its arguments)
        and return at once: its commands are written, or queued where a socket does not take them
        yet. The caller then drives the round: it watches :meth:`watched`, reports readiness with
        :meth:`ready`, calls :meth:`overdue` once :meth:`next_deadline` has passed, and
        :meth:`finish` (which returns the operation's rounds) when ``next_deadline()`` is -1.0.
        """
        self.start_call(getattr(self, op), args)

    def start_call(self, method, args):
        """:meth:`start` with the operation as a bound method of this core and its arguments as a
        tuple: an event loop's driver looks each operation up once, not once per round."""
        if self._session.in_round:
            raise RuntimeError("this core is already running a round")
        self._stepped = True
        try:
            method(*args)
        finally:
            self._stepped = False

    def watched(self):
        """``(changes, writing)``: ``changes`` counts sockets opened or closed so far (when it
        moved, see ``fds()``); ``writing`` the masters whose socket the round waits to write to
        (a tuple, empty almost always: a send normally takes the whole round at once)."""
        writing = self.writing()
        self._seen = self._opened
        return self._opened, writing

    def ready(self, i, readable, writable):
        """Master ``i``'s socket is readable and/or writable (as the event loop saw it). Owed
        replies that arrive between rounds are read this way too.

        Returns what the caller must look at (0 almost always, so an event loop's callback stays
        short): ``READY_OVER`` (1) the round in progress is over; ``READY_WATCH`` (2) sockets were
        opened or closed since :meth:`watched`, or one waits to be written; ``READY_IDLE`` (4)
        no round is in progress (an owed reply was read).
        """
        session = self._session
        code = 0
        if self.is_open(i):
            self.serve(i, readable, writable)
        if session.redirected:
            self._serve_redirected()
        if not session.in_round:
            code |= READY_IDLE
        elif session.next_deadline() < 0.0:
            code |= READY_OVER
        if self._opened != self._seen or self.any_writing():
            code |= READY_WATCH
        return code

    def next_deadline(self):
        """When the round in progress must next be looked at (monotonic seconds), or -1.0: it is over."""
        return self._session.next_deadline()

    def sweep(self):
        """Read what already arrived on the sockets the round waits for (non-blocking): an event
        loop that saw one socket ready need not go round again for the others."""
        links = self._links
        for i in range(len(links)):
            link = links[i]
            if link.polled and self.is_open(i):
                self.receive(i)

    def overdue(self):
        """A deadline passed: read what already arrived on the round's sockets, then call late
        the masters still missing."""
        self.sweep()
        self._session.expire_due(self.clock())
        self._carry_out_all()

    def finish(self):
        """End the round begun by :meth:`start`: its rounds (a list, one per key)."""
        rounds = self._session.finish(self.clock())
        if self._session.left:  # (0, mostly: no link owes replies or asks for anything)
            self._tidy()
        return rounds

    def tidy(self):
        """Between rounds: expire owed replies past their deadline (reading what arrived first);
        close a connection that owes too much or too long."""
        self._tidy()

    def owed_deadline(self):
        """The earliest deadline of an owed reply someone waits for, or -1.0."""
        return self._session.first_owed_deadline()

    # --- outside rounds ------------------------------------------------------------------------------
    def settle(self, timeout=None, until=None):
        """Read the replies owed by earlier rounds until each arrived or its deadline passed.

        Their rounds' PENDING outcomes are filled in (TIMEOUT for a reply that missed its deadline).
        ``timeout`` bounds the wait (seconds); by default it is bounded by the owed deadlines.
        ``until``: a callable; return as soon as it returns true (checked before each wait).
        """
        session = self._session
        end = -1.0 if timeout is None else self.clock() + timeout
        try:
            while until is None or not until():
                due = session.settle_wait(end)
                if due < 0.0:
                    return
                now = self.clock()
                if due > now:
                    self.wait_and_serve((due - now) * 1000.0)
                    continue
                self._tidy()
                if 0.0 <= end <= now:
                    return
        finally:
            session.settle_done()

    def close(self):
        """Close every connection; the core reconnects lazily if used again."""
        if self._session is None:
            return
        self._session.close()
        self._carry_out_all()

    # --- settings and state --------------------------------------------------------------------
    @property
    def health(self):
        """The health of the masters, shared with the other cores of the client."""
        return self._session.health

    @property
    def early(self):
        """Whether acquisitions return as soon as every key is decided."""
        return self._session.early

    @property
    def restart_grace_ms(self):
        """An OK from a master up for less than this many milliseconds does not count (UNTRUSTED)."""
        return self._grace

    @restart_grace_ms.setter
    def restart_grace_ms(self, value):
        self._session.restart_grace_ms = float(value)
        self._grace = value

    def master_states(self):
        """Per master: ``(run_id, up_since, restarts seen)`` as learned by restart-aware voting."""
        return self._session.master_states()

    @property
    def owed(self):
        """How many replies the connections still owe to rounds that already returned."""
        return self._session.owed()

    @property
    def pending(self):
        """How many of those would still fill in a PENDING outcome (not yet past their deadline)."""
        return self._session.pending()
