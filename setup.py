"""Build the compiled extensions: the hot path ``parallel_rollouts.core._core`` (Cython's
build of ``src/parallel_rollouts/core/rows.py``, typed by ``_core.pxd``, the same file the
interpreter runs as the pure-Python core), its typed kernels
``parallel_rollouts.core._kernels`` (from ``_kernels.pyx``), and the step doorbell's waits
``parallel_rollouts.processes._doorbell`` (from ``_doorbell.pyx``).

All package metadata lives in ``pyproject.toml``; this file only declares the
extensions. Cython directives are set here, once. Three environment variables
change the build:

- ``PARALLEL_ROLLOUTS_DEBUG_BUILD=1`` turns bounds, wrap-around and
  initialisation checks back on, for debugging and for one CI pass;
- ``PARALLEL_ROLLOUTS_NO_EXTENSION=1`` skips the extensions entirely, for
  machines without a C compiler: the package then runs its pure-Python core
  (and the workers answer over pipes) and warns that it does;
- ``PARALLEL_ROLLOUTS_NO_BUILD_CACHE=1`` compiles without reading or writing the
  cache below (``rm -rf build/extension-cache`` empties it).

The extensions are always generated from their Cython sources (the ``.pyx`` and
``.pxd`` files are shipped in the sdist, not in the wheel); the generated C lives under ``build/``, one copy per
kind of build.

A rebuild does not recompile what has not changed: each compiled extension is
kept under ``build/extension-cache/``, named by a fingerprint of everything that
goes into it (its sources, this file, the Cython, NumPy and Python versions, the
compiler settings), and reused when the fingerprint matches. Installing the
package again with other extras therefore costs seconds, not a compile. pip
shows a spinner while a build runs and hides what the build prints unless it
fails; ``pip install -v .`` shows these steps. So that a user can see afterwards
what a quiet install did, the build writes ``build_record.json`` beside the
compiled core (which extensions were compiled, which reused), and
``parallel-rollouts --version`` reads it out.

The version is ``parallel_rollouts.__version__`` (written once, in
``src/parallel_rollouts/__init__.py``) with the commit it was built from as a
local label, ``0.2.0.dev0+g1a2b3c4`` (``.dirty`` when the tree had uncommitted
changes), so that ``parallel-rollouts --version`` tells two builds apart. A
build from an sdist keeps the version the sdist was made with.
"""

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
EXTENSION_CACHE = os.path.join("build", "extension-cache")
# Fingerprints kept in the cache; the oldest beyond this are removed.
CACHE_ENTRIES_KEPT = 8
# Beside the compiled core, read by parallel_rollouts.core.build_record (which names the same file).
BUILD_RECORD = os.path.join("parallel_rollouts", "core", "build_record.json")
# Environment variables that change what the compiler or linker produces.
BUILD_ENVIRONMENT = ("CC", "CFLAGS", "CPPFLAGS", "LDFLAGS", "LDSHARED", "ARCHFLAGS", "MACOSX_DEPLOYMENT_TARGET")


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


DEBUG_BUILD = _flag("PARALLEL_ROLLOUTS_DEBUG_BUILD")
NO_EXTENSION = _flag("PARALLEL_ROLLOUTS_NO_EXTENSION")
CACHE_DISABLED = _flag("PARALLEL_ROLLOUTS_NO_BUILD_CACHE")

COMPILER_DIRECTIVES = {
    "language_level": 3,
    "boundscheck": DEBUG_BUILD,
    "wraparound": DEBUG_BUILD,
    "initializedcheck": DEBUG_BUILD,
    "cdivision": True,
    "embedsignature": True,
}

NO_COMPILER_HINT = (
    "Building the compiled core (`parallel_rollouts.core._core` and its kernels `_kernels`) failed. It needs a C compiler "
    "(Linux: gcc, e.g. `apt install build-essential`; macOS: `xcode-select --install`; Windows: "
    "the 'Desktop development with C++' workload of Visual Studio Build Tools). To install "
    "without it, set PARALLEL_ROLLOUTS_NO_EXTENSION=1 and run the install again: the package "
    "then uses its pure-Python core (same results, slower per step) and says so when it does."
)


def _say(message: str) -> None:
    # On stderr, which `pip install -v` shows; without -v pip shows a spinner instead.
    print(f"parallel-rollouts build: {message}", file=sys.stderr, flush=True)


def _package_version() -> str:
    source = open(os.path.join(HERE, "src", "parallel_rollouts", "__init__.py"), encoding="utf-8").read()
    return re.search(r"""^__version__ = ["']([^"']+)["']""", source, re.MULTILINE).group(1)


def _git(*arguments: str) -> str | None:
    try:
        completed = subprocess.run(
            ["git", *arguments], cwd=HERE, capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return completed.stdout.strip()


def build_version() -> str:
    """The package version with the commit it is built from as a local label (PEP 440)."""
    base = _package_version()
    if os.path.exists(os.path.join(HERE, ".git")):
        commit = _git("rev-parse", "--short=7", "HEAD")
        if commit:
            # Changes under src/ (new files included) or to the build files make a different build
            # of the same commit; a tree whose state git cannot report is not called clean.
            status = _git("status", "--porcelain", "--", "src", "setup.py", "pyproject.toml")
            return f"{base}+g{commit}" + (".dirty" if status is None or status else "")
    pkg_info = os.path.join(HERE, "PKG-INFO")
    if os.path.exists(pkg_info):  # an unpacked sdist: the version it was made with
        match = re.search(r"^Version: (\S+)$", open(pkg_info, encoding="utf-8").read(), re.MULTILINE)
        if match and match.group(1).split("+")[0] == base:
            return match.group(1)
    return base


class BuildExtWithHint(build_ext):
    """``build_ext`` that generates the C when it runs, reuses an unchanged build, and whose
    failure says what to do.

    Generating the C here rather than when ``setup.py`` is read keeps ``sdist`` and
    metadata builds free of Cython and NumPy work. pip builds in a fresh isolated environment
    each time, whose Cython headers are newer than any earlier output, so the timestamp checks of
    Cython and setuptools always rebuild; the fingerprint cache looks at contents instead.
    """

    def _fingerprint(self, ext) -> str:
        import Cython
        import numpy

        digest = hashlib.sha256()
        for part in (
            ext.name, Cython.__version__, numpy.__version__, sys.version, sys.platform,
            sysconfig.get_platform(), platform.machine(),
            repr(sorted(COMPILER_DIRECTIVES.items())), repr(DEBUG_BUILD), repr(ext.define_macros),
            *(repr(sysconfig.get_config_var(name)) for name in ("CC", "CFLAGS", "LDSHARED", "EXT_SUFFIX")),
            *(os.environ.get(name, "") for name in BUILD_ENVIRONMENT),
        ):
            digest.update(part.encode() + b"\0")
        # The sources, what they declare as depends, and every Cython or C header beside them.
        folders = {os.path.dirname(path) for path in self._original_sources[ext.name]}
        headers = sorted(
            os.path.join(folder, name) for folder in folders for name in os.listdir(folder)
            if name.endswith((".pxd", ".pxi", ".h"))
        )
        for path in [__file__, *self._original_sources[ext.name], *ext.depends, *headers]:
            digest.update(path.encode() + b"\0")
            with open(path, "rb") as source:
                digest.update(source.read())
        return digest.hexdigest()[:20]

    def _cached_path(self, ext) -> str:
        name = os.path.basename(self.get_ext_fullpath(ext.name))
        return os.path.join(EXTENSION_CACHE, self._fingerprints[ext.name], name)

    def _take_from_cache(self, ext) -> str | None:
        # A private copy of a cached build of exactly these inputs, made now so that another build
        # pruning the cache meanwhile cannot take it away; None when there is none.
        if self.force or CACHE_DISABLED:
            return None
        handle, copy = tempfile.mkstemp(suffix=os.path.splitext(self._cached_path(ext))[1])
        os.close(handle)
        try:
            shutil.copy2(self._cached_path(ext), copy)
        except OSError:  # not cached: compile it
            os.remove(copy)
            return None
        return copy

    def run(self):
        # Imported here so that a build without the extension needs neither of them.
        import numpy
        from Cython.Build import cythonize

        self._original_sources = {ext.name: list(ext.sources) for ext in self.extensions}
        self._fingerprints = {ext.name: self._fingerprint(ext) for ext in self.extensions}
        self._reused = {}
        for ext in self.extensions:
            copy = self._take_from_cache(ext)
            if copy is not None:
                self._reused[ext.name] = copy
        to_compile = [ext for ext in self.extensions if ext.name not in self._reused]
        for ext in self.extensions:
            if ext.name in self._reused:
                _say(f"{ext.name}: unchanged since an earlier build, reused {self._cached_path(ext)}")
            else:
                _say(f"{ext.name}: generating C with Cython and compiling it (about a minute on 2 cores)")
        generated = cythonize(
            to_compile,
            compiler_directives=COMPILER_DIRECTIVES,
            compile_time_env={"DEBUG_BUILD": DEBUG_BUILD},
            # The generated C depends on DEBUG_BUILD, which Cython's timestamp check cannot
            # see: each kind of build keeps its own generated C.
            build_dir=os.path.join("build", "cython-debug" if DEBUG_BUILD else "cython-release"),
            # A miss in the cache means some input changed, possibly one (a directive, a flag)
            # that Cython's timestamp check cannot see: generate the C again.
            force=True,
        ) if to_compile else []
        # Keep the extension objects setuptools has already prepared; take only the C sources.
        for extension, cythonized in zip(to_compile, generated):
            extension.sources = cythonized.sources
            extension.include_dirs.append(numpy.get_include())
        try:
            super().run()
        finally:
            for copy in self._reused.values():
                if os.path.exists(copy):
                    os.remove(copy)
        self._write_build_record()
        self._prune_cache()

    def _write_build_record(self) -> None:
        # pip hides this build's messages unless it fails or runs with -v: the record keeps, in the
        # installed package, whether each extension was compiled or reused, for `--version` to say.
        record = {
            ext.name: {"reused": ext.name in self._reused, "fingerprint": self._fingerprints[ext.name]}
            for ext in self.extensions
        }
        targets = [os.path.join(self.build_lib, BUILD_RECORD)]
        if self.inplace:  # an editable install (or build_ext --inplace) runs the package from src/
            package_dir = self.get_finalized_command("build_py").get_package_dir("parallel_rollouts.core")
            targets.append(os.path.join(package_dir, os.path.basename(BUILD_RECORD)))
        for target in targets:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w", encoding="utf-8") as file:
                json.dump(record, file, indent=1, sort_keys=True)

    def build_extension(self, ext):
        # Called where setuptools builds (an editable install builds outside the source tree, then
        # copies the result in), so the target path is the one it expects.
        target = self.get_ext_fullpath(ext.name)
        if ext.name in self._reused:
            os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
            shutil.copy2(self._reused[ext.name], target)
            return
        # The timestamp check of setuptools would keep an earlier output that is newer than the
        # generated C; every extension that reaches here is compiled.
        if os.path.exists(target):
            os.remove(target)
        try:
            super().build_extension(ext)
        except Exception as error:  # distutils raises several unrelated types here
            raise RuntimeError(f"{NO_COMPILER_HINT}\nThe compiler said: {error}") from error
        if not CACHE_DISABLED:
            self._keep(ext, target)

    def _keep(self, ext, target) -> None:
        # Best effort: a cache that cannot be written costs the next build a compile, nothing else.
        cached = self._cached_path(ext)
        try:
            os.makedirs(os.path.dirname(cached), exist_ok=True)
            handle, partial = tempfile.mkstemp(dir=os.path.dirname(cached), suffix=".partial")
            os.close(handle)
            shutil.copy2(target, partial)
            os.replace(partial, cached)  # never a half-written file under the real name
        except OSError as error:
            _say(f"{ext.name}: compiled; not kept for the next build ({error})")
            return
        _say(f"{ext.name}: compiled; kept as {cached} for the next build")

    def _prune_cache(self) -> None:
        # Best effort, and never an entry another build may be about to read.
        try:
            names = os.listdir(EXTENSION_CACHE)
        except OSError:
            return
        entries = []
        for name in names:
            path = os.path.join(EXTENSION_CACHE, name)
            try:
                entries.append((os.path.getmtime(path), path))
            except OSError:
                continue
        in_use = {os.path.join(EXTENSION_CACHE, fingerprint) for fingerprint in self._fingerprints.values()}
        recent = time.time() - 600
        for modified, path in sorted(entries, reverse=True)[CACHE_ENTRIES_KEPT:]:
            if path not in in_use and modified < recent:
                shutil.rmtree(path, ignore_errors=True)


EXTENSIONS = [
    # The typed kernels first: the compiled core cimports them.
    Extension(
        "parallel_rollouts.core._kernels",
        sources=["src/parallel_rollouts/core/_kernels.pyx"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    ),
    # The row code, `rows.py`, compiled with the types of `_core.pxd`; the interpreter runs the
    # same file as the pure-Python core.
    Extension(
        "parallel_rollouts.core._core",
        sources=["src/parallel_rollouts/core/rows.py"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    ),
    # The step doorbell of the worker processes (futex waits on Linux); optional like the core:
    # without it, every request travels over the workers' pipes.
    Extension(
        "parallel_rollouts.processes._doorbell",
        sources=["src/parallel_rollouts/processes/_doorbell.pyx"],
        depends=["src/parallel_rollouts/processes/doorbell_wait.h"],
        include_dirs=["src/parallel_rollouts/processes"],
    ),
]

setup(
    version=build_version(),
    ext_modules=[] if NO_EXTENSION else EXTENSIONS,
    cmdclass={"build_ext": BuildExtWithHint},
)
