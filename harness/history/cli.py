"""`python -m harness.history run|check`: run a workload or check a saved history."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .checker import check, summarize
from .model import History, Violation
from .requests import RunConfig
from .run import run_workload

# --------------------------------------------------------------------------- the CLI


def report(violations: Sequence[Violation], out: Any = None, per_kind: int = 5) -> None:
    """Counts per kind/register, then up to `per_kind` examples of each."""
    out = out or sys.stdout
    counts = summarize(violations, by_register=True)
    if not counts:
        print("no violations", file=out)
        return
    print(f"{len(violations)} violations:", file=out)
    for key in sorted(counts):
        print(f"  {key}: {counts[key]}", file=out)
    for key in sorted(counts):
        shown = [v for v in violations if f"{v.kind}/{v.register}" == key][:per_kind]
        for v in shown:
            print(f"- {v}", file=out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.history",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the workload against a fresh gateway and check")
    run.add_argument("--seconds", type=float, default=60.0, help="workload duration")
    run.add_argument("--kills", type=int, default=1, help="SIGKILL restarts during the run")
    run.add_argument(
        "--seed", type=int, default=1, help="names, kill times, probe sizes (not the timing)"
    )
    run.add_argument("--out", type=Path, help="write the history here (JSON lines)")
    run.add_argument("--repo", type=Path, help="the gateway's code (default: this checkout)")
    run.add_argument("--workdir", type=Path, help="data dir and server.log (default: temporary)")
    run.add_argument("--show", type=int, default=5, help="violations shown per kind")
    again = commands.add_parser("check", help="check a saved history (JSON lines)")
    again.add_argument("history", type=Path)
    again.add_argument("--show", type=int, default=5)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.command == "check":
        violations = check(History.load(args.history))
        report(violations, per_kind=args.show)
        return 1 if violations else 0
    config = RunConfig(
        seconds=args.seconds, kills=args.kills, seed=args.seed, repo=args.repo, workdir=args.workdir
    )
    result = run_workload(config)
    if args.out:
        result.history.dump(args.out)
    print(
        f"ran {result.seconds:.1f} s; {len(result.history.ops)} operations; "
        f"{json.dumps(result.counts, sort_keys=True)}"
    )
    report(result.violations, per_kind=args.show)
    return 1 if result.violations else 0
