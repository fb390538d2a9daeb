"""Sequential consumers behind the tail: tier-1 read-ahead on against off, and Kafka.

One gateway data folder gets a topic written by kafka-producer-perf-test.sh (8 partitions,
1 KiB records, far beyond the recent-batch memory; `--local-retain-bytes` large enough that
all of it stays in tier 1), and a Kafka 3.5.1 broker the same topic; then, run by run, the
gateway restarts with read-ahead on (the default) and off (`--read-ahead-bytes 0`), in
turn with Kafka (the order rotating), and each time:

* `perf-consumer`: kafka-consumer-perf-test.sh reads the whole topic (the Java consumer,
  one Fetch in flight, a partition asked again once its records are used): MB/s, and the
  gateway's CPU seconds over the read (utime+stime from /proc).
* `probe`: a raw-socket consumer that behaves the same way (a Fetch for the partitions whose
  last answer it has used, 1 MiB each, then "uses" one partition's answer at
  `--use-mb-s`): the time from a Fetch's send to its answer's first byte and to its last,
  which on loopback is the gateway's own time to answer (no client library timers).

    python -m compat.bench_read_ahead [--quick] [--runs N] [--out DIR]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from compat.bench.kvs import consumer_perf_figures  # noqa: E402
from compat.benchlib.report import environment  # noqa: E402
from compat.benchlib.scenario import RunOptions, scenario_args, standalone  # noqa: E402
from compat.benchlib.topics import create_topic  # noqa: E402
from harness.gateway import Gateway  # noqa: E402
from harness.kafka import KafkaBroker, kafka_home, run_tool  # noqa: E402

QUICK = ("--records", "20000")
_PARTITIONS = 8
_TOPIC = "readahead"
_RETAIN = ("--local-retain-bytes", str(4 << 30))  # nothing trimmed: every read from tier 1
_MODES = {"on": _RETAIN, "off": (*_RETAIN, "--read-ahead-bytes", "0")}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument(
        "--use-mb-s", type=float, default=250.0, help="the probe's pace of using records"
    )
    return parser


def _fetch_request(correlation: int, offsets: dict[int, int], partition_bytes: int) -> bytes:
    """A Fetch v4 request (the fields are plain, no tagged ones) for `offsets`."""
    topic = _TOPIC.encode()
    body = struct.pack(">hhih", 1, 4, correlation, 5) + b"probe"
    body += struct.pack(">iiiib", -1, 500, 1, 50 << 20, 0)
    body += struct.pack(">ih", 1, len(topic)) + topic + struct.pack(">i", len(offsets))
    for partition, offset in offsets.items():
        body += struct.pack(">iqi", partition, offset, partition_bytes)
    return struct.pack(">i", len(body)) + body


def _next_offsets(response: bytes) -> dict[int, tuple[int, int]]:
    """Per partition of a Fetch v4 answer: (offset after its last batch, its bytes)."""
    at = 8  # correlation id, throttle time
    (topics,) = struct.unpack_from(">i", response, at)
    at += 4
    found: dict[int, tuple[int, int]] = {}
    for _ in range(topics):
        (name_len,) = struct.unpack_from(">h", response, at)
        at += 2 + name_len
        (count,) = struct.unpack_from(">i", response, at)
        at += 4
        for _ in range(count):
            partition, error = struct.unpack_from(">ih", response, at)
            assert error == 0, f"partition {partition}: error {error}"
            at += 4 + 2 + 8 + 8
            (aborted,) = struct.unpack_from(">i", response, at)
            at += 4 + max(aborted, 0) * 16
            (size,) = struct.unpack_from(">i", response, at)
            at += 4
            end, pos = -1, at
            while pos + 61 <= at + size:  # whole batches (Kafka may cut the last one)
                base, length = struct.unpack_from(">qi", response, pos)
                if pos + 12 + length > at + size:
                    break
                (delta,) = struct.unpack_from(">i", response, pos + 23)
                end = base + delta + 1
                pos += 12 + length
            found[partition] = (end, size)
            at += max(size, 0)
    return found


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        r = sock.recv_into(view[got:])
        if r == 0:
            raise ConnectionError("gateway closed the connection")
        got += r
    return bytes(buf)


def probe(bootstrap: str, records: int, use_mb_s: float) -> dict[str, Any]:
    """Read the topic as the Java consumer does (see the module's docstring)."""
    host, port = bootstrap.rsplit(":", 1)
    first_byte: list[float] = []
    whole: list[float] = []
    offsets = dict.fromkeys(range(_PARTITIONS), 0)
    due = list(range(_PARTITIONS))  # partitions whose last answer is used up
    buffered: list[tuple[int, int]] = []  # (partition, bytes) answered, not yet used
    done = 0
    started = time.perf_counter()
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        correlation = 0
        while done < records:
            if due:
                correlation += 1
                request = _fetch_request(correlation, {p: offsets[p] for p in due}, 1 << 20)
                sent = time.perf_counter()
                sock.sendall(request)
                (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
                first = time.perf_counter()
                response = _recv_exactly(sock, size)
                last = time.perf_counter()
                first_byte.append(first - sent)
                whole.append(last - sent)
                for partition, (end, nbytes) in _next_offsets(response).items():
                    if end > offsets[partition]:
                        done += end - offsets[partition]
                        offsets[partition] = end
                    buffered.append((partition, nbytes))
                due = []
            if buffered:  # use one partition's answer, then ask again for it
                partition, nbytes = buffered.pop(0)
                time.sleep(nbytes / (use_mb_s * 1e6))
                due.append(partition)
    elapsed = time.perf_counter() - started
    return {
        "fetches": len(whole),
        "first_byte_ms": _quantiles(first_byte),
        "answer_ms": _quantiles(whole),
        "mb_per_s": round(records * 1024 / 1e6 / elapsed, 1),
    }


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)

    return {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99)}


def perf_consumer(server: Gateway | KafkaBroker, records: int) -> dict[str, Any]:
    cpu_before = server.cpu_seconds() or 0.0
    out = run_tool(
        "kafka-consumer-perf-test.sh",
        ["--bootstrap-server", server.bootstrap, "--topic", _TOPIC, "--messages", str(records)],
        timeout=600,
    )
    cpu = (server.cpu_seconds() or 0.0) - cpu_before
    return {**consumer_perf_figures(out, records), "server_cpu_s": round(cpu, 2)}


def _write_topic(bootstrap: str, records: int, record_size: int) -> None:
    create_topic(bootstrap, _TOPIC, _PARTITIONS)
    out = run_tool(
        "kafka-producer-perf-test.sh",
        [
            "--topic",
            _TOPIC,
            "--num-records",
            str(records),
            "--record-size",
            str(record_size),
            "--throughput",
            "-1",
            "--producer-props",
            f"bootstrap.servers={bootstrap}",
            "acks=all",
            "linger.ms=0",
            "batch.size=16384",
        ],
        timeout=600,
    )
    if out.returncode != 0:
        raise RuntimeError((out.stdout + out.stderr)[-2000:])


def _median(runs: list[dict[str, Any]], *path: str) -> float | None:
    values = []
    for run in runs:
        value: Any = run
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, int | float):
            values.append(value)
    return round(statistics.median(values), 3) if values else None


def _measure(server: Gateway | KafkaBroker, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "perf-consumer": perf_consumer(server, args.records),
        "probe": probe(server.bootstrap, args.records, args.use_mb_s),
    }


def run(options: RunOptions) -> dict[str, Any]:
    args = scenario_args(build_parser(), options, quick=QUICK, runs="--runs")
    with_kafka = options.wants("kafka") and kafka_home()[0] is not None
    modes = [*_MODES, "kafka"] if with_kafka else list(_MODES)
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="bench-read-ahead-") as tmp:
        data = Path(tmp) / "data"
        gateways = {
            mode: Gateway(data, Path(tmp) / f"gw-{mode}.log", extra, default_partitions=None)
            for mode, extra in _MODES.items()
        }
        writer = gateways["on"]
        writer.start_fresh()
        try:
            _write_topic(writer.bootstrap, args.records, args.record_size)
        finally:
            writer.stop()
        kafka = KafkaBroker(Path(tmp) / "kafka") if with_kafka else None
        try:
            if kafka is not None:
                kafka.start()
                _write_topic(kafka.bootstrap, args.records, args.record_size)
            for index in range(args.runs):
                shift = index % len(modes)
                for mode in modes[shift:] + modes[:shift]:
                    if mode == "kafka":
                        assert kafka is not None
                        result = _measure(kafka, args)
                    else:
                        gw = gateways[mode]
                        gw.start()
                        try:
                            result = _measure(gw, args)
                        finally:
                            gw.stop()
                    runs[mode].append(result)
                    print(mode, result, file=sys.stderr, flush=True)
        finally:
            if kafka is not None:
                kafka.stop()
    summary: dict[str, Any] = {
        mode: {
            "perf_consumer_mb_per_s": _median(results, "perf-consumer", "mb_per_s"),
            "perf_consumer_fetch_mb_per_s": _median(results, "perf-consumer", "fetch_mb_per_s"),
            "perf_consumer_server_cpu_s": _median(results, "perf-consumer", "server_cpu_s"),
            "probe_first_byte_p50_ms": _median(results, "probe", "first_byte_ms", "p50"),
            "probe_first_byte_p90_ms": _median(results, "probe", "first_byte_ms", "p90"),
            "probe_answer_p50_ms": _median(results, "probe", "answer_ms", "p50"),
            "probe_mb_per_s": _median(results, "probe", "mb_per_s"),
        }
        for mode, results in runs.items()
    }
    if with_kafka:
        kafka_mb_s = summary["kafka"]["perf_consumer_mb_per_s"]
        for mode in _MODES:
            mine = summary[mode]["perf_consumer_mb_per_s"]
            summary[mode]["perf_consumer_vs_kafka"] = (
                round(mine / kafka_mb_s, 2) if mine and kafka_mb_s else None
            )
    return {
        "settings": {k: str(v) for k, v in vars(args).items()},
        "environment": environment(),
        "summary": summary,
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    return standalone("read-ahead", argv)


if __name__ == "__main__":
    sys.exit(main())
