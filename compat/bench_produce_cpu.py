"""The gateway's CPU per MB of Produce, A/B between source trees, two ways.

* `perf-producer`: Kafka's own `kafka-producer-perf-test.sh` (its defaults: 16 KiB batches,
  5 requests in flight, idempotent, acks=all) sends `--records` x `--size` bytes to a fresh
  gateway (8 partitions) after a warm-up; the gateway's utime+stime (/proc/PID/stat) over
  the run, per MB sent, beside the throughput the tool reports. CPU time holds up on a busy
  machine far better than throughput does, yet both move with the load beside them.
* `in-process`: the append path alone, in one process with a store and no sockets: requests
  of one 15-record (~15 KB) idempotent batch per partition for 8 partitions, 5 in flight,
  each settled by result_now or wait as the gateway does. The event loop thread's CPU
  (time.thread_time) and the process's, per MB and per request.

Trees alternate run by run; each result is the median of the runs.

    streamgate bench run scenario:produce-cpu [--runs N] -- --tree A --tree B [--instructions]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from compat.benchlib.scenario import RunOptions, scenario_args, standalone  # noqa: E402
from compat.benchlib.trees import tree_commit  # noqa: E402

PERF_TEST = "kafka-producer-perf-test.sh"
_PARTITIONS = 8
_TOPIC = "produce-cpu"
# Record batch v2 header: where the CRC sits, where the bytes it covers start, and the
# base sequence.
_CRC_AT, _CRC_FROM, _BASE_SEQUENCE_AT = 17, 21, 53


def perf_producer_run(tree: Path, records: int, size: int) -> dict[str, Any]:
    """One fresh gateway from `tree`, a warm-up, then the measured perf-test run."""
    from compat.benchlib.trees import tree_gateway
    from harness.kafka import run_tool
    from harness.procstats import proc_cpu_seconds

    with tree_gateway(tree, _TOPIC, _PARTITIONS) as gw:
        assert gw.pid is not None

        def perf(count: int) -> str:
            args = ["--topic", _TOPIC, "--num-records", str(count), "--record-size"]
            args += [str(size), "--throughput", "-1", "--producer-props"]
            args += [f"bootstrap.servers={gw.bootstrap}", "acks=all"]
            return run_tool(PERF_TEST, args, timeout=600, check=True).stdout

        perf(max(records // 15, 1000))
        before = proc_cpu_seconds(gw.pid)
        out = perf(records)
        after = proc_cpu_seconds(gw.pid)
    assert before is not None and after is not None
    summary = [line for line in out.splitlines() if "records sent" in line][-1]
    mb_per_s = float(summary.split("(")[1].split()[0])
    cpu = after - before
    return {
        "cpu_s": round(cpu, 3),
        "cpu_ms_per_mb": round(cpu * 1000 / (records * size / 1e6), 3),
        "mb_per_s": mb_per_s,
    }


def in_process_run(tree: Path, requests: int) -> dict[str, Any]:
    """The append path of `tree`, measured in a child process started there."""
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--in-process-child", str(requests)],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def instructions_per_request(tree: Path, small: int, large: int) -> dict[str, Any]:
    """User-space instructions (valgrind callgrind's Ir) of the in-process run of `tree`,
    per request: the difference between a run of `large` and one of `small` requests, so
    the start-up and import cost drops out. Counts, unlike times, do not move with the load
    beside them (the flush thread's syscalls are not counted; under valgrind the CRC-32C
    may run in software, which makes the byte work weigh more than on the CPU)."""
    totals = []
    with tempfile.TemporaryDirectory(prefix="bench-produce-cpu-cg-") as tmp:
        for count in (small, large):
            out = subprocess.run(
                [
                    "valgrind",
                    "--tool=callgrind",
                    f"--callgrind-out-file={tmp}/callgrind.out",
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--in-process-child",
                    str(count),
                ],
                cwd=tree,
                env={**os.environ, "PYTHONPATH": str(tree)},
                capture_output=True,
                text=True,
                check=True,
            )
            line = next(x for x in out.stderr.splitlines() if "Collected" in x)
            totals.append(int(line.split()[-1]))
    return {
        "instructions_small": totals[0],
        "instructions_large": totals[1],
        "instructions_per_request": round((totals[1] - totals[0]) / (large - small)),
    }


def _in_process_child(requests: int) -> None:
    sys.path.insert(0, os.getcwd())
    sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
    import crc32c
    import trio
    from support.client import Rec, build_record_batch

    from core import interpreter_tuning
    from core.store import StoreSettings, StreamStore

    interpreter_tuning.tune()
    per_batch, warmup, in_flight = 15, 50, 5

    async def main(directory: str) -> dict[str, Any]:
        store = StreamStore(StoreSettings(directory))
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            stream = store.create_topic("t", _PARTITIONS)
            # One batch built, then copies with their base sequence and CRC rewritten:
            # cheap, so that an instruction count of the whole run is mostly the appends.
            template = build_record_batch(
                [Rec(b"", b"x" * 1000)] * per_batch, producer_id=7, producer_epoch=0
            )

            def numbered(sequence: int) -> bytes:
                batch = bytearray(template)
                struct.pack_into(">i", batch, _BASE_SEQUENCE_AT, sequence)
                struct.pack_into(">I", batch, _CRC_AT, crc32c.crc32c(batch[_CRC_FROM:]))
                return bytes(batch)

            batches = [
                [numbered(i * per_batch) for _ in range(_PARTITIONS)] for i in range(requests)
            ]

            def start(i: int) -> list[Any]:
                return [stream.start_append(p, batches[i][p], -1) for p in range(_PARTITIONS)]

            async def settle(pending: list[Any], slots: trio.Semaphore | None = None) -> None:
                for started in pending:
                    result = started.result_now()
                    if result is None:
                        result = await started.wait()
                    assert result.error == 0, result
                if slots is not None:
                    slots.release()

            for i in range(warmup):
                await settle(start(i))
            cpu0, loop0 = time.process_time(), time.thread_time()
            async with trio.open_nursery() as requests_nursery:
                slots = trio.Semaphore(in_flight)
                for i in range(warmup, requests):
                    await slots.acquire()
                    requests_nursery.start_soon(settle, start(i), slots)
            cpu, loop = time.process_time() - cpu0, time.thread_time() - loop0
            store.stop()
        measured = requests - warmup
        mb = measured * _PARTITIONS * per_batch * 1000 / 1e6
        return {
            "loop_ms_per_mb": round(loop * 1000 / mb, 3),
            "process_ms_per_mb": round(cpu * 1000 / mb, 3),
            "loop_us_per_request": round(loop * 1e6 / measured, 1),
        }

    with tempfile.TemporaryDirectory(prefix="bench-produce-cpu-inproc-") as tmp:
        print(json.dumps(trio.run(main, tmp)))


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {key: round(statistics.median(r[key] for r in runs), 3) for key in runs[0]}


QUICK = ("--records", "20000", "--requests", "300")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tree", action="append", type=Path, help="a checkout (repeatable, default .)"
    )
    parser.add_argument("--label", action="append", help="a name per tree (default: its path)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--requests", type=int, default=3000, help="in-process requests")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="also count the in-process run's instructions per request (valgrind, slow)",
    )
    return parser


def run(options: RunOptions) -> dict[str, Any]:
    """The scenario (compat.benchlib.scenario): every tree's medians and runs."""
    args = scenario_args(build_parser(), options, quick=QUICK, runs="--runs")
    trees = [tree.resolve() for tree in (args.tree or [REPO_ROOT])]
    labels = args.label or [str(tree) for tree in trees]
    results: dict[int, dict[str, list[dict[str, Any]]]] = {
        i: {"perf_producer": [], "in_process": []} for i in range(len(trees))
    }
    for run_index, (i, tree) in itertools.product(range(args.runs), enumerate(trees)):
        results[i]["in_process"].append(in_process_run(tree, args.requests))
        results[i]["perf_producer"].append(perf_producer_run(tree, args.records, args.size))
        print(labels[i], run_index, results[i]["in_process"][-1], results[i]["perf_producer"][-1])
    counted: dict[int, dict[str, Any]] = {}
    if args.instructions:
        for i, tree in enumerate(trees):
            counted[i] = instructions_per_request(tree, 200, 600)
    return {
        "ok": True,
        "runs": args.runs,
        "trees": [
            {
                "label": labels[i],
                "commit": tree_commit(tree),
                **{
                    kind: {"median": _medians(runs), "runs": runs}
                    for kind, runs in results[i].items()
                },
                **({"in_process_instructions": counted[i]} if i in counted else {}),
            }
            for i, tree in enumerate(trees)
        ],
    }


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--in-process-child"]:
        _in_process_child(int(args_in[1]))
        return 0
    return standalone("produce-cpu", args_in)


if __name__ == "__main__":
    sys.exit(main())
