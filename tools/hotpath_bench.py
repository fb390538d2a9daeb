"""The compiled hot path against pure Python: microbenchmarks and the gateway's CPU per Produce.

Microbenchmarks (seconds), each in a fresh process per mode, since a process loads one form:
decode of a Produce v9 request of several batches, encode of a Fetch response, record batch
header parse + CRC check (`split_batches`) + base offset patch, framing, and the record
decoder the native Spark source uses. Then, unless `--no-gateway`, a gateway per mode and
one confluent-kafka producer (100-byte records, acks=all, one request per record: a flush
after each) sending `--requests` requests; the gateway's user+system CPU seconds
(/proc/PID/stat) before and after give its CPU per request, less what it burns idle over as
long (measured right after). Modes alternate run by run.

    python -m tools.hotpath_bench --output-dir compat/results    # hotpath.json + hotpath.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

MODES = ("pure", "compiled")
_ENV = "STREAMGATE_PURE_PYTHON"
_IDLE_S = 3.0


def _best_ns(op: Callable[[], object], budget_s: float = 0.15) -> float:
    """Best of 7 repeats, in CPU ns per call (this process's CPU time, so the time it waits
    for a core on a busy machine does not count); each repeat runs about budget_s / 7."""
    timer = timeit.Timer(op, timer=time.process_time)
    number, elapsed = timer.autorange()
    number = max(1, int(number * (budget_s / 7) / max(elapsed, 1e-9)))
    return min(timer.repeat(7, number)) / number * 1e9


def micro() -> dict[str, Any]:
    """The microbenchmarks in this process (whichever form it loaded)."""
    import hotpath
    from core.gathered_io import advance, views_of
    from core.recordbatch import build_batch, decode_records, patch_base_offset, split_batches
    from kafkaclient.client import encode_request
    from kafkawire.codec import decode_header
    from kafkawire.fetch_response import PartitionData, encode_fetch_response
    from kafkawire.framing import FrameDecoder
    from kafkawire.produce_request import decode_produce_request
    from kafkawire.produce_response import encode_produce_response

    value = b"v" * 100
    batch = build_batch([(None, value, [])] * 10, producer_id=7, base_sequence=0)
    records = batch * 4  # several batches in one partition's records
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [
            {
                "name": "bench",
                "partition_data": [{"index": p, "records": records} for p in range(4)],
            }
        ],
    }
    frame = encode_request(0, 9, 1, b"bench", body)[4:]
    header, pos = decode_header(frame)
    produce_answer = {
        "responses": [
            {
                "name": "bench",
                "partition_responses": [
                    {"index": p, "error_code": 0, "base_offset": 1000 * p} for p in range(4)
                ],
            }
        ]
    }
    stored = [bytearray(batch) for _ in range(4)]
    fetch_topics = [("bench", [PartitionData(p, 0, 5000, 0, [batch] * 4) for p in range(4)])]
    framed = (len(frame).to_bytes(4, "big") + frame) * 10
    big = build_batch([(b"key", value, [("h", b"1")])] * 100)

    def patch() -> None:
        for buf in stored:
            patch_base_offset(buf, 0, 12345)

    def framing() -> None:
        decoder = FrameDecoder(1 << 20)
        decoder.feed(framed)
        while decoder.next_frame() is not None:
            pass

    pieces = [b"p" * 100] * 200
    one = build_batch([(None, value, [])], producer_id=7, base_sequence=0)
    small = {
        **body,
        "topic_data": [{"name": "bench", "partition_data": [{"index": 0, "records": one}]}],
    }
    small_framed = encode_request(0, 9, 1, b"bench", small)
    small_answer = {"responses": [{"name": "bench", "partition_responses": [{"index": 0}]}]}

    def small_produce() -> None:
        """What the listed modules do for a Produce of one 100-byte record: frame it, decode
        it, check its batch, encode the answer (the header decode is not compiled)."""
        decoder = FrameDecoder(1 << 20)
        decoder.feed(small_framed)
        request_frame = decoder.next_frame()
        assert request_frame is not None
        _, at = decode_header(request_frame)
        request = decode_produce_request(request_frame, at, 9)
        batches = request.topic_data[0].partition_data[0].records
        assert batches is not None
        split_batches(batches)
        encode_produce_response(1, 9, small_answer)

    def gathered() -> None:
        views = views_of(pieces)
        start, left = 0, 100 * len(pieces)
        while left:
            step = min(left, 1500)  # partial writes of a socket's size
            start = advance(views, start, step)
            left -= step

    ops: dict[str, Callable[[], object]] = {
        "small_produce_path_1_record": small_produce,
        "produce_request_decode_4x4_batches": lambda: decode_produce_request(frame, pos, 9),
        "produce_response_encode_4_partitions": lambda: encode_produce_response(
            1, 9, produce_answer
        ),
        "fetch_response_encode_4x4_batches": lambda: encode_fetch_response(1, 12, fetch_topics),
        "split_batches_crc_4_batches": lambda: split_batches(records),
        "patch_base_offset_4_batches": patch,
        "framing_10_frames": framing,
        "decode_records_100_records": lambda: decode_records(big),
        "gathered_io_200_pieces": gathered,
    }
    assert header.api_key == 0
    result = {name: round(_best_ns(op)) for name, op in ops.items()}
    return {"ns_per_op": result, "loaded": hotpath.describe()}


def _env(mode: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != _ENV}
    if mode == "pure":
        env[_ENV] = "1"
    return env


def _micro_in(mode: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "tools.hotpath_bench", "--micro-child"],
        env=_env(mode),
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def gateway_cpu(mode: str, requests: int, warmup: int) -> dict[str, Any]:
    """One gateway of `mode`; its CPU microseconds per acks=all Produce of one record."""
    from confluent_kafka import Producer

    from compat.benchlib.topics import create_topic
    from harness.gateway import Gateway
    from harness.procstats import proc_cpu_seconds

    with tempfile.TemporaryDirectory(prefix="hotpath-bench-") as tmp:
        extra = {_ENV: "1"} if mode == "pure" else {}
        gw = Gateway(Path(tmp) / "data", Path(tmp) / "gw.log", default_partitions=1, env=extra)
        gw.start_fresh()
        try:
            create_topic(gw.bootstrap, "cost", 1)
            producer = Producer(
                {
                    "bootstrap.servers": gw.bootstrap,
                    "acks": "all",
                    "linger.ms": 0,
                    "log.connection.close": False,
                }
            )
            value = b"x" * 100
            pid = gw.pid
            assert pid is not None
            cpu0 = 0.0
            started = 0.0
            for i in range(warmup + requests):
                if i == warmup:
                    cpu0 = proc_cpu_seconds(pid) or 0.0
                    started = time.perf_counter()
                producer.produce("cost", value, partition=0)
                producer.flush(10)
            cpu = (proc_cpu_seconds(pid) or 0.0) - cpu0
            wall = time.perf_counter() - started
            # What the gateway burns while idle (timers, housekeeping) accrues per second, not
            # per request: the slower the fsyncs, the more of it a request carries. Subtracted.
            idle0 = proc_cpu_seconds(pid) or 0.0
            time.sleep(_IDLE_S)
            idle_rate = ((proc_cpu_seconds(pid) or 0.0) - idle0) / _IDLE_S
            log = gw.log_since_start().decode(errors="replace")
            del producer  # closes it before the gateway stops (no reconnect attempts logged)
        finally:
            gw.stop()
    loaded = next((line for line in log.splitlines() if "hot path" in line), "")
    return {
        "cpu_us_per_request": round(max(0.0, cpu - idle_rate * wall) * 1e6 / requests, 1),
        "cpu_us_per_request_with_idle": round(cpu * 1e6 / requests, 1),
        "idle_cpu_percent": round(idle_rate * 100, 1),
        "requests_per_s": round(requests / wall),
        "startup_line": loaded.partition("hot path")[2][:60],
    }


def _markdown(report: dict[str, Any]) -> str:
    prov = report["provenance"]
    machine = prov["machine"]
    lines = [
        "# Compiled hot path (mypyc) against pure Python",
        "",
        f"Commit {prov['commit']}, {machine['cpu_model']}, {machine['cpus']} CPUs, "
        f"Python {machine['python']}, {prov['utc']}; written by `python -m tools.hotpath_bench`.",
        f"Load average (1 min) at the start {report['load_average_1m_at_start']}, at the end "
        f"{report.get('load_average_1m_at_end', '-')}: other work on the machine inflates "
        "every figure, the gateway's CPU per request most.",
        "",
        "| operation | pure ns | compiled ns | speed-up |",
        "|---|---:|---:|---:|",
    ]
    for name, row in report["micro"].items():
        lines.append(f"| {name} | {row['pure']} | {row['compiled']} | {row['speedup']}x |")
    gateway = report.get("gateway")
    if gateway:
        lines += [
            "",
            f"Gateway CPU per Produce (1 record of 100 B, acks=all, one confluent-kafka "
            f"producer, {gateway['requests']} requests, median of {gateway['runs']} runs):",
            "",
            "| mode | CPU us/request, idle CPU subtracted | with it | requests/s |",
            "|---|---:|---:|---:|",
        ]
        for mode in MODES:
            row = gateway[mode]
            lines.append(
                f"| {mode} | {row['cpu_us_per_request']} | "
                f"{row['cpu_us_per_request_with_idle']} | {row['requests_per_s']} |"
            )
        lines += ["", f"CPU saved per request: {gateway['cpu_saved_percent']}%."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--micro-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-gateway", action="store_true", help="microbenchmarks only")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3, help="gateway runs per mode")
    parser.add_argument("--micro-rounds", type=int, default=5)
    parser.add_argument("--output-dir", type=Path, help="write hotpath.json and hotpath.md")
    args = parser.parse_args(argv)
    if args.micro_child:
        print(json.dumps(micro()))
        return 0

    from harness.provenance import provenance

    # Modes alternate, several rounds; the best per operation, as the machine's noise only
    # ever adds time.
    runs: dict[str, dict[str, Any]] = {}
    for _round in range(args.micro_rounds):
        for mode in MODES:
            sample = _micro_in(mode)
            if mode not in runs:
                runs[mode] = sample
            else:
                best = runs[mode]["ns_per_op"]
                for name, ns in sample["ns_per_op"].items():
                    best[name] = min(best[name], ns)
    for mode in MODES:
        print(f"{mode}: {runs[mode]['loaded']}")
    if "hot path compiled" not in runs["compiled"]["loaded"]:
        print("the compiled modules are not built (make compiled): nothing to compare")
        return 1
    micro_rows = {}
    for name, pure_ns in runs["pure"]["ns_per_op"].items():
        compiled_ns = runs["compiled"]["ns_per_op"][name]
        speedup = round(pure_ns / compiled_ns, 2)
        micro_rows[name] = {"pure": pure_ns, "compiled": compiled_ns, "speedup": speedup}
        print(f"{name:40s} {pure_ns:>9} ns {compiled_ns:>9} ns  {speedup}x")
    report: dict[str, Any] = {
        "provenance": provenance(),
        # other work on the machine inflates every figure; this says how much there was
        "load_average_1m_at_start": round(os.getloadavg()[0], 2),
        "micro": micro_rows,
        "compiled_modules": runs["compiled"]["loaded"],
    }
    if not args.no_gateway:
        samples: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
        for run in range(args.runs):
            for mode in MODES if run % 2 == 0 else MODES[::-1]:
                sample = gateway_cpu(mode, args.requests, args.warmup)
                samples[mode].append(sample)
                print(f"gateway {mode}: {sample}")
        gateway: dict[str, Any] = {"requests": args.requests, "runs": args.runs}
        for mode in MODES:
            gateway[mode] = {
                key: statistics.median(s[key] for s in samples[mode])
                for key in ("cpu_us_per_request", "cpu_us_per_request_with_idle", "requests_per_s")
            }
            gateway[mode]["samples"] = samples[mode]
        pure, compiled = gateway["pure"], gateway["compiled"]
        gateway["cpu_saved_percent"] = round(
            100 * (1 - compiled["cpu_us_per_request"] / pure["cpu_us_per_request"]), 1
        )
        print(f"gateway CPU saved per request: {gateway['cpu_saved_percent']}%")
        report["gateway"] = gateway
        report["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    if args.output_dir:
        args.output_dir.mkdir(parents=True, exist_ok=True)
        (args.output_dir / "hotpath.json").write_text(json.dumps(report, indent=2) + "\n")
        (args.output_dir / "hotpath.md").write_text(_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
