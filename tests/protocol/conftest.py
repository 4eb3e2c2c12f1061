"""The protocol tables: no server, no socket, no clock; every case runs on both builds of the protocol.

``proto`` is the protocol package under test: the compiled one (``fastredlock.protocol``, which
must be compiled unless ``FASTREDLOCK_NO_EXTENSIONS`` asked for a pure install, as the root
conftest's Cython check) and the interpreted one (``fastredlock._pure.protocol``, the same source).
"""
from __future__ import annotations

import importlib
import os
from types import SimpleNamespace

import pytest

from fastredlock.io.cores import NO_EXTENSIONS


MODULES = ("session", "link", "result", "voting", "health", "resp", "replies", "handshake", "outcomes", "plans",
           "cluster", "sentinel", "scripts", "family")
#: Fixtures that start or use servers: none of them belongs in this directory.
SERVERS = {"masters", "fault_masters", "dlm", "one_dlm", "make_client", "make_one_client", "core"}
HERE = os.path.dirname(os.path.abspath(__file__))


def _load(package: str) -> SimpleNamespace:
    return SimpleNamespace(**{m: importlib.import_module(f"{package}.{m}") for m in MODULES})


@pytest.fixture(scope="session", params=["compiled", "interpreted"])
def proto(request) -> SimpleNamespace:
    """The protocol modules of one build, as attributes (``proto.session.Session``, ...)."""
    if request.param == "interpreted":
        import fastredlock._pure  # noqa: F401  (installs the finder that serves the source files)

        return _load("fastredlock._pure.protocol")
    mods = _load("fastredlock.protocol")
    compiled = mods.session.__file__.endswith((".so", ".pyd"))
    if not compiled:
        if NO_EXTENSIONS:
            pytest.skip("FASTREDLOCK_NO_EXTENSIONS is set: the compiled protocol is disabled on purpose")
        pytest.fail(f"the compiled protocol is expected but {mods.session.__file__} is interpreted")
    return mods


def pytest_runtest_setup(item):
    """The protocol tables never start a server."""
    if str(item.fspath).startswith(HERE):
        used = SERVERS.intersection(item.fixturenames)
        if used:
            pytest.fail(f"{item.nodeid} uses {sorted(used)}: tests/protocol runs without servers")
