"""Per-master outcome codes of one round, shared by both cores and the Python layer.

A core reports one small int per master; only errors turn them into readable objects, so the hot
path never builds strings.
"""
from __future__ import annotations

#: The master did what was asked: SET NX succeeded, or the owner-checked script answered 1.
OK = 0
#: The master answered "no": the key is held by someone else (acquire), or is not ours (release/extend).
NO = 1
#: No complete answer before the master's deadline; its connection was closed.
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

NAMES = {
    OK: "ok",
    NO: "no",
    TIMEOUT: "timeout",
    CONN_ERROR: "connection error",
    ERROR_REPLY: "error reply",
    PROTOCOL_ERROR: "protocol error",
    UNTRUSTED: "restarted recently",
}
