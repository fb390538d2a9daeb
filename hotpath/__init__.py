"""The request hot path compiled to C with mypyc, and the switch back to pure Python.

`MODULES` lists the modules `python -m hotpath.build` compiles in place (each gets a `.so`
beside its `.py`; Python's import system prefers the `.so`). With STREAMGATE_PURE_PYTHON=1
in the environment, `install_pure_hook` (called by the `__init__` of every package that
holds one of them, so before any is imported) makes the process import the `.py` sources
instead. This package imports no other package of the project.
"""

from __future__ import annotations

from .modules import (
    EXTENSIONS,
    MODULES,
    PURE_PYTHON_ENV,
    describe,
    extension_usable,
    loaded_modules,
    pure_requested,
    stale_modules,
)
from .pure import install_pure_hook

__all__ = [
    "EXTENSIONS",
    "MODULES",
    "PURE_PYTHON_ENV",
    "describe",
    "extension_usable",
    "install_pure_hook",
    "loaded_modules",
    "pure_requested",
    "stale_modules",
]
