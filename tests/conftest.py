"""Fixtures: real local masters and the both-cores parametrization.

Every behavioural test takes ``core`` (directly or through ``dlm``/``make_client``) and so runs
once on the Cython core and once on the pure-Python core. A test that only checks arguments (refused
before any I/O, so the core cannot matter) takes ``one_core`` (or ``one_dlm``/``make_one_client``)
instead and runs once, on the active core. The Cython run *fails* when the extension
is not importable, unless ``FASTREDLOCK_NO_EXTENSIONS`` asked for a pure install: a build that
silently fell back to the slow core must not pass as green.

What the two parameters run, in a C build (``pip install -e .``, ``fastredlock.CORE == "cython"``):

- ``[cython]``: the client's core is ``fastredlock.io.core_c`` (C: ``poll(2)`` without the GIL, the
  C reply parser, ``io/encode_c``) over the compiled protocol (``fastredlock.protocol``, every
  module of setup.py's ``PROTOCOL_MODULES``).
- ``[python]``: the client's core is the pure twin, ``fastredlock.io.core_py``, loaded *interpreted*
  with the protocol it drives: ``fastredlock._pure`` serves ``fastredlock._pure.io.core_py`` and
  ``fastredlock._pure.protocol.*`` from the same ``.py`` files, never the extensions beside them.
  Only the core is interpreted: the layers above it are one copy per process, and the ones setup.py
  compiles stay compiled under ``[python]`` too: ``SEAM_MODULES`` (``engine.executor``,
  ``engine.combine``, ``engine.unwaited``, ``engine.tokens``, ``engine.fork``, ``engine.checks``,
  ``handles.lock``, ``handles.family``, ``sync.lock``, ``sync.family``) and ``ASYNCIO_MODULES``
  (``asyncio.loop_io``, ``asyncio.executor``, ``asyncio.lock``). The modules no list names (the
  sync and asyncio clients, the watchdogs, the notifiers, ``engine.wake``, ``handles.client``, the
  rest of ``io``: TLS, masters, sentinel, cluster) are plain Python under both parameters; the pure
  twin parses replies with ``io.reader`` (hiredis where it is installed, else ``io.reader_py``).
  So in a C build ``[python]`` tests the pure core under the compiled front-end, not a pure install.

A pure install (``FASTREDLOCK_NO_EXTENSIONS=1``, PyPy, or no compiler) interprets everything: there
``[python]`` is the whole package interpreted and ``[cython]`` is skipped, saying why. The protocol
tables (tests/protocol) have their own pair, ``[compiled]``/``[interpreted]``, over the protocol
alone; tests/test_compiled.py checks that a C build compiled every module setup.py lists.
"""
from __future__ import annotations

import os
import uuid

import pytest

import fastredlock
from fastredlock.io.cores import NO_EXTENSIONS
from fastredlock.testing import find_server, make_certs, server_version, start_masters
from fastredlock.testing.tls import tls_server, tls_unsupported


#: The cores the ``core`` fixture runs: both, unless ``FASTREDLOCK_TEST_CORES`` names some (``.ci/run``
#: runs the server-sensitive suites on the other servers with the Cython core alone: both twins send
#: the same bytes, built by one protocol, and both run on the first server; the 20-minute budget).
CORES = [c for c in os.environ.get("FASTREDLOCK_TEST_CORES", "cython,python").replace(",", " ").split()]


def _check_cores() -> None:
    unknown = sorted(set(CORES) - {"cython", "python"})
    if unknown or not CORES:
        raise pytest.UsageError(f"FASTREDLOCK_TEST_CORES: {unknown or 'nothing'}: name cython, python or both")


def pytest_configure(config):
    _check_cores()
    # A server asked for by name or path that is not there stops the run at once, saying what is
    # installed: the suite never falls back to another server than the one asked for.
    if os.environ.get("FASTREDLOCK_REDIS_SERVER"):
        try:
            find_server()
        except FileNotFoundError as exc:
            raise pytest.UsageError(f"FASTREDLOCK_REDIS_SERVER: {exc}") from None


def pytest_report_header(config):
    try:
        binary = find_server()
        server = f"{server_version(binary)} ({binary})"
    except FileNotFoundError as exc:
        server = f"none ({exc})"
    return [f"fastredlock core: {fastredlock.CORE}; no-extensions: {NO_EXTENSIONS}; server: {server}"]


# What `.ci/run` runs again on each other server (-m server; README's command runs everything on
# one): the suites whose outcome depends on the server the masters run, i.e. the protocol-facing
# I/O, the sync and asyncio front-ends, compat and faults, but not their `slow` tests (contention,
# soaks, timeouts: timing, not server features), except the original libraries' own suites against
# their shims (each server answers their fault injection differently: pottery's extend on Valkey
# 8.1). Run once: tests/io/test_server_versions.py (it runs every installed server itself) and the
# Celery fleets (workers and brokers around plain lock calls the sync suites already cover; ~25 s
# a server, which .ci/run's 20-minute budget has not to spare).
SERVER_SUITES = ("io", "sync", "asyncio", "compat", "faults")
SLOW_BUT_PER_SERVER = ("compat/test_compat_suites.py",)
ONCE_FOR_ALL_SERVERS = ("io/test_server_versions.py", "compat/test_celery_once.py", "compat/test_celery_singleton.py")
_TESTS = os.path.dirname(os.path.abspath(__file__))


def pytest_collection_modifyitems(config, items):
    marker = pytest.mark.server
    suites = tuple(os.path.join(_TESTS, d) + os.sep for d in SERVER_SUITES)
    slow_too = tuple(os.path.join(_TESTS, f) for f in SLOW_BUT_PER_SERVER)
    once = tuple(os.path.join(_TESTS, f) for f in ONCE_FOR_ALL_SERVERS)
    for item in items:
        path = str(item.path)
        if not path.startswith(suites) or path in once:
            continue
        if item.get_closest_marker("slow") is None or path in slow_too:
            item.add_marker(marker)


@pytest.fixture(params=CORES)
def core(request) -> str:
    """The name of the core under test; the Cython one must be built unless explicitly disabled."""
    name = request.param
    if name == "cython":
        if NO_EXTENSIONS:
            pytest.skip("FASTREDLOCK_NO_EXTENSIONS is set: the Cython core is disabled on purpose")
        try:
            import fastredlock.io.core_c  # noqa: F401
        except ImportError as exc:  # pragma: no cover - the failure this guards against
            pytest.fail(f"the Cython core is expected but not importable: {exc}")
    return name


@pytest.fixture(scope="session")
def masters():
    """Five masters shared by the whole session; tests must not kill or pause them."""
    with start_masters(5) as local:
        yield local


@pytest.fixture(scope="session")
def server_caps(masters):
    """What the suite's server is and runs (:class:`_server.Capabilities`), asked of a session master."""
    from _server import capabilities

    return capabilities(masters[0])


@pytest.fixture
def fault_masters():
    """Five fresh masters for one test, which may kill, pause or restart them."""
    with start_masters(5) as local:
        yield local


@pytest.fixture
def name() -> str:
    """A lock name no other test uses."""
    return f"test:{uuid.uuid4().hex}"


@pytest.fixture
def one_core() -> str:
    """The active core only (``fastredlock.CORE``): for argument checks, which raise before any I/O."""
    return fastredlock.CORE


def _clients(core):
    """Yield ``make(urls, **kwargs)``, building clients on ``core``; all are closed afterwards."""
    clients = []

    def make(urls, **kwargs):
        kwargs.setdefault("core", core)
        # The suite's masters are younger than its TTLs, so restart-aware voting would (rightly)
        # refuse them; it is tested on its own in faults/test_restart_voting.py.
        kwargs.setdefault("restart_aware", False)
        client = fastredlock.Redlock(urls, **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def make_client(core):
    """Build ``Redlock`` clients on the core under test; all are closed at teardown."""
    yield from _clients(core)


@pytest.fixture
def make_one_client(one_core):
    """``make_client`` on the active core only (argument checks)."""
    yield from _clients(one_core)


def _short_retries(make, masters):
    return make(masters.urls, retry_count=2, retry_delay=0.05, retry_jitter=0.02)


@pytest.fixture
def dlm(make_client, masters):
    """A client on the session masters, on the core under test, with short retries."""
    return _short_retries(make_client, masters)


@pytest.fixture
def one_dlm(make_one_client, masters):
    """``dlm`` on the active core only (argument checks)."""
    return _short_retries(make_one_client, masters)


def _keys_on(local, key) -> int:
    count = 0
    for m in local:
        if m.running():
            count += m.command("EXISTS", key)
    return count


@pytest.fixture
def keys_on():
    """``keys_on(masters, key)``: on how many running masters ``key`` exists, read by a raw connection."""
    return _keys_on


@pytest.fixture
def dead_port():
    """A loopback port nothing listens on (connection refused), held for the test (see
    ``_ports.dead_ports``: no server started meanwhile can take it)."""
    from _ports import dead_ports  # (here: test_server_names copies this file where _ports is not)

    with dead_ports(1) as ports:
        yield ports[0]


@pytest.fixture
def dead_urls():
    """Three loopback URLs nothing listens on (connection refused), distinct, their ports held for
    the test (see ``_ports.dead_ports``: no server started meanwhile can take one and answer)."""
    from _ports import dead_ports

    with dead_ports(3) as ports:
        yield [f"redis://127.0.0.1:{port}" for port in ports]


# --- TLS masters --------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    """A CA, server/client certificates, a wrong CA, an expired and an other-host certificate."""
    return make_certs(str(tmp_path_factory.mktemp("certs")))


@pytest.fixture(scope="session")
def tls_binary(certs):
    """A server binary built with TLS (Debian's redis-server is; the server extra's are not):
    the TLS tests are skipped, saying why, where none is installed. With FASTREDLOCK_REDIS_SERVER
    set, only that server: the run is about it (asked by starting it with a TLS port)."""
    if os.environ.get("FASTREDLOCK_REDIS_SERVER"):
        binary = find_server()
        reason = tls_unsupported(binary, certs)
        if reason is not None:
            pytest.skip(f"FASTREDLOCK_REDIS_SERVER's {server_version(binary)} serves no TLS: {reason}")
        return binary
    try:
        return tls_server(certs)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def tls_masters(certs, tls_binary):
    """Five TLS masters (each with a plain port too) shared by the session; do not kill or pause."""
    with start_masters(5, tls=certs.server_tls(), binary=tls_binary) as local:
        yield local
