"""pytest-benchmark setup for ``pytest benchmarks/ --benchmark-only``.

Files here are called ``bench_*.py`` so that the test suite never picks them up; this conftest
teaches pytest to collect them when it is pointed at ``benchmarks/``.
"""
from __future__ import annotations

import time
from typing import Iterator

import pytest

from fastredlock.testing import LocalMasters, start_masters

#: TTL of every lock taken by the pytest benchmarks, seconds.
TTL = 2.0


def pytest_collect_file(file_path, parent):  # type: ignore[no-untyped-def]
    if file_path.suffix == ".py" and file_path.name.startswith("bench_"):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


@pytest.fixture(scope="session")
def masters() -> Iterator[LocalMasters]:
    """Five local masters, old enough to vote.

    fastredlock's restart-aware voting (on by default) ignores a master that has been up for less
    than the largest TTL the client uses: wait that long once, so that every master counts.
    """
    with start_masters(5) as local:
        time.sleep(TTL + 0.5)
        yield local


@pytest.fixture
def ttl() -> float:
    """TTL of the benchmarked locks (the masters fixture waited longer than this)."""
    return TTL


@pytest.fixture(params=["cython", "python"])
def core(request: pytest.FixtureRequest) -> str:
    if request.param == "cython":
        try:
            import fastredlock.io.core_c  # noqa: F401  (only: is it built?)
        except ImportError as exc:
            pytest.skip(f"the Cython core is not built: {exc}")
    return request.param


@pytest.fixture(autouse=True)
def _clean(masters: LocalMasters) -> Iterator[None]:
    yield
    for m in masters:
        m.command("FLUSHALL")
