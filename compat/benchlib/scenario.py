"""The contract between `streamgate bench` and a scenario (a compat/bench_*.py script).

A scenario module has `run(options: RunOptions) -> dict`: it measures and returns its
figures (a JSON-able dict; `"ok": False` in it marks a failed run). It writes no result file:
the runner does (compat.bench.output), with provenance. Files a scenario makes besides its
figures (a plot, a log) go in `options.out`. `main(argv)` keeps the script runnable on its own
(`python -m compat.bench_x [--quick] [--runs N] [--out DIR] [--targets a,b] [-- ITS ARGS]`):
it goes through the same runner.

The common options reach every scenario the same way: `scenario_args` turns them into the
script's own argument list (its `--quick` sizes, its repeat option, its option that leaves
Kafka out) ahead of the arguments given for it, so those win.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Report = dict[str, Any]


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What the runner tells every scenario."""

    out: Path  # the run's results folder (created by the runner)
    quick: bool = False  # small counts: a smoke test of about a minute
    runs: int | None = None  # repetitions, where the scenario repeats; None: its own default
    targets: tuple[str, ...] | None = None  # servers to measure; None: the scenario's default
    args: tuple[str, ...] = field(default=())  # the scenario's own arguments, as given

    def wants(self, target: str) -> bool:
        """Whether `target` is to be measured (every target when none were named)."""
        return self.targets is None or target in self.targets

    def to_json(self) -> Report:
        return {
            "out": str(self.out),
            "quick": self.quick,
            "runs": self.runs,
            "targets": None if self.targets is None else list(self.targets),
            "args": list(self.args),
        }


def scenario_argv(
    options: RunOptions,
    *,
    quick: Sequence[str] = (),
    runs: str | None = None,
    skip_kafka: str | None = None,
    with_kafka: str | None = None,
) -> list[str]:
    """A scenario's argument list from the common options: `quick` (its small counts) when
    --quick, `runs` (its repeat option) with --runs, `skip_kafka` when Kafka is not among the
    targets, `with_kafka` when it is named; then the scenario's own arguments."""
    argv: list[str] = list(quick) if options.quick else []
    if runs is not None and options.runs is not None:
        argv += [runs, str(options.runs)]
    if skip_kafka is not None and not options.wants("kafka"):
        argv.append(skip_kafka)
    if with_kafka is not None and options.targets is not None and "kafka" in options.targets:
        argv.append(with_kafka)
    return argv + list(options.args)


def scenario_args(
    parser: argparse.ArgumentParser,
    options: RunOptions,
    *,
    quick: Sequence[str] = (),
    runs: str | None = None,
    skip_kafka: str | None = None,
    with_kafka: str | None = None,
) -> argparse.Namespace:
    """`parser` applied to scenario_argv(...)."""
    return parser.parse_args(
        scenario_argv(options, quick=quick, runs=runs, skip_kafka=skip_kafka, with_kafka=with_kafka)
    )


def standalone(name: str, argv: list[str] | None = None) -> int:
    """A scenario script's `main`: the runner's `bench run scenario:NAME`, same options."""
    from compat.bench.cli import scenario_main

    return scenario_main(name, argv)
