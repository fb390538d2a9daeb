"""SIGKILL under load while tier 2 is busy: every acknowledged record is there exactly once.

Like test_crash_recovery.py, but the gateway cuts tiny chunks (32 KiB or 100 ms) and trims
every uploaded file at once (`--local-retain-bytes 0`), so the kills land while files are
being rolled, uploaded, committed to SQLite and trimmed, and the final read comes (almost)
entirely from tier 2. One test uses the folder tier 2, one S3 on a moto server: 20 kill
cycles in all. The moment of each kill comes from a fixed-seed RNG.

After the last restart the test waits until nothing is pending for tier 2, then checks:
every acknowledged record at its acknowledged offset exactly once, dense offsets, the same
partition read with a second client library (kafka-python), no Traceback or failed upload in
the gateway log, and the chunk objects (and every chunk the metadata knows) in tier 2.
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import Gateway
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from support.crash import check_exactly_once, read_from_start

from harness.moto import MotoServer
from harness.producers import surviving_producer

PARTITIONS = 8
FOLDER_CYCLES = 14
S3_CYCLES = 6
TIER_ARGS = (
    "--chunk-bytes",
    "32768",
    "--chunk-age-ms",
    "100",
    "--local-retain-bytes",
    "0",
    "--metrics-listen",
    "127.0.0.1:0",
)
# ~100-byte values: a 32 KiB chunk holds a few hundred records, so chunks roll by size too.
PAD = "." * 90
# Records waiting in the producer (unacknowledged) before produce_for holds back.
MAX_QUEUED = 50_000
# Log lines that mean something went wrong beyond a torn tail (which a SIGKILL may leave).
BAD_LOG_PATTERNS = ("Traceback", "upload failed")


# --------------------------------------------------------------------------- gateway


def _admin_url(gateway: Gateway) -> str:
    """The admin endpoint of the gateway's current run (port 0: read from its log)."""
    ports = re.findall(r"admin/metrics HTTP on 127\.0\.0\.1:(\d+)", gateway.log_text())
    assert ports, "gateway started without --metrics-listen"
    return f"http://127.0.0.1:{ports[-1]}"


def _tier(gateway: Gateway) -> dict:
    with urllib.request.urlopen(_admin_url(gateway) + "/tier", timeout=10) as response:
        return json.loads(response.read())


def _wait_tier2_caught_up(gateway: Gateway, timeout: float = 90.0) -> dict:
    """Wait until every tier-1 byte is confirmed in tier 2; returns the last /tier."""
    deadline = time.monotonic() + timeout
    while True:
        tier = _tier(gateway)
        if tier["tier1_pending_bytes"] == 0:
            return tier
        assert time.monotonic() < deadline, f"tier 2 did not catch up: {tier}"
        time.sleep(0.1)


@pytest.fixture
def s3_gateway(moto_server: MotoServer, tmp_path: Path) -> Iterator[Gateway]:
    """A gateway whose tier 2 is a fresh bucket on the session's moto server (the AWS
    variables the moto_server fixture sets are inherited by the subprocess)."""
    bucket = f"tier2-crash-{uuid.uuid4().hex[:12]}"
    gw = Gateway(
        tmp_path / "data",
        tmp_path / "server.log",
        (*TIER_ARGS, "--tier2", f"s3://{bucket}/p", "--s3-endpoint", moto_server.endpoint),
    )
    gw.bucket = bucket  # type: ignore[attr-defined]
    gw.start_fresh()
    yield gw
    gw.close()


# --------------------------------------------------------------------------- produce


def _produce_while_killing(
    gateway: Gateway,
    topic: str,
    cycles: int,
    seed: int,
    uptime: tuple[float, float],
    burst: int,
) -> tuple[dict[str, tuple[int, int]], set[str], list[dict]]:
    """Produce `burst` records every 5 ms while killing the gateway `cycles` times, each
    after a random `uptime` range of seconds under load (a quarter almost at once instead).
    Returns (acked value -> (partition, offset), every value sent, /tier before each kill)."""
    rng = random.Random(seed)
    before_kills: list[dict] = []
    acked: dict[str, tuple[int, int]] = {}
    failed: list[str] = []
    client_errors: list[str] = []
    lock = threading.Lock()

    def on_delivery(err, msg) -> None:
        with lock:
            if err is None:
                acked[msg.value().decode()] = (msg.partition(), msg.offset())
            else:
                failed.append(f"{msg.value().decode()[:12]}: {err}")

    def on_error(err) -> None:
        if err.fatal():
            client_errors.append(str(err))

    producer = Producer(surviving_producer(gateway.bootstrap, error_cb=on_error))
    sent: set[str] = set()
    counter = 0

    def produce_for(seconds: float) -> None:
        nonlocal counter
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if len(producer) > MAX_QUEUED:  # the gateway is slow or down: don't pile up
                producer.poll(0.05)
                continue
            for _ in range(burst):
                value = f"{counter}{PAD}"
                try:
                    producer.produce(
                        topic, key=f"k{counter % 97}", value=value, on_delivery=on_delivery
                    )
                except BufferError:  # the local queue is full while the gateway is down
                    producer.poll(0.05)
                    break
                sent.add(value)
                counter += 1
            producer.poll(0.005)

    for cycle in range(cycles):
        # Mostly a while under load (the uploads are behind, files roll), sometimes right
        # after the restart (while the replayed files are still being uploaded).
        if rng.random() < 0.25:
            produce_for(rng.uniform(0.0, 0.15))
        else:
            produce_for(rng.uniform(*uptime))
        tier = _tier(gateway)
        before_kills.append(tier)
        gateway.kill()
        with lock:
            acked_so_far = len(acked)
        print(
            f"cycle {cycle + 1}/{cycles}: sent {counter}, acked {acked_so_far}, at the kill "
            f"{tier['tier1_pending_bytes']} bytes pending, {tier['chunks_uploaded']} chunks "
            "uploaded by that process"
        )
        producer.poll(rng.uniform(0.0, 0.3))
        gateway.start()
    produce_for(0.3)  # the last restart must serve a little load as well
    producer.flush(120)
    assert len(producer) == 0, "every record must be delivered or failed by now"
    assert not client_errors, f"fatal producer errors: {client_errors[:5]}"
    assert not failed, f"{len(failed)} deliveries failed, e.g. {failed[:5]}"
    return acked, sent, before_kills


# --------------------------------------------------------------------------- check


def _consume_partition_kafka_python(bootstrap: str, topic: str, partition: int, count: int):
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        group_id=None,
        consumer_timeout_ms=1000,
    )
    tp = KafkaTopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    items: list[tuple[int, str]] = []
    deadline = time.monotonic() + 90
    try:
        while len(items) < count:
            assert time.monotonic() < deadline, f"kafka-python read {len(items)} of {count}"
            for msgs in consumer.poll(timeout_ms=500).values():
                items.extend((m.offset, m.value.decode()) for m in msgs)
    finally:
        consumer.close()
    return items


def _check_log(gateway: Gateway) -> None:
    bad = [
        line
        for line in gateway.log_text().splitlines()
        if any(pattern in line for pattern in BAD_LOG_PATTERNS)
    ]
    assert not bad, "gateway log has errors:\n" + "\n".join(bad[:20])


def _metadata_chunk_keys(gateway: Gateway) -> list[str]:
    db = sqlite3.connect(f"file:{gateway.data_dir / 'metadata.db'}?mode=ro", uri=True)
    try:
        return [row[0] for row in db.execute("SELECT object_key FROM chunks")]
    finally:
        db.close()


def _local_log_bytes(gateway: Gateway) -> int:
    return sum(p.stat().st_size for p in (gateway.data_dir / "streams").rglob("*.log"))


def _run_kill_loop(
    gateway: Gateway, cycles: int, seed: int, uptime: tuple[float, float], burst: int
) -> None:
    topic = f"tier2-crash-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(10)

    acked, sent, before_kills = _produce_while_killing(gateway, topic, cycles, seed, uptime, burst)
    assert len(acked) > 2000
    assert len(gateway.exit_codes) == cycles
    # The kills must have hit a busy tier 2: chunks confirmed during the loop, and files
    # still waiting for their upload when the gateway died.
    assert sum(t["chunks_uploaded"] for t in before_kills) > 0, before_kills
    assert any(t["tier1_pending_bytes"] > 0 for t in before_kills), before_kills

    started = time.monotonic()
    tier = _wait_tier2_caught_up(gateway)
    print(f"tier 2 caught up after {time.monotonic() - started:.1f} s: {tier}")
    assert tier["upload_errors"] == 0, tier
    assert tier["tier1_retained_bytes"] == 0, tier
    records = read_from_start(gateway.bootstrap, topic, PARTITIONS)
    check_exactly_once(records, acked, sent)

    print(f"read {sum(map(len, records.values()))} records in {time.monotonic() - started:.1f} s")
    partition = max(records, key=lambda p: len(records[p]))
    other = _consume_partition_kafka_python(
        gateway.bootstrap, topic, partition, len(records[partition])
    )
    assert other == records[partition], "kafka-python read something else than confluent-kafka"

    # Everything was uploaded and immediately trimmed: the reads above came from tier 2.
    assert _local_log_bytes(gateway) == 0
    _check_log(gateway)


# --------------------------------------------------------------------------- tests


@pytest.mark.gateway_args(*TIER_ARGS)
def test_sigkill_during_folder_uploads_loses_nothing(gateway: Gateway) -> None:
    _run_kill_loop(gateway, FOLDER_CYCLES, seed=20240611, uptime=(0.2, 1.0), burst=100)
    tier2 = gateway.data_dir / "tier2"
    # Names starting with "." are the folder store's temporary files (of PUTs a kill
    # interrupted, they stay behind): not objects.
    objects = {
        p.relative_to(tier2).as_posix()
        for p in tier2.rglob("*.chunk")
        if not p.name.startswith(".")
    }
    assert objects, "no chunk objects in the tier-2 folder"
    missing = [k for k in _metadata_chunk_keys(gateway) if k not in objects]
    assert not missing, f"chunks recorded in metadata but not in tier 2: {missing[:5]}"


def test_sigkill_during_s3_uploads_loses_nothing(
    s3_gateway: Gateway, moto_server: MotoServer
) -> None:
    # The first PUT of a process takes a while (boto3 warming up): stay up longer. Fewer
    # records: the final read does one GET to moto per chunk slice.
    _run_kill_loop(s3_gateway, S3_CYCLES, seed=20240612, uptime=(0.8, 2.0), burst=20)
    client = boto3.client("s3", endpoint_url=moto_server.endpoint, region_name="us-east-1")
    objects: set[str] = set()
    for page in client.get_paginator("list_objects_v2").paginate(
        Bucket=s3_gateway.bucket, Prefix="p/"
    ):
        objects.update(item["Key"][len("p/") :] for item in page.get("Contents", []))
    assert any(k.endswith(".chunk") for k in objects), "no chunk objects in the bucket"
    missing = [k for k in _metadata_chunk_keys(s3_gateway) if k not in objects]
    assert not missing, f"chunks recorded in metadata but not in tier 2: {missing[:5]}"
