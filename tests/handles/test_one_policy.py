"""The lock's policy is written once: the asyncio front-end does not repeat the sync one.

Every lock operation is a plan in :mod:`fastredlock.handles.lock` (and the family's in
:mod:`fastredlock.handles.family`); the front-ends only drive them. This test reads the sources (no server)
and counts the lines the asyncio front-end repeats from the sync front-end: lines compared with
``await``/``async`` removed and white space folded, in runs of 4 or more consecutive lines
(comments, blank lines and docstrings' prose count too: a copied docstring is a copied rule).
Before the plans it was about 100; the budget is 25.
"""
from __future__ import annotations

import os
import re
from typing import Dict, List, Set, Tuple

import fastredlock

PACKAGE = os.path.dirname(os.path.abspath(fastredlock.__file__))
SYNC = ["sync/lock.py", "sync/family.py", "sync/client.py", "sync/notifier.py", "sync/watchdog.py"]
ASYNC = ["asyncio/lock.py", "asyncio/family.py", "asyncio/client.py", "asyncio/notifier.py", "asyncio/watchdog.py"]
BUDGET = 25
RUN = 4


def _lines(path: str) -> List[str]:
    out = []
    with open(os.path.join(PACKAGE, path), encoding="utf-8") as f:
        for line in f:
            text = re.sub(r"\bawait\s+|\basync\s+", "", line.strip())
            text = re.sub(r"\s+", " ", text)
            if text in ("", '"""', ")", "]", "}", "):", "else:", "try:", "finally:"):
                text = ""  # punctuation alone says nothing: never part of a run
            out.append(text)
    return out


def repeated_runs(sync: List[List[str]], other: List[str], run: int = RUN) -> Set[int]:
    """Indexes of ``other``'s lines that belong to a run of ``run`` or more consecutive lines
    found, in the same order, in one of the ``sync`` files."""
    windows: Set[Tuple[str, ...]] = set()
    for lines in sync:
        for i in range(len(lines) - run + 1):
            window = tuple(lines[i:i + run])
            if all(window):
                windows.add(window)
    hit: Set[int] = set()
    for i in range(len(other) - run + 1):
        window = tuple(other[i:i + run])
        if all(window) and window in windows:
            hit.update(range(i, i + run))
    return hit


def test_the_asyncio_front_end_repeats_at_most_the_budget():
    sync = [_lines(p) for p in SYNC]
    counts: Dict[str, int] = {}
    for path in ASYNC:
        counts[path] = len(repeated_runs(sync, _lines(path)))
    assert sum(counts.values()) <= BUDGET, counts


def test_the_count_sees_a_copied_rule():
    """The measure itself: a plan copied into a front-end is counted (so the test can fail)."""
    sync = [_lines("handles/lock.py")]
    copy = _lines("handles/lock.py")[200:240]
    assert len(repeated_runs(sync, copy)) >= 30


def test_no_handle_overrides_with_a_type_ignore():
    """Neither handle subclasses the other: no method is overridden against its type."""
    for path in SYNC + ASYNC + ["handles/lock.py"]:
        with open(os.path.join(PACKAGE, path), encoding="utf-8") as f:
            assert "type: ignore[override]" not in f.read(), path
