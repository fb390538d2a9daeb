"""Aborted transactions stay hidden when their data lives in tier 2 only: the
aborted-transactions index is kept in SQLite when the abort marker is durable, so a
restart (which replays only what is still in tier 1) still tells read_committed clients
what to drop."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from support.client import unique_topic
from support.scaling import METRICS_ARGS
from support.txn import confluent_values, create_topic, produce_txn, txn_producer

FAST_TIER_ARGS = ("--chunk-bytes", "4096", "--chunk-age-ms", "200", "--local-retain-bytes", "0")


def _in_tier1(gateway, needle: bytes) -> bool:
    files = (gateway.data_dir / "streams").rglob("segment-*.log")
    return any(needle in path.read_bytes() for path in files)


@pytest.mark.gateway_args(*METRICS_ARGS, *FAST_TIER_ARGS)
def test_aborted_transactions_in_tier2_stay_hidden_after_restart(gateway) -> None:
    topic = unique_topic("txntier")
    create_topic(gateway.bootstrap, topic, partitions=2)
    producer = txn_producer(gateway.bootstrap, unique_topic("tier-id"))
    pad = b"x" * 500
    keep = [b"keep-%d-" % i + pad for i in range(20)]
    drop = [b"drop-%d-" % i + pad for i in range(20)]
    produce_txn(producer, topic, keep[:10], commit=True)
    produce_txn(producer, topic, drop, commit=False)
    produce_txn(producer, topic, keep[10:], commit=True)
    # Non-transactional filler after the roll age, so the files above roll and upload.
    filler = Producer({"bootstrap.servers": gateway.bootstrap})
    produced = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.3)
        filler.produce(topic, value=b"filler-%d" % produced)
        filler.flush(10)
        produced += 1
        if produced >= 5 and not _in_tier1(gateway, b"drop-"):
            break
    assert not _in_tier1(gateway, b"drop-"), "the aborted data is still in tier 1"
    gateway.stop()
    gateway.start()
    expected = sorted(keep) + sorted(b"filler-%d" % i for i in range(produced))
    seen = confluent_values(gateway.bootstrap, topic, "read_committed", len(expected))
    assert sorted(seen) == sorted(expected)
    everything = confluent_values(
        gateway.bootstrap, topic, "read_uncommitted", len(expected) + len(drop)
    )
    assert sorted(everything) == sorted(expected + drop)


@pytest.mark.gateway_args(*METRICS_ARGS, *FAST_TIER_ARGS)
def test_open_transaction_trimmed_from_tier1_aborts_after_sigkill(gateway) -> None:
    """An open transaction's first batches reach tier 2 and leave tier 1, then SIGKILL:
    after the restart the partition still knows the transaction is open (the last stable
    offset stays at its first offset), and when a new InitProducerId fences and aborts it,
    read_committed readers never see its records."""
    topic = unique_topic("txnopen")
    create_topic(gateway.bootstrap, topic, partitions=2)
    txn_id = unique_topic("open-id")
    producer = txn_producer(gateway.bootstrap, txn_id)
    pad = b"x" * 500
    keep = [b"keep-%d-" % i + pad for i in range(10)]
    doomed = [b"doomed-%d-" % i + pad for i in range(20)]
    produce_txn(producer, topic, keep, commit=True)
    producer.begin_transaction()
    for value in doomed:
        producer.produce(topic, value=value, key=value)
    assert producer.flush(30) == 0
    # Non-transactional filler so the files holding the open transaction roll, upload and
    # are trimmed (--local-retain-bytes 0).
    filler = Producer({"bootstrap.servers": gateway.bootstrap})
    produced = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.3)
        for p in range(2):
            filler.produce(topic, value=b"filler-%d" % produced, partition=p)
            produced += 1
        filler.flush(10)
        if produced >= 10 and not _in_tier1(gateway, b"doomed-"):
            break
    assert not _in_tier1(gateway, b"doomed-"), "the open transaction is still in tier 1"
    gateway.kill()  # SIGKILL
    gateway.start()
    fillers = [b"filler-%d" % i for i in range(produced)]
    # Still open: read_committed stops at its first offset in each partition, before any
    # filler (all of it was written after the transaction began).
    seen = confluent_values(gateway.bootstrap, topic, "read_committed", len(keep), timeout=10)
    assert sorted(seen) == sorted(keep)
    # A new InitProducerId with the same transactional id aborts the open transaction.
    txn_producer(gateway.bootstrap, txn_id)
    expected = sorted(keep + fillers)
    seen = confluent_values(gateway.bootstrap, topic, "read_committed", len(expected))
    assert sorted(seen) == expected
    everything = confluent_values(
        gateway.bootstrap, topic, "read_uncommitted", len(expected) + len(doomed)
    )
    assert sorted(everything) == sorted(expected + doomed)
