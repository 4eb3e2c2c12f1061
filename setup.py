"""Build script: the Cython core is compiled here; the metadata lives in pyproject.toml.

- ``fastredlock._io_c`` (the C I/O twin) is compiled from ``src/fastredlock/_io_c.pyx``, and the
  protocol modules ``src/fastredlock/protocol/*.py`` in Cython's pure-Python mode, each with its
  ``.pxd`` (Cython is a build requirement; the generated ``.c`` files are neither committed nor
  shipped in the sdist).
- If it cannot be compiled, the build fails, loudly: never a silent fallback to the slow core.
- ``FASTREDLOCK_NO_EXTENSIONS=1`` builds the pure-Python package on purpose.
- Windows and interpreters other than CPython get the pure-Python package, with a warning: the
  core is written against POSIX ``poll(2)`` and sockets (``_cores.py`` picks the pure core off CPython).
- ``FASTREDLOCK_DEBUG_BUILD=1`` compiles without optimisation, with debug symbols and C asserts.
"""
import os
import platform
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _flag(name):
    return os.environ.get(name, "") not in ("", "0")


def _warn(message):
    bar = "*" * 78
    print(f"\n{bar}\n{message}\n{bar}\n", file=sys.stderr)


NO_EXTENSIONS = _flag("FASTREDLOCK_NO_EXTENSIONS")
#: The protocol modules compiled for the C build (the rest of the package stays interpreted).
PROTOCOL_MODULES = ("resp", "replies", "voting", "handshake", "health", "result", "link", "session", "plans",
                    "cluster", "family")
#: The executor and the combiner (the seam under the front-ends), compiled the same way: their hot
#: path (a thread alone locking and unlocking) then crosses from Python into C once per call. The
#: plain lock's and the lock family's handles (lock, family) are compiled for the same reason.
SEAM_MODULES = ("_executor", "_combine", "_handle", "lock", "_tokens", "_fork", "_checks", "family")
#: The asyncio front-end's hot path (its coroutines and the event loop's callbacks), compiled too:
#: a compiled coroutine does not go through the interpreter's eval loop at each step.
ASYNCIO_MODULES = ("_loop_io", "_executor", "lock")
DEBUG = _flag("FASTREDLOCK_DEBUG_BUILD")

if not NO_EXTENSIONS and sys.platform == "win32":
    _warn(
        "WARNING: fastredlock's C core needs POSIX poll(2) and sockets, which Windows lacks: building\n"
        "the pure-Python package (fastredlock.CORE == 'python'). Windows is not a tested platform;\n"
        "see README, 'Installing'."
    )
    NO_EXTENSIONS = True
elif not NO_EXTENSIONS and platform.python_implementation() != "CPython":
    _warn(f"WARNING: the C core is for CPython; building the pure-Python package for "
          f"{platform.python_implementation()}.")
    NO_EXTENSIONS = True


class BuildCore(build_ext):
    """Cythonize when the build runs (an sdist ships the .pyx only) and make a failed build loud."""

    def run(self):
        try:
            from Cython.Build import cythonize
        except ImportError as exc:
            raise SystemExit(_failure(f"Cython is not installed ({exc})")) from exc
        try:
            directives = {"language_level": "3", "boundscheck": False, "wraparound": False}
            for ext, generated in zip(self.extensions, cythonize(self.extensions, compiler_directives=directives)):
                ext.sources = generated.sources  # keep setuptools' Extension objects, now built from C
            super().run()
        except Exception as exc:
            _failure(f"{type(exc).__name__}: {exc}")
            raise


def _failure(reason):
    message = (
        "ERROR: fastredlock's C build (fastredlock._io_c and the compiled protocol) could not be built:\n"
        f"  {reason}\n"
        "It needs a C compiler, the Python headers and Cython>=3.0.11 (a build requirement).\n"
        "To install the slower pure-Python core on purpose, set FASTREDLOCK_NO_EXTENSIONS=1."
    )
    _warn(message)
    return message


if NO_EXTENSIONS:
    ext_modules, cmdclass = [], {}
else:
    cflags = ["-O0", "-g3", "-UNDEBUG"] if DEBUG else ["-O2"]
    here = ["src/fastredlock"]  # _io_c_sys.h, _encode_c.h
    ext_modules = [
        Extension("fastredlock._io_c", ["src/fastredlock/_io_c.pyx"], include_dirs=here, extra_compile_args=cflags),
        Extension("fastredlock._encode_c", ["src/fastredlock/_encode_c.pyx"], include_dirs=here,
                  extra_compile_args=cflags),
    ]
    # The protocol is plain Python, compiled in Cython's pure-Python mode (each .py with its .pxd).
    ext_modules += [
        Extension(f"fastredlock.protocol.{name}", [f"src/fastredlock/protocol/{name}.py"], extra_compile_args=cflags)
        for name in PROTOCOL_MODULES
    ]
    ext_modules += [
        Extension(f"fastredlock.{name}", [f"src/fastredlock/{name}.py"], extra_compile_args=cflags)
        for name in SEAM_MODULES
    ]
    ext_modules += [
        Extension(f"fastredlock.asyncio.{name}", [f"src/fastredlock/asyncio/{name}.py"], extra_compile_args=cflags)
        for name in ASYNCIO_MODULES
    ]
    cmdclass = {"build_ext": BuildCore}

setup(ext_modules=ext_modules, cmdclass=cmdclass)
