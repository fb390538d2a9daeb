"""Fixtures and helpers for the Spark tests: ONE local[2] SparkSession for the whole run
and one gateway (admin HTTP on) shared by the Spark test modules.

Everything skips, saying why, when pyspark, Java or Spark's Kafka connector is missing
(`spark_examples.session.find_connector()` documents where the jars are looked for).
"""

from __future__ import annotations

import functools
import json
import time
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    ResourceType,
)

from harness.gateway import Gateway
from spark_examples import session as spark_session


@functools.cache
def spark_unavailable_reason() -> str | None:
    # lazily, once: only Spark tests pay for the look-up (and a Maven probe, if it comes
    # to that)
    return spark_session.unavailable_reason()


def skip_without_spark() -> None:
    reason = spark_unavailable_reason()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    skip_without_spark()
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = spark_session.build_session(
        "streamgate-tests",
        conf={
            "spark.sql.warehouse.dir": str(warehouse),
            "spark.sql.streaming.minBatchesToRetain": "5",
            # a new micro-batch as soon as data arrives; keeps the tests short
            "spark.sql.streaming.noDataProgressEventInterval": "1000",
        },
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    skip_without_spark()
    base = tmp_path_factory.mktemp("spark-gateway")
    gw = Gateway(base / "data", base / "server.log", default_partitions=3, metrics=True)
    gw.start_fresh()
    yield gw
    gw.close()


# ------------------------------------------------------------------- Kafka-side helpers


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def set_topic_config(bootstrap: str, topic: str, **configs: str) -> None:
    """IncrementalAlterConfigs SET of `configs` on `topic`."""
    client = admin(bootstrap)
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
    ]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    for fut in client.incremental_alter_configs([resource]).values():
        fut.result(30)


def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    client = admin(bootstrap)
    client.create_partitions([NewPartitions(topic, total)])[topic].result(30)


def delete_records(bootstrap: str, topic: str, before: dict[int, int]) -> None:
    offsets = [TopicPartition(topic, p, o) for p, o in before.items()]
    client = admin(bootstrap)
    for fut in client.delete_records(offsets).values():
        fut.result(30)


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes, int | None]],
    *,
    headers: Sequence[tuple[str, bytes]] | None = None,
    timestamp_ms: int | None = None,
) -> int:
    """(key, value, partition or None) records with an idempotent acks=all producer."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    errors: list[Any] = []
    n = 0

    def done(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for key, value, partition in records:
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": done}
        if partition is not None:
            kwargs["partition"] = partition
        if headers is not None:
            kwargs["headers"] = list(headers)
        if timestamp_ms is not None:
            kwargs["timestamp"] = timestamp_ms
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        n += 1
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    return n


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 60.0) -> list[Any]:
    """Every message of `topic` (assign to all partitions from the beginning)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"spark-tests-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=10)
        parts = sorted(meta.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                assert msg.error() is None, msg.error()
                out.append(msg)
        return out
    finally:
        consumer.close()


def watermarks(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (log start, high watermark)"""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-tests-offsets"})
    try:
        meta = consumer.list_topics(topic, timeout=10)
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            for p in sorted(meta.topics[topic].partitions)
        }
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    return {p: high for p, (_low, high) in watermarks(bootstrap, topic).items()}


def http(gateway: Gateway, path: str, payload: Any = None) -> Any:
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(
        gateway.admin_url + path,
        data=data,
        method="POST" if data else "GET",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def open_segments(gateway: Gateway, topic: str) -> list[dict[str, Any]]:
    return [s for s in http(gateway, f"/streams/{topic}")["segments"] if s["state"] == "open"]


def kafka_options(gateway: Gateway, **options: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": gateway.bootstrap, **options}


def wait_for(predicate: Any, timeout: float = 120.0, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"not met within {timeout}s")
        time.sleep(interval)


def parquet_rows(spark: Any, path: Path) -> list[Any]:
    """The rows a file sink committed so far (Spark reads its _spark_metadata log)."""
    from pyspark.errors import AnalysisException

    if not path.exists():
        return []
    try:
        return spark.read.parquet(str(path)).collect()
    except AnalysisException as exc:  # nothing committed yet: no schema to infer
        if "Unable to infer schema" in str(exc):
            return []
        raise
