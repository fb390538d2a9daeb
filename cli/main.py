"""The `streamgate` command line: one subcommand per plugin module.

A plugin is a module with `register(commands)`, which adds its subparser(s) to `commands`
(argparse's subparsers action) and sets `run` (a function of the parsed arguments that
returns the exit code) as a default. Another package plugs in a command by adding its
module to `PLUGINS` (e.g. `bridge.cli` for `streamgate bridge mqtt ...`).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

PLUGINS: tuple[str, ...] = (
    "cli.serve",
    "cli.groups",
    "cli.streams",
    "cli.users",
    "bridge.cli",
    "compat.cli",
    "compat.bench.cli",
)


def build_parser(plugins: tuple[str, ...] = PLUGINS) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamgate", description="A Kafka wire-protocol gateway in front of a stream store."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for name in plugins:
        importlib.import_module(name).register(commands)
    return parser


def _without_test_plugins() -> None:
    """kio imports hypothesis when it is installed (the test extra), and importing hypothesis
    runs trio's hypothesis plugin, which makes trio's scheduler deterministic for tests (a
    sort and a pure-Python shuffle of the run queue every loop turn) and imports pytest. A
    streamgate process needs neither: mark hypothesis as absent, so kio goes without it
    (0.5 s faster start, 14 MB less RSS). Not when something imported it already."""
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    _without_test_plugins()
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(args, "log_level", "WARNING").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
