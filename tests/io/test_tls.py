"""TLS masters on both cores: real redis-server TLS ports, certificates made for the session.

Each failure (wrong CA, expired or other-host certificate, plain client to a TLS port, TLS client
to a plain port, a client certificate missing where one is required, a stalled master) must give
that master its outcome within ``connect_timeout`` + ``io_timeout`` (+ slack) while the quorum of
the others decides.
"""
from __future__ import annotations

import threading
import time

import pytest

from fastredlock import LockError
from fastredlock.testing import FaultProxy, paused, start_master

from _checks import bound, gone_within, timed

TTL = 5.0


def with_ca(url: str, ca: str, **params: str) -> str:
    query = "&".join([f"ssl_ca_certs={ca}"] + [f"{k}={v}" for k, v in params.items()])
    return f"{url}?{query}"


def outcomes(lock):
    return [o.outcome for o in lock.outcomes]


@pytest.fixture
def tls_urls(tls_masters, certs):
    return [with_ca(u, certs.ca) for u in tls_masters.tls_urls]


@pytest.fixture
def odd_master(certs, tls_binary):
    """``odd_master(**server_tls)``: one more TLS master serving other settings (stopped after)."""
    started = []

    def start(cert=None, auth_clients=False):
        started.append(start_master(tls=certs.server_tls(auth_clients, cert), binary=tls_binary))
        return started[-1]

    yield start
    for m in started:
        m.stop()


def lock_cycle(dlm, name, expect=("ok",) * 5):
    lock = dlm.lock(name, ttl=TTL)
    assert lock.acquire(), lock.outcomes
    assert tuple(outcomes(lock)) == tuple(expect)
    lock.extend()
    lock.release()
    assert tuple(outcomes(lock)) == tuple(expect)  # the release's
    return lock


# --- it works -------------------------------------------------------------------------------------
def test_lock_extend_release_on_five_tls_masters(make_client, tls_urls, tls_masters, name, keys_on):
    dlm = make_client(tls_urls, connect_timeout=1.0)
    lock = dlm.lock(name, ttl=TTL)
    assert lock.acquire()
    assert outcomes(lock) == ["ok"] * 5
    assert keys_on(tls_masters, name) == 5  # read on the plain ports: the SETs went through TLS
    lock.extend()  # raises if it was lost
    assert 3000 < tls_masters[0].command("PTTL", name) <= TTL * 1000
    lock.release()
    assert keys_on(tls_masters, name) == 0
    for _ in range(20):  # the connections stay up: no handshake per round
        lock_cycle(dlm, name)
    assert all(s.connect_errors == 0 and s.connection_errors == 0 for s in dlm.stats())


def test_mix_of_tls_and_plain_masters(make_client, tls_urls, masters, name, keys_on, tls_masters):
    dlm = make_client(tls_urls[:3] + masters.urls[:2], connect_timeout=1.0)
    lock_cycle(dlm, name)
    lock = dlm.lock(name, ttl=TTL)
    assert lock.acquire()
    assert keys_on(tls_masters[:3], name) == 3 and keys_on(masters[:2], name) == 2
    lock.release()


def test_master_dicts_and_redis_clients_and_default_context(make_client, tls_masters, certs, name):
    import ssl

    import redis

    ctx = ssl.create_default_context(cafile=certs.ca)
    m = tls_masters
    forms = [
        {"host": "127.0.0.1", "port": m[0].tls_port, "ssl": True, "ssl_ca_certs": certs.ca},
        {"host": "127.0.0.1", "port": m[1].tls_port, "ssl_context": ctx},
        redis.Redis(host="127.0.0.1", port=m[2].tls_port, ssl=True, ssl_ca_certs=certs.ca),
        m[3].tls_url,  # no settings of its own: Redlock(ssl_context=...) applies
        m[4].url,
    ]
    lock_cycle(make_client(forms, ssl_context=ctx, connect_timeout=1.0), name)


def test_mutual_tls_with_client_certificate(make_client, odd_master, tls_masters, certs, name):
    m = odd_master(auth_clients=True)
    url = with_ca(m.tls_url, certs.ca, ssl_certfile=certs.client, ssl_keyfile=certs.client_key)
    dlm = make_client([url] + [with_ca(u, certs.ca) for u in tls_masters.tls_urls[:2]], connect_timeout=1.0)
    lock_cycle(dlm, name, ("ok",) * 3)


def test_reply_split_across_tls_records_and_reads(make_client, tls_urls, name):
    # 8,000 SETs answered in one go: 40 KB of "+OK\r\n", more than two 16 KB TLS records (a reply
    # straddles each record boundary: 16384 is not a multiple of 5), often over several reads.
    dlm = make_client(tls_urls, connect_timeout=1.0, io_timeout=5.0)
    names = [f"{name}:{j}" for j in range(8000)]
    locks = dlm.acquire_many(names, ttl=TTL)
    assert all(lock is not None for lock in locks)
    assert dlm.release_many(locks) == [True] * len(locks)
    held = dlm.acquire_many(names[:10], ttl=TTL)
    assert all(lock is not None for lock in held)  # every key was released
    dlm.release_many(held)


def test_four_threads_share_a_tls_client(make_client, tls_urls, name):
    dlm = make_client(tls_urls, connect_timeout=1.0, retry_count=200, retry_delay=0.001, retry_jitter=0.002)
    inside, overlaps, done, errors = [0], [0], [0], []
    guard = threading.Lock()

    def work():
        try:
            for _ in range(25):
                with dlm.lock(name, ttl=TTL):
                    with guard:
                        inside[0] += 1
                        overlaps[0] += inside[0] > 1
                    time.sleep(0.0005)
                    with guard:
                        inside[0] -= 1
                        done[0] += 1
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and done[0] == 100 and overlaps[0] == 0


def test_fault_proxy_forwards_tls(make_client, tls_masters, certs, name):
    with FaultProxy(("127.0.0.1", tls_masters[0].tls_port)) as proxy:
        proxied = with_ca(f"rediss://127.0.0.1:{proxy.port}", certs.ca)
        dlm = make_client([proxied] + [with_ca(u, certs.ca) for u in tls_masters.tls_urls[1:]],
                          connect_timeout=1.0, cooldown=0)
        lock_cycle(dlm, name)
        proxy.stall()
        lock = dlm.lock(name, ttl=TTL)
        assert timed(lock.acquire, bound(1))
        assert outcomes(lock)[0] in ("timeout", "pending") and outcomes(lock)[1:] == ["ok"] * 4
        lock.release()
        proxy.heal()


# --- each failure is that master's outcome; the others decide --------------------------------------
def acquire_with_bad_first(make_client, bad_url, tls_urls, name):
    """Acquire on [bad] + 4 good TLS masters with the suite's timeouts: it must succeed within one
    round's bound (the handshake counts as the connect); return the bad master's outcome."""
    dlm = make_client([bad_url] + tls_urls[1:], cooldown=0)
    warm = dlm.lock(name + ":warm", ttl=TTL)
    warm.acquire()
    warm.release()
    lock = dlm.lock(name, ttl=TTL)
    assert timed(lock.acquire, bound(1)), lock.outcomes
    assert outcomes(lock)[1:] == ["ok"] * 4
    lock.release()
    return lock.outcomes[0]


def test_wrong_ca_is_a_tls_error(make_client, tls_masters, tls_urls, certs, name):
    bad = with_ca(tls_masters[0].tls_url, certs.wrong_ca)
    out = acquire_with_bad_first(make_client, bad, tls_urls, name)
    assert out.outcome == "tls error" and "CERTIFICATE_VERIFY_FAILED" in out.detail, out


def test_expired_certificate_is_a_tls_error(make_client, odd_master, tls_urls, certs, name):
    time.sleep(max(0.0, certs.expired_at - time.time()))
    m = odd_master(cert=certs.expired)
    out = acquire_with_bad_first(make_client, with_ca(m.tls_url, certs.ca), tls_urls, name)
    assert out.outcome == "tls error" and "expired" in out.detail, out


def test_other_host_certificate_is_a_tls_error(make_client, odd_master, tls_urls, certs, name):
    m = odd_master(cert=certs.other_host)
    out = acquire_with_bad_first(make_client, with_ca(m.tls_url, certs.ca), tls_urls, name)
    assert out.outcome == "tls error" and "mismatch" in out.detail, out
    # ... and accepted when host name checking is off on purpose
    out = acquire_with_bad_first(make_client, with_ca(m.tls_url, certs.ca, ssl_check_hostname="false"),
                                 tls_urls, name)
    assert out.outcome == "ok", out


def test_missing_client_certificate_is_refused(make_client, odd_master, tls_urls, certs, name):
    m = odd_master(auth_clients=True)
    out = acquire_with_bad_first(make_client, with_ca(m.tls_url, certs.ca), tls_urls, name)
    # TLS 1.3: the client's handshake ends first; the master's alert comes with the first reply.
    assert out.outcome == "tls error" and "CERTIFICATE_REQUIRED" in out.detail, out


def test_no_common_protocol_version_is_a_tls_error(make_client, certs, tls_binary, tls_urls, name):
    m = start_master(tls=certs.server_tls(), binary=tls_binary, extra_args=["--tls-protocols", "TLSv1.2"])
    try:
        ok = acquire_with_bad_first(make_client, with_ca(m.tls_url, certs.ca), tls_urls, name)
        assert ok.outcome == "ok", ok  # the control: TLS 1.2 is fine by default
        bad = with_ca(m.tls_url, certs.ca, ssl_min_version="TLSv1_3")
        out = acquire_with_bad_first(make_client, bad, tls_urls, name)
        assert out.outcome == "tls error" and "PROTOCOL_VERSION" in out.detail, out
    finally:
        m.stop()


def test_plain_client_to_a_tls_port(make_client, tls_masters, tls_urls, name):
    out = acquire_with_bad_first(make_client, f"redis://127.0.0.1:{tls_masters[0].tls_port}", tls_urls, name)
    assert out.outcome == "connection error", out  # the master resets it


def test_tls_client_to_a_plain_port(make_client, masters, tls_urls, name):
    # The plain master reads the ClientHello as an inline command and waits for its end: the
    # handshake never finishes, and the connect deadline ends it.
    out = acquire_with_bad_first(make_client, masters[0].url.replace("redis://", "rediss://"), tls_urls, name)
    assert out.outcome == "timeout", out


def test_tls_master_stalled_mid_round(make_client, odd_master, tls_urls, certs, name):
    m = odd_master()
    dlm = make_client([with_ca(m.tls_url, certs.ca)] + tls_urls[1:], wait_for_all=True, cooldown=0)
    lock_cycle(dlm, name)
    with paused(m):
        lock = dlm.lock(name, ttl=TTL)
        assert timed(lock.acquire, bound(1, reconnect=False))
        assert outcomes(lock) == ["timeout"] + ["ok"] * 4
        timed(lock.release, bound(1))
    gone_within([m], name, bound(2))


def test_errors_name_the_tls_failure(make_client, tls_masters, certs, name):
    urls = [with_ca(u, certs.wrong_ca) for u in tls_masters.tls_urls]
    dlm = make_client(urls, retry_count=0)
    with pytest.raises(LockError) as info:
        with dlm.lock(name, ttl=TTL):
            pass
    assert [o.outcome for o in info.value.outcomes] == ["tls error"] * 5
    assert "tls error (CERTIFICATE_VERIFY_FAILED" in str(info.value)
    assert dlm.stats()[0].last_failure.startswith("tls error")


def test_handshake_commands_go_through_tls(make_client, tls_urls, name):
    # Restart-aware voting reads INFO on each new connection (behind the TLS handshake): these
    # masters are younger than an hour, so each says "restarted recently", which only INFO tells.
    dlm = make_client(tls_urls, restart_aware=True, restart_grace=3600.0, connect_timeout=1.0, retry_count=0)
    lock = dlm.lock(name, ttl=TTL)
    assert not lock.acquire()
    assert outcomes(lock) == ["restarted recently"] * 5


def test_cython_core_without_its_c_tls_path(make_client, tls_urls, name, core):
    # The C twin drives rounds on the SSL object in C once the handshake is done, and falls back
    # to the shared Python state machine where OpenSSL's functions are not reachable: run that too.
    if core != "cython":
        pytest.skip("the C twin's fallback")
    from fastredlock.io import core_c

    core_c._set_tls_in_c(False)
    try:
        dlm = make_client(tls_urls, connect_timeout=1.0, io_timeout=5.0)
        for _ in range(5):
            lock_cycle(dlm, name)
        locks = dlm.acquire_many([f"{name}:{j}" for j in range(8000)], ttl=TTL)
        assert all(lock is not None for lock in locks)
        assert dlm.release_many(locks) == [True] * len(locks)
    finally:
        core_c._set_tls_in_c(True)


def test_reconnect_resumes_the_tls_session(tls_masters, certs, core):
    # Observed on the pure twin, whose TLS state is a Python object (the C twin keeps the same
    # TlsConn, and hands it the previous session the same way).
    if core != "python":
        pytest.skip("the session is observed on the pure twin's TlsConn")
    from fastredlock.io.core_py import Core
    from fastredlock.io.masters import parse_masters

    twin = Core(parse_masters([with_ca(tls_masters[0].tls_url, certs.ca)]), 0.5, 1.0, 0.01)
    reused = []
    for _ in range(3):
        assert twin.acquire(b"resume", b"t", 5000).outcomes == (0,)
        twin.release(b"resume", b"t")
        reused.append(twin._tls[0].obj.session_reused)
        twin.close()
    assert reused == [False, True, True]
