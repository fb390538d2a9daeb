"""Kafka transactions with real clients against a real gateway: confluent-kafka's
transactional API in a consume-transform-produce loop (exactly once, end to end),
read_committed vs read_uncommitted consumers of confluent-kafka, kafka-python and
aiokafka, kafka-python's transactional producer, zombie fencing, a timeout abort,
OffsetFetch require_stable and ListOffsets read_committed, and Kafka's own
`kafka-transactions.sh`."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from support.client import unique_topic, wait_until
from support.txn import (
    aiokafka_values,
    confluent_values,
    create_topic,
    kafka_python_values,
    produce_txn,
    txn_producer,
)

from harness import kafka as kafka_harness


def _committed_then_aborted(bootstrap: str, topic: str) -> tuple[list[bytes], list[bytes]]:
    producer = txn_producer(bootstrap, unique_topic("txid"))
    committed = [b"c1-%d" % i for i in range(20)]
    aborted = [b"ab-%d" % i for i in range(20)]
    later = [b"c2-%d" % i for i in range(10)]
    produce_txn(producer, topic, committed, commit=True)
    produce_txn(producer, topic, aborted, commit=False)
    produce_txn(producer, topic, later, commit=True)
    return committed + later, aborted


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_aborted_data_invisible_to_read_committed(shared_gateway, client: str) -> None:
    topic = unique_topic("txnvis")
    bootstrap = shared_gateway.bootstrap
    create_topic(bootstrap, topic)
    committed, aborted = _committed_then_aborted(bootstrap, topic)
    read = {
        "confluent": confluent_values,
        "kafka-python": kafka_python_values,
        "aiokafka": aiokafka_values,
    }[client]
    seen = read(bootstrap, topic, "read_committed", len(committed))
    assert sorted(seen) == sorted(committed)
    everything = read(bootstrap, topic, "read_uncommitted", len(committed) + len(aborted))
    assert sorted(everything) == sorted(committed + aborted)


def test_consume_transform_produce_exactly_once(shared_gateway) -> None:
    """Input records are transformed into an output topic by a transactional loop that
    commits its consumer offsets with send_offsets_to_transaction; every third batch is
    aborted (and reprocessed from the committed offsets). The output, read_committed,
    holds every input exactly once, and the group's offsets are at the end."""
    bootstrap = shared_gateway.bootstrap
    source, sink, group = unique_topic("src"), unique_topic("sink"), unique_topic("eos")
    create_topic(bootstrap, source)
    create_topic(bootstrap, sink)
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    count = 300
    for i in range(count):
        plain.produce(source, key=b"%d" % i, value=b"in-%d" % i)
    plain.flush(30)

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    producer = txn_producer(bootstrap, unique_topic("eos-tx"))
    consumer.subscribe([source])
    processed = 0
    batches = 0
    deadline = time.monotonic() + 120
    try:
        while processed < count and time.monotonic() < deadline:
            msgs = consumer.consume(25, 1.0)
            msgs = [m for m in msgs if not m.error()]
            if not msgs:
                continue
            producer.begin_transaction()
            for m in msgs:
                producer.produce(sink, key=m.key(), value=m.value().replace(b"in-", b"out-"))
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
            )
            batches += 1
            if batches % 3 == 0:
                # Sent first: librdkafka's abort purges what is still lingering, and with a
                # fast gateway send_offsets can return within linger.ms.
                producer.flush(30)
                producer.abort_transaction(30)
                # Rewind to the last committed offsets: the batch is processed again.
                committed = consumer.committed(consumer.assignment(), 30)
                for tp in committed:
                    consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
                continue
            producer.commit_transaction(30)
            processed += len(msgs)
        assert processed == count
        final = consumer.committed(consumer.assignment(), 30)
    finally:
        consumer.close()
    assert sum(tp.offset for tp in final) == count
    out = confluent_values(bootstrap, sink, "read_committed", count)
    assert Counter(out) == Counter(b"out-%d" % i for i in range(count))
    dirty = confluent_values(bootstrap, sink, "read_uncommitted", count + 25)
    assert len(dirty) > count  # the aborted batches are there, only hidden


def test_kafka_python_transactional_producer(shared_gateway) -> None:
    from kafka import KafkaProducer

    bootstrap = shared_gateway.bootstrap
    topic = unique_topic("kp-txn")
    create_topic(bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique_topic("kp"))
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(10):
        producer.send(topic, value=b"keep-%d" % i)
    producer.commit_transaction()
    producer.begin_transaction()
    for i in range(10):
        producer.send(topic, value=b"drop-%d" % i)
    producer.flush()
    producer.abort_transaction()
    producer.close()
    seen = kafka_python_values(bootstrap, topic, "read_committed", 10)
    assert sorted(seen) == sorted(b"keep-%d" % i for i in range(10))
    assert len(confluent_values(bootstrap, topic, "read_uncommitted", 20)) == 20


def test_zombie_producer_is_fenced(shared_gateway) -> None:
    bootstrap = shared_gateway.bootstrap
    topic = unique_topic("zombie")
    create_topic(bootstrap, topic)
    txn_id = unique_topic("zid")
    zombie = txn_producer(bootstrap, txn_id)
    zombie.begin_transaction()
    for i in range(5):
        zombie.produce(topic, value=b"zombie-%d" % i)
    zombie.flush(30)
    successor = txn_producer(bootstrap, txn_id)  # bumps the epoch, aborts the zombie's
    produce_txn(successor, topic, [b"new-%d" % i for i in range(5)], commit=True)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal() or "fenc" in error.str().lower(), error
    seen = confluent_values(bootstrap, topic, "read_committed", 5)
    assert sorted(seen) == sorted(b"new-%d" % i for i in range(5))


def test_transaction_timeout_aborts(shared_gateway) -> None:
    bootstrap = shared_gateway.bootstrap
    topic = unique_topic("ttl")
    create_topic(bootstrap, topic, partitions=1)
    producer = txn_producer(bootstrap, unique_topic("ttl-id"), **{"transaction.timeout.ms": 2000})
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=b"late-%d" % i, partition=0)
    producer.flush(30)
    # The open transaction holds the last stable offset at its first record...
    assert _lso(bootstrap, topic) == 0
    # ...until the coordinator aborts it: the abort marker (offset 5) releases it.
    wait_until(lambda: _lso(bootstrap, topic) == 6, timeout=30, interval=0.5)
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)
    assert confluent_values(bootstrap, topic, "read_committed", 0, timeout=5) == []


def _lso(bootstrap: str, topic: str) -> int:
    """ListOffsets latest with isolation_level=1, through kafka-python's admin-free path."""
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition as KpTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    try:
        tp = KpTopicPartition(topic, 0)
        return int(consumer.end_offsets([tp])[tp])
    finally:
        consumer.close()


def test_require_stable_offset_fetch_sees_pending_commit(shared_gateway) -> None:
    """Offsets sent to an open transaction are not visible (a require_stable fetch waits
    for the transaction: librdkafka retries UNSTABLE_OFFSET_COMMIT), then become the
    group's committed offsets when it commits."""
    bootstrap = shared_gateway.bootstrap
    topic, group = unique_topic("stable"), unique_topic("stable-g")
    create_topic(bootstrap, topic, partitions=1)
    producer = txn_producer(bootstrap, unique_topic("stable-id"))
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        producer.begin_transaction()
        producer.produce(topic, value=b"x", partition=0)
        producer.send_offsets_to_transaction(
            [TopicPartition(topic, 0, 42)], consumer.consumer_group_metadata(), 30
        )
        plain = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        try:
            before = plain.committed([TopicPartition(topic, 0)], timeout=3)
            assert before[0].offset < 0  # nothing committed yet
        except KafkaException as exc:  # librdkafka may time out retrying UNSTABLE
            assert "UNSTABLE" in str(exc) or "Timed out" in str(exc)
        finally:
            plain.close()
        producer.commit_transaction(30)
        after = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert after[0].offset == 42
    finally:
        consumer.close()


def test_kafka_transactions_tool_lists_and_describes(shared_gateway) -> None:
    reason = kafka_harness.unavailable_reason()
    if reason:
        pytest.skip(reason)
    bootstrap = shared_gateway.bootstrap
    topic = unique_topic("tool")
    create_topic(bootstrap, topic)
    txn_id = unique_topic("tool-id")
    producer = txn_producer(bootstrap, txn_id)
    producer.begin_transaction()
    producer.produce(topic, value=b"open", partition=1)
    producer.flush(30)
    try:
        listed = kafka_harness.run_tool(
            "kafka-transactions.sh", ["--bootstrap-server", bootstrap, "list"]
        )
        assert listed.returncode == 0, listed.stderr
        line = next(line for line in listed.stdout.splitlines() if txn_id in line)
        assert "Ongoing" in line
        described = kafka_harness.run_tool(
            "kafka-transactions.sh",
            ["--bootstrap-server", bootstrap, "describe", "--transactional-id", txn_id],
        )
        assert described.returncode == 0, described.stderr
        assert "Ongoing" in described.stdout and f"{topic}-1" in described.stdout
    finally:
        producer.commit_transaction(30)
    described = kafka_harness.run_tool(
        "kafka-transactions.sh",
        ["--bootstrap-server", bootstrap, "describe", "--transactional-id", txn_id],
    )
    assert "CompleteCommit" in described.stdout, described.stdout + described.stderr


def test_java_console_consumer_read_committed(shared_gateway) -> None:
    """The Java consumer (Kafka's tools, and Spark's connector) drops aborted data too."""
    reason = kafka_harness.unavailable_reason()
    if reason:
        pytest.skip(reason)
    bootstrap = shared_gateway.bootstrap
    topic = unique_topic("javatxn")
    create_topic(bootstrap, topic)
    committed, aborted = _committed_then_aborted(bootstrap, topic)
    seen = {}
    for isolation in ("read_committed", "read_uncommitted"):
        out = kafka_harness.run_tool(
            "kafka-console-consumer.sh",
            [
                "--bootstrap-server",
                bootstrap,
                "--topic",
                topic,
                "--from-beginning",
                "--isolation-level",
                isolation,
                "--timeout-ms",
                "8000",
            ],
        )
        seen[isolation] = sorted(line.encode() for line in out.stdout.splitlines() if line)
    assert seen["read_committed"] == sorted(committed)
    assert seen["read_uncommitted"] == sorted(committed + aborted)
