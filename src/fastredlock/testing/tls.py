"""Certificates for TLS masters in tests, made with the ``openssl`` command line.

:func:`make_certs` writes a throwaway CA, a server certificate for ``localhost``/``127.0.0.1``,
a client certificate (mutual TLS), a second CA that signed none of them (the "wrong CA"), an
expired server certificate and one for another host name, all signed with P-256 keys (fast to
make: the whole set takes well under a second). :class:`ServerTls` tells
:func:`~fastredlock.testing.start_master` which certificate a master serves and whether it
requires client certificates.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import NamedTuple, Optional

__all__ = ["Certs", "ServerTls", "make_certs", "tls_server", "tls_unsupported"]

_tls_servers: dict = {}


class Certs(NamedTuple):
    """Paths of the PEM files :func:`make_certs` wrote (``*_key``: the matching private keys)."""

    ca: str
    server: str
    server_key: str
    client: str
    client_key: str
    wrong_ca: str
    expired: str  # a server certificate for localhost/127.0.0.1, signed by ``ca``, expired
    other_host: str  # a server certificate for ``other.invalid`` only, signed by ``ca``
    expired_at: float  # time.time() at which ``expired`` has expired

    def server_tls(self, auth_clients: bool = False, cert: Optional[str] = None) -> "ServerTls":
        """A master's TLS settings: this CA's server certificate (or ``cert``, signed with the same
        key: :attr:`expired`, :attr:`other_host`), client certificates required if asked."""
        return ServerTls(cert or self.server, self.server_key, self.ca, auth_clients)


class ServerTls(NamedTuple):
    """What a TLS master serves: ``--tls-cert-file``, ``--tls-key-file``, ``--tls-ca-cert-file``
    and ``--tls-auth-clients``."""

    cert: str
    key: str
    ca: str
    auth_clients: bool = False

    def args(self, port: int) -> list:
        """The server flags for a TLS port ``port`` (beside the plain port)."""
        return ["--tls-port", str(port), "--tls-cert-file", self.cert, "--tls-key-file", self.key,
                "--tls-ca-cert-file", self.ca, "--tls-auth-clients", "yes" if self.auth_clients else "no"]


def _openssl(*args: str) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise FileNotFoundError("openssl not found: apt-get install openssl")
    subprocess.run([openssl, *args], check=True, capture_output=True, timeout=30)


def _key(path: str) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path)


def _ca(directory: str, name: str) -> str:
    key, crt = os.path.join(directory, f"{name}.key"), os.path.join(directory, f"{name}.pem")
    _key(key)
    _openssl("req", "-x509", "-new", "-key", key, "-out", crt, "-days", "2", "-subj", f"/CN=fastredlock test {name}")
    return crt


def _signed(directory: str, name: str, key: str, cn: str, san: str, days: str, ext: str = "") -> str:
    csr, crt = os.path.join(directory, f"{name}.csr"), os.path.join(directory, f"{name}.pem")
    extfile = os.path.join(directory, f"{name}.ext")
    with open(extfile, "w") as f:
        f.write(f"subjectAltName={san}\n{ext}")
    _openssl("req", "-new", "-key", key, "-out", csr, "-subj", f"/CN={cn}")
    ca = os.path.join(directory, "ca")
    _openssl("x509", "-req", "-in", csr, "-CA", ca + ".pem", "-CAkey", ca + ".key", "-set_serial",
             str(int(time.time() * 1e6)), "-out", crt, "-days", days, "-extfile", extfile)
    return crt


def make_certs(directory: str) -> Certs:
    """Write a CA, server, client, wrong-CA, expired and other-host certificates into ``directory``."""
    os.makedirs(directory, exist_ok=True)
    ca = _ca(directory, "ca")
    wrong_ca = _ca(directory, "wrong-ca")
    server_key = os.path.join(directory, "server.key")
    client_key = os.path.join(directory, "client.key")
    _key(server_key)
    _key(client_key)
    here = "DNS:localhost,IP:127.0.0.1"
    # -days 0: valid from now until now, so expired from the next second on.
    expired = _signed(directory, "expired", server_key, "localhost", here, "0")
    expired_at = time.time() + 1.5
    server = _signed(directory, "server", server_key, "localhost", here, "2")
    other = _signed(directory, "other-host", server_key, "other.invalid", "DNS:other.invalid", "2")
    client = _signed(directory, "client", client_key, "fastredlock client", "DNS:client.invalid", "2",
                     "extendedKeyUsage=clientAuth\n")
    return Certs(ca, server, server_key, client, client_key, wrong_ca, expired, other, expired_at)


def tls_unsupported(binary: str, certs: Certs) -> Optional[str]:
    """Why server ``binary`` cannot serve TLS (the end of its start-up error, e.g. the ``server``
    extra's Valkey and Redis 6.2 builds have no TLS), or ``None`` if it can: asked by starting it
    with a TLS port, once per binary."""
    from .masters import LocalMaster

    if binary not in _tls_servers:
        master = LocalMaster(binary, tls=certs.server_tls())
        try:
            master.start()
            _tls_servers[binary] = None
        except RuntimeError as exc:
            said = str(exc).strip()
            if said.endswith(":"):  # Valkey's builds without TLS exit saying nothing
                said += " no error given (a build without TLS)"
            _tls_servers[binary] = said.splitlines()[-1][-200:]
        finally:
            master.stop()
    return _tls_servers[binary]


def tls_server(certs: Certs) -> str:
    """The first server binary (in :func:`~fastredlock.testing.find_servers` order) that serves
    TLS; ``FileNotFoundError`` naming each binary and why it does not (e.g. the ``server`` extra's
    Valkey 8 and Redis 6.2 are built without TLS, Debian's redis-server 7.0 with it)."""
    from .servers import find_servers

    why = []
    for binary in find_servers():
        reason = tls_unsupported(binary, certs)
        if reason is None:
            return binary
        why.append(f"{binary}: {reason}")
    raise FileNotFoundError("no server binary with TLS support: " + "; ".join(why or ["none found"]))
