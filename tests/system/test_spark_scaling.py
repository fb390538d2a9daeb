"""A Spark streaming query keeps running while its topic gains partitions and its stream's
segments split and merge: every record lands exactly once in the file sink, in per-key order,
and the query never fails."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

import pytest
from confluent_kafka import Producer
from support.client import unique_topic
from support.confluent import create_topic
from support.spark import add_partitions, http, kafka_options, open_segments, parquet_rows, wait_for

pytestmark = pytest.mark.timeout(600)

FIRST_PARTITIONS = 4
LATER_PARTITIONS = 6


class SequenceProducer(threading.Thread):
    """Keys k0.. each pinned to one partition, values `key:seq`; grows to the new partitions
    once told to. Idempotent, acks=all: every delivered record is counted."""

    def __init__(self, bootstrap: str, topic: str, rate: float) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.rate = rate
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "linger.ms": 5,
                "topic.metadata.refresh.interval.ms": 500,
            }
        )
        self.partitions = FIRST_PARTITIONS
        self.stop = threading.Event()
        self.delivered: dict[str, int] = defaultdict(int)
        self.errors: list[Any] = []
        self.sent = 0

    def keys(self) -> list[tuple[str, int]]:
        # 3 keys per partition; keys of the new partitions appear only after they exist
        return [(f"k{p}-{j}", p) for p in range(self.partitions) for j in range(3)]

    def grow(self, partitions: int) -> None:
        wait_for(
            lambda: (
                len(self.producer.list_topics(self.topic, timeout=5).topics[self.topic].partitions)
                == partitions
            ),
            timeout=30,
        )
        self.partitions = partitions

    def _done(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.delivered[msg.key().decode()] += 1

    def run(self) -> None:
        seq: dict[str, int] = defaultdict(int)
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        while not self.stop.is_set():
            for key, partition in self.keys():
                value = f"{key}:{seq[key]}".encode()
                self.producer.produce(
                    self.topic,
                    key=key.encode(),
                    value=value,
                    partition=partition,
                    on_delivery=self._done,
                )
                seq[key] += 1
                self.sent += 1
            self.producer.poll(0)
            next_at += interval * len(self.keys())
            time.sleep(max(0.0, next_at - time.monotonic()))
        assert self.producer.flush(60) == 0


def test_query_survives_create_partitions_split_and_merge(spark, spark_gateway, tmp_path):
    gw = spark_gateway
    topic = unique_topic("spark-scaling")
    create_topic(gw.bootstrap, topic, FIRST_PARTITIONS)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    producer = SequenceProducer(gw.bootstrap, topic, rate=300)
    producer.start()
    query = (
        spark.readStream.format("kafka")
        .options(**kafka_options(gw, subscribe=topic, startingOffsets="earliest"))
        .load()
        .selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v", "partition", "offset")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(processingTime="500 milliseconds")
        .start()
    )

    def batches() -> int:
        return int(query.lastProgress["batchId"]) if query.lastProgress else -1

    def some_batches_later(n: int = 2) -> None:
        first = batches()
        wait_for(lambda: batches() >= first + n and parquet_rows(spark, out), timeout=120)

    try:
        some_batches_later()
        # 1. CreatePartitions: 4 -> 6; the new partitions get their own keys
        add_partitions(gw.bootstrap, topic, LATER_PARTITIONS)
        producer.grow(LATER_PARTITIONS)
        some_batches_later()
        # 2. split the segment owning the most partitions
        seg = max(
            open_segments(gw, topic), key=lambda s: s["last_partition"] - s["first_partition"]
        )
        http(gw, f"/streams/{topic}/scale", {"split": seg["segment_id"], "parts": 2})
        assert len(open_segments(gw, topic)) >= 2
        some_batches_later()
        # 3. merge every open segment back into one
        ids = sorted(s["segment_id"] for s in open_segments(gw, topic))
        http(gw, f"/streams/{topic}/scale", {"merge": ids})
        assert len(open_segments(gw, topic)) == 1
        some_batches_later()
        producer.stop.set()
        producer.join(60)
        assert not producer.errors, producer.errors[:3]
        total = sum(producer.delivered.values())
        wait_for(lambda: len(parquet_rows(spark, out)) >= total, timeout=180)
        time.sleep(1.5)  # a few more triggers: nothing extra may appear
        assert query.exception() is None
        assert query.isActive
    finally:
        producer.stop.set()
        query.stop()

    rows = parquet_rows(spark, out)
    assert len(rows) == total
    per_key: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in rows:
        key, seq = r.v.rsplit(":", 1)
        assert key == r.k
        per_key[key].append((r.offset, int(seq)))
    assert set(per_key) == set(producer.delivered)
    assert {p for p in (r.partition for r in rows)} == set(range(LATER_PARTITIONS))
    for key, pairs in per_key.items():
        seqs = [seq for _offset, seq in sorted(pairs)]
        assert seqs == list(range(producer.delivered[key])), key  # once each, in order
    assert http(gw, f"/streams/{topic}")["epoch"] >= 2


def test_query_survives_gateway_sigkill(spark, gateway, tmp_path) -> None:
    """SIGKILL the gateway under a running query and a running producer, start it again:
    the query does not fail and every acknowledged record is in the file sink once, in
    per-key order (the producer is idempotent: its retries after the restart are deduped)."""
    topic = unique_topic("spark-sigkill")
    create_topic(gateway.bootstrap, topic, FIRST_PARTITIONS)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    producer = SequenceProducer(gateway.bootstrap, topic, rate=300)
    producer.start()
    query = (
        spark.readStream.format("kafka")
        .options(
            **{
                "kafka.bootstrap.servers": gateway.bootstrap,
                "subscribe": topic,
                "startingOffsets": "earliest",
            }
        )
        .load()
        .selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v", "offset")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: len(parquet_rows(spark, out)) > 100, timeout=120)
        gateway.kill()
        time.sleep(1)
        gateway.start()
        before = len(parquet_rows(spark, out))
        wait_for(lambda: len(parquet_rows(spark, out)) > before + 100, timeout=120)
        producer.stop.set()
        producer.join(120)
        assert not producer.errors, producer.errors[:3]
        total = sum(producer.delivered.values())
        wait_for(lambda: len(parquet_rows(spark, out)) >= total, timeout=180)
        time.sleep(1.5)
        assert query.exception() is None and query.isActive
    finally:
        producer.stop.set()
        query.stop()
    per_key: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in parquet_rows(spark, out):
        key, seq = r.v.rsplit(":", 1)
        per_key[key].append((r.offset, int(seq)))
    assert set(per_key) == set(producer.delivered)
    for key, pairs in per_key.items():
        assert [seq for _o, seq in sorted(pairs)] == list(range(producer.delivered[key])), key
