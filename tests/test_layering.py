"""The package's layering, checked on its source (stdlib ``ast``; no import, no server).

``protocol <- io <- engine <- handles <- {sync, asyncio} <- {compat, cli, bench, testing}``: a module
imports its own layer or a lower one, never a higher one; ``asyncio`` and ``sync`` never import each
other; no module imports another subpackage's private name or private module; the subpackages'
import graph has no cycle; ``protocol`` imports no I/O, thread or clock module. The public leaves
(``errors``, ``events``, ``fencing``) import nothing of the package; ``metrics`` only the leaves.
Imports under ``if TYPE_CHECKING:`` count too: a type is a dependency a reader must follow.
"""
from __future__ import annotations

import ast
import os
from typing import Dict, Iterator, List, Set, Tuple

import pytest

import fastredlock

SRC = os.path.dirname(os.path.abspath(fastredlock.__file__))

#: Each subpackage's (or top-level module's) rank: a module may import ranks <= its own.
RANKS: Dict[str, int] = {
    "errors": 0, "events": 0, "fencing": 0,  # the public leaves
    "protocol": 1, "_pure": 1,
    "io": 2,
    "engine": 3,
    "handles": 4,
    "sync": 5, "asyncio": 5, "metrics": 5,
    "compat": 6, "cli": 6, "bench": 6, "testing": 6, "jobs": 6,
    "__init__": 6,  # the public face: the tools stand on it
    "__main__": 7,
}
#: Pairs of the same rank that must not import each other.
APART = {("sync", "asyncio"), ("asyncio", "sync")}
#: What the sans-I/O protocol must never import.
NO_IO = {"socket", "select", "selectors", "ssl", "threading", "_thread", "time", "asyncio", "os",
         "subprocess", "signal"}


def _modules(root: str) -> Iterator[Tuple[str, str]]:
    """(dotted name under the package, path) of every Python source under ``root``."""
    for folder, _dirs, files in os.walk(root):
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                rel = os.path.relpath(path, root)[:-3].split(os.sep)
                yield ".".join(rel), path


def _imports(name: str, path: str) -> Iterator[Tuple[List[str], List[str], str, int]]:
    """(absolute target as parts under the package, imported names, stdlib module, line) per import."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    here = name.split(".")
    package = here if here[-1] == "__init__" else here[:-1]
    if here[-1] == "__init__":
        package = here[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "fastredlock":
                    yield parts[1:], [], "", node.lineno
                else:
                    yield [], [], parts[0], node.lineno
        elif isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names]
            if node.level:
                base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
                target = base + (node.module.split(".") if node.module else [])
                yield target, names, "", node.lineno
            elif node.module and node.module.split(".")[0] == "fastredlock":
                yield node.module.split(".")[1:], names, "", node.lineno
            elif node.module:
                yield [], names, node.module.split(".")[0], node.lineno


def _layer(parts: List[str]) -> str:
    return parts[0] if parts else "__init__"


def violations(root: str) -> List[str]:
    """Every breach of the rules in the module docstring, in the source tree at ``root``."""
    found: List[str] = []
    graph: Dict[str, Set[str]] = {}
    for name, path in _modules(root):
        me = _layer(name.split("."))
        if me not in RANKS:
            found.append(f"{name}: a module outside every layer (add it to RANKS)")
            continue
        where = f"{os.path.relpath(path, root)}"
        for target, names, stdlib, line in _imports(name, path):
            if stdlib:
                if me == "protocol" and stdlib in NO_IO:
                    found.append(f"{where}:{line}: the sans-I/O protocol imports {stdlib}")
                continue
            other = _layer(target)
            if other not in RANKS:
                continue  # a name of the package's __init__ (fastredlock.CORE, __version__)
            if other != me:
                graph.setdefault(me, set()).add(other)
                if RANKS[other] > RANKS[me] or (me, other) in APART:
                    found.append(f"{where}:{line}: {me} imports {'.'.join(target)} (layer {other})")
                private = [p for p in target[1:] if p.startswith("_") and p != "__init__"]
                private += [n for n in names if n.startswith("_") and n != "__version__"]
                if private and other not in ("__init__",):
                    found.append(f"{where}:{line}: {me} imports {other}'s private {', '.join(private)}")
    found += [f"import cycle between layers: {' -> '.join(c)}" for c in _cycles(graph)]
    return found


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    cycles: List[List[str]] = []
    state: Dict[str, int] = {}

    def visit(node: str, trail: List[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(trail[trail.index(nxt):] + [nxt] if nxt in trail else trail + [nxt])
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def test_the_package_keeps_its_layers():
    assert violations(SRC) == []


def test_the_top_holds_at_most_ten_modules():
    top = [f for f in os.listdir(SRC) if f.endswith((".py", ".pyx")) and f not in ("__init__.py", "__main__.py")]
    assert len(top) <= 10, sorted(top)


@pytest.mark.parametrize("module, source, expected", [
    ("asyncio/lock.py", "from ..sync import lock\n", "asyncio imports sync (layer sync)"),
    ("engine/executor.py", "from ..handles.lock import LockBase\n", "engine imports handles.lock"),
    ("sync/lock.py", "from ..handles.lock import _secret\n", "sync imports handles's private _secret"),
    ("protocol/rules.py", "import socket\n", "the sans-I/O protocol imports socket"),
    ("io/x.py", "from ..protocol import plans\n", None),
])
def test_a_planted_breach_is_found(tmp_path, module, source, expected):
    """The checker itself: each kind of breach, planted in a small tree, is reported (so the test
    above can fail), and a downward import is not."""
    for package in ("asyncio", "engine", "handles", "sync", "protocol", "io"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / module).write_text(source)
    found = violations(str(tmp_path))
    if expected is None:
        assert found == []
    else:
        assert any(expected in line for line in found), found


def test_a_planted_cycle_is_found(tmp_path):
    for package in ("sync", "asyncio"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "sync" / "a.py").write_text("from ..asyncio import b\n")
    (tmp_path / "asyncio" / "b.py").write_text("from ..sync import a\n")
    assert any("cycle" in line for line in violations(str(tmp_path)))
