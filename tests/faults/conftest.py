"""Fixtures of the fault suite: proxies in front of the fault masters, an independent counter."""
from __future__ import annotations

import shutil
from typing import List

import pytest

from fastredlock.testing import FaultProxy, LocalMaster, start_masters

from _checks import Counter


@pytest.fixture(scope="session")
def counter_master():
    master = LocalMaster().start()
    yield master
    master.stop()


@pytest.fixture
def counter(counter_master, name) -> Counter:
    """A holder counter for this test's lock name."""
    return Counter(counter_master, f"holders:{name}")


@pytest.fixture
def fault_masters():
    """Five fresh masters for one test (as the suite's fixture), torn down with SIGKILL.

    They hold nothing worth a clean shutdown, and SIGTERM costs up to a server tick per master.
    """
    local = start_masters(5)
    yield local
    for m in local:
        m.kill()
        shutil.rmtree(m.dir, ignore_errors=True)


def _proxies(local):
    started = [FaultProxy(m).start() for m in local]
    yield started
    for p in started:
        p.stop()


@pytest.fixture
def proxies(masters) -> List[FaultProxy]:
    """A :class:`FaultProxy` in front of each session master (for faults that do not kill)."""
    yield from _proxies(masters)


@pytest.fixture
def fault_proxies(fault_masters) -> List[FaultProxy]:
    """A :class:`FaultProxy` in front of each of the test's own fault masters."""
    yield from _proxies(fault_masters)


def _client_through(make_client, proxies):
    def make(**kwargs):
        kwargs.setdefault("retry_count", 0)
        return make_client([p.url for p in proxies], **kwargs)

    return make


@pytest.fixture
def proxied_client(make_client, proxies):
    """``proxied_client(**kw)``: a client whose masters are the session's, through ``proxies``."""
    return _client_through(make_client, proxies)


@pytest.fixture
def fault_client(make_client, fault_proxies):
    """``fault_client(**kw)``: a client whose masters are this test's, through ``fault_proxies``."""
    return _client_through(make_client, fault_proxies)

