"""MirrorMaker 2 (Kafka 3.5.1) from Apache Kafka into a real gateway, and a group switch.

Apache Kafka (cluster alias `kafka`) and streamgate (alias `streamgate`); MM2 mirrors with
the default replication policy, so Kafka's `orders` becomes `kafka.orders` on streamgate,
same partitions and offsets. A consumer group reads part of `orders` on Kafka and commits;
MM2's checkpoint connector translates its offsets and, with `sync.group.offsets.enabled`,
commits them into the same group on streamgate; the group then switches to streamgate and
reads on from there. Nothing may be lost; records read twice are counted, and may only be
the ones between the translated offset and the committed one (MM2 translates to an offset
at or before the group's position: at-least-once).

Skipped, with the reason, when ../shared/kafka or Java 17 is missing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from support.client import wait_until

from harness.connect import MirrorMaker, log_problems
from harness.gateway import Gateway
from harness.kafka import KafkaBroker, unavailable_reason

pytestmark = pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"MirrorMaker 2: {unavailable_reason()}"
)

TOPIC = "orders"
# the identity policy keeps topic names (the default one would mirror into "kafka.orders"),
# so producers and consumers switch clusters without renaming anything
IDENTITY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
MIRRORED = TOPIC
LAGGING, CAUGHT_UP = "billing", "audit"
PARTITIONS = 3
BEFORE, TOTAL = 1200, 1800  # records produced before MM2 starts, and in all
CONSUMED_ON_KAFKA = 700
# MM2 records an offset sync (source offset -> mirror offset) every this many records; a
# group's offset translates to the last sync at or before it, so a group at the end of the
# topic rewinds by at most this per partition. 0 (a sync per record) is exact for such a
# group, but MM2 3.5 then keeps too few old syncs to translate a lagging group at all, and
# an untranslated group would start over from auto.offset.reset on the new cluster.
OFFSET_LAG_MAX = 10


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(tmp_path_factory.mktemp("mm2-kafka"))
    broker.start()
    yield broker
    broker.close()


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    base = tmp_path_factory.mktemp("mm2-gateway")
    gateway = Gateway(base / "data", base / "server.log", default_partitions=3)
    gateway.start_fresh()
    yield gateway
    gateway.close()


def produce(bootstrap: str, start: int, stop: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(start, stop):
        producer.produce(
            TOPIC,
            key=f"customer-{i % 37}",
            value=f"order-{i:05d}",
            headers=[("seq", str(i).encode())],
        )
    assert producer.flush(30) == 0


def end_offsets(bootstrap: str, topic: str) -> list[int] | None:
    """The topic's high watermarks; None while it does not exist."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets-probe"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(PARTITIONS)
        ]
    except KafkaException:
        return None
    finally:
        consumer.close()


def group_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets on `topic` (partitions without one left out)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = [ConsumerGroupTopicPartitions(group)]
    result = admin.list_consumer_group_offsets(request)[group].result(timeout=10)
    return {
        tp.partition: tp.offset
        for tp in result.topic_partitions
        if tp.topic == topic and tp.offset >= 0
    }


def read_all(
    bootstrap: str,
    group: str,
    topic: str,
    expect: int | None = None,
    limit: int | None = None,
    idle_s: float = 5.0,
) -> list[tuple[int, int, str, str]]:
    """Consume in `group` until `limit` records, or `expect` and then `idle_s` of silence;
    commit and leave. (partition, offset, key with the `seq` header, value) of every
    record read."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
        }
    )
    consumer.subscribe([topic])
    seen: list[tuple[int, int, str, str]] = []
    last = time.monotonic()
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            if limit is not None and len(seen) >= limit:
                break
            if expect is not None and len(seen) >= expect and time.monotonic() - last > idle_s:
                break
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            last = time.monotonic()
            seq = dict(msg.headers() or []).get("seq", b"-").decode()
            key = f"{msg.key().decode()} seq={seq}"
            seen.append((msg.partition(), msg.offset(), key, msg.value().decode()))
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return seen


def wait_translated(
    bootstrap: str,
    group: str,
    committed: dict[int, int],
    max_rewind: int | None = None,
    timeout: float = 60.0,
) -> dict[int, int]:
    """The group's offsets on streamgate once MM2 has synced one for every partition it
    committed on Kafka (each within `max_rewind` of Kafka's, when given: later checkpoints
    translate closer as MM2's offset syncs arrive)."""

    last: dict[int, int] = {}

    def synced() -> dict[int, int] | None:
        nonlocal last
        last = group_offsets(bootstrap, group, MIRRORED)
        if set(last) != set(committed):
            return None
        if max_rewind is not None and any(committed[p] - last[p] > max_rewind for p in last):
            return None
        return last

    try:
        result: dict[int, int] = wait_until(synced, timeout=timeout, interval=1.0)
    except TimeoutError:
        why = f"{group}: committed {committed} on Kafka, {last} on streamgate"
        raise AssertionError(why) from None
    return result


def switch(
    bootstrap: str,
    group: str,
    on_kafka: list[tuple[int, int, str, str]],
    committed: dict[int, int],
    translated: dict[int, int],
    total: int,
) -> int:
    """Run `group` on streamgate to the end; check nothing is lost and only the records
    between the translated and the committed offsets are read again. Their count."""
    on_streamgate = read_all(bootstrap, group, MIRRORED, expect=total - sum(translated.values()))
    values_kafka = {value for _p, _o, _k, value in on_kafka}
    values_sg = [value for _p, _o, _k, value in on_streamgate]
    assert values_kafka | set(values_sg) == {f"order-{i:05d}" for i in range(total)}, (
        f"{group}: records lost in the switch"
    )
    assert len(values_sg) == len(set(values_sg)), f"{group}: a record read twice on streamgate"
    duplicates = values_kafka & set(values_sg)
    print(
        f"{group}: {len(on_kafka)} read on Kafka, {len(values_sg)} on streamgate, "
        f"{len(duplicates)} read twice; committed {committed}, translated {translated}"
    )
    # translated offsets never skip ahead; what is read twice is exactly what they rewind
    for partition, offset in translated.items():
        assert 0 <= offset <= committed[partition], (group, partition, offset, committed)
    assert len(duplicates) == sum(committed[p] - translated.get(p, 0) for p in committed)
    twice = {(p, o) for p, o, _k, v in on_streamgate if v in duplicates}
    assert all(translated.get(p, 0) <= o < committed[p] for p, o in twice)
    return len(duplicates)


def test_migrate_topic_and_groups(kafka: KafkaBroker, gw: Gateway, tmp_path: Path) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    new = NewTopic(TOPIC, PARTITIONS, 1, config={"retention.ms": "604800000"})
    admin.create_topics([new])[TOPIC].result(timeout=30)
    produce(kafka.bootstrap, 0, BEFORE)
    # a group far behind the producers
    lagging = read_all(kafka.bootstrap, LAGGING, TOPIC, limit=CONSUMED_ON_KAFKA)
    lagging_committed = group_offsets(kafka.bootstrap, LAGGING, TOPIC)
    assert sum(lagging_committed.values()) == len(lagging) == CONSUMED_ON_KAFKA

    mm2 = MirrorMaker(
        tmp_path / "mm2",
        {"kafka": kafka.bootstrap, "streamgate": gw.bootstrap},
        source="kafka",
        target="streamgate",
        topics=TOPIC,
        groups=f"{LAGGING}|{CAUGHT_UP}",
        overrides={"replication.policy.class": IDENTITY, "offset.lag.max": str(OFFSET_LAG_MAX)},
    )
    mm2.start()
    try:
        produce(kafka.bootstrap, BEFORE, TOTAL)  # traffic while mirroring
        # the cut-over: producers have stopped on Kafka; this group reads to the end there
        caught_up = read_all(kafka.bootstrap, CAUGHT_UP, TOPIC, expect=TOTAL, idle_s=2.0)
        caught_up_committed = group_offsets(kafka.bootstrap, CAUGHT_UP, TOPIC)
        source_ends = end_offsets(kafka.bootstrap, TOPIC)
        assert sum(caught_up_committed.values()) == TOTAL == sum(source_ends or [])
        wait_until(
            lambda: end_offsets(gw.bootstrap, MIRRORED) == source_ends, timeout=90, interval=1.0
        )
        # checkpoints: MM2 commits translated offsets into the idle groups on streamgate
        # a group at the end of the topic rewinds by at most OFFSET_LAG_MAX per partition
        try:
            caught_up_translated = wait_translated(
                gw.bootstrap, CAUGHT_UP, caught_up_committed, max_rewind=OFFSET_LAG_MAX
            )
        except AssertionError as exc:
            # MM2 3.5.1 may never emit the offset sync for a partition's last records once
            # the producers stop, so a checkpoint can stay further back; `switch` still
            # checks that the translation never skips ahead and that nothing is lost
            print(f"MM2 translated the caught-up group further back than usual: {exc}")
            caught_up_translated = wait_translated(
                gw.bootstrap, CAUGHT_UP, caught_up_committed, timeout=30
            )
        # a group far behind: MM2 3.5.1 keeps few old offset syncs and sometimes has none at
        # or before its offsets, so it translates nothing; the group then starts over from
        # auto.offset.reset=earliest on streamgate (more read twice, still nothing lost)
        try:
            wait_translated(gw.bootstrap, LAGGING, lagging_committed, timeout=30)
            time.sleep(3)  # a later checkpoint may translate closer; take the settled value
        except AssertionError as exc:
            print(f"MM2 did not translate every offset of the lagging group: {exc}")
        lagging_translated = group_offsets(gw.bootstrap, LAGGING, MIRRORED)
        # (MM2 logs ERRORs when it stops, from tasks still running as it closes its admin
        # clients: collected before that)
        errors = [line for line in mm2.log_text().splitlines() if "] ERROR " in line]
        # MM2 created the topic with the source's partitions and synced its configs
        gw_admin = AdminClient({"bootstrap.servers": gw.bootstrap})
        resource = ConfigResource(ConfigResource.Type.TOPIC, MIRRORED)
        config = gw_admin.describe_configs([resource])[resource].result(timeout=10)
        assert config["retention.ms"].value == "604800000"
    finally:
        mm2.close()
    # A later checkpoint may have moved the group on since it was first seen translated: the
    # switch starts from what is committed once MM2 has stopped.
    caught_up_translated = group_offsets(gw.bootstrap, CAUGHT_UP, MIRRORED)
    assert errors == []

    # the mirror holds the same records (keys, headers, values), in the same partitions at
    # the same offsets
    mirrored = read_all(gw.bootstrap, "verify-mirror", MIRRORED, expect=TOTAL, idle_s=2.0)
    source = read_all(kafka.bootstrap, "verify-source", TOPIC, expect=TOTAL, idle_s=2.0)
    assert len(source) == TOTAL
    assert all(key.endswith(f" seq={int(value[6:])}") for _p, _o, key, value in source)
    assert sorted(mirrored) == sorted(source)

    # the switch: both groups read on from streamgate
    switch(gw.bootstrap, CAUGHT_UP, caught_up, caught_up_committed, caught_up_translated, TOTAL)
    switch(gw.bootstrap, LAGGING, lagging, lagging_committed, lagging_translated, TOTAL)
    assert log_problems(gw.log_text()) == [], "the gateway logged warnings or errors"
