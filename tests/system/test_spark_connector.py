"""Spark's own Kafka connector (source and sink, batch and streaming) against streamgate.

One option per test, checked against what was produced. All tests share one local[2]
SparkSession and one gateway (tests/support/spark.py); each uses its own topics.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from support.client import unique_topic
from support.confluent import create_topic
from support.spark import (
    consume_all,
    delete_records,
    end_offsets,
    kafka_options,
    parquet_rows,
    produce,
    set_topic_config,
    wait_for,
    watermarks,
)

from harness.gateway import Gateway

pytestmark = pytest.mark.timeout(600)


def _records(n: int, partitions: int, prefix: str = "v") -> list[tuple[bytes, bytes, int]]:
    return [(f"k{i % 7}".encode(), f"{prefix}{i}".encode(), i % partitions) for i in range(n)]


def _batch(spark: Any, gw: Any, **options: str) -> Any:
    return spark.read.format("kafka").options(**kafka_options(gw, **options)).load()


def _values(df: Any) -> list[str]:
    return sorted(r.v for r in df.selectExpr("CAST(value AS STRING) AS v").collect())


def test_subscribe_batch_reads_every_record_with_metadata(spark, spark_gateway) -> None:
    topic = unique_topic("subscribe")
    create_topic(spark_gateway.bootstrap, topic, 3)
    produce(spark_gateway.bootstrap, topic, _records(90, 3))
    rows = _batch(spark, spark_gateway, subscribe=topic).collect()
    assert len(rows) == 90
    assert {r.topic for r in rows} == {topic}
    by_part: dict[int, list[int]] = {}
    for r in rows:
        by_part.setdefault(r.partition, []).append(r.offset)
        assert r.value.decode() == f"v{int(r.value[1:])}"
        assert r.key == f"k{int(r.value[1:]) % 7}".encode()
        assert r.timestampType == 0
    assert {p: sorted(o) for p, o in by_part.items()} == {p: list(range(30)) for p in range(3)}


def test_subscribe_pattern_covers_matching_topics_only(spark, spark_gateway) -> None:
    stem = unique_topic("pattern").replace("-", "_")
    topics = [f"{stem}.a", f"{stem}.b", f"other_{stem}"]
    for i, t in enumerate(topics):
        create_topic(spark_gateway.bootstrap, t, 2)
        produce(spark_gateway.bootstrap, t, [(None, f"{i}-{j}".encode(), j % 2) for j in range(10)])
    df = _batch(spark, spark_gateway, subscribePattern=f"{stem}\\..*")
    rows = df.select("topic").collect()
    assert sorted({r.topic for r in rows}) == topics[:2]
    assert len(rows) == 20


def test_assign_with_per_partition_offsets(spark, spark_gateway) -> None:
    topic = unique_topic("assign")
    create_topic(spark_gateway.bootstrap, topic, 3)
    produce(spark_gateway.bootstrap, topic, _records(60, 3))  # 20 per partition
    # -2 = earliest, -1 = latest, as in Spark's documentation
    starting = json.dumps({topic: {"0": 5, "2": -2}})
    ending = json.dumps({topic: {"0": 15, "2": -1}})
    df = _batch(
        spark,
        spark_gateway,
        assign=json.dumps({topic: [0, 2]}),
        startingOffsets=starting,
        endingOffsets=ending,
    )
    rows = df.select("partition", "offset").collect()
    got = sorted((r.partition, r.offset) for r in rows)
    assert got == [(0, o) for o in range(5, 15)] + [(2, o) for o in range(20)]


def test_earliest_and_latest_in_batch_and_streaming(spark, spark_gateway, tmp_path) -> None:
    topic = unique_topic("latest")
    create_topic(spark_gateway.bootstrap, topic, 2)
    produce(spark_gateway.bootstrap, topic, _records(10, 2, "old"))
    df = _batch(
        spark, spark_gateway, subscribe=topic, startingOffsets="earliest", endingOffsets="latest"
    )
    assert len(_values(df)) == 10
    # a stream from "latest" sees only what comes after its first batch planned the offsets
    name = f"latest_{int(time.time() * 1000)}"
    query = (
        spark.readStream.format("kafka")
        .options(**kafka_options(spark_gateway, subscribe=topic, startingOffsets="latest"))
        .load()
        .selectExpr("CAST(value AS STRING) AS v")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        _wait(lambda: query.lastProgress is not None)
        produce(spark_gateway.bootstrap, topic, _records(10, 2, "new"))
        _wait(lambda: spark.sql(f"SELECT count(*) AS n FROM {name}").first().n >= 10)
        assert query.exception() is None
        vals = sorted(r.v for r in spark.sql(f"SELECT v FROM {name}").collect())
    finally:
        query.stop()
    assert vals == sorted(f"new{i}" for i in range(10))


def test_starting_timestamp_and_offsets_by_timestamp(spark, spark_gateway) -> None:
    topic = unique_topic("timestamp")
    create_topic(spark_gateway.bootstrap, topic, 2)
    base = 1_700_000_000_000
    for step in range(4):  # 5 records per partition at each of 4 timestamps
        produce(
            spark_gateway.bootstrap,
            topic,
            _records(10, 2, f"t{step}-"),
            timestamp_ms=base + step * 1000,
        )
    df = _batch(spark, spark_gateway, subscribe=topic, startingTimestamp=str(base + 2000))
    assert len(df.collect()) == 20
    assert {v.split("-")[0] for v in _values(df)} == {"t2", "t3"}
    by_ts = json.dumps({topic: {"0": base + 1000, "1": base + 3000}})
    rows = (
        _batch(spark, spark_gateway, subscribe=topic, startingOffsetsByTimestamp=by_ts)
        .select("partition", "offset")
        .collect()
    )
    got = sorted((r.partition, r.offset) for r in rows)
    assert got == [(0, o) for o in range(5, 20)] + [(1, o) for o in range(15, 20)]
    # a timestamp after every record: no offset matches (ListOffsets answers -1, as Kafka
    # does), which Spark's default strategy reports; strategy "latest" reads nothing
    late = str(base + 99_000)
    with pytest.raises(Exception, match="No offset matched"):
        _batch(spark, spark_gateway, subscribe=topic, startingTimestamp=late).count()
    df = _batch(
        spark,
        spark_gateway,
        subscribe=topic,
        startingTimestamp=late,
        startingOffsetsByTimestampStrategy="latest",
    )
    assert df.count() == 0


def test_max_offsets_per_trigger_bounds_each_micro_batch(spark, spark_gateway, tmp_path) -> None:
    topic = unique_topic("maxoffsets")
    create_topic(spark_gateway.bootstrap, topic, 2)
    produce(spark_gateway.bootstrap, topic, _records(100, 2))
    out = tmp_path / "out"
    query = (
        spark.readStream.format("kafka")
        .options(
            **kafka_options(
                spark_gateway,
                subscribe=topic,
                startingOffsets="earliest",
                maxOffsetsPerTrigger="30",
            )
        )
        .load()
        .selectExpr("CAST(value AS STRING) AS v", "partition", "offset")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 100
    assert max(sizes) <= 30 and len(sizes) >= 4, sizes
    rows = parquet_rows(spark, out)
    assert sorted(r.v for r in rows) == sorted(f"v{i}" for i in range(100))


def test_min_partitions_splits_kafka_partitions(spark, spark_gateway) -> None:
    topic = unique_topic("minparts")
    create_topic(spark_gateway.bootstrap, topic, 2)
    produce(spark_gateway.bootstrap, topic, _records(200, 2))
    df = _batch(spark, spark_gateway, subscribe=topic, minPartitions="8")
    assert df.rdd.getNumPartitions() >= 8
    assert len(_values(df)) == 200


def test_include_headers(spark, spark_gateway) -> None:
    topic = unique_topic("headers")
    create_topic(spark_gateway.bootstrap, topic, 1)
    hdrs = [("trace", b"abc"), ("n", b"\x00\x01"), ("trace", b"second")]
    produce(spark_gateway.bootstrap, topic, _records(5, 1), headers=hdrs)
    rows = _batch(spark, spark_gateway, subscribe=topic, includeHeaders="true").collect()
    assert len(rows) == 5
    for r in rows:
        assert [(h.key, bytes(h.value)) for h in r.headers] == hdrs


def test_kafka_sink_writes_keys_values_headers_and_topic_column(spark, spark_gateway) -> None:
    t1, t2 = unique_topic("sink-a"), unique_topic("sink-b")
    for t in (t1, t2):
        create_topic(spark_gateway.bootstrap, t, 2)
    rows = [
        (t1 if i % 3 else t2, f"key{i}", f"value{i}", [("h", f"hv{i}".encode()), ("x", None)])
        for i in range(30)
    ]
    schema = (
        "topic STRING, key STRING, value STRING, headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
    )
    df = spark.createDataFrame(rows, schema)
    df.write.format("kafka").options(**kafka_options(spark_gateway)).save()
    for t in (t1, t2):
        expected = {r[1]: r for r in rows if r[0] == t}
        msgs = consume_all(spark_gateway.bootstrap, t, len(expected))
        assert len(msgs) == len(expected)
        for m in msgs:
            key = m.key().decode()
            _topic, _key, value, headers = expected[key]
            assert m.value().decode() == value
            assert m.headers() == headers
    # the sink's "topic" option instead of the column, in streaming mode (Spark's producer is
    # idempotent by default with kafka-clients 3.x)
    t3 = unique_topic("sink-stream")
    create_topic(spark_gateway.bootstrap, t3, 2)
    src = unique_topic("sink-src")
    create_topic(spark_gateway.bootstrap, src, 2)
    produce(spark_gateway.bootstrap, src, _records(40, 2))
    query = (
        spark.readStream.format("kafka")
        .options(
            **kafka_options(
                spark_gateway, subscribe=src, startingOffsets="earliest", includeHeaders="true"
            )
        )
        .load()
        .selectExpr("key", "value", "headers")
        .writeStream.format("kafka")
        .options(**kafka_options(spark_gateway, topic=t3))
        .option("checkpointLocation", f"/tmp/spark-sink-{t3}")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    msgs = consume_all(spark_gateway.bootstrap, t3, 40)
    assert sorted(m.value().decode() for m in msgs) == sorted(f"v{i}" for i in range(40))


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_fail_on_data_loss_after_delete_records(
    spark, spark_gateway, tmp_path, fail_on_data_loss: bool
) -> None:
    topic = unique_topic(f"dataloss-{fail_on_data_loss}")
    create_topic(spark_gateway.bootstrap, topic, 2)
    produce(spark_gateway.bootstrap, topic, _records(20, 2, "a"))
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run() -> Any:
        query = (
            spark.readStream.format("kafka")
            .options(
                **kafka_options(
                    spark_gateway,
                    subscribe=topic,
                    startingOffsets="earliest",
                    failOnDataLoss=str(fail_on_data_loss).lower(),
                )
            )
            .load()
            .selectExpr("CAST(value AS STRING) AS v", "partition", "offset")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(300)
        except Exception as exc:  # StreamingQueryException
            return exc
        return query.exception()

    assert run() is None
    assert len(parquet_rows(spark, out)) == 20
    # more data, then the log start moves past records the query never read
    produce(spark_gateway.bootstrap, topic, _records(20, 2, "b"))
    delete_records(spark_gateway.bootstrap, topic, {0: 15, 1: 15})
    error = run()
    rows = parquet_rows(spark, out)
    if fail_on_data_loss:
        assert error is not None
        assert "data loss" in str(error).lower() or "dataloss" in str(error).lower(), error
        assert len(rows) == 20
    else:
        assert error is None
        # offsets 10..14 of each partition are gone; 15..19 are read
        got = sorted((r.partition, r.offset) for r in rows if r.v.startswith("b"))
        assert got == [(p, o) for p in range(2) for o in range(15, 20)]
    assert end_offsets(spark_gateway.bootstrap, topic) == {0: 20, 1: 20}


def _file_sink_run(
    spark: Any, bootstrap: str, topic: str, out: Path, ckpt: Path, fail_on_data_loss: bool
) -> Any:
    """One availableNow run of a Kafka -> Parquet query; its error or None."""
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", str(fail_on_data_loss).lower())
        .load()
        .selectExpr("CAST(value AS STRING) AS v", "partition", "offset")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(300)
    except Exception as exc:  # StreamingQueryException
        return exc
    return query.exception()


# small chunks, trimmed from tier 1 at once, retention checked every 200 ms
RETENTION_ARGS = (
    "--chunk-bytes",
    "2048",
    "--chunk-age-ms",
    "100",
    "--local-retain-bytes",
    "0",
    "--retention-check-interval-ms",
    "200",
)


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_fail_on_data_loss_after_retention(spark, tmp_path, fail_on_data_loss: bool) -> None:
    """retention.ms moves the log start past records a query has not read yet."""
    gw = Gateway(tmp_path / "data", tmp_path / "server.log", RETENTION_ARGS, metrics=True)
    gw.start_fresh()
    try:
        topic = unique_topic("retention")
        create_topic(gw.bootstrap, topic, 1)  # retention.ms -1: kept forever
        day_old = int(time.time() * 1000) - 86_400_000
        produce(gw.bootstrap, topic, _records(20, 1, "a"), timestamp_ms=day_old)
        out, ckpt = tmp_path / "out", tmp_path / "ckpt"
        assert _file_sink_run(spark, gw.bootstrap, topic, out, ckpt, fail_on_data_loss) is None
        assert len(parquet_rows(spark, out)) == 20
        produce(gw.bootstrap, topic, _records(20, 1, "b"), timestamp_ms=day_old)
        # one hour of retention: the day-old slices (all in tier 2) expire, the log start
        # reaches the end
        set_topic_config(gw.bootstrap, topic, **{"retention.ms": "3600000"})
        wait_for(lambda: watermarks(gw.bootstrap, topic)[0] == (40, 40), timeout=90)
        produce(gw.bootstrap, topic, _records(10, 1, "c"))  # current timestamps: kept
        error = _file_sink_run(spark, gw.bootstrap, topic, out, ckpt, fail_on_data_loss)
        rows = parquet_rows(spark, out)
        if fail_on_data_loss:
            assert error is not None and "data" in str(error).lower(), error
            assert len(rows) == 20
        else:
            assert error is None, error
            assert sorted(r.offset for r in rows) == list(range(20)) + list(range(40, 50))
    finally:
        gw.close()


def test_batch_read_fails_or_not_on_data_loss(spark, spark_gateway) -> None:
    """Batch reads with an explicit range below the log start."""
    topic = unique_topic("batchloss")
    create_topic(spark_gateway.bootstrap, topic, 1)
    produce(spark_gateway.bootstrap, topic, _records(20, 1))
    delete_records(spark_gateway.bootstrap, topic, {0: 10})
    starting = json.dumps({topic: {"0": 5}})
    df = _batch(
        spark, spark_gateway, subscribe=topic, startingOffsets=starting, failOnDataLoss="false"
    )
    assert sorted(r.offset for r in df.collect()) == list(range(10, 20))
    df = _batch(spark, spark_gateway, subscribe=topic, startingOffsets="earliest")
    assert sorted(r.offset for r in df.collect()) == list(range(10, 20))
    with pytest.raises(Exception, match="(?i)offset|data loss|lost"):
        _batch(
            spark, spark_gateway, subscribe=topic, startingOffsets=starting, failOnDataLoss="true"
        ).collect()


def test_checkpoint_restart_no_loss_no_duplicates(spark, spark_gateway, tmp_path: Path) -> None:
    topic = unique_topic("restart")
    create_topic(spark_gateway.bootstrap, topic, 3)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def start() -> Any:
        return (
            spark.readStream.format("kafka")
            .options(
                **kafka_options(
                    spark_gateway,
                    subscribe=topic,
                    startingOffsets="earliest",
                    maxOffsetsPerTrigger="50",
                )
            )
            .load()
            .selectExpr("CAST(value AS STRING) AS v", "partition", "offset")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(ckpt))
            .trigger(processingTime="300 milliseconds")
            .start()
        )

    produce(spark_gateway.bootstrap, topic, _records(150, 3, "a"))
    query = start()
    _wait(lambda: len(parquet_rows(spark, out)) >= 50)
    query.stop()  # mid-stream: some of the first 150 are not read yet
    assert query.exception() is None
    produce(spark_gateway.bootstrap, topic, _records(150, 3, "b"))
    query = start()
    try:
        _wait(lambda: len(parquet_rows(spark, out)) >= 300)
        time.sleep(1.5)  # a few more triggers: nothing new must appear
        assert query.exception() is None
    finally:
        query.stop()
    rows = parquet_rows(spark, out)
    values = [r.v for r in rows]
    assert len(values) == len(set(values)) == 300
    assert set(values) == {f"{p}{i}" for p in "ab" for i in range(150)}


def _wait(predicate: Any, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.3)


def test_consumer_based_offset_fetching(spark, spark_gateway, tmp_path) -> None:
    """Spark's older offset reader (`useDeprecatedOffsetFetching`): a driver consumer that
    subscribes through the group coordinator (JoinGroup/SyncGroup with the Java client)
    instead of AdminClient."""
    conf = "spark.sql.streaming.kafka.useDeprecatedOffsetFetching"
    topic = unique_topic("deprecated-fetching")
    create_topic(spark_gateway.bootstrap, topic, 2)
    base = 1_700_000_000_000
    produce(spark_gateway.bootstrap, topic, _records(20, 2, "x"), timestamp_ms=base)
    produce(spark_gateway.bootstrap, topic, _records(20, 2, "y"), timestamp_ms=base + 1000)
    spark.conf.set(conf, "true")
    try:
        assert len(_values(_batch(spark, spark_gateway, subscribe=topic))) == 40
        pattern = _batch(spark, spark_gateway, subscribePattern=topic.replace("-", ".") + "$")
        assert pattern.count() == 40
        late = _batch(spark, spark_gateway, subscribe=topic, startingTimestamp=str(base + 1000))
        assert {v[0] for v in _values(late)} == {"y"}
        out = tmp_path / "out"
        error = _file_sink_run(spark, spark_gateway.bootstrap, topic, out, tmp_path / "ckpt", True)
        assert error is None
        assert sorted(r.v for r in parquet_rows(spark, out)) == sorted(
            [f"x{i}" for i in range(20)] + [f"y{i}" for i in range(20)]
        )
    finally:
        spark.conf.unset(conf)


def test_kafka_sink_partition_column_and_compression(spark, spark_gateway) -> None:
    """Spark's producer with each compression codec and the optional partition column."""
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        topic = unique_topic(f"sink-{codec}")
        create_topic(spark_gateway.bootstrap, topic, 3)
        df = spark.range(0, 3000).selectExpr(
            "CAST(id AS STRING) AS key",
            "repeat(CAST(id AS STRING), 20) AS value",
            "CAST(id % 3 AS INT) AS partition",
        )
        df.write.format("kafka").options(
            **kafka_options(spark_gateway, topic=topic, **{"kafka.compression.type": codec})
        ).save()
        back = _batch(spark, spark_gateway, subscribe=topic).selectExpr(
            "CAST(CAST(key AS STRING) AS INT) AS id", "CAST(value AS STRING) AS v", "partition"
        )
        rows = back.collect()
        assert sorted(r.id for r in rows) == list(range(3000)), codec
        assert all(r.partition == r.id % 3 and r.v == str(r.id) * 20 for r in rows), codec
