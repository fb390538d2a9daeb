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
import sys
import tempfile
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
from compat.soak_wal import kill_cycles, quantile  # noqa: E402
from harness.gateway import Gateway  # noqa: E402
from harness.nodes_cluster import NodesCluster  # noqa: E402
from harness.postgres import unavailable_reason  # noqa: E402

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
        "latency_p50_ms": quantile([x * 1000 for x in latencies], 0.5),
        "latency_p99_ms": quantile([x * 1000 for x in latencies], 0.99),
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


def measure_takeover(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    """The kill cycles of the takeover soak (compat/soak_wal.py), SIGKILL only."""
    reason = unavailable_reason()
    if reason:
        return {"skipped": f"PostgreSQL: {reason}"}
    cluster = NodesCluster(base / "nodes", 3, ["--node-lease-s", "1", "--wal", "object"])
    cluster.start()
    try:
        cycles = argparse.Namespace(
            cycles=args.kills, seed=7, partitions=3, rate=2000, settle=2.0, stall_timeout=60.0
        )
        return kill_cycles(cluster, cycles, ("kill",))
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
