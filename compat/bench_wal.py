"""The write-ahead log in object storage (`--wal object`): its object rate and takeover time.

* objects: a fresh `serve --wal object` (tier-2 folder) per cell, a topic of 10 or 5,000
  partitions, acks=all produce of 1 KiB records at 1, 10 and 100 MB/s (what the machine
  reaches, if less) for a few seconds; write-ahead objects written per second (the gateway's
  /tier counters), the rate reached and the delivery latency p50/p99;
* takeover: `serve --nodes 3 --wal object --node-lease-s 1` under produce load, a random
  node SIGKILLed each cycle: the seconds from the kill until a record of one of its
  partitions is acknowledged again (by whichever node serves it first: a live node taking
  the segment over, or the killed node restarted by the supervisor), p50/p99/max. Needs
  PostgreSQL (skipped with the reason otherwise).

Run it with `streamgate bench run scenario:wal` (`--quick`: fewer, shorter cells).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from compat.benchlib.report import environment  # noqa: E402
from compat.benchlib.scenario import RunOptions, scenario_args, standalone  # noqa: E402
from harness.gateway import Gateway  # noqa: E402
from harness.nodes_cluster import NodesCluster  # noqa: E402
from harness.postgres import unavailable_reason  # noqa: E402
from harness.producers import surviving_producer  # noqa: E402

QUICK = (
    "--rates",
    "1,10",
    "--partitions",
    "10,500",
    "--paces",
    "100",
    "--seconds",
    "3",
    "--kills",
    "3",
)
RECORD = 1024


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="1,10,100", help="MB/s, comma-separated")
    parser.add_argument("--partitions", default="10,5000", help="comma-separated")
    parser.add_argument(
        "--paces",
        default="5,100",
        help="--wal-flush-ms values, comma-separated (5: the folder's default, 100: S3's)",
    )
    parser.add_argument("--seconds", type=float, default=8.0, help="per cell")
    parser.add_argument("--kills", type=int, default=20, help="takeover cycles")
    return parser


def _topic(bootstrap: str, partitions: int) -> str:
    name = f"wal-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=60)
    return name


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 4)


def _tier(gateway: Gateway) -> dict[str, Any]:
    with urllib.request.urlopen(gateway.admin_url + "/tier", timeout=10) as response:
        body: dict[str, Any] = json.loads(response.read())
    return body


def _produce_at(bootstrap: str, topic: str, mb_s: float, seconds: float) -> dict[str, Any]:
    """acks=all records of RECORD bytes at `mb_s` for `seconds` (as fast as it goes if the
    rate is out of reach); delivery latencies of every record."""
    latencies: list[float] = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1, "batch.size": 1 << 20}
    )
    value = b"x" * RECORD
    per_s = mb_s * 1e6 / RECORD
    sent = 0
    started = time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        due = int(elapsed * per_s) - sent
        for _ in range(min(due, 5000)):
            at = time.perf_counter()
            try:
                producer.produce(
                    topic,
                    value=value,
                    on_delivery=lambda e, m, at=at: latencies.append(time.perf_counter() - at),
                )
            except BufferError:
                break
            sent += 1
        producer.poll(0.001 if due <= 0 else 0)
    producer.flush(60)
    spent = time.perf_counter() - started
    return {
        "records": sent,
        "mb_s_reached": round(len(latencies) * RECORD / spent / 1e6, 2),
        "latency_p50_ms": _quantile([x * 1000 for x in latencies], 0.5),
        "latency_p99_ms": _quantile([x * 1000 for x in latencies], 0.99),
        "seconds": round(spent, 2),
    }


def measure_objects(args: argparse.Namespace, base: Path) -> list[dict[str, Any]]:
    rows = []
    cells = [
        (pace, int(p), float(r))
        for pace in args.paces.split(",")
        for p in args.partitions.split(",")
        for r in args.rates.split(",")
    ]
    for pace, partitions, rate in cells:
        data = base / f"objects-{pace}-{partitions}-{rate:g}"
        gateway = Gateway(
            data / "data",
            data / "gw.log",
            ("--wal", "object", "--wal-flush-ms", pace),
            metrics=True,
        )
        gateway.start_fresh()
        try:
            topic = _topic(gateway.bootstrap, partitions)
            before = _tier(gateway)
            figures = _produce_at(gateway.bootstrap, topic, rate, args.seconds)
            after = _tier(gateway)
        finally:
            gateway.close()
        objects = after["wal_objects"] - before["wal_objects"]
        row = {
            "wal_flush_ms": float(pace),
            "partitions": partitions,
            "mb_s_asked": rate,
            **figures,
            "wal_objects": objects,
            "wal_objects_per_s": round(objects / figures["seconds"], 1),
            "wal_mean_object_kib": round(
                (after["wal_bytes"] - before["wal_bytes"]) / max(objects, 1) / 1024, 1
            ),
        }
        print(row, flush=True)
        rows.append(row)
    return rows


class _Acks:
    """Produce to every partition from a thread, noting when each partition acknowledges
    again after a kill."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.back: dict[int, float] = {}
        self.mark = float("inf")
        self.failed = 0
        self._stop = threading.Event()
        self._producer = Producer(surviving_producer(bootstrap, **{"message.timeout.ms": 120000}))
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, err, msg, sent: float) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            self.failed += 1
        elif sent > self.mark:  # sent after the kill: when it came back acknowledged
            self.back.setdefault(msg.partition(), time.monotonic())

    def watch(self, killed: float) -> None:
        """From now on note, per partition, the first acknowledgement of a record sent
        after `killed`."""
        self.back = {}
        self.mark = killed

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            if len(self._producer) < 5000:
                for _ in range(10):
                    sent = time.monotonic()
                    self._producer.produce(
                        "takeover",
                        key=str(n).encode(),
                        value=b"v" * 100,
                        on_delivery=lambda e, m, sent=sent: self._delivered(e, m, sent),
                    )
                    n += 1
            self._producer.poll(0.005)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._producer.flush(120)


def measure_takeover(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    reason = unavailable_reason()
    if reason:
        return {"skipped": f"PostgreSQL: {reason}"}
    cluster = NodesCluster(base / "nodes", 3, ["--node-lease-s", "1", "--wal", "object"])
    cluster.start()
    times: list[float] = []
    rng = random.Random(7)
    try:
        bootstraps = ",".join(cluster.bootstraps)
        admin = AdminClient({"bootstrap.servers": bootstraps})
        admin.create_topics([NewTopic("takeover", 3, 1)])["takeover"].result(timeout=60)
        acks = _Acks(bootstraps, "takeover")
        time.sleep(3.0)
        for cycle in range(args.kills):
            meta = admin.list_topics("takeover", timeout=10).topics["takeover"].partitions
            node = rng.choice(sorted({m.leader for m in meta.values()}))  # one that leads
            theirs = [p for p, m in meta.items() if m.leader == node]
            pid = cluster.node_pid(node)
            killed = time.monotonic()
            acks.watch(killed)
            os.kill(pid, signal.SIGKILL)
            deadline = killed + 60
            while time.monotonic() < deadline and not all(p in acks.back for p in theirs):
                time.sleep(0.01)
            back = max((acks.back.get(p, deadline) for p in theirs), default=killed)
            times.append(back - killed)
            print(
                f"cycle {cycle + 1}: node {node} killed, its partitions {theirs} "
                f"acknowledged again after {back - killed:.2f} s",
                flush=True,
            )
            cluster.wait_restarted(node, pid)
            time.sleep(2.0)
        acks.stop()
        return {
            "kills": len(times),
            "seconds_p50": _quantile(times, 0.5),
            "seconds_p99": _quantile(times, 0.99),
            "seconds_max": round(max(times), 3) if times else None,
            "seconds_mean": round(statistics.mean(times), 3) if times else None,
            "delivery_failures": acks.failed,
        }
    finally:
        cluster.close()


def run(options: RunOptions) -> dict[str, Any]:
    args = scenario_args(build_parser(), options, quick=QUICK)
    report: dict[str, Any] = {
        "settings": {k: str(v) for k, v in vars(args).items()},
        "environment": environment(),
    }
    with tempfile.TemporaryDirectory(prefix="bench-wal-") as tmp:
        report["objects"] = measure_objects(args, Path(tmp))
        report["takeover"] = measure_takeover(args, Path(tmp))
    return report


def main(argv: list[str] | None = None) -> int:
    return standalone("wal", argv)


if __name__ == "__main__":
    sys.exit(main())
