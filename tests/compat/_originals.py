"""The original libraries the shims replace: isolated installs, their sdists' own test suites, adapted.

redlock-py and glasslion's redlock both install a top-level module ``redlock``, so neither is ever
imported into the test process: each is installed with ``pip install --target`` into its own folder
under the cache (``$FASTREDLOCK_COMPAT_CACHE``, default ``~/.cache/fastredlock-compat``), with its
own redis-py, and runs in a subprocess whose ``PYTHONPATH`` is that folder.

The originals' own test suites come from their sdists (``pip download --no-binary :all:``). They are
run unchanged but for the adaptations listed in :data:`ADAPTATIONS`, once against the original and
once against the shim, on the same fresh local server. What is adapted, and why:

- the server: every ``localhost`` / ``localhost:6379`` the suites hard-code becomes the local test
  server's port (pottery's sdist ships no ``conftest.py``; ours gives the ``redis`` fixture of
  pottery's repository, pointed at that server); pottery's ``test_contention`` uses five dbs of one
  server as its five masters: the shim accepts them (with a warning: one server is no fault
  tolerance), so they stay five dbs of the local server;
- the import lines, in the shim's run only: ``from redlock import ...`` /
  ``from pottery import ...`` name the shim's module instead;
- glasslion's ``import mock`` (the PyPI backport) becomes ``from unittest import mock``, the same
  library in the standard library;
- redlock-py's ``assertEquals`` becomes ``assertEqual`` on Pythons that removed the alias (3.12+);
- pottery's six fault tests patched redis-py internals (``Redis.set``, ``Script.__call__``) to raise
  ``TimeoutError``; the shim does not lock through redis-py, so those patches would not reach it.
  They become ``refuse(master, command, ...)``: the server itself refuses those commands to the
  client's user (an ACL rule, lifted at the end of the block), a real master failure that both the
  original and the shim see as a redis error;
- in the shim's run only, ``fastredlock.compat.configure(restart_aware=False, core=...)``: the
  server was just started, and restart-aware voting would (rightly) not trust it yet (python-redis-lock's
  ``helper.py``, run as a subprocess, gets the same line);
- python-redis-lock's suite runs as its sdist ships it (its ``conftest.py`` starts a ``redis-server`` on
  a Unix socket, ``helper.py``/``config.py`` beside it, with ``process-tests``, ``gevent`` and
  ``eventlet`` installed for its ``effect`` fixture); not run: ``tests/test_django_integration.py``
  (the Django cache backend, ``redis_lock.django_cache``, which the shim does not replace). The tests
  where the shim differs on purpose are listed in :data:`DIFFERENCES`, each with why;
- pottery's asyncio suite (``pottery-aio``: ``tests/test_aioredlock.py``) needs what its repository
  has and its sdist lacks: pytest-asyncio in auto mode (``Original.suite_deps`` and
  ``pytest_args``; installed into both runs' folders with this environment's pytest pinned, never
  into the environment itself), and the repository conftest's ``aioredis`` fixture and uvloop (used
  when installed). Its documented examples name ``localhost:6379`` and use the names the module
  imports (``math``, ``AIORedis``), which the shim's run gets from the original's import lines;
- redis-py's lock suites (``redis-py``: ``tests/test_lock.py``; ``redis-py-aio``:
  ``tests/test_asyncio/test_lock.py``, pytest-asyncio in auto mode as redis-py's pytest.ini sets it)
  pass ``lock_class=Lock`` to ``r.lock(...)``: in the shim's run the import of ``Lock`` names the
  shim's class (``AsyncLock as Lock`` for asyncio). redis-py's own conftest needs its whole test
  stack (entraid, jwt, sentinels, cluster options), so ours gives the fixtures and helpers the two
  files use (``r``, ``decoded_r``, ``_get_client``, ``create_redis`` with its single/pool params,
  the ``onlynoncluster`` marker, ``skip_if_server_version_lt``), and the sync file imports
  ``_get_client`` from it instead of from the package's ``.conftest``;
- tests that patch or read the original's private internals (redis-py's fake clocks, which replace
  its private module attributes ``redis.lock.mod_time`` and ``redis.asyncio.lock.asyncio``;
  python-redis-lock's renewal thread and its log lines) are listed in ``Original.differences`` or
  :data:`DIFFERENCES` with the reason: the shim must fail exactly those (with the listed evidence in
  the failure message, where one is given), and pass every other test the original passes;
- aioredlock's sdist ships no tests: ``test_compat_aioredlock_acceptance.py`` checks the behaviours of
  its repository's acceptance tests (tag v0.7.3), written from reading them, in every connection form.
"""
from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple


class Original(NamedTuple):
    dist: str  # the PyPI name
    version: str  # pinned: the suites and the differences documented are those of this version
    shim: str  # the module that replaces it
    tests: Tuple[str, ...]  # the sdist's test files that cover what the shim replaces
    pins: Tuple[str, ...] = ()  # dependencies pinned in both runs (the suite's expectations need them)
    doctests: Tuple[Tuple[str, str], ...] = ()  # (source file, module name): documented examples run too
    suite_deps: Tuple[str, ...] = ()  # what the suite itself needs (a pytest plugin), in both runs
    pytest_args: Tuple[str, ...] = ()  # the suite's pytest configuration (its repository's pytest.ini)
    support: Tuple[str, ...] = ()  # the sdist's helper files the tests import (copied beside them)
    differences: Tuple["Difference", ...] = ()  # the suite's tests that assert a documented difference


class Difference(NamedTuple):
    """A test of the original's suite that asserts what the shim documents as different: it passes
    against the original and must fail against the shim, with a message matching ``evidence``."""

    test: str  # the test function's name (every parametrization of it)
    why: str
    evidence: str  # a regex the shim's failure message must match

    def covers(self, test_id: str) -> bool:
        return test_id.split("::")[-1].split("[")[0] == self.test


#: pottery's suite compares an exception's repr with the redis-py 5 form of a client's repr (later
#: versions add the socket options); the same redis-py serves both runs of every suite.
_REDIS_PY = "redis==5.3.1"
#: python-redis-lock's connection fixtures: ``make_conn`` over ``make_conn_plain``, each with and without
#: ``decode_responses`` (pytest joins their ids).
_DECODE_IDS = [f"decode_responses={a}-decode_responses={b}" for a in ("True", "False") for b in ("True", "False")]

ORIGINALS: Dict[str, Original] = {
    "redlock-py": Original("redlock-py", "1.0.8", "fastredlock.compat.redlock_py", ("tests/test_redlock.py",),
                           (_REDIS_PY,)),
    "redlock": Original("redlock", "1.2.0", "fastredlock.compat.redlock",
                        ("tests/test_lock.py", "tests/test_factory.py"), (_REDIS_PY,)),
    "pottery": Original("pottery", "3.0.1", "fastredlock.compat.pottery", ("tests/test_redlock.py",), (_REDIS_PY,),
                        (("pottery/redlock.py", "pottery.redlock"),)),
    # Its sdist ships no tests (tests/compat/test_compat_aioredlock.py checks its documented behaviour);
    # it needs aioredis 1.x, which still runs on the Pythons we test (3.11 here), for the interop run.
    "aioredlock": Original("aioredlock", "0.7.3", "fastredlock.compat.aioredlock", (), ("aioredis==1.3.1",)),
    # pottery's asyncio Redlock: its tests are async functions, run by pytest-asyncio in auto mode
    # (pottery's repository sets asyncio_mode = auto in its pytest.ini, which the sdist lacks).
    "pottery-aio": Original("pottery", "3.0.1", "fastredlock.compat.pottery", ("tests/test_aioredlock.py",),
                            (_REDIS_PY,), (("pottery/aioredlock.py", "pottery.aioredlock"),),
                            suite_deps=("pytest-asyncio==1.4.0",),
                            pytest_args=("-p", "pytest_asyncio.plugin", "-o", "asyncio_mode=auto"),
                            differences=(Difference(
                                "test_release_rediserror",
                                "the server refuses scripts and the native owner-checked deletes before the lock "
                                "is taken (its acquire() runs inside the refusal): pottery takes a lock it then "
                                "cannot release; the shim refuses to acquire where no safe release exists "
                                "(ScriptsRefusedError, naming the right)", r"ScriptsRefusedError|errors\.Scrip"),)),
    # python-redis-lock: a single-server lock (``import redis_lock``). Its suite starts its own
    # redis-server on a Unix socket (process-tests' TestProcess) and runs helper.py in subprocesses,
    # also under gevent and eventlet monkey-patching (its tox.ini pins both; their current releases
    # here, the old pins do not build on this Python).
    "python-redis-lock": Original("python-redis-lock", "4.0.1", "fastredlock.compat.redis_lock",
                                  ("tests/test_redis_lock.py",), (_REDIS_PY,),
                                  suite_deps=("process-tests==3.0.0", "gevent==26.9.0", "eventlet==0.41.3"),
                                  support=("tests/conftest.py", "tests/helper.py", "tests/config.py")),
}

#: The tests of a suite where the shim differs from the original on purpose (a bug not kept, or a
#: detail of the original's internals); each must fail against the shim (and pass against the
#: original), so that a difference that goes away is noticed too.
DIFFERENCES: Dict[str, Dict[str, str]] = {
    "python-redis-lock": {
        **{f"test_redis_lock::test_simple_auto_renewal[{effect}]": (
            "reads the renewal thread's log lines ('Starting renewal thread', 'Refreshing Lock'): the shim "
            "renews with fastredlock's watchdog (one thread per process, all locks), which logs none")
           for effect in ("normal", "gevent", "eventlet")},
        **{f"test_redis_lock::test_auto_renewal[{conn}]": (
            "checks lock._lock_renewal_thread is a threading.Thread of its own: the watchdog renews instead "
            "(the key is still renewed: the test's own assertion on the key is covered by "
            "test_compat_redis_lock.py::test_auto_renewal_keeps_it_and_stops_when_the_lock_is_collected)")
           for conn in _DECODE_IDS},
        **{f"test_redis_lock::test_auto_renewal_stops_after_gc[{conn}]": (
            "joins lock._lock_renewal_thread (None in the shim); that renewal stops when the lock is "
            "collected, and the key expires, is checked by test_compat_redis_lock.py")
           for conn in _DECODE_IDS},
    },
}

#: redis-py's lock suites, as of the release the issue names (its Lock keeps a lock made without
#: ``timeout`` without expiry: ``TTL == -1``, which the shim does too).
_REDIS_PY_LOCKS = "redis==8.1.0"
#: Tests of redis-py's sync lock suite that replace ``redis.lock.mod_time`` (a private module
#: attribute: redis-py's clock) with a fake one that never sleeps, then assert what that fake clock
#: saw. The shim keeps its own clock, so the fake one sees nothing.
_FAKE_CLOCK = ("patches redis-py's private module attribute redis.lock.mod_time (a fake clock) and asserts "
               "what it saw: the shim sleeps and reads time with its own clock, which the patch does not reach")
_REDIS_PY_DIFFERENCES = tuple(Difference(test, _FAKE_CLOCK, r"fake_lock_time\.(now|sleeps)")
                              for test in ("test_blocking_timeout", "test_context_manager_blocking_timeout"))
#: The asyncio suite's fake clock replaces the private module attribute ``redis.asyncio.lock.asyncio``
#: (its ``get_running_loop().time()`` and ``sleep``), likewise out of the shim's reach.
_FAKE_LOOP_CLOCK = _FAKE_CLOCK.replace("redis.lock.mod_time", "redis.asyncio.lock.asyncio")
_REDIS_PY_AIO_DIFFERENCES = (Difference("test_blocking_timeout", _FAKE_LOOP_CLOCK, r"fake_lock_time\.(now|sleeps)"),)
ORIGINALS.update({
    # redis-py's own Lock: the sdist's tests of redis.lock.Lock, with a conftest of our own that gives
    # the fixtures of redis-py's tests/conftest.py they use (its conftest needs a whole test stack).
    "redis-py": Original("redis", "8.1.0", "fastredlock.compat.redis_py", ("tests/test_lock.py",),
                         (_REDIS_PY_LOCKS,), differences=_REDIS_PY_DIFFERENCES),
    # redis.asyncio.lock.Lock: async tests run by pytest-asyncio in auto mode (redis-py's pytest.ini).
    "redis-py-aio": Original("redis", "8.1.0", "fastredlock.compat.redis_py", ("tests/test_asyncio/test_lock.py",),
                             (_REDIS_PY_LOCKS,), suite_deps=("pytest-asyncio==1.4.0",),
                             pytest_args=("-p", "pytest_asyncio.plugin", "-o", "asyncio_mode=auto"),
                             differences=_REDIS_PY_AIO_DIFFERENCES),
})

#: The originals whose sdists ship a test suite (run by test_compat_suites.py).
WITH_SUITES = [name for name, orig in ORIGINALS.items() if orig.tests]


class Unavailable(Exception):
    """The original could not be fetched (no network, no such release): its tests are skipped."""


def cache_dir() -> Path:
    root = os.environ.get("FASTREDLOCK_COMPAT_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "fastredlock-compat"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _pip(args: List[str], what: str) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as exc:
        raise Unavailable(f"pip timed out fetching {what}") from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise Unavailable(f"pip could not fetch {what}: {' | '.join(tail)}")


def _build_once(final: Path, build: Callable[[Path], None]) -> Path:
    """Build ``final`` through a temporary sibling and an atomic rename (concurrent runs are safe)."""
    if final.is_dir():
        return final
    tmp = Path(tempfile.mkdtemp(prefix=final.name + ".", dir=final.parent))
    try:
        build(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _label(pins: Tuple[str, ...]) -> str:
    return "-".join(p.replace("==", "-") for p in pins) or "nopins"


def _pins(orig: Original) -> Tuple[str, ...]:
    """What is installed beside the original (or alone, for the shim's run): its pins, and the
    suite's own dependencies with this environment's pytest pinned, so a plugin cannot bring
    another pytest onto the suite's PYTHONPATH."""
    if not orig.suite_deps:
        return orig.pins
    return (*orig.pins, *orig.suite_deps, f"pytest=={importlib.metadata.version('pytest')}")


def install(name: str) -> Path:
    """The folder holding the original and its dependencies (redis-py included), for PYTHONPATH."""
    orig = ORIGINALS[name]
    base = cache_dir() / f"{orig.dist}-{orig.version}"
    base.mkdir(exist_ok=True)
    spec = f"{orig.dist}=={orig.version}"
    pins = _pins(orig)
    extra = [p for p in pins if p != spec]  # redis-py is its own pin (its shim's run needs it too)
    return _build_once(
        base / ("site-" + _label(pins)), lambda tmp: _pip(["install", "--quiet", "--target", str(tmp), spec, *extra], spec)
    )


def shim_deps(name: str) -> Optional[Path]:
    """A folder with the original's pinned dependencies only, for the shim's run (or None)."""
    pins = _pins(ORIGINALS[name])
    if not pins:
        return None
    return _build_once(
        cache_dir() / f"deps-{_label(pins)}",
        lambda tmp: _pip(["install", "--quiet", "--target", str(tmp), *pins], " ".join(pins)),
    )


def sdist(name: str) -> Path:
    """The original's unpacked sdist (its own tests are in there)."""
    orig = ORIGINALS[name]
    base = cache_dir() / f"{orig.dist}-{orig.version}"
    base.mkdir(exist_ok=True)

    def build(tmp: Path) -> None:
        download = tmp / "download"
        _pip(["download", "--quiet", "--no-deps", "--no-binary", ":all:", "-d", str(download),
              f"{orig.dist}=={orig.version}"], f"the sdist of {orig.dist}=={orig.version}")
        (archive,) = list(download.glob("*.tar.gz"))
        with tarfile.open(archive) as tar:
            try:
                tar.extractall(tmp / "unpacked", filter="data")
            except TypeError:  # Python < 3.12 without the filter backport
                tar.extractall(tmp / "unpacked")
        (root,) = list((tmp / "unpacked").iterdir())
        shutil.move(str(root), str(tmp / "src"))

    return _build_once(base / "sdist", build) / "src"


# --- adapting the suites -----------------------------------------------------------------------
class Adaptation(NamedTuple):
    file: str  # the sdist's test file
    old: str  # exact text (or a regex, when regex is True)
    new: str  # may use {port} and {shim}
    why: str
    shim_only: bool = False
    regex: bool = False
    count: Optional[int] = None  # how many occurrences must be found (None: at least one)
    when: Callable[[], bool] = lambda: True


_SERVER = "the server: the suite hard-codes localhost:6379"
_IMPORT = "import line: the shim instead of the original"

def _pottery(file: str, imports: str, n_imports: int, client: str, n_set: int, lock: str, n_scripts: int,
             n_extends: int, script_class: str = "Script") -> List[Adaptation]:
    """What pottery's suites (``Redlock``'s and ``AIORedlock``'s, alike) need adapted in ``file``."""
    return [
        Adaptation(file, imports, "from {shim} import", _IMPORT, shim_only=True, regex=True, count=n_imports),
        Adaptation(file, "urls = [f'redis://localhost:6379/{db}' for db in dbs]",
                   "urls = [f'redis://localhost:{port}/{{db}}' for db in dbs]",
                   "the server: test_contention's five masters are five dbs of the local server (the shim "
                   "accepts them, with a warning that one server is no fault tolerance)", count=1),
        Adaptation(file, f"unittest.mock.patch.object({client}, 'set')", f"refuse({client}, 'set')",
                   "fault injection reaching the shim: the server refuses SET", count=n_set),
        # An extension goes out as `SET ... IFEQ` where the master has it (Valkey >= 8.1, Redis >= 8.4),
        # not as a script: in the extend tests the server refuses that too (refuse() skips the
        # commands a server does not have), so the fault reaches the shim whichever server runs.
        Adaptation(file, rf"unittest\.mock\.patch\.object\({script_class}, '__call__'\)(?=(?:(?!def )[\s\S])*?\.extend\()",
                   f"refuse(next(iter({lock}.masters)), 'eval', 'evalsha', 'set')",
                   "fault injection reaching the shim: the server refuses what an extension sends (scripts, "
                   "and SET for `SET ... IFEQ`)", regex=True, count=n_extends),
        # A release may go out natively (DELIFEQ / DELEX ... IFEQ) where the master has it.
        Adaptation(file, f"unittest.mock.patch.object({script_class}, '__call__')",
                   f"refuse(next(iter({lock}.masters)), 'eval', 'evalsha', 'delifeq', 'delex')",
                   "fault injection reaching the shim: the server refuses scripts (and the native "
                   "owner-checked deletes)", count=n_scripts - n_extends),
        Adaptation(file, "import pytest\n", "import pytest\nfrom _fastredlock_fault import refuse\n",
                   "import of the fault injection above", count=1),
    ]


ADAPTATIONS: Dict[str, List[Adaptation]] = {
    "redlock-py": [
        Adaptation("tests/test_redlock.py", "from redlock import", "from {shim} import", _IMPORT, shim_only=True, count=1),
        Adaptation("tests/test_redlock.py", 'Redlock([{"host": "localhost"}])',
                   'Redlock([{{"host": "localhost", "port": {port}}}])', _SERVER, count=1),
        Adaptation("tests/test_redlock.py", "self.assertEquals(", "self.assertEqual(",
                   "Python 3.12 removed the assertEquals alias", count=1,
                   when=lambda: sys.version_info >= (3, 12)),
    ],
    "redlock": [
        Adaptation("tests/test_lock.py", "from redlock import", "from {shim} import", _IMPORT, shim_only=True, count=1),
        Adaptation("tests/test_factory.py", "from redlock import", "from {shim} import", _IMPORT, shim_only=True, count=1),
        Adaptation("tests/test_lock.py", "import mock\n", "from unittest import mock\n",
                   "the PyPI `mock` backport is the standard library's unittest.mock", count=1),
        Adaptation("tests/test_lock.py", '{"host": "localhost"}', '{{"host": "localhost", "port": {port}}}', _SERVER),
        Adaptation("tests/test_factory.py", '{"host": "localhost"}', '{{"host": "localhost", "port": {port}}}', _SERVER),
        Adaptation("tests/test_lock.py", '"redis://localhost/0"', '"redis://localhost:{port}/0"', _SERVER, count=1),
        Adaptation("tests/test_factory.py", '"redis://localhost/0"', '"redis://localhost:{port}/0"', _SERVER, count=1),
    ],
    "pottery": [
        *_pottery("tests/test_redlock.py", r"^from pottery(\.base)? import", 9, "redis", 2, "redlock", 6, 2),
        Adaptation("tests/test_redlock.py", "host=localhost,port=6379", "host=localhost,port={port}", _SERVER, count=1),
    ],
    "python-redis-lock": [
        Adaptation("tests/test_redis_lock.py", "from redis_lock import", "from {shim} import", _IMPORT,
                   shim_only=True, count=8),
        Adaptation("tests/helper.py", "from redis_lock import Lock\n",
                   "from {shim} import Lock\nimport fastredlock.compat\n\n"
                   "fastredlock.compat.configure(restart_aware=False, core={core!r})\n",
                   "import line, and in helper.py (a subprocess of the suite, which the shim's conftest does "
                   "not reach) the shim's configuration: the server was just started", shim_only=True, count=1),
    ],
    "pottery-aio": _pottery("tests/test_aioredlock.py", r"^from pottery(\.exceptions)? import", 6, "aioredis", 1,
                            "aioredlock", 3, 1, script_class="AsyncScript"),
    # The suites pass lock_class=Lock (their get_lock) to r.lock(): the import line names the shim's class.
    "redis-py": [
        Adaptation("tests/test_lock.py", "from redis.lock import Lock\n", "from {shim} import Lock\n", _IMPORT,
                   shim_only=True, count=1),
        Adaptation("tests/test_lock.py", "from .conftest import _get_client", "from conftest import _get_client",
                   "the suite's helper comes from our conftest.py beside it (the sdist's tests/ is a package "
                   "whose conftest needs redis-py's whole test stack: entraid, jwt, sentinel, cluster options)",
                   count=1),
    ],
    "redis-py-aio": [
        Adaptation("tests/test_asyncio/test_lock.py", "from redis.asyncio.lock import Lock\n",
                   "from {shim} import AsyncLock as Lock\n", _IMPORT, shim_only=True, count=1),
    ],
}

_FAULT_HELPER = '''\
"""Fault injection for the adapted suite: the server refuses some commands to the client's user."""
import contextlib
import inspect
import types

import redis


def _blocking(client):
    """``client``, or for a redis.asyncio client a blocking one to the same server and user."""
    if not inspect.iscoroutinefunction(client.execute_command):
        return client
    kw = client.connection_pool.connection_kwargs
    return redis.Redis(host=kw.get("host", "localhost"), port=kw.get("port", 6379), db=kw.get("db", 0),
                       username=kw.get("username"), password=kw.get("password"))


@contextlib.contextmanager
def refuse(client, *commands):
    client = _blocking(client)
    user = client.execute_command("ACL", "WHOAMI")
    user = user.decode() if isinstance(user, bytes) else user
    refused = []
    for c in commands:
        try:
            client.execute_command("ACL", "SETUSER", user, "-" + c)
        except redis.ResponseError:  # a command this server does not have (DELIFEQ, DELEX)
            continue
        refused.append(c)
    commands = refused
    try:
        yield types.SimpleNamespace(side_effect=None)  # the suite sets side_effect on its mock
    finally:
        client.execute_command("ACL", "SETUSER", user, *["+" + c for c in commands])
'''

_POTTERY_CONFTEST = '''\
"""The `redis` fixture of pottery's repository (its sdist ships no conftest.py), on the local server."""
import random

import pytest
from redis import Redis


@pytest.fixture(scope="session")
def redis_url():
    return "redis://localhost:{port}/" + str(random.randint(1, 15))


@pytest.fixture
def redis(redis_url):
    client = Redis.from_url(redis_url, socket_timeout=1)
    client.flushdb()
    yield client
    client.flushdb()
'''

_POTTERY_AIO_CONFTEST = _POTTERY_CONFTEST + '''

# The rest of pottery's repository conftest.py: uvloop (when installed here) and the `aioredis` fixture.
try:
    import uvloop
except ImportError:
    uvloop = None
from redis.asyncio import Redis as AIORedis


@pytest.fixture(autouse=True, scope="session")
def install_uvloop():
    if uvloop is not None:
        uvloop.install()


@pytest.fixture
async def aioredis(redis_url):
    client = AIORedis.from_url(redis_url, socket_timeout=1)
    await client.flushdb()
    yield client
    await client.flushdb()
'''

_REDIS_PY_CONFTEST = '''\
"""The fixtures and helpers of redis-py's tests/conftest.py that its lock suites use, on the local
server (redis-py's own conftest needs its whole test stack: entraid, jwt, sentinels, clusters).
As there: ``_get_client`` (a single-connection client unless asked otherwise, the db flushed at
teardown), ``r``, ``decoded_r``, the ``onlynoncluster`` marker (this server is not a cluster) and
``skip_if_server_version_lt``."""
import pytest
import redis
from packaging.version import Version

REDIS_URL = "redis://localhost:{port}/0"


def pytest_configure(config):
    config.addinivalue_line("markers", "onlynoncluster: the test needs a server that is not a cluster")


def skip_if_server_version_lt(min_version):
    version = redis.Redis.from_url(REDIS_URL).info("server")["redis_version"]
    return pytest.mark.skipif(Version(version) < Version(min_version), reason=f"Redis version required >= {{min_version}}")


def _get_client(cls, request, single_connection_client=True, flushdb=True, from_url=None, **kwargs):
    client = cls(connection_pool=redis.ConnectionPool.from_url(from_url or REDIS_URL, **kwargs))
    if single_connection_client:
        client = client.client()
    if request:
        def teardown():
            if flushdb:
                client.flushdb()
            client.close()
            client.connection_pool.disconnect()

        request.addfinalizer(teardown)
    return client


@pytest.fixture()
def r(request):
    with _get_client(redis.Redis, request) as client:
        yield client


@pytest.fixture()
def decoded_r(request):
    with _get_client(redis.Redis, request, decode_responses=True) as client:
        yield client
'''

_REDIS_PY_AIO_CONFTEST = _REDIS_PY_CONFTEST + '''

# tests/test_asyncio/conftest.py: ``create_redis`` (a client factory; every test runs with a
# single-connection client and with a pooled one), ``r`` and ``decoded_r`` built with it.
import pytest_asyncio
import redis.asyncio


@pytest_asyncio.fixture(params=[True, False], ids=["single", "pool"])
async def create_redis(request):
    single_connection = request.param
    teardowns = []

    async def client_factory(url=REDIS_URL, cls=redis.asyncio.Redis, flushdb=True, **kwargs):
        single = kwargs.pop("single_connection_client", False) or single_connection
        client = cls(connection_pool=redis.asyncio.ConnectionPool.from_url(url, **kwargs))
        if single:
            client = client.client()
            await client.initialize()

        async def teardown():
            if flushdb:
                await client.flushdb()
            await client.aclose()
            await client.connection_pool.disconnect()

        teardowns.append(teardown)
        return client

    yield client_factory
    for teardown in teardowns:
        await teardown()


@pytest_asyncio.fixture()
async def r(create_redis):
    return await create_redis()


@pytest_asyncio.fixture()
async def decoded_r(create_redis):
    return await create_redis(decode_responses=True)
'''

_CONFTESTS = {"pottery": _POTTERY_CONFTEST, "pottery-aio": _POTTERY_AIO_CONFTEST,
              "redis-py": _REDIS_PY_CONFTEST, "redis-py-aio": _REDIS_PY_AIO_CONFTEST}

_DOCTESTS = '''\
"""The documented examples of {source} (pottery's test_doctests.py runs them with doctest.testmod),
read from the sdist's source and run with the names of {module} (the import line of this run).
Adapted: `Redis()` and `localhost:6379` name the local server's port; $REDIS_URL points there too.
The names the original module imports (its examples use them) are given to the examples too."""
import ast
import contextlib
import doctest
import importlib
import io
import time

import pytest

SOURCE = {path!r}
MODULE = {module!r}
PORT = {port}


def _examples():
    found = []

    def visit(node, name):
        doc = ast.get_docstring(node)
        if doc and ">>>" in doc:
            found.append((name, doc))
        for child in node.body:
            if isinstance(child, (ast.ClassDef, ast.FunctionDef)):
                visit(child, name + "." + child.name)

    with open(SOURCE) as f:
        visit(ast.parse(f.read()), {source_module!r})
    return sorted(found)  # the order of doctest.testmod


def _original_imports():
    """What the original module's own absolute imports bind (``import asyncio``, ``from x import y``)."""
    with open(SOURCE) as f:
        tree = ast.parse(f.read())
    imports = [node for node in tree.body if isinstance(node, ast.Import)
               or (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module != "__future__")]
    names = {{}}
    exec(compile(ast.Module(body=imports, type_ignores=[]), SOURCE, "exec"), names)
    names.pop("__builtins__", None)
    return names


@pytest.mark.parametrize("name, doc", _examples(), ids=[n for n, _ in _examples()])
def test_documented_examples(name, doc):
    globs = dict(vars(importlib.import_module(MODULE)))
    globs.setdefault("contextlib", contextlib)  # imported by the original module, used by its examples
    globs.setdefault("time", time)
    for name_, value in _original_imports().items():
        globs.setdefault(name_, value)
    doc = doc.replace("Redis()", "Redis(port=%d)" % PORT).replace("localhost:6379", "localhost:%d" % PORT)
    test = doctest.DocTestParser().get_doctest(doc, globs, name, SOURCE, 0)
    out = io.StringIO()
    runner = doctest.DocTestRunner()
    runner.run(test, out=out.write)
    assert not runner.failures, out.getvalue()
'''

_SHIM_CONFTEST = '''\

# The shim's run: the server was just started, so restart-aware voting would not trust it yet.
import fastredlock.compat

fastredlock.compat.configure(restart_aware=False, core={core!r})
'''


def adapt(name: str, dest: Path, *, ports: List[int], shim: bool, core: Optional[str] = None) -> List[str]:
    """Write the adapted suite of ``name`` into ``dest``; return the adaptations applied (as text).

    ``ports``: the local servers (five); the suites' single server is the first.
    """
    port = ports[0]
    urls = [f"redis://localhost:{p}/1" for p in ports]
    orig = ORIGINALS[name]
    src = sdist(name)
    dest.mkdir(parents=True, exist_ok=True)
    texts = {f: (src / f).read_text() for f in (*orig.tests, *orig.support)}
    applied = []
    for a in ADAPTATIONS[name]:
        if (a.shim_only and not shim) or not a.when():
            continue
        new = a.new.format(port=port, shim=orig.shim, urls=urls, core=core)
        text = texts[a.file]
        if a.regex:
            text, n = re.subn(a.old, new, text, flags=re.MULTILINE)
        else:
            n = text.count(a.old)
            text = text.replace(a.old, new)
        if n == 0 or (a.count is not None and n != a.count):
            raise AssertionError(f"{orig.dist} {a.file}: expected {a.count or 'some'} of {a.old!r}, found {n}")
        texts[a.file] = text
        applied.append(f"{a.file}: {a.old!r} -> {new!r} ({n}x; {a.why})")
    for f, text in texts.items():
        (dest / Path(f).name).write_text(text)
    for source, source_module in orig.doctests:
        module = orig.shim if shim else source_module
        (dest / f"test_doctests_{Path(source).stem}.py").write_text(_DOCTESTS.format(
            source=source, path=str(src / source), module=module, source_module=source_module, port=port))
        applied.append(f"{source}: documented examples run with {module}'s names (and those the original "
                       f"imports); 'Redis()' -> 'Redis(port={port})', 'localhost:6379' -> 'localhost:{port}', "
                       f"REDIS_URL=redis://localhost:{port}/0 (the server)")
    if orig.suite_deps or orig.pytest_args:
        applied.append(f"the suite's own needs, from its repository: {' '.join(orig.suite_deps)} installed beside "
                       f"the pins in both runs; pytest {' '.join(orig.pytest_args)}")
    conftest = texts.get("tests/conftest.py", "") + _CONFTESTS.get(name, "").format(port=port)  # the sdist's own first
    if shim:
        conftest += _SHIM_CONFTEST.format(core=core)
    (dest / "conftest.py").write_text(conftest)
    (dest / "_fastredlock_fault.py").write_text(_FAULT_HELPER)
    return applied


class SuiteRun(NamedTuple):
    outcomes: Dict[str, str]  # test id -> "passed" / "failed" / "error" / "skipped"
    output: str
    messages: Dict[str, str] = {}  # test id -> its failure or error message, for those that did not pass


def run_suite(name: str, dest: Path, *, port: int, shim: bool, timeout: float = 600) -> SuiteRun:
    """Run the adapted suite in ``dest`` in a subprocess: the original's folder on PYTHONPATH, or
    (for the shim) its pinned dependencies and the fastredlock this process imported (the one under test)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the suites use none of this environment's plugins
    env["REDIS_URL"] = f"redis://localhost:{port}/0"  # pottery's default master
    paths = [install(name)] if not shim else [shim_deps(name), _fastredlock_root()]
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths if p is not None)
    report = dest / "report.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *ORIGINALS[name].pytest_args,
           "--rootdir", str(dest), "-c", os.devnull, f"--junitxml={report}", str(dest)]
    proc = subprocess.run(cmd, cwd=dest, env=env, capture_output=True, text=True, timeout=timeout)
    output = proc.stdout + proc.stderr
    if not report.exists():
        raise AssertionError(f"the suite did not run:\n{output[-3000:]}")
    outcomes = {}
    messages = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        state = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                state = {"failure": "failed"}.get(child.tag, child.tag)
                messages[test_id] = f"{child.get('message') or ''}\n{child.text or ''}"
        outcomes[test_id] = state
    return SuiteRun(outcomes, output, messages)


def expected_of_shim(name: str, original: Dict[str, str]) -> Dict[str, str]:
    """The outcomes the shim's run must have: the original's, but "failed" for the tests that
    assert a documented difference (:attr:`Original.differences`)."""
    differences = ORIGINALS[name].differences
    listed = DIFFERENCES.get(name, {})  # by test id, without an evidence pattern
    return {test_id: "failed" if test_id in listed or any(d.covers(test_id) for d in differences) else state
            for test_id, state in original.items()}


def _fastredlock_root() -> Path:
    """The folder of the fastredlock under test (a checkout's ``src``, or site-packages): the
    shim's run imports that one, not whichever the interpreter would find first."""
    import fastredlock

    return Path(fastredlock.__file__).resolve().parent.parent


def describe() -> str:
    """The adaptations, as text (for reports)."""
    lines = []
    for name, items in ADAPTATIONS.items():
        lines.append(f"{name} {ORIGINALS[name].version}:")
        for a in items:
            lines.append(textwrap.indent(f"{a.file}: {a.old!r} -> {a.new!r} ({a.why})", "  "))
        for d in ORIGINALS[name].differences:
            lines.append(f"  expected to fail against the shim: {d.test} ({d.why})")
    return "\n".join(lines)
