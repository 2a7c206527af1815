"""Build the two compiled extensions: the hot path ``parallel_rollouts.core._core`` (from
``src/parallel_rollouts/core/_core.pyx``) and the step doorbell's waits
``parallel_rollouts.processes._doorbell`` (from ``_doorbell.pyx``).

All package metadata lives in ``pyproject.toml``; this file only declares the
extensions. Cython directives are set here, once. Two environment variables
change the build:

- ``PARALLEL_ROLLOUTS_DEBUG_BUILD=1`` turns bounds, wrap-around and
  initialisation checks back on, for debugging and for one CI pass;
- ``PARALLEL_ROLLOUTS_NO_EXTENSION=1`` skips the extensions entirely, for
  machines without a C compiler: the package then runs its pure-Python core
  (and the workers answer over pipes) and warns that it does.

The extensions are always generated from their ``.pyx`` sources (shipped in the
sdist, not in the wheel); the generated C lives under ``build/``, one copy per
kind of build.
"""

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


DEBUG_BUILD = _flag("PARALLEL_ROLLOUTS_DEBUG_BUILD")
NO_EXTENSION = _flag("PARALLEL_ROLLOUTS_NO_EXTENSION")

COMPILER_DIRECTIVES = {
    "language_level": 3,
    "boundscheck": DEBUG_BUILD,
    "wraparound": DEBUG_BUILD,
    "initializedcheck": DEBUG_BUILD,
    "cdivision": True,
    "embedsignature": True,
}

NO_COMPILER_HINT = (
    "Building the compiled core `parallel_rollouts.core._core` failed. It needs a C compiler "
    "(Linux: gcc, e.g. `apt install build-essential`; macOS: `xcode-select --install`; Windows: "
    "the 'Desktop development with C++' workload of Visual Studio Build Tools). To install "
    "without it, set PARALLEL_ROLLOUTS_NO_EXTENSION=1 and run the install again: the package "
    "then uses its pure-Python core (same results, slower per step) and says so when it does."
)


class BuildExtWithHint(build_ext):
    """``build_ext`` that generates the C when it runs, and whose failure says what to do.

    Generating the C here rather than when ``setup.py`` is read keeps ``sdist`` and
    metadata builds free of Cython and NumPy work.
    """

    def run(self):
        # Imported here so that a build without the extension needs neither of them.
        import numpy
        from Cython.Build import cythonize

        generated = cythonize(
            self.extensions,
            compiler_directives=COMPILER_DIRECTIVES,
            compile_time_env={"DEBUG_BUILD": DEBUG_BUILD},
            # The generated C depends on DEBUG_BUILD, which Cython's timestamp check cannot
            # see: each kind of build keeps its own generated C.
            build_dir=os.path.join("build", "cython-debug" if DEBUG_BUILD else "cython-release"),
        )
        # Keep the extension objects setuptools has already prepared; take only the C sources.
        for extension, cythonized in zip(self.extensions, generated):
            extension.sources = cythonized.sources
            extension.include_dirs.append(numpy.get_include())
        super().run()

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as error:  # distutils raises several unrelated types here
            raise RuntimeError(f"{NO_COMPILER_HINT}\nThe compiler said: {error}") from error


EXTENSIONS = [
    Extension(
        "parallel_rollouts.core._core",
        sources=["src/parallel_rollouts/core/_core.pyx"],
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

setup(ext_modules=[] if NO_EXTENSION else EXTENSIONS, cmdclass={"build_ext": BuildExtWithHint})
