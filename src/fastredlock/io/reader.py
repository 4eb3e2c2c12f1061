"""The RESP reader: hiredis where it is installed, the pure-Python twin where it is not.

hiredis-py has CPython wheels only, so the package requires it on CPython alone (an environment
marker in pyproject.toml) and PyPy users get :mod:`fastredlock.io.reader_py`, which has the same
interface. Modules that parse replies import this module as ``hiredis``
(``from fastredlock import _reader as hiredis``) and keep hiredis's names.
:data:`PARSER` says which one is active (``"hiredis"`` or ``"python"``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["PARSER", "ProtocolError", "Reader", "ReplyError"]

if TYPE_CHECKING:
    from .reader_py import ProtocolError, Reader, ReplyError
    PARSER: str
else:
    try:
        from hiredis import ProtocolError, Reader, ReplyError
        PARSER = "hiredis"
    except ImportError:  # PyPy, or wherever hiredis did not install
        from .reader_py import ProtocolError, Reader, ReplyError
        PARSER = "python"
