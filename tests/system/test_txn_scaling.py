"""A transaction stays atomic while its stream scales: a split and a merge of the segment
holding an open transaction's data, and CreatePartitions during it (the new partition
joins the transaction), neither lose nor expose partial results."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions
from support.client import unique_topic, wait_until
from support.scaling import METRICS_ARGS, open_segments, scale
from support.txn import confluent_values, create_topic, txn_producer


def _produce(producer, topic: str, tag: str, partitions: range) -> list[bytes]:
    values = [f"{tag}-{p}-{i}".encode() for p in partitions for i in range(5)]
    for value in values:
        producer.produce(topic, value=value, partition=int(value.split(b"-")[1]))
    producer.flush(30)
    return values


def _scale_and_grow(gateway, producer, topic: str, tag: str, grow_to: int) -> list[bytes]:
    """Write into an open transaction across a split, a merge and CreatePartitions."""
    written = _produce(producer, topic, f"{tag}a", range(4))
    (segment,) = open_segments(gateway, topic)
    scale(gateway, topic, {"split": segment["segment_id"], "parts": 2})
    assert len(open_segments(gateway, topic)) == 2
    written += _produce(producer, topic, f"{tag}b", range(4))
    # Nothing of the open transaction is visible meanwhile.
    assert confluent_values(gateway.bootstrap, topic, "read_committed", 0, timeout=4) == []
    scale(gateway, topic, {"merge": [s["segment_id"] for s in open_segments(gateway, topic)]})
    assert len(open_segments(gateway, topic)) == 1
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_partitions([NewPartitions(topic, grow_to)])[topic].result(timeout=30)
    wait_until(
        lambda: len(producer.list_topics(topic, timeout=10).topics[topic].partitions) == grow_to
    )
    written += _produce(producer, topic, f"{tag}c", range(grow_to))
    return written


@pytest.mark.gateway_args(*METRICS_ARGS)
def test_split_merge_and_new_partitions_during_transactions(gateway) -> None:
    topic = unique_topic("txnscale")
    create_topic(gateway.bootstrap, topic, partitions=4)
    producer = txn_producer(gateway.bootstrap, unique_topic("scale-id"))

    producer.begin_transaction()
    committed = _scale_and_grow(gateway, producer, topic, "keep", grow_to=5)
    producer.commit_transaction(30)
    seen = confluent_values(gateway.bootstrap, topic, "read_committed", len(committed))
    assert sorted(seen) == sorted(committed)

    producer.begin_transaction()
    aborted = _scale_and_grow(gateway, producer, topic, "drop", grow_to=6)
    producer.abort_transaction(30)
    seen = confluent_values(gateway.bootstrap, topic, "read_committed", len(committed))
    assert sorted(seen) == sorted(committed)
    everything = confluent_values(
        gateway.bootstrap, topic, "read_uncommitted", len(committed) + len(aborted)
    )
    assert sorted(everything) == sorted(committed + aborted)
