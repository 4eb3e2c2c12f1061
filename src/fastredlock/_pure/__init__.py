"""The interpreted engine, whatever was compiled: ``fastredlock._pure.protocol`` and ``.io.core_py``.

The C build compiles :mod:`fastredlock.protocol` with Cython, and Python then imports the compiled
modules in place of the ``.py`` files beside them. The pure core (``core="python"``, or an install
without extensions) must run the very same rules *interpreted*, so that both builds are tested
in one process: this package loads the protocol's and the pure I/O twin's source files under its
own name (``fastredlock._pure.protocol.session`` is ``protocol/session.py``, interpreted).
"""
import importlib.abc
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PREFIX = __name__ + "."
#: What this package serves: the protocol package and the pure I/O twin, ``io.core_py`` (the rest of
#: ``io`` is shared: the twin imports it by its absolute name, never through this package).
_SERVED = ("protocol", "io")

__path__ = []  # submodules come from the finder below, never from a folder


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds ``fastredlock._pure.X`` as the source file of ``fastredlock.X`` (never an extension)."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(_PREFIX):
            return None
        rel = fullname[len(_PREFIX):]
        if rel.split(".", 1)[0] not in _SERVED:
            return None
        base = os.path.join(_HERE, *rel.split("."))
        if os.path.isdir(base):
            return importlib.util.spec_from_file_location(
                fullname, os.path.join(base, "__init__.py"), submodule_search_locations=[base])
        if os.path.isfile(base + ".py"):
            return importlib.util.spec_from_file_location(fullname, base + ".py")
        return None


if not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _SourceFinder())
