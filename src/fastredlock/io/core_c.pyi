"""Type stub of the C I/O twin ``fastredlock.io.core_c``.

It has the interface of the pure-Python twin :mod:`fastredlock.io.core_py` (the differential tests hold
both to it), so this stub re-exports that module's public names: editors and mypy see one ``Core``
whichever twin is active, and the stub cannot drift from the reference.
"""
from .core_py import *  # noqa: F403

def _set_fast_path(enabled: bool) -> None: ...
def _set_tls_in_c(enabled: bool) -> None: ...
