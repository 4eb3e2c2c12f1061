"""Restart-aware voting: when a master's OK does not count toward a quorum.

A master that restarted without persistence has forgotten the locks it held. The client learns each
master's ``run_id`` and uptime on every (re)connect (``INFO server``, part of the handshake); an OK
from a master that has been up for less than the restart grace (the largest TTL in use) is reported
as ``UNTRUSTED`` and does not count, because the lock it forgot may still be held by someone else.

A Sentinel master promoted from a replica is treated the same way from the moment of its promotion
(it may lack keys the old master acknowledged): see :mod:`.sentinel` and :meth:`MasterClock.promoted`.
"""
from .outcomes import CONN_ERROR, NO, OK, UNTRUSTED


class MasterClock:
    """What the client knows of one master's life: its run_id, when it started, restarts seen."""

    def __init__(self):
        self.run_id = None
        #: Monotonic time the master started (from its uptime), or -1.0 when not known.
        self.up_since = -1.0
        #: How many times the run_id changed (restarts seen).
        self.restarts = 0
        #: A Sentinel master: the ``(host, port)`` the sentinels named last, or None.
        self.address = None
        #: ... and when they saw it take the master role (monotonic), or -1.0 (see :mod:`.sentinel`).
        self.reported_since = -1.0
        #: A cluster node: the run_id it had when this client first saw it promoted, and when
        #: (monotonic; -1.0: never), so a reconnect to the same server keeps the first sighting.
        self.promoted_run = None
        self.promoted_at = -1.0

    def learned(self, run_id, uptime, now):
        """An ``INFO server`` answer read at ``now``: ``run_id`` and ``uptime`` in seconds.

        The server computes ``uptime_in_seconds`` as a difference of whole wall-clock seconds (its
        start and now, each rounded down), so it can overstate the true uptime by almost a second:
        a master started at 10.9 s answers 1 at 11.1 s. The master is taken to have started at
        ``now - (uptime - 1)`` (``now`` if that is later), never earlier than it really did: trusting
        it early is the double holder that restart-aware voting exists to prevent."""
        if self.run_id is not None and run_id != self.run_id:
            self.restarts += 1
        self.run_id = run_id
        self.up_since = now - (uptime - 1 if uptime > 1 else 0)

    def promoted(self, since):
        """The master was promoted from a replica at ``since`` (monotonic): it counts as up only
        since then (a later time than its start), like a restarted master. Call after the
        connection's ``INFO server`` answer (:meth:`learned`), which it overrides."""
        if since > self.up_since:
            self.up_since = since

    def state(self):
        """``(run_id, up_since or None, restarts)`` for ``Core.master_states``."""
        return self.run_id, (self.up_since if self.up_since >= 0.0 else None), self.restarts

    def untrusted(self, now, grace_ms):
        """Whether an OK from this master at ``now`` must not count (up for less than the grace)."""
        return self.up_since >= 0.0 and (now - self.up_since) * 1000.0 < grace_ms

    def acquisition_outcome(self, code, detail, retried, now, grace_ms):
        """An acquisition's OK or "no" reconsidered: restart-aware voting, and a resent command.

        Returns ``(code, detail)``.
        """
        if code == OK and self.untrusted(now, grace_ms):
            up = now - self.up_since
            return UNTRUSTED, "up for %.0fs, less than the restart grace of %gs; its vote counts in %.1fs" % (
                up, grace_ms / 1000.0, grace_ms / 1000.0 - up)
        if code == NO and retried:
            # The lost connection may have run our first SET: the key can be ours. Not a clear
            # "no", so the caller releases (owner-checked) to be sure.
            return CONN_ERROR, "connection broke; the resent command found the key set"
        return code, detail
