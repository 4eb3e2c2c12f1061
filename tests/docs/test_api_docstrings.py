"""Every public name of the API reference has a docstring.

mkdocstrings renders what is there and says nothing about what is missing, so this test is the
check: each public module has a docstring, and so has every name in its ``__all__`` (classes and
functions) and every public method and property of those classes, inherited ones included (the
reference shows them where they are used, whoever defines them). Plain data (``CORE``, constants,
``__slots__`` attributes) is described by its module's or class's docstring instead.
"""
from __future__ import annotations

import importlib
import inspect
from typing import Iterator, Tuple

import pytest

PUBLIC_MODULES = [
    "fastredlock",
    "fastredlock.asyncio",
    "fastredlock.errors",
    "fastredlock.metrics",
    "fastredlock.jobs",
    "fastredlock.jobs.asgi",
    "fastredlock.testing",
    "fastredlock.compat",
    "fastredlock.compat.aioredlock",
    "fastredlock.compat.celery_once",
    "fastredlock.compat.celery_singleton",
    "fastredlock.compat.pottery",
    "fastredlock.compat.redis_lock",
    "fastredlock.compat.redis_py",
    "fastredlock.compat.redlock",
    "fastredlock.compat.redlock_py",
]

# Names defined in files that are being rewritten on another branch (the lock core), which still
# lack a docstring. Each entry is "module.Qualname.member" as reported below; the lead empties
# this list as the docstrings land. Any name not listed here fails the test.
MISSING_IN_FILES_BEING_REWRITTEN: frozenset = frozenset()


def _documented(obj: object) -> bool:
    doc = getattr(obj, "__doc__", None)
    return bool(doc and doc.strip())


def _members(cls: type) -> Iterator[Tuple[str, object, type]]:
    """Public methods and properties of a class, with the class that defines each."""
    for name in dir(cls):
        if name.startswith("_"):
            continue
        for owner in cls.__mro__:
            if name in vars(owner):
                break
        else:  # pragma: no cover - dir() found it, so some class defines it
            continue
        if owner is object or owner.__module__ in ("builtins", "typing", "abc", "enum"):
            continue
        if owner.__module__.split(".")[0] != "fastredlock":
            continue  # inherited from the standard library (tuple's count, Exception's args, ...)
        raw = vars(owner)[name]
        if isinstance(raw, (staticmethod, classmethod)):
            raw = raw.__func__
        if inspect.isfunction(raw) or isinstance(raw, property) or inspect.ismethoddescriptor(raw) \
                or inspect.isbuiltin(raw):
            yield name, raw, owner


def _missing() -> Iterator[str]:
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        if not _documented(module):
            yield f"{module_name} (module)"
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if not (inspect.isclass(obj) or inspect.isroutine(obj)):
                continue
            if not _documented(obj):
                yield f"{obj.__module__}.{getattr(obj, '__qualname__', name)}"
            if inspect.isclass(obj):
                for member, raw, owner in _members(obj):
                    if not _documented(raw):
                        yield f"{owner.__module__}.{owner.__qualname__}.{member}"


def test_public_modules_import():
    for module_name in PUBLIC_MODULES:
        importlib.import_module(module_name)


def test_every_public_name_has_a_docstring():
    missing = sorted(set(_missing()))
    unexpected = [name for name in missing if name not in MISSING_IN_FILES_BEING_REWRITTEN]
    assert not unexpected, "public names without a docstring:\n  " + "\n  ".join(unexpected)


def test_allow_list_holds_only_names_still_missing():
    if not MISSING_IN_FILES_BEING_REWRITTEN:
        pytest.skip("the allow-list is empty")
    stale = MISSING_IN_FILES_BEING_REWRITTEN - set(_missing())
    assert not stale, f"documented now, remove from the allow-list: {sorted(stale)}"
