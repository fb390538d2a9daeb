"""Apache Kafka 3.5.1 beside streamgate: the old command line of the side-by-side, now a
front for `streamgate bench run` (the workloads are the files in workloads/, executed by
compat/bench/kvs.py). Prefer

    streamgate bench run kafka-vs-streamgate-all [--runs 3] [--quick] [--targets ...]

This one keeps `--workloads a,b` (into one report) and `--out PATH` (a path without suffix).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # run as a script: python compat/bench_kafka_vs_streamgate.py
    sys.path.insert(0, str(REPO_ROOT))

from compat.bench import kvs, workloads  # noqa: E402
from compat.benchlib.display import PROGRESS_MODES  # noqa: E402
from compat.benchlib.options import choices, positive_int  # noqa: E402
from harness.results import results_dir  # noqa: E402

SUITE = "kafka-vs-streamgate-all"
WORKLOADS = ("perf-producer", "perf-consumer", "confluent", "small-16", "rate-2k", "rate-20k")
WORKLOADS += ("partitions", "many", "many-raw")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=positive_int, default=3, help="runs per target (median)")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    p.add_argument("--workloads", type=choices(WORKLOADS), help=f"default: those of {SUITE}")
    p.add_argument("--targets", type=choices(workloads.TARGETS))
    p.add_argument("--many-on-kafka", action="store_true", help="many/many-raw on Kafka too")
    p.add_argument("--out", type=Path, help="output path without suffix (.json, .md, .png)")
    p.add_argument("--gateway-arg", action="append", default=[])
    p.add_argument("--progress", choices=PROGRESS_MODES, default="auto")
    p.add_argument("--keep-data", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    names = args.workloads or [SUITE]
    found = [w for name in names for w in workloads.expand(name, quick=args.quick)]
    if args.many_on_kafka:
        found = [
            dataclasses.replace(w, targets=(*w.targets, "kafka"))
            if w.driver in ("many", "many-raw")
            else w
            for w in found
        ]
    out = args.out or results_dir("kafka-vs-streamgate") / "kafka_vs_streamgate"
    options = kvs.Options(
        out=out,
        targets=args.targets,
        runs=args.runs,
        quick=args.quick,
        gateway_args=args.gateway_arg,
        progress=args.progress,
        keep_data=args.keep_data,
    )
    return kvs.run_workloads(found, options)


if __name__ == "__main__":
    sys.exit(main())
