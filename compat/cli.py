"""`streamgate compat run`: the compatibility matrix against one or two Kafka endpoints.

Also `python -m compat.cli run ...`. Importing this module needs only the standard library;
the clients are imported by the cell processes (`pip install -e '.[compat]'`).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.results import results_dir

REPO_ROOT = Path(__file__).resolve().parent.parent
# The published scorecard is compat/results/ (`--output-dir compat/results` to update it);
# a run writes outside the source tree unless told (harness/results.py).
PUBLISHED_OUT = REPO_ROOT / "compat" / "results"


def register(subparsers: Any) -> None:
    """Add `compat run` to a parent parser's subparsers (streamgate's or our own)."""
    compat = subparsers.add_parser("compat", help="compatibility matrix with real Kafka clients")
    sub = compat.add_subparsers(dest="compat_command", required=True)
    run = sub.add_parser(
        "run",
        help="run the feature matrix",
        description="Run every (row, client) cell against the target and "
        "optionally a reference; print a table, write Markdown and JSON.",
    )
    tgt = run.add_mutually_exclusive_group(required=True)
    tgt.add_argument("--bootstrap", metavar="HOST:PORT", help="the endpoint under test")
    tgt.add_argument(
        "--streamgate",
        action="store_true",
        help="start a fresh streamgate (harness.gateway) as the target",
    )
    ref = run.add_mutually_exclusive_group()
    ref.add_argument("--against", metavar="HOST:PORT", help="a reference endpoint")
    ref.add_argument(
        "--kafka",
        action="store_true",
        help="start Apache Kafka from ../shared/kafka or KAFKA_HOME as reference",
    )
    run.add_argument("--rows", help="comma-separated row ids (default: all)")
    run.add_argument("--columns", help="comma-separated clients (default: all)")
    run.add_argument("--records", type=int, default=50, help="records per cell (default 50)")
    run.add_argument("--jobs", type=int, default=4, help="cells run at once (default 4)")
    run.add_argument(
        "--cell-timeout",
        type=float,
        default=90.0,
        help="seconds before a cell is killed and failed (default 90)",
    )
    run.add_argument(
        "--output-dir",
        type=Path,
        help="where the Markdown and JSON go (default: $STREAMGATE_RESULTS/compat-<time>/ or "
        "./bench-results/compat-<time>/; the published scorecard is compat/results/)",
    )
    run.add_argument("--stem", default="compat_matrix", help="output file name stem")
    run.add_argument(
        "--gateway-arg",
        action="append",
        default=[],
        help="extra `streamgate serve` argument for --streamgate (repeatable)",
    )
    run.add_argument(
        "--allowlist",
        type=Path,
        help="cells expected to pass on the target (`row` or `column/row` lines); "
        "exit 1 when one of them fails",
    )
    run.add_argument("--quiet", action="store_true", help="no per-cell progress lines")
    run.set_defaults(run=run_command, compat_func=run_command)


def read_allowlist(path: Path) -> set[str]:
    entries = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            entries.add(line)
    return entries


def allowed(entries: set[str], column: str, row: str) -> bool:
    return row in entries or f"{column}/{row}" in entries


@contextlib.contextmanager
def _targets(args: argparse.Namespace, work: Path) -> Iterator[list[Any]]:
    from compat.matrix.runner import Target

    targets: list[Target] = []
    with contextlib.ExitStack() as stack:
        if args.streamgate:
            from harness.gateway import Gateway

            gw = Gateway(
                work / "streamgate" / "data",
                work / "streamgate" / "server.log",
                args.gateway_arg,
                default_partitions=3,
            )
            stack.callback(gw.close)
            gw.start_fresh()
            targets.append(Target("streamgate", gw.bootstrap, gw.restart))
        else:
            targets.append(Target("target", args.bootstrap))
        if args.kafka:
            from harness.kafka import KafkaBroker, unavailable_reason

            why = unavailable_reason()
            if why:
                raise SystemExit(f"--kafka: {why}")
            broker = KafkaBroker(work / "kafka")
            stack.callback(broker.close)
            broker.start()

            def restart_kafka() -> None:
                broker.stop(timeout=60)
                broker.start()

            targets.append(Target("kafka", broker.bootstrap, restart_kafka))
        elif args.against:
            targets.append(Target("reference", args.against))
        yield targets


def run_command(args: argparse.Namespace) -> int:
    from compat.matrix import report
    from compat.matrix.registry import COLUMNS
    from compat.matrix.rows import ROWS, row
    from compat.matrix.runner import run_target
    from harness.provenance import provenance

    rows = [row(r.strip()) for r in args.rows.split(",")] if args.rows else list(ROWS)
    columns = [c.strip() for c in args.columns.split(",")] if args.columns else list(COLUMNS)
    for c in columns:
        if c not in COLUMNS:
            print(f"unknown column {c!r}; columns: {', '.join(COLUMNS)}", file=sys.stderr)
            return 2
    if args.records < 4:
        print("--records must be at least 4", file=sys.stderr)
        return 2

    def progress(r: Any) -> None:
        if not args.quiet:
            print(
                f"  {r.target:10} {r.row:20} {r.column:16} {r.status:4} {r.seconds:6.1f}s"
                + ("" if r.status == "pass" else f"  {r.detail[:160]}"),
                flush=True,
            )

    results = []
    with (
        tempfile.TemporaryDirectory(prefix="streamgate-compat-") as tmp,
        _targets(args, Path(tmp)) as targets,
    ):
        for t in targets:
            print(f"{t.name}: {t.bootstrap}", flush=True)
            results += run_target(
                t,
                rows,
                columns,
                records=args.records,
                jobs=args.jobs,
                cell_timeout=args.cell_timeout,
                work_dir=Path(tmp) / "cells",
                on_result=progress,
            )
        names = {t.name: t.bootstrap for t in targets}
    report.print_table(results, rows, columns, list(names))
    output_dir = args.output_dir or results_dir("compat")
    md, js = report.write(output_dir, args.stem, results, rows, columns, names, provenance())
    print(f"wrote {md} and {js}")
    if args.allowlist:
        entries = read_allowlist(args.allowlist)
        first = next(iter(names))
        regressions = [
            r
            for r in results
            if r.target == first and r.status != "pass" and allowed(entries, r.column, r.row)
        ]
        newly = [
            r
            for r in results
            if r.target == first and r.status == "pass" and not allowed(entries, r.column, r.row)
        ]
        for r in newly:
            print(f"passes but not in the allowlist: {r.column}/{r.row}")
        for r in regressions:
            print(f"ALLOWLISTED CELL FAILED: {r.column}/{r.row}: {r.detail}")
        return 1 if regressions else 0
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compat.cli")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["compat", *(sys.argv[1:] if argv is None else argv)])
    return int(args.compat_func(args))


if __name__ == "__main__":
    sys.exit(main())
