"""Choosing the server binary (fastredlock.testing.servers): FASTREDLOCK_REDIS_SERVER takes a path or
the short name of an installed server, and a choice that is not there is an error, never another
server."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from fastredlock.testing import find_server, find_servers, server_name, server_names, server_version

ENV = "FASTREDLOCK_REDIS_SERVER"


def test_every_installed_server_is_found_by_its_short_name(monkeypatch):
    names = server_names()
    assert names, "no server installed"
    for name, path in names.items():
        assert re.fullmatch(r"(redis|valkey)-\d+\.\d+", name), name
        assert server_name(path) == name
        monkeypatch.setenv(ENV, name)
        assert find_server() == path
        assert find_servers()[0] == path  # the chosen one first, then the others
        kind, version = name.split("-")
        monkeypatch.setenv(ENV, f"{kind}-{version.split('.')[0]}")  # a shorter prefix matches too
        assert server_version(find_server()).startswith(f"{kind} {version.split('.')[0]}.")


def test_a_path_is_taken_as_it_is(monkeypatch):
    path = next(iter(server_names().values()))
    monkeypatch.setenv(ENV, path)
    assert find_server() == path


@pytest.mark.parametrize("choice", ["redis-1.0", "valkey-99", "/nonexistent/redis-server"])
def test_a_choice_that_is_not_there_is_an_error_naming_what_is(monkeypatch, choice):
    monkeypatch.setenv(ENV, choice)
    with pytest.raises(FileNotFoundError) as info:
        find_server()
    assert choice in str(info.value) and next(iter(server_names())) in str(info.value)
    with pytest.raises(FileNotFoundError):
        find_servers()


def test_the_suite_refuses_to_start_on_a_server_that_is_not_there(tmp_path):
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    conftest = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conftest.py")
    (tmp_path / "conftest.py").write_text(open(conftest).read())
    env = dict(os.environ, **{ENV: "redis-1.0"})
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
                           str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # a usage error: nothing ran
    assert "no redis-1.0 server installed" in proc.stdout + proc.stderr
