"""The executors never touch a handle: checked on their source (stdlib ``ast``; no import, no server).

The executors' modules (:mod:`fastredlock.engine.executor` and its helpers ``combine`` and
``unwaited``, :mod:`fastredlock.asyncio.executor` and ``loop_io``) say "nothing here knows what a
``Lock`` is": what they must tell a handle goes through a value they return or a callback they were
given. So none of them reads or writes another object's private attribute: ``obj._x`` where
``obj`` is not ``self`` (``self._a._b`` counts: ``self._a`` is another object). Dunders are not
private.
"""
from __future__ import annotations

import ast
import os
from typing import List

import pytest

import fastredlock

SRC = os.path.dirname(os.path.abspath(fastredlock.__file__))

#: The modules of the executors, relative to the package.
EXECUTOR_MODULES = (
    "engine/executor.py", "engine/combine.py", "engine/unwaited.py", "asyncio/executor.py", "asyncio/loop_io.py",
)


def reaches_in(source: str, where: str = "<source>") -> List[str]:
    """``"where:line: expr"`` for each read or write of another object's private attribute."""
    found = []
    for node in ast.walk(ast.parse(source, where)):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
            continue
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            continue
        found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("module", EXECUTOR_MODULES)
def test_an_executor_module_touches_no_private_attribute_of_another_object(module):
    path = os.path.join(SRC, *module.split("/"))
    with open(path, encoding="utf-8") as f:
        assert reaches_in(f.read(), module) == []


@pytest.mark.parametrize("source, expected", [
    ("def report(entry):\n    entry.lock._unwaited_report(entry)\n", "entry.lock._unwaited_report"),
    ("def f(lock):\n    since = lock._acquired_at\n", "lock._acquired_at"),
    ("def f(lock, rnd):\n    lock._last = rnd\n", "lock._last"),
    ("class C:\n    def f(self):\n        self._executor._interrupted(1)\n", "self._executor._interrupted"),
    ("class C:\n    def f(self):\n        return self._core.n, self.__class__, self._x\n", None),
])
def test_a_planted_reach_is_found(source, expected):
    """The checker itself: a planted ``lock._x`` (read, write or call) is reported, so the test
    above can fail; ``self._x`` and dunders are not."""
    found = reaches_in(source)
    if expected is None:
        assert found == []
    else:
        assert any(line.endswith(expected) for line in found), found
