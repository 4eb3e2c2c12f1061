"""Build script: the C extension core lives here, the metadata lives in pyproject.toml.

``FASTREDLOCK_NO_EXTENSIONS=1`` builds the pure-Python package; otherwise a failure to compile
the Cython core fails the install (no silent fallback to the slow core).
"""
import os

from setuptools import setup

NO_EXTENSIONS = os.environ.get("FASTREDLOCK_NO_EXTENSIONS", "") not in ("", "0")
CORE_PYX = os.path.join("src", "fastredlock", "_core.pyx")

ext_modules = []
if not NO_EXTENSIONS and os.path.exists(CORE_PYX):
    from Cython.Build import cythonize
    from setuptools import Extension

    debug = os.environ.get("FASTREDLOCK_DEBUG_BUILD", "") not in ("", "0")
    ext_modules = cythonize(
        [Extension("fastredlock._core", [CORE_PYX], extra_compile_args=["-O0", "-g"] if debug else ["-O2"])],
        compiler_directives={"language_level": "3", "boundscheck": False, "wraparound": False},
    )

setup(ext_modules=ext_modules)
