"""Build the compiled hot path, ``parallel_rollouts._core``, from ``_core/``.

All package metadata lives in ``pyproject.toml``; this file only declares the
extension. Cython directives are set here, once. Setting
``PARALLEL_ROLLOUTS_DEBUG_BUILD=1`` turns bounds, wrap-around and
initialisation checks back on, for debugging and for one CI pass.
"""

import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG_BUILD = os.environ.get("PARALLEL_ROLLOUTS_DEBUG_BUILD", "") not in ("", "0")

COMPILER_DIRECTIVES = {
    "language_level": 3,
    "boundscheck": DEBUG_BUILD,
    "wraparound": DEBUG_BUILD,
    "initializedcheck": DEBUG_BUILD,
    "cdivision": True,
    "embedsignature": True,
}

extensions = [
    Extension(
        "parallel_rollouts._core",
        sources=["_core/_core.pyx"],
        include_dirs=[numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives=COMPILER_DIRECTIVES,
        compile_time_env={"DEBUG_BUILD": DEBUG_BUILD},
    ),
)
