"""An import hook that loads the listed modules from their `.py` sources, `.so` or not."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

from .modules import MODULES, pure_requested, stale_modules


class PureSourceFinder:
    """A meta path finder, ahead of the standard one, for the compiled modules only: it
    answers with the source file's spec, so the `.so` beside it is never loaded."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = frozenset(names)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname not in self.names or not path:
            return None
        leaf = fullname.rpartition(".")[2] + ".py"
        for entry in path:
            source = os.path.join(entry, leaf)
            if os.path.isfile(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None  # no source: let the standard finders decide


def install_pure_hook() -> bool:
    """Install the finder when STREAMGATE_PURE_PYTHON asks for it or the build is stale
    (idempotent); returns whether it is installed. Must run before any listed module is
    imported: a module already loaded stays as it is."""
    if any(isinstance(finder, PureSourceFinder) for finder in sys.meta_path):
        return True
    if not (pure_requested() or stale_modules()):
        return False
    sys.meta_path.insert(0, PureSourceFinder(MODULES))
    return True
