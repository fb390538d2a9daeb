"""`streamgate bench`: run a workload file or a named scenario, list them.

    streamgate bench list
    streamgate bench run WORKLOAD [--targets streamgate,kafka,...] [--runs N] [--out DIR] [--quick]
    streamgate bench run scenario:NAME [--out DIR] [-- SCENARIO ARGS...]
    streamgate bench scenario NAME [SCENARIO ARGS...]

WORKLOAD names workloads/WORKLOAD.toml (compat.bench.workloads). Results go to `--out DIR`,
by default `$STREAMGATE_RESULTS/<name>-<time>/` or `./bench-results/<name>-<time>/`
(harness.results): outside the source tree. Importing this module needs only the standard
library; the benchmarks' clients are imported when a run starts (`pip install -e '.[bench]'`).
"""

from __future__ import annotations

import argparse
import sys
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
    """Add `bench` (run, scenario, list) to a parent parser's subparsers."""
    bench = subparsers.add_parser(
        "bench", help="benchmarks: workload files (workloads/) and named scenarios"
    )
    sub = bench.add_subparsers(dest="bench_command", required=True)
    run = sub.add_parser(
        "run",
        help="run a workload file (or scenario:NAME)",
        description="Run workloads/WORKLOAD.toml on its targets, alternating them run by run; "
        "write JSON (with provenance), Markdown and PNG of the medians. scenario:NAME runs a "
        "named scenario instead (arguments for it after `--`).",
    )
    run.add_argument("workload", help="a workload file's name, or scenario:NAME")
    _add_run_options(run)
    # the options after WORKLOAD (argparse gives them here), and a scenario's own after --
    run.add_argument("extra", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    run.set_defaults(run=run_command)

    scenario = sub.add_parser("scenario", help="run a named scenario (a compat/ script)")
    scenario.add_argument("name", choices=sorted(SCENARIOS))
    scenario.add_argument("--out", type=Path, help="results folder (default: outside the tree)")
    scenario.add_argument("extra", nargs=argparse.REMAINDER, help="the scenario's own arguments")
    scenario.set_defaults(run=scenario_command)

    listing = sub.add_parser("list", help="list the workload files and scenarios")
    listing.set_defaults(run=list_command)


def _add_run_options(run: argparse.ArgumentParser, suppress: bool = False) -> None:
    """The options of `bench run`; `suppress`: no defaults (only those given are set)."""

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
    run.add_argument(
        "--any-target",
        action="store_true",
        default=default(False),
        help="run every workload on every target of --targets, even one it leaves out",
    )
    run.add_argument("--runs", type=_positive, default=default(3), help="runs per target (median)")
    run.add_argument(
        "--quick",
        action="store_true",
        default=default(False),
        help="the files' [quick] sizes: a smoke test",
    )
    run.add_argument(
        "--out", type=Path, default=default(None), help="results folder (default: outside the tree)"
    )
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
    _add_run_options(parser, suppress=True)
    if args.workload.startswith(SCENARIO_PREFIX):
        known, unknown = parser.parse_known_args(mine)
        theirs = unknown + theirs
    else:
        known = parser.parse_args(mine)
        if theirs:
            parser.error(f"unexpected arguments for a workload: {theirs}")
    vars(args).update(vars(known))
    return theirs


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
        return run_scenario(name, args.out, scenario_args)
    try:
        found = workloads.expand(args.workload, quick=args.quick)
    except workloads.WorkloadError as exc:
        print(exc, file=sys.stderr)
        return 2
    from compat.bench import kvs

    out_dir = args.out or results_dir(args.workload)
    options = kvs.Options(
        out=out_dir / args.workload,
        targets=args.targets,
        runs=args.runs,
        quick=args.quick,
        any_target=args.any_target,
        gateway_args=args.gateway_arg,
        progress=args.progress,
        keep_data=args.keep_data,
    )
    return kvs.run_workloads(found, options)


def scenario_command(args: argparse.Namespace) -> int:
    extra = list(args.extra)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    return run_scenario(args.name, args.out, extra)


def run_scenario(name: str, out: Path | None, extra: list[str]) -> int:
    """Runs scenario `name` with its outputs in `out` (unless `extra` names them), then
    writes run.json / run.md there: provenance, the arguments, the exit code, the files."""
    from compat.bench.output import provenance_markdown, write_all
    from harness.provenance import provenance

    scenario = SCENARIOS[name]
    out_dir = out or results_dir(name)
    out_dir.mkdir(parents=True, exist_ok=True)
    prov = provenance()  # before the run's own files
    argv: list[str] = []
    outputs = [(scenario.output_flag, f"{name}.json")] if scenario.output_flag else []
    for flag, file_name in [*outputs, *scenario.extra_outputs]:
        if flag not in extra and not any(e.startswith(flag + "=") for e in extra):
            argv += [flag, str(out_dir / file_name)]
    argv += extra
    print(f"scenario {name}: {scenario.module} {' '.join(argv)}", file=sys.stderr)
    code = scenario.main(argv)
    files = sorted(p.name for p in out_dir.iterdir() if not p.name.startswith("run."))
    report: dict[str, Any] = {
        "provenance": prov,
        "scenario": name,
        "module": scenario.module,
        "argv": argv,
        "exit_code": code,
        "files": files,
    }
    body = [
        f"Scenario `{name}` ({scenario.module}): exit code {code}.",
        "",
        *(f"- `{f}`" for f in files),
    ]
    path = write_all(
        out_dir / "run", report, provenance_markdown(f"bench scenario {name}", report, body)
    )
    print(f"written: {path.parent}", file=sys.stderr)
    return code
