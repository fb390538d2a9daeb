"""Benchmark of elastic streams and cheap virtual partitions (not a test).

Measures, each against a fresh `streamgate serve` on a free port with a temporary data dir:
1. produce throughput (confluent-kafka, acks=all) for the same load (default 100k x 1 KiB)
   spread over 10, 100, 1,000 and 5,000 partitions;
2. gateway RSS with 10,000 idle partitions (one topic of 10,000; 10 topics x 1,000), and the
   time to restart with them;
3. Metadata for a 5,000-partition topic (client round trip);
4. the time a split or merge takes: in-process `Stream.scale` and the HTTP round trip.
Prints a table and writes compat/results/scaling.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import trio
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from core.store import StoreSettings, StreamStore  # noqa: E402

OUTPUT = REPO_ROOT / "compat" / "results" / "scaling.json"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A gateway subprocess with the admin endpoint on."""

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.port = _free_port()
        self.admin_port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = os.path.join(data_dir, "..", "server.log")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> float:
        """Start and return the seconds until it listens."""
        started = time.perf_counter()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gateway",
                    "serve",
                    "--listen",
                    self.bootstrap,
                    "--data-dir",
                    self.data_dir,
                    "--metrics-listen",
                    f"127.0.0.1:{self.admin_port}",
                    "--log-level",
                    "WARNING",
                ],
                cwd=REPO_ROOT,
                stdout=log,
                stderr=log,
            )
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return time.perf_counter() - started
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError("gateway exited") from None
                time.sleep(0.01)

    def rss_mib(self) -> float:
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/status") as f:
            match = re.search(r"VmRSS:\s+(\d+) kB", f.read())
        assert match
        return int(match.group(1)) / 1024

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)

    def http(self, path: str, payload: Any = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.admin_port}{path}",
            data=data,
            method="GET" if data is None else "POST",
        )
        with urllib.request.urlopen(request, timeout=30) as response:
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
    os.makedirs(server.data_dir)
    server.start()
    try:
        _create(server.bootstrap, {"bench": partitions})
        producer = Producer(
            {
                "bootstrap.servers": server.bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "batch.size": 262144,
                "queue.buffering.max.messages": 1_000_000,
            }
        )
        payload = os.urandom(size)
        errors = []
        started = time.perf_counter()
        for i in range(records):
            while True:
                try:
                    producer.produce("bench", payload, partition=i % partitions)
                    break
                except BufferError:
                    producer.poll(0.01)
            if i % 1000 == 0:
                producer.poll(0)
        producer.flush(300)
        elapsed = time.perf_counter() - started
        producer.poll(0)
        return {
            "partitions": partitions,
            "records": records,
            "record_bytes": size,
            "seconds": round(elapsed, 3),
            "records_per_s": round(records / elapsed),
            "mib_per_s": round(records * size / elapsed / 2**20, 1),
            "errors": len(errors),
            "rss_mib_after": round(server.rss_mib(), 1),
        }
    finally:
        server.stop()


def idle_partitions(workdir: str, name: str, topics: dict[str, int]) -> dict[str, Any]:
    server = Server(os.path.join(workdir, f"idle-{name}"))
    os.makedirs(server.data_dir)
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
        server.stop()
        restart_s = server.start()
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
        server.stop()


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
    os.makedirs(server.data_dir)
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
        server.stop()

    def ms(values: list[float]) -> float:
        return round(statistics.median(values) * 1000, 3)

    return {
        "rounds": rounds,
        "in_process_split_ms_median": ms(splits),
        "in_process_merge_ms_median": ms(merges),
        "http_split_ms_median": ms(http_split),
        "http_merge_ms_median": ms(http_merge),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--partitions", default="10,100,1000,5000")
    parser.add_argument("--scale-rounds", type=int, default=20)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
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
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps({"throughput": throughput, "idle": idle, "scale": scaling}, indent=2) + "\n"
    )
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
