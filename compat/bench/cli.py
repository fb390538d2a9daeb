"""`streamgate bench`: run a workload file or a named scenario, list them, report them.

    streamgate bench list
    streamgate bench run WORKLOAD [--targets streamgate,kafka,...] [--runs N] [--out DIR] [--quick]
    streamgate bench run scenario:NAME [--quick] [--runs N] [--targets ...] [--out DIR] [-- ARGS]
    streamgate bench scenario NAME [the same options and ARGS]
    streamgate bench report [--results compat/results] [--doc docs/performance.md] [--check]

WORKLOAD names workloads/WORKLOAD.toml (compat.bench.workloads); NAME a scenario of
compat.bench.scenarios, handed the common options as a RunOptions (compat.benchlib.scenario).
Either way the runner writes `<out>/<name>.json` in one schema (compat.bench.output) and a
Markdown page beside it. Results go to `--out DIR`, by default
`$STREAMGATE_RESULTS/<name>-<time>/` or `./bench-results/<name>-<time>/` (harness.results):
outside the source tree. Importing this module needs only the standard library; the
benchmarks' clients are imported when a run starts (`pip install -e '.[bench]'`).
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from compat.bench import workloads
from compat.bench.scenarios import SCENARIOS
from harness.results import results_dir

SCENARIO_PREFIX = "scenario:"
PROGRESS_MODES = ("auto", "bar", "lines", "none")


def _targets(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in workloads.TARGETS]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown targets {bad}: choose from {', '.join(workloads.TARGETS)}"
        )
    return names


def _positive(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return n


def register(subparsers: Any) -> None:
    """Add `bench` (run, scenario, report, list) to a parent parser's subparsers."""
    bench = subparsers.add_parser(
        "bench", help="benchmarks: workload files (workloads/) and named scenarios"
    )
    sub = bench.add_subparsers(dest="bench_command", required=True)
    run = sub.add_parser(
        "run",
        help="run a workload file (or scenario:NAME)",
        description="Run workloads/WORKLOAD.toml on its targets, alternating them run by run; "
        "write JSON (the one schema, with provenance), Markdown and PNG of the medians. "
        "scenario:NAME runs a named scenario instead: --quick, --runs, --targets and --out "
        "reach it, any other argument (and all after `--`) is its own.",
    )
    run.add_argument("workload", help="a workload file's name, or scenario:NAME")
    _add_run_options(run)
    # the options after WORKLOAD (argparse gives them here), and a scenario's own after --
    run.add_argument("extra", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    run.set_defaults(run=run_command)

    scenario = sub.add_parser(
        "scenario",
        help="run a named scenario: the same as `run scenario:NAME`",
        description="Run a named scenario; --quick, --runs, --targets and --out as for `run`, "
        "any other argument is the scenario's own.",
    )
    scenario.add_argument("name", choices=sorted(SCENARIOS))
    scenario.add_argument("extra", nargs=argparse.REMAINDER, help="options, the scenario's own")
    scenario.set_defaults(run=scenario_command)

    report = sub.add_parser(
        "report",
        help="regenerate docs/performance.md's figures from compat/results/",
        description="Rewrite the generated tables of DOC (between its bench-report marker "
        "comments) from the result files in RESULTS; --check only says whether they are "
        "current; --convert first rewrites older result files in the one schema.",
    )
    report.add_argument("--results", type=Path, default=None, help="default: compat/results")
    report.add_argument("--doc", type=Path, default=None, help="default: docs/performance.md")
    report.add_argument("--check", action="store_true", help="exit 1 if DOC is not current")
    report.add_argument("--convert", action="store_true", help="upgrade older result files")
    report.set_defaults(run=report_command)

    listing = sub.add_parser("list", help="list the workload files and scenarios")
    listing.set_defaults(run=list_command)


def _add_run_options(
    run: argparse.ArgumentParser, suppress: bool = False, common_only: bool = False
) -> None:
    """The options of `bench run`; `suppress`: no defaults (only those given are set);
    `common_only`: only those every scenario takes (the others go to the scenario)."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    run.add_argument(
        "--targets",
        type=_targets,
        default=default(None),
        help="comma-separated, of " + ", ".join(workloads.TARGETS) + " (default: each "
        "workload's own); a workload runs on those it names (streamgate-2n where it names "
        "streamgate)",
    )
    if not common_only:
        run.add_argument(
            "--any-target",
            action="store_true",
            default=default(False),
            help="run every workload on every target of --targets, even one it leaves out",
        )
    run.add_argument(
        "--runs",
        type=_positive,
        default=default(None),
        help="runs per target (median; default 3), a scenario's repetitions (its own default)",
    )
    run.add_argument(
        "--quick",
        action="store_true",
        default=default(False),
        help="small sizes, a smoke test: the files' [quick] tables, a scenario's quick counts",
    )
    run.add_argument(
        "--out", type=Path, default=default(None), help="results folder (default: outside the tree)"
    )
    if common_only:
        return
    run.add_argument(
        "--gateway-arg",
        action="append",
        default=default([]),
        help="an extra `streamgate serve` argument (repeatable)",
    )
    run.add_argument("--progress", choices=PROGRESS_MODES, default=default("auto"))
    run.add_argument("--keep-data", action="store_true", default=default(False))


def _reparse(args: argparse.Namespace) -> list[str]:
    """Parses `args.extra` (what followed WORKLOAD) into `args`; returns what is left for a
    scenario: the arguments after `--`, and for a scenario those the runner does not know."""
    extra = list(args.extra)
    cut = extra.index("--") if "--" in extra else len(extra)
    mine, theirs = extra[:cut], extra[cut + 1 :]
    parser = argparse.ArgumentParser(
        prog="streamgate bench run", add_help=False, allow_abbrev=False
    )
    scenario = args.workload.startswith(SCENARIO_PREFIX)
    _add_run_options(parser, suppress=True, common_only=scenario)
    if scenario:
        known, unknown = parser.parse_known_args(mine)
        theirs = unknown + theirs
    else:
        known = parser.parse_args(mine)
        if theirs:
            parser.error(f"unexpected arguments for a workload: {theirs}")
    vars(args).update(vars(known))
    return theirs


def command_line() -> list[str]:
    """The command as typed: `streamgate ...` also when run as `python -m gateway ...`."""
    name = Path(sys.argv[0]).name
    return ["streamgate" if name in ("__main__.py", "streamgate") else name, *sys.argv[1:]]


def list_command(args: argparse.Namespace) -> int:
    print(f"workloads ({workloads.WORKLOADS_DIR}):")
    for name in workloads.names():
        print(f"  {name:<26} {workloads.description(name)}")
    print("scenarios (streamgate bench run scenario:NAME):")
    for name, scenario in sorted(SCENARIOS.items()):
        print(f"  {name:<26} {scenario.description} ({scenario.module})")
    return 0


def run_command(args: argparse.Namespace) -> int:
    scenario_args = _reparse(args)
    if args.workload.startswith(SCENARIO_PREFIX):
        name = args.workload[len(SCENARIO_PREFIX) :]
        if name not in SCENARIOS:
            print(f"no scenario {name!r}: choose from {', '.join(sorted(SCENARIOS))}")
            return 2
        return run_scenario(name, args, scenario_args)
    try:
        found = workloads.expand(args.workload, quick=args.quick)
    except workloads.WorkloadError as exc:
        print(exc, file=sys.stderr)
        return 2
    from compat.bench import kvs
    from harness.provenance import provenance

    out_dir = args.out or results_dir(args.workload)
    options = kvs.Options(
        out=out_dir / args.workload,
        targets=args.targets,
        runs=args.runs or 3,
        quick=args.quick,
        any_target=args.any_target,
        gateway_args=args.gateway_arg,
        progress=args.progress,
        keep_data=args.keep_data,
        provenance=provenance(command_line()),
    )
    return kvs.run_workloads(found, options)


def scenario_command(args: argparse.Namespace) -> int:
    return scenario_main(args.name, list(args.extra))


def scenario_main(name: str, argv: list[str] | None = None) -> int:
    """`bench run scenario:NAME ARGV...`: also each scenario script's own `main`."""
    from cli.main import build_parser

    extra = sys.argv[1:] if argv is None else list(argv)
    args = build_parser((__name__,)).parse_args(["bench", "run", SCENARIO_PREFIX + name])
    args.extra = extra
    return run_command(args)


def run_scenario(name: str, args: argparse.Namespace, extra: list[str]) -> int:
    """Runs scenario `name` with the common options of `args` and its own `extra`, then
    writes `<out>/<name>.json` and `.md` (compat.bench.output): provenance, the options,
    the figures it returned, the other files it left in the folder."""
    from compat.bench.output import result_document, write_result
    from compat.benchlib.scenario import RunOptions
    from harness.provenance import provenance

    scenario = SCENARIOS[name]
    out_dir = args.out or results_dir(name)
    out_dir.mkdir(parents=True, exist_ok=True)
    prov = provenance(command_line())  # before the run's own files
    options = RunOptions(
        out=out_dir,
        quick=args.quick,
        runs=args.runs,
        targets=None if args.targets is None else tuple(args.targets),
        args=tuple(extra),
    )
    print(f"scenario {name}: {scenario.module} {options.to_json()}", file=sys.stderr)
    started = time.monotonic()
    try:
        figures = scenario.run(options)
        ok = bool(figures.get("ok", True))
    except Exception as exc:  # the failure is a result too: written, exit code 1
        traceback.print_exc()
        figures, ok = {"ok": False, "error": repr(exc)}, False
    own = {f"{name}.json", f"{name}.md"}
    files = [p.name for p in out_dir.iterdir() if p.is_file() and p.name not in own]
    doc = result_document(
        name=name,
        kind="scenario",
        figures=figures,
        provenance=prov,
        quick=args.quick,
        options={**options.to_json(), "wall_s": round(time.monotonic() - started, 1)},
        ok=ok,
        files=files,
    )
    path = write_result(out_dir / name, doc)
    print(f"written: {path} ({'ok' if ok else 'FAILED'})", file=sys.stderr)
    return 0 if ok else 1


def report_command(args: argparse.Namespace) -> int:
    from compat.bench import report

    return report.main(args.results, args.doc, check=args.check, convert_old=args.convert)
