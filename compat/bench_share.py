"""Share-group figures with confluent-kafka's ShareConsumer (librdkafka 2.16).

* throughput: RECORDS records of 100 bytes in a 4-partition topic, then 1, 4 and 16 share
  consumers of one new group (implicit acknowledgement, one thread each) read them; the
  time from the consumers' start to every record delivered once (joins included).
* acknowledgement cost: one consumer in explicit mode accepts records one at a time, each
  with commit_sync(); p50/p90 of that round trip (a metadata transaction per
  acknowledgement, before the answer).

Starts a fresh `streamgate serve` (earliest share offsets) on a free loopback port, or
measures `--bootstrap HOST:PORT` (which must use --share-auto-offset-reset earliest).
`python compat/bench_share.py [--records 50000]`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from harness.gateway import Gateway  # noqa: E402

PARTITIONS = 4


def _fill(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(timeout=15)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=b"x" * 100, partition=i % partitions)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(60)


def _consumer(bootstrap: str, group: str, topic: str, explicit: bool = False) -> Any:
    config = {"bootstrap.servers": bootstrap, "group.id": group}
    if explicit:
        config["share.acknowledgement.mode"] = "explicit"
    consumer = ShareConsumer(config)
    consumer.subscribe([topic])
    return consumer


def throughput(bootstrap: str, members: int, count: int) -> tuple[float, list[int]]:
    topic = f"bench-share-{members}-{time.time_ns()}"
    _fill(bootstrap, topic, count, PARTITIONS)
    consumers = [_consumer(bootstrap, "g-" + topic, topic) for _ in range(members)]
    counts = [0] * members
    stop = threading.Event()

    def work(index: int) -> None:
        consumer = consumers[index]
        while not stop.is_set():
            counts[index] += sum(1 for m in consumer.poll(0.2) if m.error() is None)
        consumer.commit_sync(15)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(members)]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    while sum(counts) < count and time.monotonic() - start < 300:
        time.sleep(0.02)
    elapsed = time.monotonic() - start
    stop.set()
    for thread in threads:
        thread.join()
    for consumer in consumers:
        consumer.close()
    return elapsed, counts


def ack_cost(bootstrap: str, count: int = 200) -> list[float]:
    topic = f"bench-share-ack-{time.time_ns()}"
    _fill(bootstrap, topic, count, 1)
    consumer = _consumer(bootstrap, "g-" + topic, topic, explicit=True)
    latencies: list[float] = []
    deadline = time.monotonic() + 120
    while len(latencies) < count and time.monotonic() < deadline:
        for message in consumer.poll(0.5):
            if message.error() is None:
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                began = time.perf_counter()
                consumer.commit_sync(15)
                latencies.append(time.perf_counter() - began)
    consumer.close()
    return sorted(latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="measure this server instead of a fresh one")
    parser.add_argument("--records", type=int, default=50_000)
    args = parser.parse_args()
    gateway = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        base = Path(tempfile.mkdtemp(prefix="bench-share-"))
        gateway = Gateway(
            base / "data",
            base / "server.log",
            ("--share-auto-offset-reset", "earliest", "--log-level", "WARNING"),
        )
        gateway.start_fresh()
        bootstrap = gateway.bootstrap
    try:
        for members in (1, 4, 16):
            elapsed, counts = throughput(bootstrap, members, args.records)
            total = sum(counts)
            print(
                f"members {members:2d}: {total} records in {elapsed:.2f} s = "
                f"{total / elapsed:,.0f} records/s (per member {counts})",
                flush=True,
            )
        lat = ack_cost(bootstrap)
        print(
            f"acknowledgement (accept one record + commit_sync): n={len(lat)} "
            f"p50 {statistics.median(lat) * 1000:.2f} ms, "
            f"p90 {lat[int(len(lat) * 0.9)] * 1000:.2f} ms"
        )
    finally:
        if gateway is not None:
            gateway.close()


if __name__ == "__main__":
    main()
