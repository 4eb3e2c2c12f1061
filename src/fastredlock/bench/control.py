"""The worker's side of the conversation: JSON lines to the driver, and a tiny stdlib RESP client.

``emit``/``wait_go`` talk to the driver (see :mod:`.worker`). :class:`Ctl` is a blocking control
connection for checks that must not go through the code under test (the double-holder counter,
EXISTS of a key after a fault). Standard library only: peers' processes import this file.
"""
from __future__ import annotations

import json
import socket
import sys
from typing import Any, Dict, Tuple

# --------------------------------------------------------------------------------------------
# output


def emit(obj: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def wait_go() -> None:
    line = sys.stdin.readline()
    if not line.strip().startswith("go"):
        raise SystemExit("driver went away")


def err_name(exc: BaseException) -> str:
    return f"{type(exc).__module__.split('.')[0]}.{type(exc).__name__}"


# --------------------------------------------------------------------------------------------
# a tiny blocking RESP client (stdlib only) for checks that must not go through the code under test


def host_port(url: str) -> Tuple[str, int]:
    rest = url.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = rest.rpartition(":")
    return host, int(port)


def encode(*parts: Any) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for p in parts:
        if not isinstance(p, bytes):
            p = str(p).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(p), p))
    return b"".join(out)


class Ctl:
    """A control connection: INCR/DECR of the double-holder counter, EXISTS checks."""

    def __init__(self, url: str, timeout: float = 2.0) -> None:
        self.sock = socket.create_connection(host_port(url), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.sock.makefile("rb")

    def cmd(self, *args: Any) -> Any:
        self.sock.sendall(encode(*args))
        return self._read()

    def _read(self) -> Any:
        line = self.f.readline()
        if not line:
            raise ConnectionError("control connection closed")
        kind, body = line[:1], line[1:-2]
        if kind == b"+":
            return body
        if kind == b"-":
            return RuntimeError(body.decode())
        if kind == b":":
            return int(body)
        if kind == b"$":
            n = int(body)
            if n < 0:
                return None
            data = self.f.read(n + 2)
            return data[:-2]
        if kind == b"*":
            n = int(body)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise ValueError(f"bad RESP line {line!r}")

    def close(self) -> None:
        try:
            self.f.close()
            self.sock.close()
        except OSError:
            pass
