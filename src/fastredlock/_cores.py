"""Pick the core: the Cython extension when it is built, the pure-Python twin otherwise.

``FASTREDLOCK_NO_EXTENSIONS`` (any value but empty or ``0``) forces the pure core, as does any
interpreter other than CPython. :data:`CORE` says which one is active. Tests and benchmarks can ask
for a given core with :func:`core_class`.
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Optional, Type

NO_EXTENSIONS = (
    os.environ.get("FASTREDLOCK_NO_EXTENSIONS", "") not in ("", "0")
    or sys.implementation.name != "cpython"
)

if TYPE_CHECKING:
    from ._core_py import Core
    CORE = "python"
elif NO_EXTENSIONS:
    from ._core_py import Core
    CORE = "python"
else:
    try:
        from ._core import Core
        CORE = "cython"
    except ImportError:  # a source checkout that was not built; the tests catch a missing build
        from ._core_py import Core
        CORE = "python"

__all__ = ["CORE", "Core", "NO_EXTENSIONS", "core_class"]


def core_class(name: Optional[str] = None) -> "Type[Core]":
    """Return the core class called ``name`` (``"cython"`` or ``"python"``), or the active one."""
    if name is None:
        return Core
    if name == "python":
        from ._core_py import Core as PyCore
        return PyCore
    if name == "cython":
        try:
            from ._core import Core as CyCore
        except ImportError as exc:
            raise ImportError(
                "the Cython core fastredlock._core is not built; install with a C compiler "
                "(pip install -e .) or use core='python'"
            ) from exc
        return CyCore
    raise ValueError(f"core must be 'cython', 'python' or None, not {name!r}")
