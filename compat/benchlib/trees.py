"""Side-by-side runs of source trees for the probes: trees alternate run by run (the order
rotates) so the machine's noise hits them alike; the summary is each figure's median."""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from compat.benchlib.topics import create_topic
from harness.gateway import Gateway
from harness.provenance import provenance

Result = dict[str, Any]


def tree_arguments(parser: argparse.ArgumentParser, runs: int = 3) -> None:
    """`--tree` (repeatable: a checkout whose gateway code runs) and `--runs`."""
    parser.add_argument("--tree", action="append", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=runs)


def run_alternating(
    trees: Sequence[Path], runs: int, run_once: Callable[[Path], Result]
) -> dict[str, list[Result]]:
    """`run_once(tree)` for every tree, `runs` times, printing each result as it comes."""
    results: dict[str, list[Result]] = {str(t): [] for t in trees}
    for run in range(runs):
        order = list(trees[run % len(trees) :]) + list(trees[: run % len(trees)])
        for tree in order:
            result = run_once(tree.resolve())
            results[str(tree)].append(result)
            print(tree, json.dumps(result), flush=True)
    return results


def print_summary(results: dict[str, list[Result]], keys: Sequence[str]) -> None:
    """Each tree's median of every key (runs where it is None left out), with provenance."""
    summary = {
        tree: {
            key: statistics.median(v for r in runs if (v := r.get(key)) is not None) for key in keys
        }
        for tree, runs in results.items()
    }
    print(json.dumps({"summary": summary, "provenance": provenance()}, indent=1))


@contextlib.contextmanager
def tree_gateway(tree: Path, topic: str, partitions: int) -> Iterator[Gateway]:
    """A fresh gateway running `tree`'s code, with `topic` created; stopped on leaving."""
    with tempfile.TemporaryDirectory(prefix="bench-tree-gateway-") as tmp:
        gw = Gateway(Path(tmp) / "data", Path(tmp) / "gw.log", default_partitions=partitions)
        gw.cwd = tree  # `-m gateway` imports from the working directory: that tree's code
        gw.start_fresh()
        try:
            create_topic(gw.bootstrap, topic, partitions)
            yield gw
        finally:
            gw.stop()


def tree_commit(tree: Path) -> str | None:
    """The tree's git commit, when it is a checkout (a `git archive` copy is not)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True
        )
    except OSError:
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None
