"""Build script: the Cython core is compiled here; the metadata lives in pyproject.toml.

- ``fastredlock.io.core_c`` (the C I/O twin) is compiled from ``src/fastredlock/io/core_c.pyx``, and the
  protocol modules ``src/fastredlock/protocol/*.py`` in Cython's pure-Python mode, each with its
  ``.pxd`` (Cython is a build requirement; the generated ``.c`` files are neither committed nor
  shipped in the sdist).
- If it cannot be compiled, the build fails, loudly: never a silent fallback to the slow core.
- ``FASTREDLOCK_NO_EXTENSIONS=1`` builds the pure-Python package on purpose.
- Windows and interpreters other than CPython get the pure-Python package, with a warning: the
  core is written against POSIX ``poll(2)`` and sockets (``io/cores.py`` picks the pure core off CPython).
- ``FASTREDLOCK_DEBUG_BUILD=1`` compiles without optimisation, with debug symbols and C asserts.
"""
import glob
import os
import platform
import shutil
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
PROTOCOL_MODULES = ("resp", "replies", "voting", "handshake", "health", "result", "link", "session", "driver", "plans",
                    "cluster", "family")
#: The engine's seam under the front-ends (the executor, the combiner, releases not waited for,
#: tokens, fork, checks), the handles' shared state and plans, and the sync front-end's handles,
#: compiled the same way: their hot path (a thread alone locking and unlocking) then crosses from
#: Python into C once per call. In a C build the front-ends' ``[python]`` test runs therefore still
#: run these compiled: only the core (``io`` twin and protocol) is interpreted there.
SEAM_MODULES = ("engine.executor", "engine.combine", "engine.unwaited", "engine.tokens", "engine.fork",
                "engine.checks", "handles.lock", "handles.family", "sync.lock", "sync.family")
#: The asyncio front-end's hot path (its coroutines and the event loop's callbacks), compiled too:
#: a compiled coroutine does not go through the interpreter's eval loop at each step.
ASYNCIO_MODULES = ("loop_io", "executor", "lock")
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
    """Cythonize when the build runs (an sdist ships the .pyx only) and make a failed build loud.

    Both steps use every core: Cython translates the modules in a process pool and the C compiler
    runs once per extension in parallel (``build_ext --parallel``, default: all cores), largest
    first. An editable install (README's commands, ``.ci/run``) builds in a fresh temporary
    directory each time, so setuptools alone would compile every module again on each
    ``pip install -e``: a module whose in-place ``.so`` is newer than its C source, the headers and
    this file, and was built with the same flags by the same interpreter, is reused instead (by a
    wheel built from the same tree too: ``.ci/run``'s wheel audit). A fresh checkout or an sdist has
    no in-place modules and compiles everything.
    """

    def finalize_options(self):
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1
        super().finalize_options()

    def run(self):
        try:
            from Cython.Build import cythonize
        except ImportError as exc:
            raise SystemExit(_failure(f"Cython is not installed ({exc})")) from exc
        try:
            directives = {"language_level": "3", "boundscheck": False, "wraparound": False}
            stale = [ext for ext in self.extensions if not _translated(ext)]
            if stale:
                generated = cythonize(stale, compiler_directives=directives, nthreads=os.cpu_count() or 1)
                for ext, gen in zip(stale, generated):
                    ext.sources = gen.sources  # keep setuptools' Extension objects, now built from C
            # largest first, so that the parallel compile does not end on one long module
            self.extensions.sort(key=lambda ext: -os.path.getsize(ext.sources[0]))
            self._stamp = _read_stamp()  # the flags the in-place modules were built with
            if os.path.exists(_STAMP_FILE):
                os.remove(_STAMP_FILE)  # a build that fails half-way leaves modules of mixed flags
            super().run()
            _write_stamp()
        except Exception as exc:
            _failure(f"{type(exc).__name__}: {exc}")
            raise

    def build_extension(self, ext):
        built = self._reusable(ext)
        if built is None:
            return super().build_extension(ext)
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)
        print(f"reusing {built} (up to date)")
        return None

    def _reusable(self, ext):
        """The in-place ``.so`` of ``ext`` (an editable install's) if this build may reuse it, else None."""
        if self.force or self._stamp != _STAMP:
            return None
        built = os.path.join(*ext.name.split(".")[:-1], self.get_ext_filename(ext.name.split(".")[-1]))
        built = os.path.join("src", built)
        if not os.path.exists(built):
            return None
        inputs = list(ext.sources) + list(ext.depends) + [__file__] + glob.glob("src/fastredlock/io/*.h")
        newest = max(os.path.getmtime(path) for path in inputs if os.path.exists(path))
        return built if os.path.getmtime(built) > newest else None


def _translated(ext):
    """Point ``ext`` at its C file if that is current, and say so (then Cython need not run).

    Current: made by the Cython installed now and newer than the module's source and every ``.pxd``
    (the cimports), ``.pyx`` and ``.h`` of the package. Cython's own check would also compare it with
    the ``.pxd`` files Cython ships (``libc/string.pxd``), which a build-isolated environment
    installs anew each time, so that every ``pip install`` translated (and compiled) again.
    """
    import Cython

    source = ext.sources[0]
    c_file = os.path.splitext(source)[0] + ".c"
    try:
        with open(c_file) as f:
            if f"Generated by Cython {Cython.__version__} " not in f.readline():
                return False
        made = os.path.getmtime(c_file)
    except OSError:
        return False
    inputs = [source, __file__] + [p for pattern in ("*.pxd", "*.pyx", "*.h") for p in
                         glob.glob(os.path.join("src", "fastredlock", "**", pattern), recursive=True)]
    if any(os.path.getmtime(p) >= made for p in inputs):
        return False
    ext.sources = [c_file] + ext.sources[1:]
    return True


#: What a reusable in-place build must have been compiled with (flags and interpreter).
_STAMP_FILE = os.path.join("build", "fastredlock-build-flags")


def _write_stamp():
    os.makedirs(os.path.dirname(_STAMP_FILE), exist_ok=True)
    with open(_STAMP_FILE, "w") as stamp:
        stamp.write(_STAMP)


def _read_stamp():
    try:
        with open(_STAMP_FILE) as stamp:
            return stamp.read()
    except OSError:
        return None


def _failure(reason):
    message = (
        "ERROR: fastredlock's C build (fastredlock.io.core_c and the compiled protocol) could not be built:\n"
        f"  {reason}\n"
        "It needs a C compiler, the Python headers and Cython>=3.0.11 (a build requirement).\n"
        "To install the slower pure-Python core on purpose, set FASTREDLOCK_NO_EXTENSIONS=1."
    )
    _warn(message)
    return message


if NO_EXTENSIONS:
    ext_modules, cmdclass = [], {}
else:
    # -g0: Python's own CFLAGS ask for debug info, which costs a third of the compile time of
    # Cython's large C files (and wheel size); FASTREDLOCK_DEBUG_BUILD=1 builds with it.
    cflags = ["-O0", "-g3", "-UNDEBUG"] if DEBUG else ["-O2", "-g0"]
    _STAMP = f"{sys.version} {cflags}\n"
    here = ["src/fastredlock/io"]  # core_c_sys.h, tls_c.h, encode_c.h
    ext_modules = [
        Extension("fastredlock.io.core_c", ["src/fastredlock/io/core_c.pyx"], include_dirs=here,
                  extra_compile_args=cflags),
        Extension("fastredlock.io.encode_c", ["src/fastredlock/io/encode_c.pyx"], include_dirs=here,
                  extra_compile_args=cflags),
    ]
    # The protocol is plain Python, compiled in Cython's pure-Python mode (each .py with its .pxd).
    ext_modules += [
        Extension(f"fastredlock.protocol.{name}", [f"src/fastredlock/protocol/{name}.py"], extra_compile_args=cflags)
        for name in PROTOCOL_MODULES
    ]
    ext_modules += [
        Extension(f"fastredlock.{name}", [f"src/fastredlock/{name.replace('.', '/')}.py"], extra_compile_args=cflags)
        for name in SEAM_MODULES
    ]
    ext_modules += [
        Extension(f"fastredlock.asyncio.{name}", [f"src/fastredlock/asyncio/{name}.py"], extra_compile_args=cflags)
        for name in ASYNCIO_MODULES
    ]
    cmdclass = {"build_ext": BuildCore}

setup(ext_modules=ext_modules, cmdclass=cmdclass)
