"""Pick the core: the C I/O twin over the compiled protocol, or the pure-Python twin, interpreted.

``FASTREDLOCK_NO_EXTENSIONS`` (any value but empty or ``0``) forces the pure core, as does any
interpreter other than CPython. :data:`CORE` says which one is active. Tests and benchmarks can ask
for a given core with :func:`core_class`. The pure core always runs the protocol interpreted
(:mod:`fastredlock._pure`), even where the compiled one is installed beside it.
"""
from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Optional

NO_EXTENSIONS = (
    os.environ.get("FASTREDLOCK_NO_EXTENSIONS", "") not in ("", "0")
    or sys.implementation.name != "cpython"
)

__all__ = ["CORE", "Core", "NO_EXTENSIONS", "core_class"]


def _pure() -> Any:
    return importlib.import_module("fastredlock._pure.io.core_py").Core


def _compiled() -> Any:
    from .core_c import Core as CyCore
    return CyCore


if NO_EXTENSIONS:
    Core = _pure()
    CORE = "python"
else:
    try:
        Core = _compiled()
        CORE = "cython"
    except ImportError:  # a source checkout that was not built; the tests catch a missing build
        Core = _pure()
        CORE = "python"


def core_class(name: Optional[str] = None) -> Any:
    """Return the core class called ``name`` (``"cython"`` or ``"python"``), or the active one."""
    if name is None:
        return Core
    if name == "python":
        return _pure()
    if name == "cython":
        try:
            return _compiled()
        except ImportError as exc:
            raise ImportError(
                "the Cython core fastredlock.io.core_c is not built; install with a C compiler "
                "(pip install -e .) or use core='python'"
            ) from exc
    raise ValueError(f"core must be 'cython', 'python' or None, not {name!r}")
