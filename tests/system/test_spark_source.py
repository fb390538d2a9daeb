"""The native Spark source (spark_source/): `spark.read.format("streamgate")` against a real
gateway, history read straight from tier 2 (a folder; moto's S3 in one test).

The gateway of this module cuts small chunks and keeps nothing in tier 1 once uploaded,
so a topic's history is soon only in tier 2; the tail test uses the shared Spark gateway
(default settings: records stay in tier 1 for seconds). Results are compared with what
Spark's Kafka connector reads from the same gateway. One SparkSession for the whole run
(tests/support/spark.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.client import unique_topic
from support.compaction import produce as produce_keyed
from support.compaction import wait_compacted
from support.confluent import create_topic
from support.nodes import gateway_args, pg_url, postgres, requires_postgres  # noqa: F401
from support.spark import delete_records, http, kafka_options, produce, wait_for
from support.txn import produce_txn, txn_producer

from harness.gateway import Gateway

pytestmark = pytest.mark.timeout(600)

FAST_TIER_ARGS = (
    *("--chunk-bytes", "65536", "--chunk-age-ms", "200", "--local-retain-bytes", "0"),
    *("--compaction-interval-ms", "300"),
)
VALUE = b"x" * 400


@pytest.fixture(scope="module")
def source(spark) -> Any:
    from spark_source import register

    register(spark)
    return spark


@pytest.fixture(scope="module")
def tier_gateway(tmp_path_factory: pytest.TempPathFactory, spark) -> Iterator[Gateway]:
    base = tmp_path_factory.mktemp("spark-source-gateway")
    gw = Gateway(base / "data", base / "server.log", FAST_TIER_ARGS, metrics=True)
    gw.start_fresh()
    yield gw
    gw.close()


def admin_address(gw: Gateway) -> str:
    return gw.admin_url.removeprefix("http://")


def native(spark: Any, gw: Gateway, **options: str) -> Any:
    reader = spark.read.format("streamgate")
    reader = reader.option("gateway", gw.bootstrap).option("admin", admin_address(gw))
    return reader.options(**options).load()


def wait_tier2_only(gw: Gateway, topic: str) -> dict[str, Any]:
    """Wait until every partition's records are all in tier 2; the chunk map then."""

    def done() -> dict[str, Any] | None:
        doc = http(gw, f"/streams/{topic}/chunks")
        parts = doc["partitions"]
        ok = all(p["tier2_end"] == p["high_watermark"] > 0 for p in parts)
        local = list((gw.data_dir / "streams").rglob("segment-*.log"))
        sizes = sum(f.stat().st_size for f in local)
        return doc if ok and sizes == 0 else None

    return wait_for(done, timeout=90, interval=0.3)


def rows_as_tuples(rows: list[Any]) -> list[tuple[Any, ...]]:
    return sorted(
        (
            r.topic,
            r.partition,
            r.offset,
            bytes(r.key) if r.key is not None else None,
            bytes(r.value),
            r.timestamp,
            r.timestampType,
            tuple((h.key, bytes(h.value)) for h in r.headers or ()),
        )
        for r in rows
    )


@pytest.fixture(scope="module")
def history(tier_gateway: Gateway) -> tuple[str, int]:
    """A one-partition topic of several chunks, all in tier 2: (topic, records)."""
    topic = unique_topic("native-history")
    create_topic(tier_gateway.bootstrap, topic, 1)
    n = 0
    for round_ in range(4):  # pauses: one chunk (at least) per round
        n += produce(
            tier_gateway.bootstrap,
            topic,
            [(f"k{n + i}".encode(), b"%d|" % (n + i) + VALUE, None) for i in range(300)],
            headers=[("round", str(round_).encode())],
        )
        time.sleep(0.5)
    wait_tier2_only(tier_gateway, topic)
    return topic, n


def test_tier2_history_equals_the_kafka_connector_record_for_record(
    source, tier_gateway, history
) -> None:
    topic, n = history
    doc = http(tier_gateway, f"/streams/{topic}/chunks")
    assert doc["tier2"]["kind"] == "folder"
    slices = doc["partitions"][0]["slices"]
    assert len(slices) >= 3, slices
    df = native(source, tier_gateway, topic=topic, includeHeaders="true", minPartitionBytes="0")
    # Spark partitions follow chunks: a one-partition topic reads in parallel
    assert df.rdd.getNumPartitions() == len(slices)
    kafka = (
        source.read.format("kafka")
        .options(**kafka_options(tier_gateway, subscribe=topic, includeHeaders="true"))
        .load()
    )
    rows = df.collect()
    # Spark partitions come back in order, each in offset order, with the true offsets
    assert [r.offset for r in rows] == list(range(n))
    ours, theirs = rows_as_tuples(rows), rows_as_tuples(kafka.collect())
    assert ours == theirs


def test_offsets_options(source, tier_gateway, history) -> None:
    topic, n = history
    starting = json.dumps({topic: {"0": 100}})
    ending = json.dumps({topic: {"0": 750}})
    df = native(source, tier_gateway, topic=topic, startingOffsets=starting, endingOffsets=ending)
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(100, 750))
    assert native(source, tier_gateway, topic=topic, startingOffsets="latest").count() == 0
    assert "headers" not in native(source, tier_gateway, topic=topic).columns


def test_fail_on_data_loss(source, tier_gateway) -> None:
    """Offsets asked for below the log start (DeleteRecords here) raise an error naming
    failOnDataLoss; with it false they are skipped."""
    topic = unique_topic("native-loss")
    create_topic(tier_gateway.bootstrap, topic, 1)
    produce(tier_gateway.bootstrap, topic, [(None, b"%d" % i + VALUE, 0) for i in range(100)])
    delete_records(tier_gateway.bootstrap, topic, {0: 40})
    starting = json.dumps({topic: {"0": 10}})
    message = _error(
        lambda: native(source, tier_gateway, topic=topic, startingOffsets=starting).collect()
    )
    assert "offsets 10 to 39 are no longer there" in message
    assert "option 'failOnDataLoss' false skips them" in message
    df = native(source, tier_gateway, topic=topic, startingOffsets=starting, failOnDataLoss="false")
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(40, 100))


def test_timestamp_options_skip_by_time(source, tier_gateway) -> None:
    topic = unique_topic("native-times")
    create_topic(tier_gateway.bootstrap, topic, 2)
    base = 1_700_000_000_000
    for step in range(3):  # 3 groups of 100 per partition, at base, base+1000, base+2000
        records = [(None, b"%d-%d" % (step, i), i % 2) for i in range(200)]
        produce(tier_gateway.bootstrap, topic, records, timestamp_ms=base + step * 1000)
    wait_tier2_only(tier_gateway, topic)

    def groups(**options: str) -> dict[str, int]:
        rows = native(source, tier_gateway, topic=topic, **options).collect()
        found: dict[str, int] = {}
        for r in rows:
            group = r.value.decode().split("-")[0]
            found[group] = found.get(group, 0) + 1
        return found

    assert groups(startingTimestamp=str(base + 1000)) == {"1": 200, "2": 200}
    assert groups(startingTimestamp=str(base + 500), endingTimestamp=str(base + 2000)) == {"1": 200}


def test_subscribe_pattern_reads_matching_topics(source, tier_gateway) -> None:
    stem = unique_topic("native-pattern").replace("-", "_")
    topics = [f"{stem}.a", f"{stem}.b", f"other_{stem}"]
    for i, t in enumerate(topics):
        create_topic(tier_gateway.bootstrap, t, 2)
        produce(tier_gateway.bootstrap, t, [(None, b"%d-%d" % (i, j), j % 2) for j in range(10)])
    rows = native(source, tier_gateway, subscribePattern=f"{stem}\\..*").collect()
    assert sorted({r.topic for r in rows}) == topics[:2]
    assert len(rows) == 20


def test_compacted_topic_reads_what_the_connector_reads(source, tier_gateway) -> None:
    topic = unique_topic("native-compact")
    configs = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}
    create_topic(tier_gateway.bootstrap, topic, 1, configs)
    updates = [(0, b"k%d" % (i % 20), b"v%d" % i + VALUE) for i in range(400)]
    acked = produce_keyed(tier_gateway.bootstrap, topic, updates)
    wait_compacted(tier_gateway.admin_url, topic, {0: max(acked[0]) + 1})
    wait_tier2_only(tier_gateway, topic)
    ours = native(source, tier_gateway, topic=topic, includeHeaders="true").collect()
    options = kafka_options(tier_gateway, subscribe=topic, includeHeaders="true")
    theirs = source.read.format("kafka").options(**options).load().collect()
    assert rows_as_tuples(ours) == rows_as_tuples(theirs)
    assert 20 <= len(ours) < 400  # compacted: the latest of each key, offsets kept
    assert all(acked[0][r.offset] == (bytes(r.key), bytes(r.value)) for r in ours)


def test_tail_not_yet_in_tier2_comes_through_the_kafka_protocol(source, spark_gateway) -> None:
    topic = unique_topic("native-tail")
    create_topic(spark_gateway.bootstrap, topic, 3)
    produce(spark_gateway.bootstrap, topic, [(b"k", b"v%d" % i, i % 3) for i in range(90)])
    doc = http(spark_gateway, f"/streams/{topic}/chunks")
    assert any(p["tier2_end"] < p["high_watermark"] for p in doc["partitions"]), doc
    rows = native(source, spark_gateway, topic=topic).collect()
    by_partition: dict[int, list[int]] = {}
    for r in rows:
        by_partition.setdefault(r.partition, []).append(r.offset)
    assert {p: sorted(o) for p, o in by_partition.items()} == {p: list(range(30)) for p in range(3)}


def test_read_committed_hides_aborted_transactions(source, tier_gateway) -> None:
    topic = unique_topic("native-txn")
    create_topic(tier_gateway.bootstrap, topic, 2)
    producer = txn_producer(tier_gateway.bootstrap, f"{topic}-tx")
    committed: list[bytes] = []
    aborted: list[bytes] = []
    for t in range(5):
        values = [b"t%d-%d" % (t, i) for i in range(40)]
        produce_txn(producer, topic, values, commit=t % 2 == 0)
        (committed if t % 2 == 0 else aborted).extend(values)
    wait_tier2_only(tier_gateway, topic)
    doc = http(tier_gateway, f"/streams/{topic}/chunks")
    assert sum(len(p["aborted"]) for p in doc["partitions"]) >= 2
    rows = native(source, tier_gateway, topic=topic, isolationLevel="read_committed").collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(committed)
    # read_uncommitted: every data record, never a control record (the markers)
    rows = native(source, tier_gateway, topic=topic).collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(committed + aborted)


def test_gateway_stopped_tier2_read_completes(source, tmp_path: Path, history) -> None:
    gw = Gateway(tmp_path / "data", tmp_path / "server.log", FAST_TIER_ARGS, metrics=True)
    gw.start_fresh()
    try:
        topic = unique_topic("native-stopped")
        create_topic(gw.bootstrap, topic, 2)
        n = produce(gw.bootstrap, topic, [(None, b"%d" % i + VALUE, i % 2) for i in range(600)])
        wait_tier2_only(gw, topic)
        rdd = native(source, gw, topic=topic, minPartitionBytes="0").rdd
        assert rdd.getNumPartitions() >= 2  # planned: the chunk map came from the gateway
    finally:
        gw.close()
    assert rdd.map(lambda r: (r.partition, r.offset)).distinct().count() == n
    # planned with the gateway down: the chunk map from the metadata store's file
    metadata = str(gw.data_dir / "metadata.db")
    df = source.read.format("streamgate").options(gateway=gw.bootstrap, metadata=metadata)
    rows = df.options(topic=topic, includeHeaders="true").load().collect()
    assert sorted((r.partition, r.offset) for r in rows) == sorted(
        (p, o) for p in range(2) for o in range(n // 2)
    )


@requires_postgres
def test_planned_from_postgres_with_the_gateway_down(
    source,
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    """A gateway on the shared PostgreSQL metadata: once stopped, a read is planned from
    the database (read-only) and read from tier 2."""
    tier2 = tmp_path / "tier2"
    gw = Gateway(
        tmp_path / "data",
        tmp_path / "server.log",
        (*FAST_TIER_ARGS, *gateway_args(pg_url), "--tier2", str(tier2)),
        metrics=True,
    )
    gw.start_fresh()
    try:
        topic = unique_topic("native-pg")
        create_topic(gw.bootstrap, topic, 2)
        n = produce(gw.bootstrap, topic, [(None, b"%d" % i + VALUE, i % 2) for i in range(400)])
        wait_tier2_only(gw, topic)
    finally:
        gw.close()

    def read(**options: str) -> Any:  # a fresh reader each time: options accumulate
        reader = source.read.format("streamgate").options(gateway=gw.bootstrap, metadata=pg_url)
        return reader.options(**options).load()

    message = _error(lambda: read(topic=topic))
    assert "needs 'tier2.folder' or 's3.bucket'" in message
    rows = read(topic=topic, **{"tier2.folder": str(tier2)}).collect()
    assert sorted((r.partition, r.offset) for r in rows) == sorted(
        (p, o) for p in range(2) for o in range(n // 2)
    )
    assert read(subscribePattern="native-pg-.*", **{"tier2.folder": str(tier2)}).count() == n
    wrong = pg_url.rsplit("/", 1)[0] + "/no_such_db"
    message = _error(
        lambda: (
            source.read.format("streamgate")
            .options(gateway=gw.bootstrap, metadata=wrong, topic=topic, **{"tier2.folder": "/x"})
            .load()
            .collect()
        )
    )
    assert "option 'metadata': cannot connect to" in message


def _error(call: Any) -> str:
    with pytest.raises(Exception) as info:
        call()
    return str(info.value)


def test_errors_name_the_option_or_the_object(source, tier_gateway, tmp_path: Path) -> None:
    read = source.read.format("streamgate")
    message = _error(lambda: read.option("gateway", tier_gateway.bootstrap).load())
    assert "options 'topic'" in message
    message = _error(lambda: read.options(gateway=tier_gateway.bootstrap, topic="x").load())
    assert "option 'admin' is required" in message
    # the other option checks: tests/unit/test_spark_source_plan.py
    message = _error(lambda: native(source, tier_gateway, topic="no-such-topic").collect())
    assert "topic 'no-such-topic' does not exist" in message
    dead = source.read.format("streamgate").options(
        gateway="127.0.0.1:9", admin="127.0.0.1:9", topic="x", timeoutMs="2000"
    )
    message = _error(lambda: dead.load().collect())
    assert "cannot reach the gateway's admin listener at 127.0.0.1:9 (option 'admin')" in message

    # a chunk deleted behind the map's back: an error naming the object, never a gap
    topic = unique_topic("native-missing")
    create_topic(tier_gateway.bootstrap, topic, 1)
    produce(tier_gateway.bootstrap, topic, [(None, b"%d" % i + VALUE, 0) for i in range(300)])
    doc = wait_tier2_only(tier_gateway, topic)
    key = doc["partitions"][0]["slices"][0][0]
    moved = tmp_path / "moved.chunk"
    chunk = Path(doc["tier2"]["root"], *key.split("/"))
    chunk.rename(moved)
    try:
        message = _error(lambda: native(source, tier_gateway, topic=topic).collect())
    finally:
        moved.rename(chunk)
    assert f"chunk object {key!r} is missing from tier 2 folder" in message
    message = _error(
        lambda: native(
            source, tier_gateway, topic=topic, **{"tier2.folder": "/nonexistent"}
        ).collect()
    )
    assert "tier 2 folder /nonexistent cannot be read" in message


def test_s3_tier2_read_directly(source, moto_server, tmp_path: Path) -> None:
    bucket = f"native-{time.monotonic_ns()}"
    gw = Gateway(
        tmp_path / "data",
        tmp_path / "server.log",
        (*FAST_TIER_ARGS, "--tier2", f"s3://{bucket}/gw", "--s3-endpoint", moto_server.endpoint),
        metrics=True,
        env=moto_server.env(),
    )
    gw.start_fresh()
    try:
        topic = unique_topic("native-s3")
        create_topic(gw.bootstrap, topic, 2)
        n = produce(gw.bootstrap, topic, [(None, b"%d" % i + VALUE, i % 2) for i in range(400)])
        doc = wait_tier2_only(gw, topic)
        assert doc["tier2"]["kind"] == "s3" and doc["tier2"]["bucket"] == bucket
        env = moto_server.env()
        df = native(
            source,
            gw,
            topic=topic,
            **{
                "s3.accessKeyId": env["AWS_ACCESS_KEY_ID"],
                "s3.secretAccessKey": env["AWS_SECRET_ACCESS_KEY"],
            },
        )
        values = sorted(int(bytes(r.value).split(b"x")[0]) for r in df.collect())
        assert values == list(range(n))
    finally:
        gw.close()
