"""Which modules are compiled, and which form the running process loaded them in."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

# Kept by measured gain (compat/results/hotpath.md): the sans-io Produce/Fetch codecs and
# their primitives, framing, record batch headers/CRC/offsets (also the Spark source's
# record decoder) and gathered writes. The modules of one build call each other directly.
MODULES: tuple[str, ...] = (
    "kafkawire.framing",
    "kafkawire.body_reader",
    "kafkawire.wire",
    "kafkawire.produce_request",
    "kafkawire.produce_response",
    "kafkawire.fetch_request",
    "kafkawire.fetch_response",
    "core.recordbatch",
    "core.gathered_io",
)
# Extensions written in C, each with a Python module that falls back without it: the
# segment logs' durable writes in native threads that never take the GIL.
EXTENSIONS: dict[str, str] = {
    "core.segments._durable_writer": "core/segments/durable_writer.c",
}

PURE_PYTHON_ENV = "STREAMGATE_PURE_PYTHON"
ROOT = Path(__file__).resolve().parent.parent
EXT_SUFFIX: str = sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def pure_requested() -> bool:
    """True when the environment asks for the pure-Python modules."""
    return os.environ.get(PURE_PYTHON_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def source_path(name: str) -> Path:
    return ROOT / (name.replace(".", "/") + ".py")


def compiled_path(name: str) -> Path:
    return ROOT / (name.replace(".", "/") + EXT_SUFFIX)


def extension_built(name: str) -> bool:
    """Whether the C extension `name` is built and not older than its source."""
    try:
        return compiled_path(name).stat().st_mtime >= (ROOT / EXTENSIONS[name]).stat().st_mtime
    except FileNotFoundError:
        return False


def extension_usable(name: str) -> bool:
    """Whether the C extension `name` may be loaded: built, current, and
    STREAMGATE_PURE_PYTHON not set."""
    return not pure_requested() and extension_built(name)


def stale_modules() -> list[str]:
    """Listed modules whose `.so` is older than their `.py` (edited since the build).

    The compiled modules call each other directly, so one stale module makes the whole
    build unusable: the caller then loads every listed module from source."""
    stale = []
    for name in MODULES:
        try:
            if compiled_path(name).stat().st_mtime < source_path(name).stat().st_mtime:
                stale.append(name)
        except FileNotFoundError:
            continue
    return stale


def loaded_modules() -> dict[str, bool]:
    """For each listed module this process has imported: True if from a compiled `.so`."""
    found = {}
    for name in MODULES:
        module = sys.modules.get(name)
        if module is not None:
            found[name] = str(getattr(module, "__file__", "")).endswith(EXT_SUFFIX)
    return found


def describe() -> str:
    """One line for the startup log: compiled or pure Python, and which modules."""
    loaded = loaded_modules()
    compiled = sorted(name for name, is_compiled in loaded.items() if is_compiled)
    pure = sorted(name for name, is_compiled in loaded.items() if not is_compiled)
    native = sorted(name for name in EXTENSIONS if name in sys.modules)
    if compiled and not pure:
        return f"hot path compiled ({', '.join(compiled + native)})"
    if compiled:
        return f"hot path mixed: compiled {', '.join(compiled)}; pure Python {', '.join(pure)}"
    if pure_requested():
        why = f"{PURE_PYTHON_ENV} set"
    elif stale_modules():
        why = "the build is older than the sources: make compiled"
    else:
        why = "not built: make compiled"
    return f"hot path pure Python ({why}; {', '.join(pure) or 'nothing loaded yet'})"
