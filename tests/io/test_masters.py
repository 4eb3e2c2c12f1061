"""The ways to name a master, and logging in to it: URLs, dicts, tuples, redis.Redis, AUTH, db, Unix."""
from __future__ import annotations

import pytest

from fastredlock import Redlock
from fastredlock.io.masters import MasterSpec, parse_master
from fastredlock.testing import start_masters


@pytest.mark.parametrize(
    "given, expected",
    [
        ("redis://127.0.0.1:7001", MasterSpec("127.0.0.1", 7001, None, 0, None, None)),
        ("redis://localhost", MasterSpec("localhost", 6379, None, 0, None, None)),
        ("redis://127.0.0.1:7001/3", MasterSpec("127.0.0.1", 7001, None, 3, None, None)),
        ("redis://:s3cret@127.0.0.1:7001", MasterSpec("127.0.0.1", 7001, None, 0, None, "s3cret")),
        ("redis://s3cret@127.0.0.1:7001", MasterSpec("127.0.0.1", 7001, None, 0, None, "s3cret")),
        ("redis://al%40ice:p%3Aw@127.0.0.1:7001/2", MasterSpec("127.0.0.1", 7001, None, 2, "al@ice", "p:w")),
        ("unix:///tmp/r.sock", MasterSpec(None, 0, "/tmp/r.sock", 0, None, None)),
        ("unix:///tmp/r.sock?db=4", MasterSpec(None, 0, "/tmp/r.sock", 4, None, None)),
        ({"host": "127.0.0.1", "port": 7002, "db": 1, "password": "pw"},
         MasterSpec("127.0.0.1", 7002, None, 1, None, "pw")),
        ({"unix_socket_path": "/tmp/x.sock"}, MasterSpec(None, 0, "/tmp/x.sock", 0, None, None)),
        (("127.0.0.1", 7003), MasterSpec("127.0.0.1", 7003, None, 0, None, None)),
    ],
)
def test_parse_master_forms(given, expected):
    assert parse_master(given) == expected


def test_dict_with_unknown_key_raises():
    with pytest.raises(ValueError, match="masters"):
        parse_master({"host": "127.0.0.1", "prot": 7001})


def test_label_hides_password():
    spec = parse_master("redis://user:secret@127.0.0.1:7001/2")
    assert "secret" not in spec.label and spec.label == "127.0.0.1:7001/2"


def test_redis_py_clients_are_read_not_used(make_client, masters, name, keys_on):
    redis = pytest.importorskip("redis")
    clients = [redis.Redis(host=m.host, port=m.port) for m in masters]
    dlm = make_client(clients)
    assert dlm.masters == tuple(f"127.0.0.1:{m.port}" for m in masters)
    with dlm.lock(name, ttl=5.0):
        assert keys_on(masters, name) == 5
    for c in clients:
        assert c.connection_pool._created_connections == 0  # redis-py never opened a socket


def test_password_and_db_are_used(make_client, name):
    with start_masters(3, extra_args=["--requirepass", "pw"]) as local:
        urls = [f"redis://:pw@127.0.0.1:{m.port}/5" for m in local]
        with make_client(urls).lock(name, ttl=5.0) as lock:
            for m in local:
                assert m.command("AUTH", "pw") == b"OK"
        # the key went to db 5, behind the password
        checks = []
        for m in local:
            import socket

            import hiredis

            from fastredlock.protocol.resp import encode_command

            with socket.create_connection((m.host, m.port)) as s:
                s.sendall(encode_command(b"AUTH", b"pw") + encode_command(b"SELECT", b"5")
                          + encode_command(b"SET", b"probe", b"1"))
                r = hiredis.Reader()
                replies = []
                while len(replies) < 3:
                    r.feed(s.recv(4096))
                    while (x := r.gets()) is not False:
                        replies.append(x)
                checks.append(replies)
        assert all(c == [b"OK", b"OK", b"OK"] for c in checks)
        assert lock.outcomes and all(o.outcome == "ok" for o in lock.outcomes)


def test_wrong_password_counts_as_no_with_server_message(make_client, name):
    with start_masters(3, extra_args=["--requirepass", "pw"]) as local:
        urls = [f"redis://:{'pw' if i else 'wrong'}@127.0.0.1:{m.port}" for i, m in enumerate(local)]
        lock = make_client(urls, retry_count=0).lock(name, ttl=5.0)
        assert lock.acquire()  # 2 of 3
        first = lock.outcomes[0]
        assert first.outcome == "error reply"
        assert "WRONGPASS" in first.detail or "invalid" in first.detail
        lock.release()


def test_acl_user_login(make_client, name):
    with start_masters(3) as local:
        for m in local:
            assert m.command("ACL", "SETUSER", "locker", "on", ">lpw", "~*", "+@all") == b"OK"
        urls = [f"redis://locker:lpw@127.0.0.1:{m.port}" for m in local]
        with make_client(urls).lock(name, ttl=5.0) as lock:
            assert [o.outcome for o in lock.outcomes] == ["ok"] * 3
        denied = [f"redis://locker:nope@127.0.0.1:{m.port}" for m in local]
        lock = make_client(denied, retry_count=0).lock(name, ttl=5.0)
        assert not lock.acquire()
        assert all(o.outcome == "error reply" for o in lock.outcomes)


def test_unix_socket_masters(make_client, name):
    with start_masters(3, unix_socket=True) as local:
        urls = [f"unix://{m.unix_path}" for m in local]
        dlm = make_client(urls)
        with dlm.lock(name, ttl=5.0) as lock:
            assert [o.outcome for o in lock.outcomes] == ["ok"] * 3
            assert all(m.command("GET", name) == lock.token for m in local)


def test_unreachable_host_counts_as_connection_error(make_client, name):
    # a port nobody listens on (bound then released) -> refused
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    lock = make_client([f"redis://127.0.0.1:{port}"], retry_count=0).lock(name, ttl=1.0)
    assert lock.acquire() is False
    assert lock.outcomes[0].outcome == "connection error"


# --- TLS settings -------------------------------------------------------------------------------
def test_rediss_url_takes_redis_py_query_parameters(certs):
    spec = parse_master(f"rediss://u:pw@localhost:7001/2?ssl_ca_certs={certs.ca}&ssl_certfile={certs.client}"
                        f"&ssl_keyfile={certs.client_key}&ssl_check_hostname=false&ssl_min_version=TLSv1_2")
    assert (spec.host, spec.port, spec.db, spec.username, spec.password) == ("localhost", 7001, 2, "u", "pw")
    assert spec.tls.ca_certs == certs.ca and spec.tls.certfile == certs.client
    assert spec.tls.check_hostname is False and spec.tls.min_version == "TLSv1_2"
    assert parse_master("redis://localhost:7001").tls is None


def test_tls_context_verifies_by_default(certs):
    import ssl

    from fastredlock.io.tls import context_for

    ctx = context_for(parse_master(f"rediss://localhost:7001?ssl_ca_certs={certs.ca}").tls)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    none = context_for(parse_master("rediss://localhost:7001?ssl_cert_reqs=none").tls)
    assert none.verify_mode == ssl.CERT_NONE and not none.check_hostname


def test_tls_dicts_and_redis_py_clients(certs):
    redis = pytest.importorskip("redis")
    spec = parse_master({"host": "localhost", "port": 7001, "ssl": True, "ssl_ca_certs": certs.ca})
    assert spec.tls.ca_certs == certs.ca
    client = redis.Redis(host="localhost", port=7002, ssl=True, ssl_ca_certs=certs.ca,
                         ssl_certfile=certs.client, ssl_keyfile=certs.client_key)
    spec = parse_master(client)
    assert spec.tls.ca_certs == certs.ca and spec.tls.keyfile == certs.client_key
    assert parse_master(redis.Redis(host="localhost", port=7003)).tls is None


@pytest.mark.parametrize("bad, match", [
    ("rediss://localhost:7001?ssl_ca_certs=/nonexistent/ca.pem", "cannot load the TLS files"),
    ("rediss://localhost:7001?ssl_cert_reqs=maybe", "ssl_cert_reqs"),
    ("rediss://localhost:7001?ssl_min_version=SSLv2", "ssl_min_version"),
    ({"host": "localhost", "port": 7001, "ssl_ca_certs": "/x"}, "without ssl=True"),
])
def test_bad_tls_settings_raise_naming_masters(bad, match):
    with pytest.raises(ValueError, match=match):
        parse_master(bad)


def test_redlock_ssl_context_is_the_default_for_tls_masters(one_core, certs):
    import ssl

    ctx = ssl.create_default_context(cafile=certs.ca)
    dlm = Redlock(["rediss://localhost:7001", f"rediss://localhost:7002?ssl_ca_certs={certs.ca}",
                   "redis://localhost:7003"], ssl_context=ctx, core=one_core)
    tls = [spec.tls for spec in dlm._specs]
    assert tls[0].context is ctx and tls[1].context is None and tls[2] is None
    with pytest.raises(TypeError, match="ssl_context"):
        Redlock(["rediss://localhost:7001"], ssl_context="not a context", core=one_core)


# --- Sentinel masters ---------------------------------------------------------------------------------
def _sentinel(sentinels, service, db=0, username=None, password=None, s_user=None, s_password=None, tls=None):
    from fastredlock.io.masters import SentinelSpec

    return MasterSpec(None, 0, None, db, username, password, tls, SentinelSpec(tuple(sentinels), service, s_user, s_password))


@pytest.mark.parametrize(
    "given, expected",
    [
        ("redis+sentinel://127.0.0.1:26379,localhost:26380,[::1]/svc",
         _sentinel([("127.0.0.1", 26379), ("localhost", 26380), ("::1", 26379)], "svc")),
        ("redis+sentinel://u:p%40w@127.0.0.1:26379/svc/3?sentinel_password=sp&sentinel_username=su",
         _sentinel([("127.0.0.1", 26379)], "svc", 3, "u", "p@w", "su", "sp")),
        ("redis+sentinel://pw@127.0.0.1/svc?db=2", _sentinel([("127.0.0.1", 26379)], "svc", 2, None, "pw")),
        ({"sentinels": ["127.0.0.1:1", ("127.0.0.1", 2)], "service": "m", "db": 1, "password": "x",
          "sentinel_password": "y"}, _sentinel([("127.0.0.1", 1), ("127.0.0.1", 2)], "m", 1, None, "x", None, "y")),
    ],
)
def test_parse_sentinel_forms(given, expected):
    assert parse_master(given) == expected
    assert parse_master(given).label.startswith("sentinel:")


def test_parse_sentinel_tls_and_redis_sentinel_objects():
    from redis.sentinel import Sentinel

    spec = parse_master("rediss+sentinel://127.0.0.1:26379/svc?ssl_cert_reqs=none")
    assert spec.sentinel.service == "svc" and spec.tls is not None and spec.tls.cert_reqs == "none"
    sentinel = Sentinel([("127.0.0.1", 26379), ("127.0.0.2", 26380)], sentinel_kwargs={"password": "sp"},
                        password="mp", db=2)
    expected = _sentinel([("127.0.0.1", 26379), ("127.0.0.2", 26380)], "svc", 2, None, "mp", None, "sp")
    assert parse_master((sentinel, "svc")) == expected
    assert parse_master(sentinel.master_for("svc")) == expected
    with pytest.raises(TypeError, match="service name"):
        parse_master(sentinel)


@pytest.mark.parametrize(
    "bad, match",
    [
        ("redis+sentinel://127.0.0.1:26379", "malformed URL"),
        ("redis+sentinel://127.0.0.1:26379/a/1/x", "malformed URL"),
        ("redis+sentinel://127.0.0.1:99999/a", "port 99999 out of range"),
        ("redis+sentinel://127.0.0.1/a?ssl_ca_certs=/x", "without ssl=True"),
        ({"sentinels": [], "service": "a"}, "non-empty list"),
        ({"sentinels": [("h", 1)], "service": ""}, "service name"),
        ({"sentinels": [("h", 1)], "service": "a", "port": 6379}, "asked of its sentinels"),
    ],
)
def test_bad_sentinel_masters_raise_naming_masters(bad, match):
    with pytest.raises(ValueError, match=match):
        parse_master(bad)


def test_command_line_lists_keep_a_sentinel_urls_commas():
    from fastredlock.io.masters import split_urls

    assert split_urls("redis://a:1,redis+sentinel://h:1,h:2/svc,redis://b:2 unix:///x.sock") == [
        "redis://a:1", "redis+sentinel://h:1,h:2/svc", "redis://b:2", "unix:///x.sock"]
