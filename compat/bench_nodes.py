"""Figures for a gateway node on PostgreSQL metadata (README "Several nodes").

* throughput: confluent-kafka produces `--records` records (acks=all, idempotent) to a
  3-partition topic, then a consumer reads them back; once with the default SQLite metadata
  and once with `--metadata postgresql://...` (a real PostgreSQL from harness/postgres.py).
* commit latency: synchronous OffsetCommit round trips (a metadata commit each: SQLite
  fsync vs a PostgreSQL transaction).
* failover: a producer sends continuously; the node is SIGKILLed and restarted at once
  (same node id and data dir). The restart must wait for the killed incarnation's lease to
  expire; we time kill -> first acknowledged record after the restart, per lease length.

* scale-out: 1, 2 and 4 active nodes (`--multi-node`), one topic led by each and one
  producer per node at once; aggregate produce records/s and the ratio to one node.

Results: a table and JSON with provenance (compat/results/nodes.json).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from harness.gateway import Gateway  # noqa: E402
from harness.postgres import PostgresServer  # noqa: E402
from harness.provenance import provenance  # noqa: E402

DEFAULT_OUTPUT = REPO_ROOT / "compat" / "results" / "nodes.json"
PARTITIONS = 3


def _throughput(bootstrap: str, records: int, size: int) -> dict[str, float]:
    topic = f"bench-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(20)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.size": 262144,
        }
    )
    payload = b"x" * size
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=payload, key=str(i % 64).encode())
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    produce_s = time.perf_counter() - started
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    started = time.perf_counter()
    while got < records:
        for msg in consumer.consume(1000, 1.0):
            if msg.error() is None:
                got += 1
    consume_s = time.perf_counter() - started
    latencies = []
    for i in range(200):
        t0 = time.perf_counter()
        consumer.commit(offsets=[TopicPartition(topic, 0, i + 1)], asynchronous=False)
        latencies.append((time.perf_counter() - t0) * 1000)
    consumer.close()
    latencies.sort()
    mib = records * size / (1 << 20)
    return {
        "produce_records_per_s": round(records / produce_s),
        "produce_mib_per_s": round(mib / produce_s, 2),
        "consume_records_per_s": round(records / consume_s),
        "commit_p50_ms": round(statistics.median(latencies), 2),
        "commit_p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 2),
    }


def _failover(gw: Gateway, rounds: int) -> list[float]:
    """Seconds from SIGKILL to the first record acknowledged by the restarted node."""
    topic = f"failover-{uuid.uuid4().hex[:6]}"
    acked_at: list[float] = []
    lock = threading.Lock()

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is None:
            with lock:
                acked_at.append(time.monotonic())

    producer = Producer(
        {
            "bootstrap.servers": gw.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 1,
            "message.timeout.ms": 120000,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 100,
            "retry.backoff.ms": 20,
        }
    )
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            producer.produce(topic, value=str(i).encode(), on_delivery=on_delivery)
            i += 1
            producer.poll(0.002)
        producer.flush(120)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    times = []
    try:
        time.sleep(1.5)
        for _ in range(rounds):
            killed = time.monotonic()
            gw.kill()
            # acks the dead process sent may still be in librdkafka's queue: only count
            # those reported once it is gone (plus a margin for the 2 ms poll loop)
            dead = time.monotonic() + 0.05
            gw.start()
            while True:
                with lock:
                    after = [t for t in acked_at if t > dead]
                if after:
                    times.append(round(min(after) - killed, 3))
                    break
                time.sleep(0.005)
            time.sleep(1.0)
    finally:
        stop.set()
        thread.join(120)
    return times


def _scale_out(pg: PostgresServer, work: Path, nodes: int, records: int, size: int) -> Any:
    """`nodes` active nodes (--multi-node), one topic led by each, one producer
    thread per node writing `records` to its node's topic at once; aggregate records/s."""
    url = _new_database(pg, f"scale{nodes}")
    gws = [
        Gateway(
            work / f"s{nodes}-{i}",
            work / f"s{nodes}-{i}.log",
            [
                "--metadata",
                url,
                "--node-id",
                str(i),
                "--multi-node",
                "true",
                "--tier2",
                str(work / f"s{nodes}-tier2"),
            ],
        )
        for i in range(1, nodes + 1)
    ]
    try:
        for gw in gws:
            gw.start_fresh()
        topics = []
        for i, gw in enumerate(gws, start=1):
            topic = f"scale-{i}"
            admin = AdminClient({"bootstrap.servers": gw.bootstrap})
            admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(20)
            topics.append((gw.bootstrap, topic))
        time.sleep(1.5)  # every node has synced every topic's leader
        elapsed: list[float] = []
        payload = b"x" * size

        def produce(bootstrap: str, topic: str) -> None:
            producer = Producer(
                {
                    "bootstrap.servers": bootstrap,
                    "acks": "all",
                    "enable.idempotence": True,
                    "linger.ms": 5,
                    "batch.size": 262144,
                }
            )
            started = time.perf_counter()
            for i in range(records):
                while True:
                    try:
                        producer.produce(topic, value=payload, key=str(i % 64).encode())
                        break
                    except BufferError:
                        producer.poll(0.01)
            assert producer.flush(300) == 0
            elapsed.append(time.perf_counter() - started)

        threads = [threading.Thread(target=produce, args=t) for t in topics]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - started
        return {
            "nodes": nodes,
            "records": records * nodes,
            "seconds": round(wall, 2),
            "produce_records_per_s": round(records * nodes / wall),
        }
    finally:
        for gw in gws:
            gw.close()


def _new_database(pg: PostgresServer, name: str) -> str:
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return pg.url.rsplit("/", 1)[0] + "/" + name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--failover-rounds", type=int, default=3)
    parser.add_argument("--leases", default="1,3", help="lease lengths (s) to time failover")
    parser.add_argument("--nodes", default="1,2,4", help="active node counts to compare")
    parser.add_argument("--scale-records", type=int, default=30_000, help="per node")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-nodes-"))
    result: dict[str, Any] = {
        "provenance": provenance(sys.argv),
        "records": args.records,
        "record_bytes": args.size,
        "partitions": PARTITIONS,
    }
    pg = PostgresServer(work / "pg")
    pg.start()
    try:
        for name, extra in (
            ("sqlite", []),
            ("postgresql", ["--metadata", _new_database(pg, "throughput")]),
        ):
            gw = Gateway(work / name, work / f"{name}.log", extra)
            gw.start_fresh()
            try:
                result[f"throughput_{name}"] = _throughput(gw.bootstrap, args.records, args.size)
            finally:
                gw.close()
            print(name, result[f"throughput_{name}"], flush=True)
        result["scale_out"] = [
            _scale_out(pg, work, n, args.scale_records, args.size)
            for n in (int(x) for x in args.nodes.split(","))
        ]
        base = result["scale_out"][0]["produce_records_per_s"]
        for row in result["scale_out"]:
            row["ratio_to_first"] = round(row["produce_records_per_s"] / base, 2)
            print("scale-out", row, flush=True)
        result["failover_s"] = {}
        for lease in args.leases.split(","):
            gw = Gateway(
                work / f"fo{lease}",
                work / f"fo{lease}.log",
                [
                    "--metadata",
                    _new_database(pg, f"failover{lease.replace('.', '_')}"),
                    "--node-lease-s",
                    lease,
                ],
            )
            gw.start_fresh()
            try:
                result["failover_s"][f"lease_{lease}s"] = _failover(gw, args.failover_rounds)
            finally:
                gw.close()
            print("failover lease", lease, result["failover_s"][f"lease_{lease}s"], flush=True)
    finally:
        pg.close()
        shutil.rmtree(work, ignore_errors=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
