"""Type stub of the Cython core ``fastredlock._core``.

The compiled core has the interface of the pure-Python reference :mod:`fastredlock._core_py` (the
differential tests hold both to it), so this stub re-exports the reference's public names (its
``__all__``): editors and mypy see one ``Core`` and one ``Round`` whichever core is active, and the
stub cannot drift from the reference.
"""
from ._core_py import *  # noqa: F403
from ._core_py import parse_info_server as parse_info_server

def _set_fast_path(enabled: bool) -> None: ...
