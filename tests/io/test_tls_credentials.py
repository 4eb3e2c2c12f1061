"""No credential leaves in plain text where TLS was asked for: audit, the blocking side connections,
sentinels, redis-py clients whose connection class is TLS by inheritance; and the TLS settings a
user writes are used or refused, never ignored (``ssl_*`` on a ``redis://`` URL, ``ssl_password``).

The "master" of the leak tests is a plain TCP listener standing on the TLS port (tests/_peers.py):
it records every byte a client sends. A client that does TLS sends a ClientHello and nothing else
(the handshake fails: the listener speaks no TLS); a client that does not sends its ``AUTH``.
The TLS successes run against real TLS servers (Debian's redis-server 7.0 is built with TLS; the
tests that need one are skipped, saying why, where no installed server has it).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from fastredlock.cli.audit import FAIL, PASS, audit
from fastredlock.engine.wake import open_connection
from fastredlock.io.masters import parse_master
from fastredlock.io.sentinel import Resolver, SentinelError
from fastredlock.testing import start_sentinels

from _peers import Peer, record, tls_client_hello

SECRET = "S3cretPW"
SENTINEL_SECRET = "Sent1nelPW"
SRC = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "src")


@pytest.fixture
def listener():
    """A plain TCP listener standing where a TLS master should be; records what it receives."""
    with Peer(record) as peer:
        yield peer


def no_credential(peer: Peer, *secrets: str) -> None:
    data = peer.received()
    assert peer.conns, "nothing connected to the listener"
    for conn in list(peer.conns):
        assert tls_client_hello(bytes(conn.received)), bytes(conn.received[:80])
    for secret in (SECRET, *secrets):
        assert secret.encode() not in data
    assert b"AUTH" not in data


# --- audit -----------------------------------------------------------------------------------------
def test_audit_sends_no_credential_to_a_plain_listener_on_a_tls_url(listener):
    url = f"rediss://auditor:{SECRET}@127.0.0.1:{listener.port}?ssl_cert_reqs=none"
    verdicts = audit([url], clock_seconds=0.1, samples=1, timeout=1.0)
    reach = [v for v in verdicts if v.check == "reach"]
    assert [v.verdict for v in reach] == [FAIL]
    no_credential(listener)


def test_audit_talks_tls_to_a_tls_master(certs, tls_binary):
    from fastredlock.testing import start_master

    m = start_master(tls=certs.server_tls(), binary=tls_binary, extra_args=("--requirepass", SECRET))
    try:
        url = f"rediss://:{SECRET}@127.0.0.1:{m.tls_port}?ssl_ca_certs={certs.ca}"
        verdicts = audit([url], clock_seconds=0.1, samples=2, timeout=2.0, restart_aware=True)
    finally:
        m.stop()
    by_check = {v.check: v for v in verdicts}
    assert by_check["reach"].verdict == PASS and by_check["reach"].found == "connected and logged in"
    assert by_check["version"].verdict != FAIL and "redis" in by_check["version"].found


# --- the wake-on-release connection ----------------------------------------------------------------
def test_wake_connection_sends_no_credential_to_a_plain_listener(listener):
    spec = parse_master(f"rediss://user:{SECRET}@127.0.0.1:{listener.port}?ssl_cert_reqs=none")
    with pytest.raises(OSError):  # the handshake fails: nothing of ours is sent
        open_connection(spec, 1.0).close()
    assert listener.wait_conns(1, 2.0)
    no_credential(listener)


def test_a_client_on_a_tls_url_sends_no_credential_on_any_connection(make_client, listener, masters, name):
    # the lock path and the waiters' notification connection (a waiter waits while another holds)
    url = f"rediss://user:{SECRET}@127.0.0.1:{listener.port}?ssl_cert_reqs=none"
    holder = make_client(masters.urls[:2], connect_timeout=0.2)
    dlm = make_client([url] + masters.urls[:2], connect_timeout=0.2, retry_delay=0.05)
    with holder.lock(name, ttl=5.0):
        waiter = dlm.lock(name, ttl=5.0)
        assert not waiter.acquire(timeout=0.6)
    assert len(listener.conns) >= 2  # the lock path's and the notifier's (and reconnects)
    no_credential(listener)


# --- sentinels ---------------------------------------------------------------------------------------
def test_rediss_sentinel_url_asks_the_sentinels_over_tls(listener):
    url = (f"rediss+sentinel://:{SECRET}@127.0.0.1:{listener.port}/svc?ssl_cert_reqs=none"
           f"&sentinel_password={SENTINEL_SECRET}")
    spec = parse_master(url)
    assert spec.sentinel.tls is not None
    with pytest.raises(SentinelError, match="TLS"):
        Resolver(spec).ask(1.0)
    no_credential(listener, SENTINEL_SECRET)


def test_plain_sentinels_only_when_asked(listener):
    url = (f"rediss+sentinel://127.0.0.1:{listener.port}/svc?ssl_cert_reqs=none&sentinel_ssl=false"
           f"&sentinel_password={SENTINEL_SECRET}")
    spec = parse_master(url)
    assert spec.sentinel.tls is None and spec.tls is not None
    with pytest.raises(ValueError, match="sentinel_ssl"):
        parse_master("redis+sentinel://127.0.0.1:1/svc?sentinel_ssl_ca_certs=/x")
    plain = parse_master("redis+sentinel://127.0.0.1:1/svc")
    assert plain.sentinel.tls is None and plain.tls is None


def test_sentinel_lock_outcome_with_a_plain_listener(make_client, listener, masters, name):
    url = f"rediss+sentinel://127.0.0.1:{listener.port}/svc?ssl_cert_reqs=none&sentinel_password={SENTINEL_SECRET}"
    dlm = make_client([url] + masters.urls[:2], connect_timeout=0.5)
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire(timeout=3.0)
    first = lock.outcomes[0]
    assert first.outcome == "sentinel error" and "TLS" in first.detail
    lock.release()
    no_credential(listener, SENTINEL_SECRET)


@pytest.fixture(scope="module")
def tls_sentinels(certs, tls_binary):
    with start_sentinels("tlssvc", count=1, replicas=0, failover_ready=False, binary=tls_binary,
                         sentinel_tls=certs.server_tls()) as group:
        yield group


def test_tls_sentinels_with_their_own_certificate_checks(make_client, tls_sentinels, certs, masters, name):
    (host, port), = tls_sentinels.tls_addresses
    url = f"redis+sentinel://{host}:{port}/tlssvc?sentinel_ssl=true&sentinel_ssl_ca_certs={certs.ca}"
    dlm = make_client([url], connect_timeout=1.0)
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire(timeout=3.0), lock.outcomes
    assert [o.outcome for o in lock.outcomes] == ["ok"]
    assert tls_sentinels.master.command("EXISTS", name) == 1
    lock.release()
    # the sentinel's certificate is checked: a CA that did not sign it fails that master
    wrong = f"redis+sentinel://{host}:{port}/tlssvc?sentinel_ssl=true&sentinel_ssl_ca_certs={certs.wrong_ca}"
    dlm = make_client([wrong] + masters.urls[:2], connect_timeout=1.0)
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire(timeout=3.0)
    first = lock.outcomes[0]
    assert first.outcome == "sentinel error" and "CERTIFICATE_VERIFY_FAILED" in first.detail
    lock.release()


def test_redis_sentinel_object_with_tls_connections(one_core, tls_sentinels, certs):
    from redis.sentinel import Sentinel

    sentinel = Sentinel(tls_sentinels.tls_addresses, sentinel_kwargs={"ssl": True, "ssl_ca_certs": certs.ca})
    spec = parse_master((sentinel, "tlssvc"))
    assert spec.sentinel.tls is not None and spec.sentinel.tls.ca_certs == certs.ca
    assert Resolver(spec).ask(1.0)[0] == (tls_sentinels.master.host, tls_sentinels.master.port)


# --- redis-py clients: TLS by what the connection is, not by its class's name ---------------------
def test_a_tls_connection_subclass_is_tls(make_client, listener, masters, name):
    import redis

    class TLSConnection(redis.SSLConnection):
        pass

    pool = redis.ConnectionPool(connection_class=TLSConnection, host="127.0.0.1", port=listener.port,
                                password=SECRET, ssl_cert_reqs="none")
    spec = parse_master(redis.Redis(connection_pool=pool))
    assert spec.tls is not None and spec.tls.cert_reqs == "none"
    bare = redis.ConnectionPool(connection_class=TLSConnection, host="127.0.0.1", port=listener.port)
    assert parse_master(redis.Redis(connection_pool=bare)).tls is not None  # the class alone says it
    dlm = make_client([redis.Redis(connection_pool=pool)] + masters.urls[:2], connect_timeout=0.3)
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire(timeout=3.0)
    assert lock.outcomes[0].outcome != "ok"
    lock.release()
    no_credential(listener)


def test_plain_redis_clients_stay_plain(one_core, masters):
    import redis

    assert parse_master(redis.Redis(host="127.0.0.1", port=masters[0].port)).tls is None
    assert parse_master(redis.Redis(host="127.0.0.1", port=1, ssl=True, ssl_cert_reqs="none")).tls is not None


# --- TLS settings used or refused, never ignored -----------------------------------------------------
@pytest.mark.parametrize("url", [
    "redis://127.0.0.1:6379?ssl_ca_certs=/etc/ssl/ca.pem",
    "redis://:pw@127.0.0.1:6379/1?ssl_cert_reqs=required",
    "unix:///tmp/redis.sock?ssl_certfile=/x.pem",
])
def test_ssl_settings_on_a_plain_url_are_refused_like_the_dict_form(url):
    with pytest.raises(ValueError, match="plain .*rediss://"):
        parse_master(url)
    with pytest.raises(ValueError, match="without ssl=True"):
        parse_master({"host": "127.0.0.1", "ssl_ca_certs": "/etc/ssl/ca.pem"})


@pytest.fixture(scope="module")
def encrypted_client_key(certs, tmp_path_factory):
    """The session client certificate's key, encrypted with a password."""
    path = str(tmp_path_factory.mktemp("enc") / "client-enc.key")
    subprocess.run(["openssl", "pkey", "-in", certs.client_key, "-out", path, "-aes256", "-passout",
                    "pass:keypw"], check=True, capture_output=True, timeout=30)
    return path


def test_ssl_password_opens_an_encrypted_client_key(make_client, certs, tls_binary, encrypted_client_key, name):
    from fastredlock.testing import start_master

    m = start_master(tls=certs.server_tls(auth_clients=True), binary=tls_binary)
    try:
        base = f"{m.tls_url}?ssl_ca_certs={certs.ca}&ssl_certfile={certs.client}&ssl_keyfile={encrypted_client_key}"
        dlm = make_client([base + "&ssl_password=keypw"], connect_timeout=1.0, retry_count=3)
        with dlm.lock(name, ttl=5.0) as lock:
            assert [o.outcome for o in lock.outcomes] == ["ok"]
        with pytest.raises(ValueError, match=r"the client key is encrypted: give its password \(ssl_password\)"):
            make_client([base])
        with pytest.raises(ValueError, match=r"is ssl_password the key's password\?"):
            make_client([base + "&ssl_password=wrong"])
        dict_form = {"host": "127.0.0.1", "port": m.tls_port, "ssl": True, "ssl_ca_certs": certs.ca,
                     "ssl_certfile": certs.client, "ssl_keyfile": encrypted_client_key, "ssl_password": "keypw"}
        with make_client([dict_form], connect_timeout=1.0, retry_count=3).lock(name, ttl=5.0):
            pass
    finally:
        m.stop()


def test_an_encrypted_key_without_password_never_prompts_on_the_terminal(certs, encrypted_client_key):
    # The constructor runs with a terminal of its own (a pty as its controlling terminal): OpenSSL's
    # default is to ask for the pass phrase there and wait.
    import pty
    import select

    code = (f"import fastredlock\ntry:\n    fastredlock.Redlock(['rediss://127.0.0.1:1?ssl_ca_certs={certs.ca}"
            f"&ssl_certfile={certs.client}&ssl_keyfile={encrypted_client_key}'])\n"
            "except ValueError as exc:\n    print('REFUSED', exc)\n")
    master, slave = pty.openpty()

    def controlling_tty():
        import fcntl
        import termios

        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen([sys.executable, "-c", code], stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True, preexec_fn=controlling_tty,
                            env={**os.environ, "PYTHONPATH": SRC})
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 20.0
    try:
        # until the prompt shows, or the process has ended and its output is read (EIO on the pty)
        while time.monotonic() < deadline and b"pass phrase" not in out.lower():
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None and not select.select([master], [], [], 0.2)[0]:
                break
    finally:
        proc.kill()
        proc.wait(10)
        os.close(master)
    assert b"pass phrase" not in out.lower(), out
    assert b"REFUSED" in out and b"give its password (ssl_password)" in out, out


def test_tls_sentinels_without_settings_take_the_clients_ssl_context(make_client, tls_sentinels, certs, name):
    import ssl

    (host, port), = tls_sentinels.tls_addresses
    ctx = ssl.create_default_context(cafile=certs.ca)
    dlm = make_client([f"redis+sentinel://{host}:{port}/tlssvc?sentinel_ssl=true"], ssl_context=ctx,
                      connect_timeout=1.0, retry_count=3)
    with dlm.lock(name, ttl=5.0) as lock:
        assert [o.outcome for o in lock.outcomes] == ["ok"]


def test_rediss_sentinel_tls_end_to_end(make_client, certs, tls_binary, name):
    # TLS sentinels that watch and name the master on its TLS port: the client asks them over TLS
    # (their certificates checked with the master's ssl_* settings) and locks on the master over TLS
    with start_sentinels("e2e", count=1, replicas=0, failover_ready=False, binary=tls_binary,
                         sentinel_tls=certs.server_tls(), master_tls=certs.server_tls()) as group:
        (host, port), = group.tls_addresses
        assert group.sentinels[0].master_address() == (group.master.host, group.master.tls_port)
        url = f"rediss+sentinel://{host}:{port}/e2e?ssl_ca_certs={certs.ca}"
        dlm = make_client([url], connect_timeout=1.0, retry_count=3)
        with dlm.lock(name, ttl=5.0) as lock:
            assert [o.outcome for o in lock.outcomes] == ["ok"]
            assert group.master.command("EXISTS", name) == 1  # read on the plain port


def test_asyncio_redis_clients_are_judged_alike(one_core):
    import redis.asyncio

    class TLSConnection(redis.asyncio.SSLConnection):
        pass

    pool = redis.asyncio.ConnectionPool(connection_class=TLSConnection, host="127.0.0.1", port=1)
    assert parse_master(redis.asyncio.Redis(connection_pool=pool)).tls is not None
    assert parse_master(redis.asyncio.Redis(host="127.0.0.1", port=1)).tls is None
