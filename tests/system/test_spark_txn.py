"""Spark's Kafka connector with `kafka.isolation.level=read_committed` against streamgate.

A confluent-kafka transactional producer commits some transactions, aborts others and
leaves one open; Spark (batch and streaming) must see exactly the committed records with
read_committed, and every data record with read_uncommitted. Shares the SparkSession and
gateway of tests/support/spark.py; skips with its reason when Spark is missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support.client import unique_topic
from support.confluent import create_topic
from support.spark import kafka_options, parquet_rows
from support.txn import produce_txn, txn_producer

pytestmark = pytest.mark.timeout(600)

PARTITIONS = 3


def _values(rows: list[Any]) -> list[str]:
    return sorted(r.value.decode() for r in rows)


@pytest.fixture(scope="module")
def txn_topic(spark, spark_gateway) -> Iterator[tuple[str, list[str], list[str], list[str]]]:
    """A topic with 4 committed, 3 aborted and 1 still open transaction, interleaved:
    (topic, committed values, aborted values, open values)."""
    topic = unique_topic("spark-txn")
    create_topic(spark_gateway.bootstrap, topic, PARTITIONS)
    producer = txn_producer(spark_gateway.bootstrap, f"{topic}-tx")
    committed: list[str] = []
    aborted: list[str] = []
    for t in range(7):
        values = [f"t{t}-{i}" for i in range(30)]
        commit = t % 2 == 0
        produce_txn(producer, topic, [v.encode() for v in values], commit)
        (committed if commit else aborted).extend(values)
    # One more transaction left open (another producer, so the first one stays usable):
    # read_committed readers stop at its first offset (the last stable offset).
    other = txn_producer(spark_gateway.bootstrap, f"{topic}-open")
    other.begin_transaction()
    open_values = [f"open-{i}" for i in range(12)]
    for v in open_values:
        other.produce(topic, value=v.encode(), key=v.encode())
    other.flush(30)
    yield topic, committed, aborted, open_values
    other.abort_transaction(30)


def _batch(spark: Any, gw: Any, topic: str, isolation: str) -> list[Any]:
    options = kafka_options(gw, subscribe=topic, **{"kafka.isolation.level": isolation})
    return spark.read.format("kafka").options(**options).load().collect()


def test_batch_read_committed_sees_only_committed(spark, spark_gateway, txn_topic) -> None:
    topic, committed, _aborted, _open = txn_topic
    rows = _batch(spark, spark_gateway, topic, "read_committed")
    assert _values(rows) == sorted(committed)


def test_batch_read_uncommitted_sees_every_data_record(spark, spark_gateway, txn_topic) -> None:
    topic, committed, aborted, open_values = txn_topic
    rows = _batch(spark, spark_gateway, topic, "read_uncommitted")
    # markers are control records: no client, Spark's included, returns them
    assert _values(rows) == sorted(committed + aborted + open_values)


def test_streaming_read_committed_sees_only_committed(
    spark, spark_gateway, txn_topic, tmp_path
) -> None:
    topic, committed, _aborted, _open = txn_topic
    out = tmp_path / "out"
    options = kafka_options(
        spark_gateway,
        subscribe=topic,
        startingOffsets="earliest",
        **{"kafka.isolation.level": "read_committed"},
    )
    query = (
        spark.readStream.format("kafka")
        .options(**options)
        .load()
        .selectExpr("value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    assert _values(parquet_rows(spark, out)) == sorted(committed)
