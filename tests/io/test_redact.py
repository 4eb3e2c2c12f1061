"""No password in text (security issue 39, item 7): one planted password, grepped through every
message, ``repr``, CLI line, log, event and metric that can hold a URL or a master's settings.

The rule itself lives in :mod:`fastredlock.io.redact`; the first test pins it."""
from __future__ import annotations

import asyncio
import logging
import traceback

import pytest

import fastredlock
import fastredlock.asyncio
from fastredlock.io.masters import parse_master
from fastredlock.io.redact import redact, redact_settings

SECRET = "S3cretPW"


def _text_of(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)) + repr(exc)


@pytest.mark.parametrize("text, shown", [
    ("redis://user:S3cretPW@h:1/0", "redis://user:***@h:1/0"),
    ("redis://S3cretPW@h:1", "redis://***@h:1"),
    ("rediss://:S3cretPW@h:1", "rediss://:***@h:1"),
    ("redis://:p@ss@h:1", "redis://:***@h:1"),
    ("redis://u:pa/ss?x#y@h:1/0", "redis://u:***@h:1/0"),     # unencoded, malformed: still masked
    ("unix:///s.sock?db=1&password=S3cretPW", "unix:///s.sock?db=1&password=***"),
    ("redis+sentinel://h:1/svc?sentinel_password=S3cretPW&x=1", "redis+sentinel://h:1/svc?sentinel_password=***&x=1"),
    ("rediss://h:1?ssl_password=S3cretPW", "rediss://h:1?ssl_password=***"),
    ("{'host': 'h', 'password': 'S3cretPW'}", "{'host': 'h', 'password': '***'}"),
    ("Spec(password='S3cretPW', db=0)", "Spec(password='***', db=0)"),
    ("in 'redis://u:S3cretPW@h:x' and redis://S3cretPW@h2", "in 'redis://u:***@h:x' and redis://***@h2"),
    ("redis://h:1/0 no secret", "redis://h:1/0 no secret"),
])
def test_rule(text, shown):
    assert redact(text) == shown


def test_settings_are_masked():
    assert redact_settings({"password": SECRET, "sentinel_password": SECRET, "port": 1, "username": "u"}) == {
        "password": "***", "sentinel_password": "***", "port": 1, "username": "u"}


MALFORMED = [
    f"redis://u:{SECRET}@127.0.0.1:notaport",            # bad port
    f"redis://u:{SECRET}@127.0.0.1:99999",               # port out of range
    f"redis://u:{SECRET}@127.0.0.1:6379/x",              # bad db
    f"redis://u:{SECRET}@127.0.0.1:6379/0?db=-1",         # negative db in the query
    f"redis://u:{SECRET}@:6379",                         # missing host
    f"redis://u:{SECRET}/x@127.0.0.1:6379",              # an unencoded '/' in the password
    f"redis://{SECRET}@127.0.0.1:bad",                   # password-only form
    f"unix:///tmp/x.sock?db=x&password={SECRET}",        # the unix form's ?password=
    f"unix://?password={SECRET}",                        # the unix form without a path
    f"foo://u:{SECRET}@127.0.0.1:1",                     # unknown scheme
    f"rediss://u:{SECRET}@127.0.0.1:1?ssl_cert_reqs=bogus",  # bad TLS setting
    f"redis+sentinel://:{SECRET}@127.0.0.1:1/?sentinel_password={SECRET}",  # no service
    f"redis+sentinel://:{SECRET}@127.0.0.1:x/svc?sentinel_password={SECRET}",  # bad sentinel port
    f"redis+cluster://u:{SECRET}@127.0.0.1:1/2",         # a cluster has no db
]
BAD_DICTS = [
    {"host": "", "password": SECRET},
    {"host": "127.0.0.1", "port": "x", "password": SECRET},
    {"host": "127.0.0.1", "db": "x", "password": SECRET},
    {"host": "127.0.0.1", "bogus": 1, "password": SECRET},
    {"sentinels": [("127.0.0.1", 1)], "service": "", "sentinel_password": SECRET, "password": SECRET},
]


@pytest.mark.parametrize("master", MALFORMED + BAD_DICTS, ids=lambda m: str(m)[:40])
def test_malformed_masters_errors_hold_no_password(one_core, master):
    with pytest.raises((ValueError, TypeError)) as info:
        fastredlock.Redlock([master], core=one_core)
    assert SECRET not in _text_of(info.value)


def test_reprs_of_specs_and_clients_hold_no_password(masters, make_one_client, tmp_path):
    urls = [f"redis://u:{SECRET}@127.0.0.1:1/2", f"redis://{SECRET}@127.0.0.1:1",
            f"unix:///tmp/x.sock?password={SECRET}",
            f"redis+sentinel://u:{SECRET}@127.0.0.1:1,127.0.0.1:2/svc?sentinel_password={SECRET}",
            f"redis+cluster://u:{SECRET}@127.0.0.1:1", f"rediss://u:{SECRET}@127.0.0.1:1?ssl_cert_reqs=none"]
    for url in urls:
        spec = parse_master(url)
        shown = repr(spec) + str(spec) + repr(spec.sentinel) + repr(spec.tls) + repr(spec.cluster) + spec.label
        assert SECRET not in shown and "***" in shown, url
    dict_spec = parse_master({"host": "127.0.0.1", "port": 1, "password": SECRET})
    assert SECRET not in repr(dict_spec)
    # clients: sync, asyncio, and the shims that keep their masters
    user_urls = _user_urls(masters)
    dlm = make_one_client(user_urls)
    assert SECRET not in repr(dlm) + str(dlm.masters) + repr(dlm.stats())

    async def aclient():
        a = fastredlock.asyncio.Redlock(user_urls, restart_aware=False)
        try:
            return repr(a)
        finally:
            await a.aclose()

    assert SECRET not in asyncio.run(asyncio.wait_for(aclient(), 10))
    from fastredlock.compat.aioredlock import Aioredlock, Sentinel
    for connections in (user_urls, [{"host": "127.0.0.1", "port": 1, "password": SECRET}],
                        [f"redis://127.0.0.1:1/0?password={SECRET}"]):
        assert SECRET not in repr(Aioredlock(connections))
    assert SECRET not in repr(Sentinel(f"redis://:{SECRET}@127.0.0.1:1/0?master=m", password=SECRET))
    assert SECRET not in repr(Sentinel({"host": "127.0.0.1", "port": 1, "password": SECRET}, master="m"))


@pytest.fixture
def user(masters):
    """An ACL user with the planted password on every session master (removed afterwards)."""
    for m in masters:
        m.command("ACL", "SETUSER", "redactuser", "on", f">{SECRET}", "~*", "&*", "+@all")
    yield "redactuser"
    for m in masters:
        m.command("ACL", "DELUSER", "redactuser")


def _user_urls(masters):
    return [f"redis://redactuser:{SECRET}@127.0.0.1:{m.port}" for m in masters]


def test_logs_events_metrics_and_errors_hold_no_password(user, masters, make_client, name, caplog, dead_port):
    from fastredlock import metrics

    events = []
    dlm = make_client(_user_urls(masters) + [f"redis://redactuser:{SECRET}@127.0.0.1:{dead_port}"],
                      on_event=events.append, retry_count=1, retry_delay=0.01, io_timeout=0.2)
    recorder = metrics.recorder_of(dlm)
    wrong = make_client([f"redis://redactuser:x{SECRET}@127.0.0.1:{m.port}" for m in masters], retry_count=0)
    with caplog.at_level(logging.DEBUG, logger="fastredlock"):
        lock = dlm.lock(name, ttl=5.0)
        assert lock.acquire()
        lock.extend()
        lock.release()
        assert not wrong.lock(name).acquire(blocking=False)  # every master refuses the login
        text = "".join(str(o) + repr(o) for o in wrong.lock(name).outcomes or ())
        try:
            wrong.lock(name, ttl=5.0).acquire(blocking=True)
        except fastredlock.LockError as exc:
            text += _text_of(exc)
    text += caplog.text + "".join(map(repr, events)) + repr(recorder.snapshot()) + repr(dlm.stats())
    assert events and caplog.records is not None
    assert SECRET not in text


def _cli_output(capsys, call):
    try:
        call()
    except SystemExit:
        pass
    out = capsys.readouterr()
    return out.out + out.err


def test_cli_lines_hold_no_password(user, masters, capsys, name, dead_port):
    import importlib

    audit, main, run = (importlib.import_module(f"fastredlock.cli.{m}") for m in ("audit", "main", "run"))

    good = f"redis://redactuser:{SECRET}@127.0.0.1:{masters[0].port}"
    wrong = f"redis://redactuser:x{SECRET}@127.0.0.1:{masters[0].port}"
    quick = ["--samples", "2", "--timeout", "0.5", "--clock-seconds", "0.1"]
    shown = ""
    for url in MALFORMED[:3] + [wrong, f"redis://redactuser:{SECRET}@127.0.0.1:{dead_port}"]:
        shown += _cli_output(capsys, lambda: run.run(["-m", url, "--wait", "0", name, "--", "true"]))
        shown += _cli_output(capsys, lambda: main.inspect_main([url, name]))
        shown += _cli_output(capsys, lambda: audit.main([url, *quick]))
    shown += _cli_output(capsys, lambda: run.run(["-m", good, "--wait", "1", name, "--", "true"]))
    shown += _cli_output(capsys, lambda: audit.main([good, *quick, "--name", name]))
    assert "127.0.0.1" in shown and "u:***@127.0.0.1" in shown  # the URLs were shown, masked
    assert SECRET not in shown
