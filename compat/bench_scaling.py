"""Benchmark of elastic streams and cheap virtual partitions (not a test).

Measures, each against a fresh `streamgate serve` on a free port with a temporary data dir:
1. produce throughput (confluent-kafka, acks=all) for the same load (default 100k x 1 KiB)
   spread over 10, 100, 1,000 and 5,000 partitions;
2. gateway RSS with 10,000 idle partitions (one topic of 10,000; 10 topics x 1,000), and the
   time to restart with them;
3. Metadata for a 5,000-partition topic (client round trip);
4. the time a split or merge takes: in-process `Stream.scale` and the HTTP round trip.
Prints a table; run it with `streamgate bench run scenario:scaling` (`--quick`: 5,000 records
into 10 and 100 partitions, 3 scale rounds).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import trio
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from compat.benchlib.records import ErrorLog  # noqa: E402
from compat.benchlib.scenario import RunOptions, scenario_args, standalone  # noqa: E402
from core.store import StoreSettings, StreamStore  # noqa: E402
from harness.gateway import Gateway  # noqa: E402
from harness.procstats import proc_status_kib  # noqa: E402

QUICK = ("--records", "5000", "--partitions", "10,100", "--scale-rounds", "3")
FLUSH_TIMEOUT = 300.0
# loopback only: an HTTP(S)_PROXY of the environment must not see these requests
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Server(Gateway):
    """A gateway with the admin endpoint on, logging warnings only."""

    def __init__(self, work_dir: str) -> None:
        super().__init__(
            Path(work_dir) / "data",
            Path(work_dir) / "server.log",
            ["--log-level", "WARNING"],
            default_partitions=None,
            metrics=True,
        )

    def timed_start(self) -> float:
        """Start and return the seconds until it listens."""
        started = time.perf_counter()
        self.start()
        return time.perf_counter() - started

    def rss_mib(self) -> float:
        assert self.proc is not None
        kib = proc_status_kib(self.proc.pid, "VmRSS")
        assert kib is not None, "gateway not running"
        return kib / 1024

    def http(self, path: str, payload: Any = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(
            f"{self.admin_url}{path}",
            data=data,
            method="GET" if data is None else "POST",
        )
        with _HTTP.open(request, timeout=30) as response:
            return json.loads(response.read())


def _create(bootstrap: str, topics: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=n, replication_factor=1) for name, n in topics.items()]
    )
    for future in futures.values():
        future.result(60)


def produce_throughput(workdir: str, partitions: int, records: int, size: int) -> dict[str, Any]:
    server = Server(os.path.join(workdir, f"tp-{partitions}"))
    server.start()
    try:
        _create(server.bootstrap, {"bench": partitions})
        errors = ErrorLog()
        delivered = 0

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            nonlocal delivered
            if err is None:
                delivered += 1
            else:
                errors.add(err.name(), f"partition {msg.partition()}: {err.str()}")

        producer = Producer(
            {
                "bootstrap.servers": server.bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "batch.size": 262144,
                "queue.buffering.max.messages": 1_000_000,
                "error_cb": errors.on_client_error,
            }
        )
        payload = os.urandom(size)
        started = time.perf_counter()
        for i in range(records):
            while True:
                try:
                    producer.produce(
                        "bench", payload, partition=i % partitions, on_delivery=on_delivery
                    )
                    break
                except BufferError:
                    producer.poll(0.01)
            if i % 1000 == 0:
                producer.poll(0)
        unflushed = producer.flush(FLUSH_TIMEOUT)
        elapsed = time.perf_counter() - started
        producer.poll(0)
        return {
            "partitions": partitions,
            "records": records,
            "record_bytes": size,
            "seconds": round(elapsed, 3),
            # delivered ones only: a failed or unflushed record is not throughput
            "records_per_s": round(delivered / elapsed),
            "mib_per_s": round(delivered * size / elapsed / 2**20, 1),
            "delivered": delivered,
            "errors": errors.total(),
            "error_samples": errors.samples,
            "unflushed": unflushed,
            "ok": delivered == records and errors.total() == 0 and unflushed == 0,
            "rss_mib_after": round(server.rss_mib(), 1),
        }
    finally:
        server.close()


def idle_partitions(workdir: str, name: str, topics: dict[str, int]) -> dict[str, Any]:
    server = Server(os.path.join(workdir, f"idle-{name}"))
    server.start()
    try:
        baseline = server.rss_mib()
        started = time.perf_counter()
        _create(server.bootstrap, topics)
        create_s = time.perf_counter() - started
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        metadata_ms = []
        for _ in range(5):
            started = time.perf_counter()
            admin.list_topics(timeout=30)
            metadata_ms.append((time.perf_counter() - started) * 1000)
        rss = server.rss_mib()
        server.stop(timeout=60)
        restart_s = server.timed_start()
        rss_restarted = server.rss_mib()
        return {
            "layout": name,
            "partitions": sum(topics.values()),
            "rss_mib_empty": round(baseline, 1),
            "rss_mib_with_topics": round(rss, 1),
            "rss_mib_after_restart": round(rss_restarted, 1),
            "create_s": round(create_s, 3),
            "restart_to_listening_s": round(restart_s, 3),
            "metadata_all_topics_ms_median": round(statistics.median(metadata_ms), 2),
        }
    finally:
        server.close()


def scale_timing(workdir: str, rounds: int) -> dict[str, Any]:
    """In-process Stream.scale (split then merge, alternating) and the HTTP round trip."""

    async def in_process() -> tuple[list[float], list[float]]:
        store = StreamStore(StoreSettings(os.path.join(workdir, "inproc")))
        os.makedirs(store.settings.data_dir)
        splits, merges = [], []
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            stream = store.create_topic("s", 64)
            for _ in range(rounds):
                (segment,) = [sid for _f, _l, sid in stream.owners()]
                started = time.perf_counter()
                result = stream.scale([segment], [(0, 31), (32, 63)])
                splits.append(time.perf_counter() - started)
                started = time.perf_counter()
                stream.scale([s.segment_id for s in result.successors], [(0, 63)])
                merges.append(time.perf_counter() - started)
                await trio.sleep(0)
            store.stop()
        return splits, merges

    splits, merges = trio.run(in_process)
    server = Server(os.path.join(workdir, "scale-http"))
    server.start()
    http_split, http_merge = [], []
    try:
        _create(server.bootstrap, {"s": 64})
        for _ in range(rounds):
            segment = server.http("/streams/s")["segments"][-1]["segment_id"]
            started = time.perf_counter()
            result = server.http("/streams/s/scale", {"split": segment, "parts": 2})
            http_split.append(time.perf_counter() - started)
            ids = [s["segment_id"] for s in result["successors"]]
            started = time.perf_counter()
            server.http("/streams/s/scale", {"merge": ids})
            http_merge.append(time.perf_counter() - started)
    finally:
        server.close()

    def ms(values: list[float]) -> float:
        return round(statistics.median(values) * 1000, 3)

    return {
        "rounds": rounds,
        "in_process_split_ms_median": ms(splits),
        "in_process_merge_ms_median": ms(merges),
        "http_split_ms_median": ms(http_split),
        "http_merge_ms_median": ms(http_merge),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--partitions", default="10,100,1000,5000")
    parser.add_argument("--scale-rounds", type=int, default=20)
    return parser


def run(options: RunOptions) -> dict[str, Any]:
    args = scenario_args(build_parser(), options, quick=QUICK, runs="--scale-rounds")
    workdir = tempfile.mkdtemp(prefix="bench-scaling-")
    try:
        throughput = [
            produce_throughput(workdir, int(n), args.records, args.record_bytes)
            for n in args.partitions.split(",")
        ]
        idle = [
            idle_partitions(workdir, "1x10000", {"idle": 10_000}),
            idle_partitions(workdir, "10x1000", {f"idle-{i}": 1_000 for i in range(10)}),
        ]
        scaling = scale_timing(workdir, args.scale_rounds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{'partitions':>10} {'records/s':>10} {'MiB/s':>7} {'seconds':>8} {'RSS MiB':>8}")
    for row in throughput:
        print(
            f"{row['partitions']:>10} {row['records_per_s']:>10} {row['mib_per_s']:>7} "
            f"{row['seconds']:>8} {row['rss_mib_after']:>8}"
        )
    print(
        f"\n{'idle layout':>12} {'RSS empty':>10} {'RSS idle':>9} {'restart s':>10} {'meta ms':>8}"
    )
    for row in idle:
        print(
            f"{row['layout']:>12} {row['rss_mib_empty']:>10} {row['rss_mib_with_topics']:>9} "
            f"{row['restart_to_listening_s']:>10} {row['metadata_all_topics_ms_median']:>8}"
        )
    print(f"\nscale events: {json.dumps(scaling)}")
    ok = all(row["ok"] for row in throughput)
    for row in throughput:
        if not row["ok"]:
            print(
                f"  ! {row['partitions']} partitions: {row['delivered']} of {row['records']} "
                f"delivered, {row['errors']} errors, {row['unflushed']} unflushed "
                f"{row['error_samples'][:3]}"
            )
    return {
        "benchmark": "compat/bench_scaling.py",
        "ok": ok,
        "settings": vars(args),
        "throughput": throughput,
        "idle": idle,
        "scale": scaling,
    }


def main(argv: list[str] | None = None) -> int:
    return standalone("scaling", argv)


if __name__ == "__main__":
    sys.exit(main())
