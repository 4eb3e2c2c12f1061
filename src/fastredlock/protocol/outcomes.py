"""Per-master outcome codes of one round, shared by both cores and the Python layer.

A core reports one small int per master; only errors turn them into readable objects, so the hot
path never builds strings.
"""
from __future__ import annotations

#: The master did what was asked: SET NX succeeded, or the owner-checked script answered 1.
OK = 0
#: The master answered "no": the key is held by someone else (acquire), or is not ours (release/extend).
NO = 1
#: No complete answer before the master's deadline (the connection stays open for the requests
#: queued behind; the late reply is read and dropped when it comes).
TIMEOUT = 2
#: Could not connect, or the connection broke (refused, reset, closed).
CONN_ERROR = 3
#: The master answered an error reply (``-ERR ...``, ``NOAUTH``, ``WRONGTYPE``, ...).
ERROR_REPLY = 4
#: The master answered bytes that are not valid RESP, or a reply of the wrong type.
PROTOCOL_ERROR = 5

#: The master said OK, but it restarted less than the restart grace ago (it may have forgotten
#: locks it held), so its vote does not count toward the quorum (restart-aware voting).
UNTRUSTED = 6

#: The round returned before this master answered (early decision at quorum, or a master it did not
#: wait for). The outcome is filled in when the reply is read: by the next round on that connection,
#: or by ``Core.settle`` (which ``Lock.outcomes`` and errors call). Never counts toward a quorum.
PENDING = 7

#: Not asked: the master is cooling down after recent timeouts or refused connections (counted as
#: "no" without waiting), or too many masters are cooling down for a quorum to be possible.
SKIPPED = 8

#: The TLS handshake (or a TLS record) failed: a bad or expired certificate, a host name the
#: certificate does not name, no common protocol version, a client certificate the master wants
#: and did not get... The detail is OpenSSL's reason. Counted as a connection error.
TLS_ERROR = 9

#: A Sentinel master could not be found: no sentinel answered (within ``connect_timeout``), none
#: knows the service, or the server they named is not a master. Counted as a connection error;
#: the sentinels are asked again at the next connect.
SENTINEL_ERROR = 10

NAMES = {
    OK: "ok",
    NO: "no",
    TIMEOUT: "timeout",
    CONN_ERROR: "connection error",
    ERROR_REPLY: "error reply",
    PROTOCOL_ERROR: "protocol error",
    UNTRUSTED: "restarted recently",
    PENDING: "pending",
    SKIPPED: "cooling down",
    TLS_ERROR: "tls error",
    SENTINEL_ERROR: "sentinel error",
}

#: Outcomes that say a master is down or unreachable (what an error naming the down masters lists).
DOWN = frozenset({TIMEOUT, CONN_ERROR, SKIPPED, TLS_ERROR, SENTINEL_ERROR})

# Per-master counters kept by ``Health`` (both cores): indexes into ``COUNTERS``.
C_REPLIES = 0
C_TIMED = 1
C_TIMEOUTS = 2
C_CONNECT_ERRORS = 3
C_CONNECTION_ERRORS = 4
C_ERROR_REPLIES = 5
C_PROTOCOL_ERRORS = 6
C_SKIPPED = 7
C_LATE = 8
C_RELEASES_NOT_HELD = 9

#: The counters' names, in index order (the first fields of ``Redlock.stats()``'s ``MasterStats``).
COUNTERS = (
    "replies",            # replies received in time (every reply of a batch counts)
    "rounds_timed",       # rounds whose round trip to this master was measured (latency_avg's count)
    "timeouts",           # times the master missed a deadline (one per round, however many replies)
    "connect_errors",     # connections refused or failed (including a reset before any reply)
    "connection_errors",  # established connections that broke
    "error_replies",      # error replies (-ERR, NOPERM, WRONGTYPE, a failed AUTH, ...)
    "protocol_errors",    # replies that were not valid RESP or of the wrong shape
    "skipped",            # rounds that skipped the master because it was cooling down
    "late_replies",       # replies that came after their deadline (read and dropped)
    "releases_not_held",  # releases not waited for that it answered "not held" (expired, or another's)
)
