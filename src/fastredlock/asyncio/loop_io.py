# cython: annotation_typing=False
"""One core driven by an asyncio event loop instead of ``poll(2)``.

The core (either I/O twin) does the socket work and the protocol decides; this module only tells
the loop what to watch and tells the core what the loop saw. A reader callback stays on every
open socket for as long as it is open, so owed replies that arrive between rounds are read when
they come (their rounds' outcomes are filled in); a writer callback is on only while a round waits
to write (a connect in progress, or bytes a full socket did not take); one timer stands for the
round's next deadline, and between rounds for the owed replies' first deadline. No thread, no
executor: every callback runs on the loop, non-blocking.

The task running a round awaits a :class:`_Run` (what :meth:`LoopCore.run` returns): no coroutine
frame between the caller's ``await`` and the loop, and no ``asyncio.Future`` either: the task
waits on the ``_Run`` itself, and when a loop callback (a reader, a writer, the timer) ends the
round, it resumes the task at once, inside the same loop iteration, instead of scheduling the
task's wake-up for the next one (``call_soon``): one loop iteration per round, as one ``poll(2)``
per round in the sync client.
"""
from __future__ import annotations

import asyncio
import select
from asyncio.selector_events import BaseSelectorEventLoop
from typing import Any, Dict, List, Optional, Set

from ..protocol.driver import Driver

try:  # the shadow module says whether this file runs compiled (it is absent from a pure install)
    import cython
    _BUILT = cython.compiled
except ImportError:  # pragma: no cover - pure install without Cython
    _BUILT = False


class _StopCheck:
    """Whether a result can leave a compiled ``__next__`` as :class:`_Run`'s does: set as the
    pending ``StopIteration`` by the C helper, then a bare ``raise StopIteration``, which this
    Cython compiles to a plain return that leaves the pending exception untouched. Another Cython
    might replace it (every await would then return ``None``): :func:`stop_keeps_result` runs this
    once at import, and where it fails ``_Run`` raises ``StopIteration(result)`` as Python does."""

    def __next__(self):  # (unannotated, as _Run.__next__)
        _stop(_STOP_MARK)
        raise StopIteration


_STOP_MARK = object()


def stop_keeps_result() -> bool:
    """True where the compiled ``__next__`` hands a result through the pending ``StopIteration``
    (see :class:`_StopCheck`); False interpreted."""
    if not _BUILT:
        return False
    try:
        next(_StopCheck())
    except StopIteration as stop:
        return stop.value is _STOP_MARK
    return False


#: Compiled, where the check passes: a round's result leaves ``__next__`` without a traceback.
_COMPILED = stop_keeps_result()


class _Run:
    """One core operation run on the loop, awaited by the task that asked for it (made by
    :meth:`LoopCore.run`): its own iterator, no coroutine frame in between. It is also what the
    task waits on while the round runs, a future-like object (the protocol asyncio's tasks accept
    from any awaitable: ``_asyncio_future_blocking``, ``get_loop``, ``add_done_callback``,
    ``cancel``, ``result``) that the loop callback ending the round resolves, resuming the waiting
    task at once (:meth:`resume` with ``direct``), in the task's own context.

    ``cancel()`` refuses (returns False): a round is not interrupted; the task is then marked to be
    cancelled and throws its ``CancelledError`` in when it resumes (the round is over then): the
    cancellation is held back (:meth:`LoopCore.take_cancelled`) and the rounds returned.

    ``then``: None, or ``then(run, rounds, exc)``, called once the operation's rounds are in
    (``exc`` None: its return value is the await's; it may :meth:`chain` another operation
    instead, awaited the same way, then is called again) or once it failed (``exc``: it tidies
    up; the error is raised after). ``held``: whatever ``then`` needs to keep meanwhile.
    """

    def __init__(self, lc: "LoopCore", op: str, args: tuple) -> None:
        self.setup(lc, op, args)

    def setup(self, lc: "LoopCore", op: str, args: tuple) -> None:
        """(Re)initialize: operation ``op`` with ``args`` on ``lc``, not started yet."""
        self._lc = lc
        self._loop = lc.loop
        self._asyncio_future_blocking = False
        self.over = False
        self._exc: Optional[BaseException] = None
        self._callback: Any = None  # the waiting task's wake-up, once it yielded this
        self._context: Any = None  # ... and the context to call it in
        self.op = op
        self.args = args
        self._state = 0  # 0: the operation is not started; 1: its round runs; 2: done
        self._result: Any = None
        self.cancelled_by: Optional[BaseException] = None  # a CancelledError held back
        self.then: Any = None
        self.held: Any = None

    def chain(self, op: str, args: tuple) -> None:
        """From ``then``: run operation ``op`` next, in the same await."""
        self.op = op
        self.args = args
        self._state = 0

    # --- asyncio's future protocol (what the task sees) ----------------------------------------
    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def done(self) -> bool:
        return self.over

    def cancelled(self) -> bool:
        return False

    def cancel(self, msg: Any = None) -> bool:
        return False  # the round runs to its end (the task remembers it must be cancelled)

    def result(self) -> None:
        if self._exc is not None:
            raise self._exc
        if not self.over:
            raise asyncio.InvalidStateError("the round is not over")

    def exception(self) -> Optional[BaseException]:
        return self._exc

    def add_done_callback(self, fn: Any, *, context: Any = None) -> None:
        if self.over:
            self._loop.call_soon(fn, self, context=context)
        else:
            self._callback = fn
            self._context = context

    def remove_done_callback(self, fn: Any) -> int:
        if self._callback is not None and self._callback == fn:
            self._callback = None
            self._context = None
            return 1
        return 0

    def end_with(self, exc: Optional[BaseException]) -> None:
        """Mark the round over (``exc``: it ended with that error); the first call counts."""
        if not self.over:
            self.over = True
            self._exc = exc

    def resume(self, direct: bool) -> None:
        """Resume the task waiting for this (once it is done): at once if ``direct`` (only from
        a loop callback, outside every task; the task may start its next round before this
        returns), else in the loop's next iteration."""
        fn = self._callback
        if fn is None or not self.over:
            return
        self._callback = None
        context = self._context
        self._context = None
        if not direct:
            self._loop.call_soon(fn, self, context=context)
        elif context is not None:
            context.run(fn, self)
        else:
            fn(self)

    # --- the awaitable (what the awaiting coroutine sees) ------------------------------------
    def __await__(self) -> Any:  # itself, as its own iterator (typed Any: it is no Generator)
        return self

    def __iter__(self) -> "_Run":
        return self

    def __next__(self):  # (unannotated: compiled, _stop is the C helper of loop_io.pxd)
        if self._step(None):
            return self
        result = self._result
        self._result = None
        if _COMPILED:
            _stop(result)  # StopIteration(result) set, no traceback: ...
            raise StopIteration  # ... compiled, a bare raise in __next__ returns with it as set
        raise StopIteration(result)

    def send(self, value: Any) -> "_Run":
        return self.__next__()  # type: ignore[no-any-return]

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> "_Run":
        if isinstance(typ, BaseException):
            exc = typ
        elif isinstance(val, BaseException):
            exc = val
        else:
            exc = typ() if val is None else typ(val)
        if self._step(exc):
            return self
        result = self._result
        self._result = None
        raise StopIteration(result)

    def close(self) -> None:
        """The awaiting coroutine is closed half-way: end the round as an error would."""
        if self._state == 1:
            self._state = 2
            self._lc.abort()
            then = self.then
            self.then = None
            if then is not None:
                then(self, None, GeneratorExit())

    def _step(self, thrown: Optional[BaseException]) -> bool:
        """Go on (``thrown``: what the awaiting task threw in): True while the round runs (yield
        this), False once the result is in (``_result``)."""
        try:
            return self._advance(thrown)
        except BaseException as exc:
            self._state = 2
            then = self.then
            self.then = None
            if then is not None:
                then(self, None, exc)
            raise

    def _advance(self, thrown: Optional[BaseException]) -> bool:
        """Go on: True while the round runs (yield this), False once the result is in."""
        lc = self._lc
        if self._state == 0:
            self._state = 1
            self.over = False
            lc.begin(self)
        elif self._state == 1:
            exc = thrown if thrown is not None else self._exc
            if exc is not None:
                self._exc = None
                if not isinstance(exc, asyncio.CancelledError):
                    lc.abort()  # end the round (what was not answered stays owed), close the links
                    raise exc
                if lc.closed:
                    lc.abort()
                    raise RuntimeError("this Redlock client was closed during the round") from exc
                self.cancelled_by = exc  # the round runs to its end; the cancellation is raised after
        else:
            raise RuntimeError("cannot reuse an awaited round")
        while True:
            if not self.over:
                self._asyncio_future_blocking = True
                return True
            rounds = lc.end(self)
            then = self.then
            if then is None:
                self._result = rounds
                self._state = 2
                return False
            self.then = None
            self._result = then(self, rounds, None)
            if self._state != 0:
                self._state = 2
                return False
            self.then = then  # chained: the next operation, in the same await
            self._state = 1
            self.over = False
            lc.begin(self)


class LoopCore:
    """Drives the rounds of ``core`` on ``loop``; one round at a time (the caller serializes)."""

    def __init__(self, core: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.core = core
        self._c: Optional[Driver] = core if isinstance(core, Driver) else None
        self.loop = loop
        self._changes = -1                 # the core's socket open/close count when last synced
        self._ops: Dict[str, Any] = {}     # operation name -> the core's bound method
        self._readers: Dict[int, int] = {}  # master -> fd with a reader callback
        self._writers: Dict[int, int] = {}  # master -> fd with a writer callback
        self._round: Optional[_Run] = None   # set while a round runs
        self._timer: Optional[asyncio.TimerHandle] = None
        self._timer_at = -1.0
        self._waiters: List[asyncio.Future] = []  # see activity()
        self._cancelled: Optional[BaseException] = None  # see take_cancelled()
        self.closed = False
        # Several masters on asyncio's own (pure-Python) selector loop, on Linux: their sockets
        # in an epoll set of our own, whose one descriptor the loop watches: one callback reads
        # every socket that is ready, instead of one callback per socket, each a trip through
        # the loop's Python machinery. (uvloop's callbacks cost less than the extra poll.)
        self._ep: Any = None
        if core.n > 1 and hasattr(select, "epoll") and isinstance(loop, BaseSelectorEventLoop):
            self._ep = select.epoll()
        self._index: Dict[int, int] = {}  # fd -> master, for the sockets in _ep
        self._ep_watched = False  # _ep's descriptor has the loop's reader callback
        core.on_close = self._forget  # the loop must forget a socket before the core closes it

    # --- rounds ---------------------------------------------------------------------------------
    def run(self, op: str, *args: Any) -> _Run:
        """Run core operation ``op`` (e.g. ``"acquire"``) on the loop: awaiting this returns its rounds.

        Not interruptible half-way: if the awaiting task is cancelled, the round still runs to
        its end (its outcomes and owed replies stay right) and returns; the cancellation is held
        back until the caller's plan is complete (:meth:`take_cancelled`).
        """
        return self.prepare(op, args)

    def prepare(self, op: str, args: tuple) -> _Run:
        """:meth:`run` with the arguments as a tuple (a C call from the compiled executor)."""
        run = _Run.__new__(_Run)
        run.setup(self, op, args)
        return run

    def begin(self, run: _Run) -> None:
        """``run``'s operation starts: its commands are written; it is the round the loop's
        callbacks end (at once, if nothing is left to wait for)."""
        if self.closed:
            raise RuntimeError("this Redlock client is closed")
        self._start(run.op, run.args)
        self._round = run
        try:
            self._rewatch()  # may already end it
        except BaseException:
            self.abort()
            raise

    def end(self, run: _Run) -> List[Any]:
        """``run``'s round is over: its rounds. A cancellation it held back is kept for
        :meth:`take_cancelled`."""
        self._round = None
        rounds = self._finish()
        if self._writers:
            self._rewatch()
        else:
            # Nothing to unwatch: a socket the round's end closed was forgotten as it closed
            # (_forget), and the next start or reader callback resyncs the readers.
            self._arm(self._owed_deadline())
            if self._waiters:
                self._wake()
        if run.cancelled_by is not None and self._cancelled is None:
            self._cancelled = run.cancelled_by
        return rounds

    def abort(self) -> None:
        """The client is closing, or something broke: end the round (what was not answered stays
        owed) and close the connections, whose replies could be out of step now."""
        self._round = None
        self._finish()
        if not self.closed:
            self.core.close()
            self._rewatch()

    def take_cancelled(self) -> Optional[BaseException]:
        """The cancellation :meth:`run` held back, if any (and forget it): the caller raises it
        once the plan that ran the rounds is complete, so a cancelled task still ends cancelled."""
        exc, self._cancelled = self._cancelled, None
        return exc

    async def activity(self) -> None:
        """Return after the next read or deadline sweep between rounds (stragglers' answers)."""
        fut = self.loop.create_future()
        self._waiters.append(fut)
        self._arm(self._owed_deadline())
        await fut

    def close(self) -> None:
        """Stop watching; close the core's connections (a round in progress ends with an error)."""
        self.closed = True
        if self._round is not None:
            self._round.end_with(asyncio.CancelledError())  # run() raises RuntimeError
            self._round.resume(False)
        self._unwatch_all()
        self.core.close()
        if self._ep is not None:
            self._ep.close()
        self._wake()

    # --- what the loop sees -----------------------------------------------------------------------
    def _on_readable(self, i: int) -> None:
        try:
            code = self._ready(i, True, False)
        except BaseException as exc:  # a bug or an OSError: the round must not hang on it
            self._fail(exc)
            return
        if code == 1 and self._round is not None:  # READY_OVER alone: the round is over, nothing
            self._round.end_with(None)               # else changed (run() rewatches after finish)
            self._resume()
        elif code:  # the watch list changed, or an owed reply came between rounds
            self._rewatch()
            self._resume()

    def _on_any_readable(self) -> None:
        """The epoll set says some masters' sockets are readable: read each (one pass)."""
        code = 0
        try:
            for fd, _ in self._ep.poll(0):
                i = self._index.get(fd, -1)
                if i >= 0:
                    code |= self._ready(i, True, False)
        except BaseException as exc:  # a bug or an OSError: the round must not hang on it
            self._fail(exc)
            return
        if code == 1 and self._round is not None:  # READY_OVER alone (see _on_readable)
            self._round.end_with(None)
            self._resume()
        elif code:
            self._rewatch()
            self._resume()

    def _on_writable(self, i: int) -> None:
        try:
            self._ready(i, False, True)
        except BaseException as exc:
            self._fail(exc)
            return
        self._rewatch()
        self._resume()

    def _resume(self) -> None:
        """From a loop callback, last: if the round is over, resume its task now (it may start
        the next round before this returns; nothing of this one is looked at after)."""
        turn = self._round
        if turn is not None and turn.over:
            turn.resume(True)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = -1.0
        if self._round is None and self._owed_deadline() < 0.0:
            return  # set for a round that ended in time: nothing is due
        try:
            if self._round is not None:
                self.core.overdue()
            else:
                self.core.tidy()
        except BaseException as exc:
            self._fail(exc)
            return
        self._rewatch()
        self._resume()

    def _fail(self, exc: BaseException) -> None:
        """A loop callback failed: end the round with ``exc`` (resumed at once), or report it."""
        turn = self._round
        self._wake()
        if turn is not None and not turn.over:
            turn.end_with(exc)
            turn.resume(True)
        else:
            self.loop.call_exception_handler({"message": "fastredlock: error between rounds", "exception": exc})

    # --- keeping the loop's watch list in step with the core -------------------------------------
    def _rewatch(self) -> None:
        """After anything the core did: readers on its open sockets, writers where the round waits
        to write, the timer on the next deadline; resolve the round when it is over."""
        core = self.core
        changes, writing = self._watched()
        if changes != self._changes:
            self._changes = changes
            self._watch_readers(core.fds())
        if writing or self._writers:
            self._watch_writers(core.fds(), set(writing) if self._round is not None else set())
        turn = self._round
        if turn is not None:
            first = self._next_deadline()
            if first < 0.0:
                turn.end_with(None)  # resumed by the callback that called this (_resume), or not
                return              # awaited yet
            self._arm(first)
        else:
            self._arm(self._owed_deadline())
            if self._waiters:
                self._wake()

    def _forget(self, i: int, fd: int) -> None:
        """The core is about to close master ``i``'s socket: stop watching it while it is open
        (once closed, its number may belong to someone else's socket at once)."""
        loop = self.loop
        try:
            if self._writers.get(i) == fd:
                del self._writers[i]
                loop.remove_writer(fd)
            if self._readers.get(i) == fd:
                del self._readers[i]
                self._unread(fd)
        except Exception as exc:  # the loop is closed: nothing to forget any more
            if not loop.is_closed():
                raise exc

    def _unread(self, fd: int) -> None:
        """Stop watching ``fd`` for reading (in the epoll set, or the loop's reader)."""
        if self._ep is None:
            self.loop.remove_reader(fd)
            return
        self._index.pop(fd, None)
        try:
            self._ep.unregister(fd)
        except (OSError, ValueError):  # closed already: the kernel dropped it from the set
            pass

    def _watch_readers(self, fds: List[int]) -> None:
        loop = self.loop
        ep = self._ep
        if ep is not None and not self._ep_watched:
            loop.add_reader(ep.fileno(), self._on_any_readable)
            self._ep_watched = True
        for i, fd in enumerate(fds):
            old = self._readers.get(i)
            if old == fd:
                continue
            if old is not None:
                # The socket was closed (maybe replaced by one with the same number): forget the
                # old registration; the selector ignores the closed fd's removal error.
                self._unread(old)
                del self._readers[i]
                if self._writers.get(i) == old:
                    loop.remove_writer(old)
                    del self._writers[i]
            if fd >= 0:
                if ep is None:
                    loop.add_reader(fd, self._on_readable, i)
                else:
                    ep.register(fd, select.EPOLLIN)
                    self._index[fd] = i
                self._readers[i] = fd

    def _watch_writers(self, fds: List[int], writing: Set[int]) -> None:
        loop = self.loop
        for i, fd in list(self._writers.items()):
            if i not in writing or fds[i] != fd:
                loop.remove_writer(fd)
                del self._writers[i]
        for i in writing:
            if i not in self._writers:
                loop.add_writer(fds[i], self._on_writable, i)
                self._writers[i] = fds[i]

    def _unwatch_all(self) -> None:
        if not self.loop.is_closed():
            for fd in self._writers.values():
                self.loop.remove_writer(fd)
            for fd in self._readers.values():
                self._unread(fd)
            if self._ep_watched:
                self.loop.remove_reader(self._ep.fileno())
        self._ep_watched = False
        self._readers.clear()
        self._writers.clear()
        self._changes = -1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._timer_at = -1.0

    def _arm(self, at: float) -> None:
        """Make sure the timer fires by ``at`` (the core's monotonic clock; -1.0: nothing due).

        Lazy: a timer already set to fire earlier is kept (when it fires, the deadline that is
        due then is looked at and the timer set again). Each round's deadline lies beyond the
        previous one's, so most rounds set no timer at all.
        """
        timer_at = self._timer_at
        if at < 0.0 or (self._timer is not None and timer_at <= at):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = self.loop.call_later(max(0.0, at - self.core.now()), self._on_timer)

    # --- the core's calls each round: C calls where the core is the compiled twin ---------------------
    def _start(self, op: str, args: tuple) -> None:
        """Start operation ``op`` (its bound method looked up once per name)."""
        method = self._ops.get(op)
        if method is None:
            method = self._ops[op] = getattr(self.core, op)
        if self._c is not None:
            self._c.start_call(method, args)
        else:
            self.core.start_call(method, args)

    def _ready(self, i: int, readable: bool, writable: bool) -> int:
        if self._c is not None:
            return self._c.ready(i, readable, writable)
        return self.core.ready(i, readable, writable)  # type: ignore[no-any-return]

    def _next_deadline(self) -> float:
        if self._c is not None:
            return self._c.next_deadline()
        return self.core.next_deadline()  # type: ignore[no-any-return]

    def _owed_deadline(self) -> float:
        if self._c is not None:
            return self._c.owed_deadline()
        return self.core.owed_deadline()  # type: ignore[no-any-return]

    def _finish(self) -> List[Any]:
        if self._c is not None:
            return self._c.finish()
        return self.core.finish()  # type: ignore[no-any-return]

    def _watched(self) -> tuple:
        if self._c is not None:
            return self._c.watched()
        return self.core.watched()  # type: ignore[no-any-return]

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
