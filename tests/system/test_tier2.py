"""Tier 2 end to end: a real gateway process, real Kafka clients, a folder or S3 (moto) store.

Every scenario that makes sense for both runs against the default folder tier 2
(DATA/tier2) and against S3 (a moto server, a unique bucket per test):

- produce far past the local retention: everything reaches tier 2, tier 1 keeps little, and
  three different clients read every record back exactly once from offset 0;
- removing every local log file after the upload: the data is served from tier 2 alone and
  new records continue the offsets densely;
- an S3 outage in the middle of a produce (S3 only, through a TCP proxy): the tier-1 budget
  fills up and Produce gets the retriable KAFKA_STORAGE_ERROR, reads of data only in tier 2
  fail with it too, metadata keeps working; after the outage uploads resume and every
  acknowledged record is there exactly once at its acknowledged offset;
- retention.ms and retention.bytes move the log start offset and delete chunk objects, and
  the new log start survives a SIGKILL;
- ListOffsets by timestamp finds records that are only in tier 2;
- a restart and a crash while S3 is down lose nothing; deleting a topic deletes its chunks.

The tests at the end pin bugs found while writing this file (timestamp lookups across the
log start and during an outage, the upload-lag figure after a restart); all are fixed.

The gateway's /tier JSON (--metrics-listen) is polled for upload progress; nothing here
depends on wall-clock timings beyond generous polling deadlines.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from conftest import Gateway
from support.client import (
    ERR_NONE,
    ERR_OFFSET_OUT_OF_RANGE,
    RawClient,
    Rec,
    api_versions_ok,
    build_record_batch,
    fetch_request,
    list_offsets_request,
    metadata_request,
    produce_request,
    wait_until,
)
from support.confluent import create_topic
from support.scaling import METRICS_ARGS, http

ERR_KAFKA_STORAGE_ERROR = 56
CHUNK_BYTES = 65536
# Small chunks, rolled quickly, trimmed from tier 1 as soon as they are in tier 2.
FAST_TIER_ARGS = (
    "--chunk-bytes",
    str(CHUNK_BYTES),
    "--chunk-age-ms",
    "200",
    "--local-retain-bytes",
    "0",
)
VALUE_BYTES = 1000
UPLOAD_TIMEOUT = 90.0


# --------------------------------------------------------------------------- fixtures


@dataclass
class Tier2:
    """Where the gateway under test keeps tier 2, and how to list its chunk objects."""

    kind: str  # "folder" or "s3"
    args: tuple[str, ...] = ()
    bucket: str = ""
    prefix: str = ""
    endpoint: str = ""

    def chunk_keys(self, data_dir: Path) -> list[str]:
        if self.kind == "folder":
            root = data_dir / "tier2"
            while True:
                try:
                    return sorted(
                        str(p.relative_to(root))
                        for p in root.rglob("*.chunk")
                        if not p.name.startswith(".")
                    )
                except FileNotFoundError:  # a deleted topic's folder went while listed
                    time.sleep(0.05)
        import boto3

        client = boto3.client("s3", endpoint_url=self.endpoint)
        keys: list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix + "/"
        ):
            keys.extend(item["Key"] for item in page.get("Contents", []))
        client.close()
        return sorted(k for k in keys if k.endswith(".chunk"))


def _s3_tier(endpoint: str, gateway_endpoint: str | None = None) -> Tier2:
    bucket = f"sg-tier2-{uuid.uuid4().hex[:12]}"
    prefix = "cluster-a"
    return Tier2(
        "s3",
        (
            "--tier2",
            f"s3://{bucket}/{prefix}",
            "--s3-endpoint",
            gateway_endpoint or endpoint,
        ),
        bucket,
        prefix,
        endpoint,
    )


@pytest.fixture(params=["folder", "s3"])
def tier2(request: pytest.FixtureRequest) -> Tier2:
    if request.param == "folder":
        return Tier2("folder")  # the default: DATA/tier2
    moto = request.getfixturevalue("moto_server")
    return _s3_tier(moto.endpoint)


def _marker_args(request: pytest.FixtureRequest) -> tuple[str, ...]:
    args: list[str] = []
    for marker in request.node.iter_markers("gateway_args"):
        args.extend(str(a) for a in marker.args)
    return tuple(args)


@pytest.fixture
def tgw(request: pytest.FixtureRequest, tmp_path: Path, tier2: Tier2) -> Iterator[Gateway]:
    """A gateway on the parametrized tier 2, with /tier served and the marker's arguments."""
    gw = Gateway(
        tmp_path / "data",
        tmp_path / "server.log",
        (*METRICS_ARGS, *tier2.args, *_marker_args(request)),
    )
    gw.start_fresh()
    yield gw
    gw.close()


# --------------------------------------------------------------------------- helpers


def tier_stats(gw: Gateway) -> dict[str, Any]:
    status, body = http(gw, "/tier")
    assert status == 200, body
    return body


def wait_all_uploaded(gw: Gateway, timeout: float = UPLOAD_TIMEOUT) -> dict[str, Any]:
    """Poll /tier until nothing is pending in tier 1 (every rolled file is in tier 2)."""

    def done() -> dict[str, Any] | None:
        stats = tier_stats(gw)
        if stats["tier1_pending_bytes"] == 0 and stats["chunks_uploaded"] > 0:
            return stats
        return None

    try:
        return wait_until(done, timeout=timeout, interval=0.1)
    except TimeoutError:
        raise AssertionError(f"tier 2 did not catch up: {tier_stats(gw)}") from None


def local_log_bytes(gw: Gateway) -> int:
    return sum(p.stat().st_size for p in (gw.data_dir / "streams").rglob("segment-*.log"))


def wait_local_trimmed(gw: Gateway) -> None:
    """Wait until no tier-1 file is left (with --local-retain-bytes 0). A file is removed in
    a worker thread just after its chunk is confirmed, so /tier can say "nothing pending"
    a moment before the file is gone."""
    try:
        wait_until(lambda: local_log_bytes(gw) == 0, timeout=UPLOAD_TIMEOUT, interval=0.1)
    except TimeoutError:
        raise AssertionError(f"{local_log_bytes(gw)} tier-1 bytes left") from None


def value_for(i: int, size: int = VALUE_BYTES) -> bytes:
    head = f"{i:08d}|".encode()
    return head + bytes((i * 7 + j) % 251 for j in range(size - len(head)))


Expected = dict[bytes, tuple[int, int, bytes]]  # key -> (partition, offset, value)


def produce(
    bootstrap: str,
    topic: str,
    records: list[tuple[bytes, bytes, int | None, int | None]],
    **conf: Any,
) -> Expected:
    """Produce (key, value, partition or None, timestamp ms or None) records, acks=all,
    and return what the delivery reports acknowledged. Every record must be delivered."""
    acked: Expected = {}
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked[msg.key()] = (msg.partition(), msg.offset(), msg.value())

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 60000,
            **conf,
        }
    )
    for key, value, partition, timestamp in records:
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        if timestamp is not None:
            kwargs["timestamp"] = timestamp
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0, "records still undelivered"
    assert not errors, errors[:5]
    assert len(acked) == len(records), "a key was produced twice or not acknowledged"
    return acked


def keyed(start: int, count: int, partition: int | None = None, timestamp: int | None = None):
    return [
        (f"k{i}".encode(), value_for(i), partition, timestamp) for i in range(start, start + count)
    ]


def check_exactly(rows: list[tuple[int, int, bytes, bytes]], expected: Expected) -> None:
    """`rows` of (partition, offset, key, value) are exactly the expected records, once."""
    seen: Expected = {}
    dups = []
    for partition, offset, key, value in rows:
        if key in seen:
            dups.append(key)
        seen[key] = (partition, offset, value)
    assert not dups, f"{len(dups)} records read twice, e.g. {dups[:3]}"
    missing = [k for k in expected if k not in seen]
    assert not missing, f"{len(missing)} of {len(expected)} records missing, e.g. {missing[:3]}"
    extra = [k for k in seen if k not in expected]
    assert not extra, f"{len(extra)} unexpected records, e.g. {extra[:3]}"
    wrong = [k for k in expected if seen[k] != expected[k]]
    assert not wrong, f"{len(wrong)} records differ, e.g. {wrong[0]!r}: {seen[wrong[0]][:2]}"


def ends_of(expected: Expected, partitions: int) -> dict[int, int]:
    ends = dict.fromkeys(range(partitions), 0)
    for partition, offset, _v in expected.values():
        ends[partition] = max(ends[partition], offset + 1)
    return ends


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tier2-watermarks"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)
            for p in range(partitions)
        }
    finally:
        consumer.close()


def confluent_read(
    bootstrap: str, topic: str, starts: dict[int, int], count: int, timeout: float = 60.0
) -> list[tuple[int, int, bytes, bytes]]:
    """`count` records from the given start offsets, then a short drain for extras."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"tier2-confluent-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.assign([TopicPartition(topic, p, off) for p, off in starts.items()])
    rows: list[tuple[int, int, bytes, bytes]] = []
    deadline = time.monotonic() + timeout
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is None:
                if len(rows) >= count:
                    quiet_until = quiet_until or time.monotonic() + 0.5
                    if time.monotonic() >= quiet_until:
                        break
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"consumer error: {msg.error()}")
            rows.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return rows


def kafka_python_read(
    bootstrap: str, topic: str, partitions: int, count: int, timeout: float = 60.0
) -> list[tuple[int, int, bytes, bytes]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        request_timeout_ms=30000,
        fetch_max_wait_ms=100,
    )
    try:
        tps = [KTopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        assert consumer.beginning_offsets(tps) == dict.fromkeys(tps, 0)
        for tp in tps:
            consumer.seek(tp, 0)
        rows: list[tuple[int, int, bytes, bytes]] = []
        deadline = time.monotonic() + timeout
        while len(rows) < count and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=200).items():
                rows.extend((tp.partition, r.offset, r.key, r.value) for r in records)
        for tp, records in consumer.poll(timeout_ms=500).items():  # nothing more
            rows.extend((tp.partition, r.offset, r.key, r.value) for r in records)
        return rows
    finally:
        consumer.close()


def aiokafka_read(
    bootstrap: str, topic: str, partitions: int, count: int, timeout: float = 60.0
) -> list[tuple[int, int, bytes, bytes]]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    async def main() -> list[tuple[int, int, bytes, bytes]]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="none",
            request_timeout_ms=30000,
            fetch_max_wait_ms=100,
        )
        await consumer.start()
        try:
            tps = [ATopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, 0)
            rows: list[tuple[int, int, bytes, bytes]] = []
            deadline = time.monotonic() + timeout
            while len(rows) < count and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=200)
                for tp, records in batch.items():
                    rows.extend((tp.partition, r.offset, r.key, r.value) for r in records)
            batch = await consumer.getmany(timeout_ms=500)
            for tp, records in batch.items():
                rows.extend((tp.partition, r.offset, r.key, r.value) for r in records)
            return rows
        finally:
            await consumer.stop()

    return asyncio.run(asyncio.wait_for(main(), timeout=timeout + 30))


def raw_fetch(bootstrap: str, topic: str, partition: int, offset: int) -> Any:
    with RawClient(bootstrap) as client:
        response = client.request(fetch_request(topic, partition, offset, max_wait_ms=0))
    return response.responses[0].partitions[0]


def raw_list_offset(bootstrap: str, topic: str, partition: int, timestamp: int) -> Any:
    with RawClient(bootstrap) as client:
        response = client.request(list_offsets_request(topic, partition, timestamp))
    return response.topics[0].partitions[0]


# --------------------------------------------------------------------------- 1. offload


@pytest.mark.gateway_args(*FAST_TIER_ARGS)
def test_produce_beyond_local_retention_reads_back_from_tier2(tgw, tier2, topic) -> None:
    partitions, count = 4, 3000  # ~3 MB of values, dozens of chunks of 64 KiB
    create_topic(tgw.bootstrap, topic, partitions)
    # Small producer batches: a flush appends whole requests, so files (and chunks) grow
    # past --chunk-bytes by up to one flush's worth before they roll.
    expected = produce(tgw.bootstrap, topic, keyed(0, count), **{"batch.size": 16384})
    produced_bytes = count * VALUE_BYTES
    ends = ends_of(expected, partitions)
    assert sum(ends.values()) == count and all(ends.values()), ends

    stats = wait_all_uploaded(tgw)
    assert stats["chunks_uploaded"] >= produced_bytes // (4 * CHUNK_BYTES), stats
    assert stats["bytes_uploaded"] >= produced_bytes, stats
    assert stats["upload_errors"] == 0 and not stats["outage"], stats
    assert stats["tier1_retained_bytes"] == 0, stats  # --local-retain-bytes 0
    local = local_log_bytes(tgw)
    assert local < produced_bytes // 10, f"tier 1 still holds {local} of {produced_bytes} bytes"
    chunks = tier2.chunk_keys(tgw.data_dir)
    assert len(chunks) == stats["chunks_uploaded"], (len(chunks), stats)

    marks = watermarks(tgw.bootstrap, topic, partitions)
    assert marks == {p: (0, ends[p]) for p in range(partitions)}

    rows = confluent_read(tgw.bootstrap, topic, dict.fromkeys(range(partitions), 0), count)
    check_exactly(rows, expected)
    check_exactly(kafka_python_read(tgw.bootstrap, topic, partitions, count), expected)
    check_exactly(aiokafka_read(tgw.bootstrap, topic, partitions, count), expected)

    after = tier_stats(tgw)
    assert after["cache_misses"] > 0 and after["bytes_fetched"] > 0, after
    assert after["read_errors"] == 0, after
    status, text = http(tgw, "/metrics")
    assert status == 200
    assert "streamgate_tier1_pending_bytes 0.0" in text
    uploaded = [line for line in text.splitlines() if line.startswith("streamgate_tier2_chunks_")]
    assert f"streamgate_tier2_chunks_uploaded_total {float(stats['chunks_uploaded'])}" in uploaded
    # Every acknowledged batch waited for a group commit: the histogram counted them.
    commits = re.search(r"^streamgate_wal_commit_seconds_count (\S+)$", text, re.M)
    assert commits is not None and float(commits.group(1)) > 0, text[-3000:]
    inf = re.search(r'^streamgate_wal_commit_seconds_bucket\{le="\+Inf"\} (\S+)$', text, re.M)
    assert inf is not None and inf.group(1) == commits.group(1)


# ------------------------------------------------------------- 2. local logs removed


@pytest.mark.gateway_args("--chunk-bytes", str(CHUNK_BYTES), "--chunk-age-ms", "200")
def test_local_logs_removed_after_upload_are_served_from_tier2(tgw, tier2, topic) -> None:
    partitions, count = 3, 1200
    create_topic(tgw.bootstrap, topic, partitions)
    expected = produce(tgw.bootstrap, topic, keyed(0, count))
    ends = ends_of(expected, partitions)
    wait_all_uploaded(tgw)  # pending 0: the last file rolled by age and is in tier 2 too
    assert local_log_bytes(tgw) > 0, "the default --local-retain-bytes keeps the files"

    assert tgw.stop() == 0
    removed = list((tgw.data_dir / "streams").rglob("segment-*.log"))
    assert removed
    for path in removed:
        path.unlink()
    tgw.start()

    assert watermarks(tgw.bootstrap, topic, partitions) == {
        p: (0, ends[p]) for p in range(partitions)
    }
    rows = confluent_read(tgw.bootstrap, topic, dict.fromkeys(range(partitions), 0), count)
    check_exactly(rows, expected)
    stats = tier_stats(tgw)
    assert stats["cache_misses"] > 0 and stats["bytes_fetched"] > 0, stats

    more = produce(tgw.bootstrap, topic, keyed(count, 600))
    for partition in range(partitions):
        offsets = sorted(off for p, off, _v in more.values() if p == partition)
        assert offsets == list(range(ends[partition], ends[partition] + len(offsets))), partition
    expected.update(more)
    ends = ends_of(expected, partitions)

    # The new records are in tier 1, the old ones only in tier 2; a crash loses neither.
    tgw.kill()
    tgw.start()
    assert watermarks(tgw.bootstrap, topic, partitions) == {
        p: (0, ends[p]) for p in range(partitions)
    }
    rows = confluent_read(tgw.bootstrap, topic, dict.fromkeys(range(partitions), 0), len(expected))
    check_exactly(rows, expected)


# --------------------------------------------------------------------- 3. S3 outage


FIRST_ACKED = 500


class BackgroundProducer(threading.Thread):
    """Produces keys k<start>.. (idempotent, acks=all) and flushes; records what was acked.
    `stop` ends it early (a failed test must not leave a producer behind)."""

    def __init__(self, bootstrap: str, topic: str, start: int, count: int) -> None:
        super().__init__(daemon=True)
        self.topic, self.start_at, self.count = topic, start, count
        self.acked: Expected = {}
        self.errors: list[str] = []
        self.produced = 0
        self.undelivered = -1
        self.stop = threading.Event()
        self.first_acked = threading.Event()
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 180000,
                "retry.backoff.ms": 50,
                "retry.backoff.max.ms": 500,
            }
        )

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked[msg.key()] = (msg.partition(), msg.offset(), msg.value())

    def run(self) -> None:
        """The first FIRST_ACKED records are flushed (`first_acked` is set then); the rest
        follow without waiting, about 5 MB/s, so plenty is still to come when S3 goes away."""
        for i, (key, value, _p, _t) in enumerate(keyed(self.start_at, self.count)):
            if i == FIRST_ACKED:
                self.producer.flush(60)
                self.first_acked.set()
            while not self.stop.is_set():
                try:
                    self.producer.produce(
                        self.topic, key=key, value=value, on_delivery=self._delivered
                    )
                    self.produced += 1
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.producer.poll(0.02 if i % 100 == 99 else 0)
        deadline = time.monotonic() + 150
        while len(self.producer) and not self.stop.is_set() and time.monotonic() < deadline:
            self.producer.flush(0.5)
        if self.stop.is_set():
            self.producer.purge()
            self.producer.flush(5)
        self.undelivered = len(self.producer)

    def finish(self, timeout: float) -> None:
        self.join(timeout)
        if self.is_alive():
            self.stop.set()
            self.join(30)


@pytest.fixture
def outage_gateway(
    request: pytest.FixtureRequest, tmp_path: Path, outage_proxy: Any, moto_server: Any
) -> Iterator[Gateway]:
    tier = _s3_tier(moto_server.endpoint, gateway_endpoint=outage_proxy.endpoint)
    gw = Gateway(
        tmp_path / "data",
        tmp_path / "server.log",
        (*METRICS_ARGS, *tier.args, *_marker_args(request)),
    )
    gw.start_fresh()
    yield gw
    gw.close()


BUDGET = 2 << 20
OUTAGE_ARGS = (*FAST_TIER_ARGS, "--tier1-budget-bytes", str(BUDGET))


def _wait_outage_noticed(gw: Gateway) -> dict[str, Any]:
    return wait_until(lambda: (s := tier_stats(gw))["outage"] and s, timeout=30, interval=0.1)


@pytest.mark.gateway_args(*OUTAGE_ARGS)
def test_s3_outage_mid_produce(outage_gateway, outage_proxy, topic) -> None:
    gw = outage_gateway
    partitions = 4
    create_topic(gw.bootstrap, topic, partitions)
    raw_topic = topic + "-raw"
    create_topic(gw.bootstrap, raw_topic, 1)

    # Before the outage: some records reach tier 2 and are trimmed from tier 1.
    first = produce(gw.bootstrap, topic, keyed(0, 400))
    wait_all_uploaded(gw)
    wait_local_trimmed(gw)
    assert min(off for p, off, _v in first.values() if p == 0) == 0

    background = BackgroundProducer(gw.bootstrap, topic, 400, 6000)  # ~6 MB, 3x the budget
    background.start()
    try:
        assert background.first_acked.wait(60)
        assert len(background.acked) == FIRST_ACKED
        outage_proxy.down()  # while the producer keeps going
        try:
            raw_acked = _check_during_outage(gw, topic, raw_topic, partitions, background)
        finally:
            outage_proxy.up()

        # (d) uploads resume, the producer gets everything acknowledged, nothing is lost.
        background.finish(180)
    finally:
        background.finish(0)
    assert background.undelivered == 0 and not background.errors, background.errors[:5]
    assert background.produced == 6000 and len(background.acked) == 6000
    stats = wait_all_uploaded(gw, timeout=120)
    assert stats["upload_errors"] > 0 and not stats["outage"], stats

    expected = {**first, **background.acked}
    ends = ends_of(expected, partitions)
    assert watermarks(gw.bootstrap, topic, partitions) == {
        p: (0, ends[p]) for p in range(partitions)
    }
    rows = confluent_read(gw.bootstrap, topic, dict.fromkeys(range(partitions), 0), len(expected))
    check_exactly(rows, expected)
    # The raw topic holds exactly what raw Produce requests got acknowledged, if any got in
    # before the budget was full.
    assert watermarks(gw.bootstrap, raw_topic, 1)[0] == (0, len(raw_acked))
    assert raw_acked == list(range(len(raw_acked)))


def _check_during_outage(
    gw: Gateway, topic: str, raw_topic: str, partitions: int, background: BackgroundProducer
) -> list[int]:
    """The checks while S3 is down; returns the offsets raw Produce requests got."""
    stats = _wait_outage_noticed(gw)
    assert stats["upload_errors"] > 0, stats

    # (a) the budget fills up: a raw Produce gets the retriable storage error.
    raw_acked: list[int] = []

    def produce_refused() -> Any:
        batch = build_record_batch([Rec(b"r", key=b"raw")])
        with RawClient(gw.bootstrap) as client:
            response = client.request(produce_request(raw_topic, 0, batch))
        part = response.responses[0].partition_responses[0]
        if part.error_code == ERR_NONE:
            raw_acked.append(part.base_offset)
            return None
        assert part.error_code == ERR_KAFKA_STORAGE_ERROR, part
        return part

    refused = wait_until(produce_refused, timeout=60, interval=0.1)
    assert "budget" in (refused.error_message or ""), refused
    stats = tier_stats(gw)
    assert stats["outage"] and stats["tier1_pending_bytes"] >= BUDGET, stats
    assert tier_stats(gw)["chunks_uploaded"] == stats["chunks_uploaded"]

    # (b) data only in tier 2 cannot be read while S3 is down...
    part = raw_fetch(gw.bootstrap, topic, 0, 0)
    assert part.error_code == ERR_KAFKA_STORAGE_ERROR, part
    assert tier_stats(gw)["read_errors"] > 0
    # ...while data still in tier 1 can: the last record acknowledged on partition 0.
    p0_last = max(off for p, off, _v in list(background.acked.values()) if p == 0)
    tail = raw_fetch(gw.bootstrap, topic, 0, p0_last)
    assert tail.error_code == ERR_NONE and tail.records, tail

    # (c) the gateway still answers ApiVersions, Metadata and ListOffsets.
    assert api_versions_ok(gw.bootstrap)
    with RawClient(gw.bootstrap) as client:
        meta = client.request(metadata_request([topic], auto_create=False))
    assert meta.topics[0].error_code == ERR_NONE
    assert len(meta.topics[0].partitions) == partitions
    earliest = raw_list_offset(gw.bootstrap, topic, 0, -2)
    assert (earliest.error_code, earliest.offset) == (ERR_NONE, 0)
    assert background.is_alive(), "the producer must still be waiting for its records"
    # Let the outage last through a few retries with growing backoff.
    wait_until(lambda: tier_stats(gw)["upload_errors"] >= 5, timeout=30, interval=0.2)
    return raw_acked


# ------------------------------------------------------------------------ 4. retention

RETENTION_ARGS = (*FAST_TIER_ARGS, "--retention-check-interval-ms", "200")


def _wait_objects(tier2: Tier2, gw: Gateway, count: int) -> list[str]:
    def settled() -> list[str] | None:
        keys = tier2.chunk_keys(gw.data_dir)
        return keys if len(keys) == count else None

    try:
        return wait_until(settled, timeout=30, interval=0.2)
    except TimeoutError:
        keys = tier2.chunk_keys(gw.data_dir)
        raise AssertionError(f"{len(keys)} chunk objects, expected {count}") from None


@pytest.mark.gateway_args(*RETENTION_ARGS)
def test_retention_ms_expires_old_slices_and_deletes_chunks(tgw, tier2, topic) -> None:
    partitions = 2
    create_topic(tgw.bootstrap, topic, partitions, {"retention.ms": "60000"})
    hour_ago = int(time.time() * 1000) - 3600_000
    old = produce(tgw.bootstrap, topic, keyed(0, 600, timestamp=hour_ago))
    old_ends = ends_of(old, partitions)
    wait_all_uploaded(tgw)  # the old records are in chunks of their own

    new = produce(tgw.bootstrap, topic, keyed(600, 300))
    ends = ends_of({**old, **new}, partitions)

    def expired() -> dict[int, tuple[int, int]] | None:
        marks = watermarks(tgw.bootstrap, topic, partitions)
        return marks if all(marks[p][0] > 0 for p in range(partitions)) else None

    marks = wait_until(expired, timeout=30, interval=0.2)
    # Every old slice is expired, no new one: the log start is where the new records begin.
    assert marks == {p: (old_ends[p], ends[p]) for p in range(partitions)}

    stats = wait_all_uploaded(tgw)
    assert stats["chunks_deleted"] > 0, stats
    keys = _wait_objects(tier2, tgw, stats["chunks_uploaded"] - stats["chunks_deleted"])
    assert keys

    starts = {p: old_ends[p] for p in range(partitions)}
    check_exactly(confluent_read(tgw.bootstrap, topic, starts, len(new)), new)
    for p in range(partitions):
        gone = raw_fetch(tgw.bootstrap, topic, p, 0)
        assert gone.error_code == ERR_OFFSET_OUT_OF_RANGE, gone
        assert gone.log_start_offset == old_ends[p]

    # The new log start is durable: a crash does not bring the old records back.
    tgw.kill()
    tgw.start()
    assert watermarks(tgw.bootstrap, topic, partitions) == marks
    assert raw_fetch(tgw.bootstrap, topic, 0, 0).error_code == ERR_OFFSET_OUT_OF_RANGE
    check_exactly(confluent_read(tgw.bootstrap, topic, starts, len(new)), new)
    assert len(tier2.chunk_keys(tgw.data_dir)) == len(keys)


@pytest.mark.gateway_args(*RETENTION_ARGS)
def test_retention_bytes_keeps_the_newest_bytes(tgw, tier2, topic) -> None:
    retention_bytes = 200_000
    create_topic(tgw.bootstrap, topic, 1, {"retention.bytes": str(retention_bytes)})
    expected: Expected = {}
    for start in range(0, 1000, 250):  # ~1 MB in several flushes: many chunks
        batch = keyed(start, 250, partition=0)
        expected.update(produce(tgw.bootstrap, topic, batch, **{"batch.size": 16384}))
    count = len(expected)
    by_offset = {off: (key, value) for key, (_p, off, value) in expected.items()}
    assert sorted(by_offset) == list(range(count))

    stats = wait_all_uploaded(tgw)

    def trimmed() -> tuple[int, int] | None:
        low, high = watermarks(tgw.bootstrap, topic, 1)[0]
        return (low, high) if low > 0 else None

    wait_until(trimmed, timeout=30, interval=0.2)
    time.sleep(1.0)  # a few more retention checks: the log start settles
    low, high = watermarks(tgw.bootstrap, topic, 1)[0]
    assert high == count and 0 < low < count
    kept = (high - low) * VALUE_BYTES
    assert kept >= retention_bytes * 0.9, f"kept only {high - low} records"
    assert kept <= retention_bytes + 3 * CHUNK_BYTES, f"kept {high - low} records"
    stats = tier_stats(tgw)
    assert stats["chunks_deleted"] > 0, stats
    _wait_objects(tier2, tgw, stats["chunks_uploaded"] - stats["chunks_deleted"])

    rows = confluent_read(tgw.bootstrap, topic, {0: low}, high - low)
    assert [off for _p, off, _k, _v in rows] == list(range(low, high))
    assert all(by_offset[off] == (key, value) for _p, off, key, value in rows)
    assert raw_fetch(tgw.bootstrap, topic, 0, low - 1).error_code == ERR_OFFSET_OUT_OF_RANGE

    tgw.kill()
    tgw.start()
    assert watermarks(tgw.bootstrap, topic, 1)[0] == (low, high)
    rows = confluent_read(tgw.bootstrap, topic, {0: low}, high - low)
    assert [off for _p, off, _k, _v in rows] == list(range(low, high))


# ---------------------------------------------------------------- 5. timestamp lookup


@pytest.mark.gateway_args(*FAST_TIER_ARGS)
def test_offsets_for_times_in_tier2(tgw, tier2, topic) -> None:
    partitions, per_partition = 2, 500
    create_topic(tgw.bootstrap, topic, partitions)
    base = int(time.time() * 1000) - 600_000
    step = 10

    def ts(partition: int, i: int) -> int:  # distinct, increasing timestamps per partition
        return base + partition * 3 + i * step

    records = [
        (f"p{p}-{i}".encode(), value_for(i), p, ts(p, i))
        for i in range(per_partition)
        for p in range(partitions)
    ]
    acked = produce(tgw.bootstrap, topic, records)
    offset_of: dict[tuple[int, int], int] = {}
    for p in range(partitions):
        for i in range(per_partition):
            partition, offset, _v = acked[f"p{p}-{i}".encode()]
            assert (partition, offset) == (p, i)
            offset_of[(p, ts(p, i))] = offset
    wait_all_uploaded(tgw)
    wait_local_trimmed(tgw)  # everything must be only in tier 2
    before = tier_stats(tgw)["cache_misses"]

    consumer = Consumer({"bootstrap.servers": tgw.bootstrap, "group.id": "tier2-times"})

    def lookup(queries: list[tuple[int, int]]) -> list[int]:
        """One ListOffsets per query: a request names each partition once."""
        offsets = []
        for p, t in queries:
            (found,) = consumer.offsets_for_times([TopicPartition(topic, p, t)], timeout=15)
            assert found.error is None, found
            offsets.append(found.offset)
        return offsets

    samples = [0, 1, 137, 250, 251, 499]
    for p in range(partitions):
        exact = [(p, ts(p, i)) for i in samples]
        assert lookup(exact) == [offset_of[q] for q in exact]
        between = [(p, ts(p, i) - step // 2) for i in samples[1:]]  # -> the next record
        assert lookup(between) == [offset_of[(p, ts(p, i))] for i in samples[1:]]
        assert lookup([(p, 0), (p, ts(p, per_partition))]) == [0, -1]
    consumer.close()
    assert tier_stats(tgw)["cache_misses"] > before, "the lookups must have read tier 2"

    # ListOffsets v7 timestamp -3: the record with the largest timestamp.
    for p in range(partitions):
        newest = raw_list_offset(tgw.bootstrap, topic, p, -3)
        assert newest.error_code == ERR_NONE
        assert (newest.offset, newest.timestamp) == (
            per_partition - 1,
            ts(p, per_partition - 1),
        )


# ------------------------------------------------------- restarts, deletes, known bugs


@pytest.mark.gateway_args(*FAST_TIER_ARGS)
def test_restart_and_crash_during_s3_outage(outage_gateway, outage_proxy, topic) -> None:
    """Tier-1 data not yet uploaded survives a restart and a SIGKILL while S3 is down,
    the gateway starts without S3, and uploads everything once S3 is back."""
    gw = outage_gateway
    create_topic(gw.bootstrap, topic, 2)
    first = produce(gw.bootstrap, topic, keyed(0, 300))
    wait_all_uploaded(gw)
    outage_proxy.down()
    try:
        second = produce(gw.bootstrap, topic, keyed(300, 300))
        _wait_outage_noticed(gw)
        assert gw.stop() == 0
        gw.start()
        assert tier_stats(gw)["tier1_pending_bytes"] > 0
        assert raw_fetch(gw.bootstrap, topic, 0, 0).error_code == ERR_KAFKA_STORAGE_ERROR
        third = produce(gw.bootstrap, topic, keyed(600, 100))
        gw.kill()
        gw.start()
        _wait_outage_noticed(gw)
    finally:
        outage_proxy.up()
    stats = wait_all_uploaded(gw)
    assert stats["upload_errors"] > 0, stats
    expected = {**first, **second, **third}
    wait_local_trimmed(gw)
    rows = confluent_read(gw.bootstrap, topic, {0: 0, 1: 0}, len(expected))
    check_exactly(rows, expected)


@pytest.mark.gateway_args(*FAST_TIER_ARGS)
def test_delete_topic_deletes_its_chunks(tgw, tier2, topic) -> None:
    create_topic(tgw.bootstrap, topic, 2)
    other = topic + "-kept"
    create_topic(tgw.bootstrap, other, 1)
    produce(tgw.bootstrap, topic, keyed(0, 600))
    kept = produce(tgw.bootstrap, other, keyed(0, 200))
    wait_all_uploaded(tgw)
    before = tier2.chunk_keys(tgw.data_dir)
    assert len(before) == tier_stats(tgw)["chunks_uploaded"]

    admin = AdminClient({"bootstrap.servers": tgw.bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=15)

    def topic_ids() -> set[str]:
        return {d.name for d in (tgw.data_dir / "streams").iterdir() if d.is_dir()}

    def only_others_left() -> list[str] | None:
        keys = tier2.chunk_keys(tgw.data_dir)
        owners = {k.split("/")[-3] for k in keys}
        return keys if len(topic_ids()) == 1 and owners == topic_ids() else None

    left = wait_until(only_others_left, timeout=30, interval=0.2)
    # The chunks still there are the other topic's: it reads back whole, from tier 2 alone.
    assert local_log_bytes(tgw) == 0
    check_exactly(confluent_read(tgw.bootstrap, other, {0: 0}, len(kept)), kept)
    tgw.restart()
    assert tier2.chunk_keys(tgw.data_dir) == left
    create_topic(tgw.bootstrap, topic, 2)
    assert watermarks(tgw.bootstrap, topic, 2) == {0: (0, 0), 1: (0, 0)}


@pytest.mark.gateway_args(*FAST_TIER_ARGS)
def test_timestamp_lookup_during_s3_outage_answers_storage_error(
    outage_gateway, outage_proxy, topic
) -> None:
    gw = outage_gateway
    create_topic(gw.bootstrap, topic, 1)
    now = int(time.time() * 1000)
    produce(gw.bootstrap, topic, keyed(0, 200, partition=0, timestamp=now))
    wait_all_uploaded(gw)
    wait_local_trimmed(gw)
    outage_proxy.down()
    try:
        with RawClient(gw.bootstrap) as client:
            response = client.request(list_offsets_request(topic, 0, now - 1000))
            part = response.topics[0].partitions[0]
            assert part.error_code == ERR_KAFKA_STORAGE_ERROR, part
            # ...and the connection is still usable.
            assert client.request(list_offsets_request(topic, 0, -1)).topics[0].partitions[0]
    finally:
        outage_proxy.up()


@pytest.mark.parametrize("tier2", ["folder"], indirect=True)
@pytest.mark.gateway_args(
    "--chunk-bytes",
    str(CHUNK_BYTES),
    "--chunk-age-ms",
    "200",
    "--retention-check-interval-ms",
    "200",
)
def test_timestamp_lookup_below_log_start_with_local_copy(tgw, tier2, topic) -> None:
    create_topic(tgw.bootstrap, topic, 1, {"retention.ms": "60000"})
    hour_ago = int(time.time() * 1000) - 3600_000
    produce(tgw.bootstrap, topic, keyed(0, 300, partition=0, timestamp=hour_ago))
    wait_all_uploaded(tgw)
    produce(tgw.bootstrap, topic, keyed(300, 100, partition=0))
    wait_until(lambda: watermarks(tgw.bootstrap, topic, 1)[0] == (300, 400), timeout=30)
    assert local_log_bytes(tgw) > 0  # the expired records are still in tier 1
    consumer = Consumer({"bootstrap.servers": tgw.bootstrap, "group.id": "tier2-times"})
    try:
        for t in (0, hour_ago):
            (found,) = consumer.offsets_for_times([TopicPartition(topic, 0, t)], timeout=15)
            assert found.offset == 300, (t, found)
    finally:
        consumer.close()


@pytest.mark.parametrize("tier2", ["folder"], indirect=True)
@pytest.mark.gateway_args(*FAST_TIER_ARGS)
def test_timestamp_lookup_after_mid_batch_delete_records(tgw, tier2, topic) -> None:
    create_topic(tgw.bootstrap, topic, 1)
    now = int(time.time() * 1000)
    for b in range(5):  # five batches of ten records, timestamps now + 100 * batch
        produce(tgw.bootstrap, topic, keyed(b * 10, 10, partition=0, timestamp=now + b * 100))
    wait_all_uploaded(tgw)
    wait_local_trimmed(tgw)
    admin = AdminClient({"bootstrap.servers": tgw.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 15)]).values():
        future.result(timeout=15)
    assert watermarks(tgw.bootstrap, topic, 1)[0] == (15, 50)
    consumer = Consumer({"bootstrap.servers": tgw.bootstrap, "group.id": "tier2-times"})
    try:
        for t in (0, now + 100):
            (found,) = consumer.offsets_for_times([TopicPartition(topic, 0, t)], timeout=15)
            assert found.offset == 15, (t, found)
    finally:
        consumer.close()


@pytest.mark.parametrize("tier2", ["folder"], indirect=True)
def test_upload_lag_of_files_replayed_after_a_crash(tgw, tier2, topic) -> None:
    create_topic(tgw.bootstrap, topic, 1)
    produce(tgw.bootstrap, topic, keyed(0, 100, partition=0))
    assert tier_stats(tgw)["tier1_pending_bytes"] > 0  # 5 s --chunk-age-ms: not rolled yet
    tgw.kill()
    tgw.start()
    stats = wait_all_uploaded(tgw)
    # A replayed file's first-write time is unknown: it adds no sample (None here), and
    # never a clock-offset figure. 10 minutes is a bound no honest lag can reach here.
    lag = stats["tier2_upload_lag_p99_seconds"]
    assert lag is None or lag < 600, stats


@pytest.mark.parametrize("tier2", ["folder"], indirect=True)
def test_max_timestamp_lookup_after_log_start_moved(tgw, tier2, topic) -> None:
    create_topic(tgw.bootstrap, topic, 1)
    now = int(time.time() * 1000)
    produce(tgw.bootstrap, topic, keyed(0, 10, partition=0, timestamp=now + 1000))
    produce(tgw.bootstrap, topic, keyed(10, 10, partition=0, timestamp=now + 500))
    admin = AdminClient({"bootstrap.servers": tgw.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 10)]).values():
        future.result(timeout=15)
    newest = raw_list_offset(tgw.bootstrap, topic, 0, -3)
    assert (newest.error_code, newest.offset, newest.timestamp) == (ERR_NONE, 10, now + 500)
