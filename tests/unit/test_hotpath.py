"""The compiled hot path (hotpath/): a build is really loaded, the switch really loads the
sources, and the codec tests pass in the mode this run is not in.

Each check runs in a fresh interpreter, since a process loads each module once, in one form.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import hotpath
from hotpath.build import built_files

ROOT = Path(__file__).resolve().parents[2]
_BUILT = len(built_files()) == len(hotpath.MODULES) + 1
_NOT_BUILT = "the hot path is not compiled here (make compiled)"


def _loaded(pure: bool, root: Path = ROOT) -> dict[str, bool]:
    """In a fresh interpreter with or without the switch: which listed modules load compiled."""
    env = {k: v for k, v in os.environ.items() if k != hotpath.PURE_PYTHON_ENV}
    env["PYTHONPATH"] = str(root)
    if pure:
        env[hotpath.PURE_PYTHON_ENV] = "1"
    code = (
        "import importlib, json, hotpath\n"
        "for name in hotpath.MODULES: importlib.import_module(name)\n"
        "print(json.dumps(hotpath.loaded_modules()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, check=True
    )
    result: dict[str, bool] = json.loads(out.stdout)
    return result


def test_a_build_is_what_loads() -> None:
    if not _BUILT:
        pytest.skip(_NOT_BUILT)
    if stale := hotpath.stale_modules():
        pytest.skip(f"the build is older than {', '.join(stale)}: make compiled")
    loaded = _loaded(pure=False)
    assert set(loaded) == set(hotpath.MODULES)
    not_compiled = [name for name, compiled in loaded.items() if not compiled]
    assert not not_compiled, f"built but loaded from source: {not_compiled}"


def test_the_switch_loads_every_module_from_its_source() -> None:
    loaded = _loaded(pure=True)
    assert set(loaded) == set(hotpath.MODULES)
    assert not any(loaded.values()), loaded


def test_a_stale_build_is_not_loaded(tmp_path: Path) -> None:
    """A module edited after the build loads every listed module from source: the compiled
    modules call each other directly, so one stale module would run old code. (On a copy of
    the packages: touching the real files would change what other tests' gateways load.)"""
    if not _BUILT:
        pytest.skip(_NOT_BUILT)
    skip = shutil.ignore_patterns("__pycache__")
    for package in ("hotpath", "kafkawire", "core"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=skip, copy_function=shutil.copy2)
    assert all(_loaded(pure=False, root=tmp_path).values())
    edited = tmp_path / "kafkawire" / "wire.py"
    edited.touch()
    assert not any(_loaded(pure=False, root=tmp_path).values())


# The codec tests, deterministic ones only (every truncation, hostile lengths, versions,
# the usual answers): the generated ones run in the main run's mode only (in both, they
# would add half a minute).
_OTHER_MODE_TESTS = [
    "tests/unit/test_produce_request_decoder.py",
    "tests/unit/test_produce_response_encoder.py",
    "tests/unit/test_fetch_request_decoder.py",
    "tests/unit/test_records.py",
    "tests/unit/test_gathered_io.py",
]


def test_codec_tests_pass_in_the_other_mode() -> None:
    if not _BUILT:
        pytest.skip(f"{_NOT_BUILT}: both modes are the same")
    env = dict(os.environ)
    if hotpath.pure_requested():
        env.pop(hotpath.PURE_PYTHON_ENV)
    else:
        env[hotpath.PURE_PYTHON_ENV] = "1"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-k",
        "not hypothesis and not (test_matches_kio and not usual_answer) and not write_all_writes",
        *_OTHER_MODE_TESTS,
    ]
    out = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
