"""The C build compiled every module setup.py lists, or the test run fails (no silent fallback).

A module whose Cython build did not happen (left out of the build, or a stale checkout) would be
imported from its ``.py`` file and run interpreted: every behavioural test still passes, only
slower. So the C build's module lists are read from setup.py itself and each module must have
been loaded from an extension. Skipped where the pure build was asked for.
"""
import ast
import importlib
import os

import pytest

from fastredlock.io.cores import NO_EXTENSIONS

HERE = os.path.dirname(os.path.abspath(__file__))
SETUP = os.path.join(os.path.dirname(HERE), "setup.py")
#: setup.py's module lists and the package each one's modules live in.
LISTS = {"PROTOCOL_MODULES": "fastredlock.protocol", "SEAM_MODULES": "fastredlock",
         "ASYNCIO_MODULES": "fastredlock.asyncio"}


def compiled_modules():
    """The dotted names of the modules setup.py compiles with Cython in pure-Python mode."""
    names = []
    for node in ast.parse(open(SETUP).read()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = getattr(node.targets[0], "id", None)
            if target in LISTS:
                names += [f"{LISTS[target]}.{m}" for m in ast.literal_eval(node.value)]
    return names


def test_setup_lists_the_family_among_the_compiled_modules():
    assert {"fastredlock.sync.lock", "fastredlock.handles.family"} <= set(compiled_modules())


@pytest.mark.parametrize("module", compiled_modules())
def test_module_of_the_c_build_is_compiled(module):
    if NO_EXTENSIONS:
        pytest.skip("FASTREDLOCK_NO_EXTENSIONS is set: the pure build was asked for")
    path = importlib.import_module(module).__file__
    assert path.endswith((".so", ".pyd")), f"{module} is interpreted ({path}): its Cython build did not happen"


def test_the_compiled_asyncio_round_hands_its_result_without_a_traceback():
    """The asyncio round's result leaves the compiled ``_Run.__next__`` through the pending
    ``StopIteration`` (no traceback built); that rests on how this Cython compiles a bare ``raise
    StopIteration``. The import-time check falls back to ``StopIteration(result)`` where it does
    not hold; this says so here, where the fast path would be lost silently otherwise."""
    if NO_EXTENSIONS:
        pytest.skip("FASTREDLOCK_NO_EXTENSIONS is set: the pure build was asked for")
    from fastredlock.asyncio import loop_io

    assert loop_io.stop_keeps_result(), "this Cython's bare raise in __next__ drops a pending StopIteration"
