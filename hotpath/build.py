"""Compile `MODULES` in place with mypyc: `python -m hotpath.build` (`make compiled`).

Each module gets a `.so` beside its `.py`, plus the code of them all in one shared library,
`hotpath/native__mypyc*.so` (inside a package, so that an editable install finds it too);
the C sources and objects go to build/ (all git-ignored). Without mypyc or a C compiler it
says so in one line and exits 0: the gateway then runs in pure Python.
`--if-needed` does nothing when every module has a `.so` newer than its source (what
`make run` and `make test` call); `--clean` removes the built `.so` files.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import sys
import sysconfig
import time
from pathlib import Path

from .modules import (
    EXT_SUFFIX,
    EXTENSIONS,
    MODULES,
    ROOT,
    compiled_path,
    extension_built,
    stale_modules,
)

_GROUP = "hotpath.native"  # the shared library: hotpath/native__mypyc.*.so


def built_files() -> list[Path]:
    """The `.so` files a build leaves in the tree."""
    found = [compiled_path(name) for name in MODULES]
    found += sorted((ROOT / "hotpath").glob(f"*__mypyc{EXT_SUFFIX}"))
    return [path for path in found if path.exists()]


def built_extensions() -> list[Path]:
    """The C extensions' `.so` files a build leaves in the tree."""
    return [path for path in map(compiled_path, EXTENSIONS) if path.exists()]


def clean() -> None:
    for path in built_files() + built_extensions():
        path.unlink()
    shutil.rmtree(ROOT / "build", ignore_errors=True)


def _sources() -> list[str]:
    return [name.replace(".", "/") + ".py" for name in MODULES]


def build(verbose: bool = False) -> bool:
    """Compile; True on success. Failures are reported in one line, not raised."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        print(f"hotpath: no C compiler ({compiler}); running in pure Python")
        return False
    try:
        from mypyc.build import mypycify
        from setuptools import Extension, setup  # type: ignore[import-untyped]
    except ImportError as exc:
        print(f"hotpath: mypyc or setuptools missing ({exc.name}); running in pure Python")
        return False
    started = time.monotonic()
    for path in built_files() + built_extensions():  # no older build left loaded on failure
        path.unlink()
    previous = os.getcwd()
    os.chdir(ROOT)  # mypyc writes its C sources under ./build
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            setup(
                name="streamgate-hotpath",
                ext_modules=[
                    *mypycify(_sources(), opt_level="3", debug_level="0", group_name=_GROUP),
                    *(
                        Extension(name, [source], extra_compile_args=["-O2"])
                        for name, source in EXTENSIONS.items()
                    ),
                ],
                script_args=["build_ext", "--inplace", "--build-temp", "build/temp"],
            )
    except (Exception, SystemExit) as exc:
        if verbose:
            print(out.getvalue(), file=sys.stderr)
        print(f"hotpath: the build failed ({exc!s:.200}); running in pure Python")
        return False
    finally:
        os.chdir(previous)
    if verbose:
        print(out.getvalue(), file=sys.stderr)
    # build_ext copies unchanged per-module stubs with their old times: stamp them now, or
    # the staleness check would take a fresh build for an old one
    for path in built_files() + built_extensions():
        os.utime(path)
    size = sum(path.stat().st_size for path in built_files() + built_extensions())
    print(
        f"hotpath: compiled {len(MODULES)} modules and {len(EXTENSIONS)} C extension(s) "
        f"in {time.monotonic() - started:.0f} s "
        f"({size / 1e6:.1f} MB of .so)"
    )
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hotpath.build", description=__doc__)
    parser.add_argument("--clean", action="store_true", help="remove the built .so files")
    parser.add_argument(
        "--if-needed", action="store_true", help="build only if a .so is missing or stale"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show the compiler output")
    args = parser.parse_args(argv)
    if args.clean:
        clean()
        return 0
    if (
        args.if_needed
        and len(built_files()) == len(MODULES) + 1
        and not stale_modules()
        and all(map(extension_built, EXTENSIONS))
    ):
        return 0
    build(args.verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main())
