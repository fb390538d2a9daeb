"""confluent-kafka (librdkafka) cells."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupState,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from compat.matrix.clients.common import (
    LARGE_RECORDS,
    LARGE_VALUE_BYTES,
    broker_api_keys,
    expect_split,
    expect_values,
    in_order_per_partition,
    wait_for,
)
from compat.matrix.model import CellContext, ClientLacks, expect


def _producer(ctx: CellContext, **conf: Any) -> Producer:
    return Producer({"bootstrap.servers": ctx.bootstrap, "linger.ms": 5, **conf})


def _produce(
    ctx: CellContext,
    n: int,
    conf: dict[str, Any] | None = None,
    *,
    topic: str | None = None,
    partition: int | None = None,
    headers: bool = False,
    timestamp: int | None = None,
    start: int = 0,
    value_size: int = 0,
) -> list[tuple[int, int]]:
    p = _producer(ctx, **(conf or {}))
    acked: list[tuple[int, int]] = []
    errors: list[str] = []

    def report(err: Any, msg: Message) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked.append((msg.partition() or 0, msg.offset() or 0))

    for i in range(start, start + n):
        kwargs: dict[str, Any] = {"key": ctx.key(i), "on_delivery": report}
        value = ctx.value(i)
        if value_size:
            value = value + b"x" * (value_size - len(value))
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = [("h-index", str(i).encode()), ("h-const", b"compat")]
        if timestamp is not None:
            kwargs["timestamp"] = timestamp
        p.produce(topic or ctx.topic, value=value, **kwargs)
        p.poll(0)
    left = p.flush(ctx.timeout / 2)
    expect(left == 0, f"{left} records never acknowledged")
    expect(not errors, f"delivery errors: {errors[:3]}")
    expect(len(acked) == n, f"{len(acked)} of {n} acknowledged")
    return acked


def _consumer(ctx: CellContext, group: str | None = None, **conf: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": ctx.bootstrap,
            "group.id": group or f"{ctx.group}-r",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **conf,
        }
    )


def _read(
    ctx: CellContext,
    n: int,
    *,
    topic: str | None = None,
    partitions: int | None = None,
    offsets: dict[int, int] | None = None,
    conf: dict[str, Any] | None = None,
) -> list[Message]:
    c = _consumer(ctx, **(conf or {}))
    parts = partitions if partitions is not None else ctx.partitions
    try:
        if offsets is None:
            c.assign(
                [TopicPartition(topic or ctx.topic, p, OFFSET_BEGINNING) for p in range(parts)]
            )
        else:
            c.assign([TopicPartition(topic or ctx.topic, p, o) for p, o in offsets.items()])
        return _poll(c, n, ctx.timeout / 2)
    finally:
        c.close()


def _poll(c: Consumer, n: int, timeout: float) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        got.append(msg)
    return got


def _roundtrip(ctx: CellContext, conf: dict[str, Any]) -> str:
    _produce(ctx, ctx.records, conf)
    msgs = _read(ctx, ctx.records)
    expect_values(ctx, (m.value() for m in msgs), ctx.records)
    return f"{ctx.records} records"


def _codec(codec: str):  # type: ignore[no-untyped-def]
    return lambda ctx: _roundtrip(ctx, {"compression.type": codec, "acks": "all"})


def idempotence(ctx: CellContext) -> str:
    _produce(ctx, ctx.records, {"enable.idempotence": True})
    msgs = _read(ctx, ctx.records)
    expect_values(ctx, (m.value() for m in msgs), ctx.records)
    expect(in_order_per_partition((m.partition(), m.value()) for m in msgs), "out of order")
    return f"{ctx.records} records in order"


def keys_headers(ctx: CellContext) -> str:
    _produce(ctx, ctx.records, headers=True)
    msgs = _read(ctx, ctx.records)
    expect_values(ctx, (m.value() for m in msgs), ctx.records)
    for m in msgs:
        i = int((m.value() or b"").rsplit(b"-v", 1)[1])
        expect(m.key() == ctx.key(i), f"key {m.key()!r} for record {i}")
        expect(
            m.headers() == [("h-index", str(i).encode()), ("h-const", b"compat")],
            f"headers {m.headers()!r} for record {i}",
        )
    return f"{ctx.records} keys and header pairs"


def large_message(ctx: CellContext) -> str:
    _produce(ctx, LARGE_RECORDS, value_size=LARGE_VALUE_BYTES)
    msgs = _read(ctx, LARGE_RECORDS)
    expect(len(msgs) == LARGE_RECORDS, f"{len(msgs)} of {LARGE_RECORDS} read back")
    expect(all(len(m.value() or b"") == LARGE_VALUE_BYTES for m in msgs), "a value lost bytes")
    return f"{LARGE_RECORDS} x {LARGE_VALUE_BYTES} bytes"


def auto_create(ctx: CellContext) -> str:
    _produce(ctx, 3)
    msgs = _read(ctx, 3, partitions=_partition_count(ctx, ctx.topic))
    expect_values(ctx, (m.value() for m in msgs), 3)
    return "created on first produce"


def _partition_count(ctx: CellContext, topic: str) -> int:
    md = AdminClient({"bootstrap.servers": ctx.bootstrap}).list_topics(topic, timeout=10)
    t = md.topics[topic]
    if t.error is not None:
        raise KafkaException(t.error)
    return len(t.partitions)


def consume_assign(ctx: CellContext) -> str:
    _produce(ctx, ctx.records, partition=0)
    start = ctx.records // 2
    msgs = _read(ctx, ctx.records - start, offsets={0: start})
    expect(msgs and msgs[0].offset() == start, f"first offset {msgs[0].offset() if msgs else None}")
    expect_values(ctx, (m.value() for m in msgs), ctx.records, start)
    return f"partition 0 from offset {start}"


def consume_subscribe(ctx: CellContext) -> str:
    _produce(ctx, ctx.records)
    c = _consumer(ctx, ctx.group)
    try:
        c.subscribe([ctx.topic])
        msgs = _poll(c, ctx.records, ctx.timeout / 2)
    finally:
        c.close()
    expect_values(ctx, (m.value() for m in msgs), ctx.records)
    return f"{ctx.records} records via group {ctx.group}"


def list_offsets_time(ctx: CellContext) -> str:
    t0 = int(time.time() * 1000) - 60_000
    half = ctx.records // 2
    _produce(ctx, half, partition=0, timestamp=t0)
    _produce(ctx, ctx.records - half, partition=0, timestamp=t0 + 10_000, start=half)
    c = _consumer(ctx)
    try:
        got = c.offsets_for_times([TopicPartition(ctx.topic, 0, t0 + 5_000)], timeout=10)
        late = c.offsets_for_times([TopicPartition(ctx.topic, 0, t0 + 20_000)], timeout=10)
    finally:
        c.close()
    expect(got[0].offset == half, f"offset for t0+5s is {got[0].offset}, want {half}")
    expect(late[0].offset in (-1, ctx.records), f"offset after the last is {late[0].offset}")
    return f"t0+5s -> {half}"


def _group_split(
    ctx: CellContext, strategy: str, static: bool = False, protocol: str = "classic"
) -> str:
    conf: dict[str, Any] = {
        "partition.assignment.strategy": strategy,
        "session.timeout.ms": 30000,
        "heartbeat.interval.ms": 500,
    }
    if protocol == "consumer":  # the broker assigns with its server assignor `strategy`
        conf = {"group.protocol": "consumer", "group.remote.assignor": strategy}
    members: list[Consumer] = []
    for i in range(2):
        extra = {"group.instance.id": f"member-{i}"} if static else {}
        c = _consumer(ctx, ctx.group, **conf, **extra)
        c.subscribe([ctx.topic])
        members.append(c)
        if i == 0:
            wait_for(
                lambda: _assignment_of(members[0]), ctx.timeout / 3, "the first member's assignment"
            )

    def split() -> list[set[int]] | None:
        for m in members:
            m.poll(0.1)
        sets = [{tp.partition for tp in m.assignment()} for m in members]
        if all(sets) and not (sets[0] & sets[1]) and len(sets[0] | sets[1]) == ctx.partitions:
            return sets
        return None

    try:
        sets = wait_for(split, ctx.timeout / 2, "a complete, disjoint assignment")
        detail = expect_split(sets, ctx.partitions, strategy)
        if static:
            # member 0 closes (a static member does not leave) and comes back: same partitions
            members[0].close()
            c = _consumer(ctx, ctx.group, **conf, **{"group.instance.id": "member-0"})
            c.subscribe([ctx.topic])
            members[0] = c
            again = wait_for(split, ctx.timeout / 2, "the static member's assignment back")
            expect(again == sets, f"assignment changed: {sets} -> {again}")
            detail += "; rejoined with the same partitions"
        return detail
    finally:
        for m in members:
            with contextlib.suppress(RuntimeError):
                m.close()


def _assignment_of(c: Consumer) -> list[TopicPartition]:
    c.poll(0.1)  # the group protocol runs inside poll
    return list(c.assignment())


def committed_offsets(ctx: CellContext) -> str:
    _produce(ctx, ctx.records, partition=0)
    mid = ctx.records // 2
    c = _consumer(ctx, ctx.group)
    c.subscribe([ctx.topic])
    wait_for(lambda: (c.poll(0.1), c.assignment())[1], ctx.timeout / 3, "an assignment")
    c.commit(offsets=[TopicPartition(ctx.topic, 0, mid)], asynchronous=False)
    c.close()
    c = _consumer(ctx, ctx.group)
    try:
        committed = c.committed([TopicPartition(ctx.topic, 0)], timeout=10)
        expect(committed[0].offset == mid, f"committed {committed[0].offset}, want {mid}")
        c.subscribe([ctx.topic])
        msgs = _poll(c, ctx.records - mid, ctx.timeout / 2)
    finally:
        c.close()
    expect(msgs and msgs[0].offset() == mid, "did not resume at the committed offset")
    expect_values(ctx, (m.value() for m in msgs), ctx.records, mid)
    return f"resumed at {mid}"


def _admin(ctx: CellContext) -> AdminClient:
    return AdminClient({"bootstrap.servers": ctx.bootstrap})


def admin_topics(ctx: CellContext) -> str:
    a = _admin(ctx)
    a.create_topics([NewTopic(ctx.topic, 2, 1)])[ctx.topic].result(timeout=20)

    # Kafka's brokers learn of a new topic asynchronously: list again until it shows
    def listed() -> Any:
        md = a.list_topics(timeout=10)
        return md if ctx.topic in md.topics else None

    md = wait_for(listed, 10, "the created topic to be listed")
    expect(len(md.topics[ctx.topic].partitions) == 2, "wrong partition count")
    a.delete_topics([ctx.topic])[ctx.topic].result(timeout=20)
    wait_for(lambda: ctx.topic not in a.list_topics(timeout=10).topics, 20, "the topic to go")
    return "create, list, delete"


def admin_partitions(ctx: CellContext) -> str:
    a = _admin(ctx)
    a.create_partitions([NewPartitions(ctx.topic, 5)])[ctx.topic].result(timeout=20)
    wait_for(
        lambda: len(a.list_topics(ctx.topic, timeout=10).topics[ctx.topic].partitions) == 5,
        20,
        "5 partitions in metadata",
    )
    _produce(ctx, 2, partition=4)
    msgs = _read(ctx, 2, offsets={4: OFFSET_BEGINNING})
    expect_values(ctx, (m.value() for m in msgs), 2)
    return f"{ctx.partitions} -> 5, produced to the new partition 4"


def admin_configs(ctx: CellContext) -> str:
    a = _admin(ctx)
    res = ConfigResource(ConfigResource.Type.TOPIC, ctx.topic)
    before = a.describe_configs([res])[res].result(timeout=20)
    expect("retention.ms" in before, "retention.ms not described")
    op = ConfigEntry("retention.ms", "123456789", incremental_operation=AlterConfigOpType.SET)
    res2 = ConfigResource(ConfigResource.Type.TOPIC, ctx.topic, incremental_configs=[op])
    a.incremental_alter_configs([res2])[res2].result(timeout=20)
    # Kafka's brokers apply a config change asynchronously: describe again until it shows
    after: Any = {}

    def altered() -> bool:
        nonlocal after
        after = a.describe_configs([res])[res].result(timeout=20)
        return bool(after["retention.ms"].value == "123456789")

    with contextlib.suppress(AssertionError):
        wait_for(altered, 10, "the altered retention.ms")
    expect(after["retention.ms"].value == "123456789", f"retention.ms={after['retention.ms']}")
    return f"{len(before)} configs described; retention.ms altered"


def admin_groups(ctx: CellContext) -> str:
    a = _admin(ctx)
    c = _consumer(ctx, ctx.group)
    c.subscribe([ctx.topic])
    wait_for(lambda: (c.poll(0.1), c.assignment())[1], ctx.timeout / 3, "an assignment")
    c.commit(offsets=[TopicPartition(ctx.topic, 0, 0)], asynchronous=False)
    listed = a.list_consumer_groups().result(timeout=20)
    expect(ctx.group in {g.group_id for g in listed.valid}, "group not listed")
    desc = a.describe_consumer_groups([ctx.group])[ctx.group].result(timeout=20)
    expect(desc.state == ConsumerGroupState.STABLE, f"state {desc.state}")
    expect(len(desc.members) == 1, f"{len(desc.members)} members")
    c.close()
    a.delete_consumer_groups([ctx.group])[ctx.group].result(timeout=20)
    listed = a.list_consumer_groups().result(timeout=20)
    expect(ctx.group not in {g.group_id for g in listed.valid}, "deleted group still listed")
    return "list, describe (Stable, 1 member), delete"


def admin_records(ctx: CellContext) -> str:
    _produce(ctx, ctx.records, partition=0)
    mid = ctx.records // 2
    a = _admin(ctx)
    out = a.delete_records([TopicPartition(ctx.topic, 0, mid)])
    deleted = list(out.values())[0].result(timeout=20)
    expect(deleted.low_watermark == mid, f"low watermark {deleted.low_watermark}")
    c = _consumer(ctx)
    try:
        low, high = c.get_watermark_offsets(TopicPartition(ctx.topic, 0), timeout=10)
    finally:
        c.close()
    expect((low, high) == (mid, ctx.records), f"watermarks {(low, high)}")
    msgs = _read(ctx, ctx.records - mid, offsets={0: OFFSET_BEGINNING})
    expect_values(ctx, (m.value() for m in msgs), ctx.records, mid)
    return f"log start {mid}"


def many_partitions(ctx: CellContext) -> str:
    p = _producer(ctx)
    for part in range(ctx.partitions):
        p.produce(ctx.topic, value=ctx.value(part), partition=part)
    expect(p.flush(ctx.timeout / 2) == 0, "not all acknowledged")
    msgs = _read(ctx, ctx.partitions)
    expect_values(ctx, (m.value() for m in msgs), ctx.partitions)
    expect(
        all(m.value() == ctx.value(m.partition() or 0) for m in msgs), "record in wrong partition"
    )
    return f"{ctx.partitions} partitions"


def restart(ctx: CellContext) -> str:
    mid = ctx.records // 2
    if ctx.phase == "before":
        _produce(ctx, ctx.records, {"acks": "all"}, partition=0)
        c = _consumer(ctx, ctx.group)
        c.subscribe([ctx.topic])
        wait_for(lambda: (c.poll(0.1), c.assignment())[1], ctx.timeout / 3, "an assignment")
        c.commit(offsets=[TopicPartition(ctx.topic, 0, mid)], asynchronous=False)
        c.close()
        return f"{ctx.records} produced, {mid} committed"
    msgs = _read(ctx, ctx.records, offsets={0: OFFSET_BEGINNING})
    expect_values(ctx, (m.value() for m in msgs), ctx.records)
    c = _consumer(ctx, ctx.group)
    try:
        committed = c.committed([TopicPartition(ctx.topic, 0)], timeout=10)
    finally:
        c.close()
    expect(committed[0].offset == mid, f"committed {committed[0].offset}, want {mid}")
    return "records and commit intact"


def transactions(ctx: CellContext) -> str:
    p = _producer(ctx, **{"transactional.id": f"{ctx.topic}-tx"})
    p.init_transactions(min(20.0, ctx.timeout / 3))
    p.begin_transaction()
    for i in range(3):
        p.produce(ctx.topic, value=ctx.value(i), partition=0)
    p.commit_transaction(min(20.0, ctx.timeout / 3))
    msgs = _read(ctx, 3, offsets={0: OFFSET_BEGINNING}, conf={"isolation.level": "read_committed"})
    expect_values(ctx, (m.value() for m in msgs), 3)
    return "committed transaction read back"


def compacted_topic(ctx: CellContext) -> str:
    a = _admin(ctx)
    a.create_topics([NewTopic(ctx.topic, 1, 1, config={"cleanup.policy": "compact"})])[
        ctx.topic
    ].result(timeout=20)
    _produce(ctx, ctx.records)
    msgs = _read(ctx, ctx.records, partitions=1)
    expect_values(ctx, (m.value() for m in msgs), ctx.records)
    return "compacted topic created and read back"


def topic_ids(ctx: CellContext) -> str:
    from confluent_kafka import TopicCollection

    a = _admin(ctx)  # kept referenced: a collected client cancels its futures
    desc = a.describe_topics(TopicCollection([ctx.topic]))[ctx.topic].result(timeout=20)
    expect(
        desc.topic_id is not None and str(desc.topic_id) != "AAAAAAAAAAAAAAAAAAAAAA",
        f"topic id {desc.topic_id}",
    )
    return f"topic id {desc.topic_id}"


def oversize_refused(ctx: CellContext) -> str:
    a = _admin(ctx)
    a.create_topics([NewTopic(ctx.topic, 1, 1, config={"max.message.bytes": "10000"})])[
        ctx.topic
    ].result(timeout=20)
    try:
        _produce(ctx, 1, value_size=20_000, conf={"message.max.bytes": 100_000})
    except AssertionError as exc:
        expect("too large" in str(exc).lower(), f"refused, but with: {exc}")
        return f"refused: {str(exc)[:80]}"
    raise AssertionError("a 20000-byte record was accepted by a max.message.bytes=10000 topic")


def share_group(ctx: CellContext) -> str:
    """Two explicit-mode share consumers: every record accepted once overall; one record
    released first comes back with delivery count 2."""
    import confluent_kafka

    if not hasattr(confluent_kafka, "ShareConsumer"):
        raise ClientLacks("this confluent-kafka has no ShareConsumer")
    if 76 not in broker_api_keys(ctx.bootstrap):  # ShareGroupHeartbeat
        raise ClientLacks("the broker serves no share groups (Kafka 4.1+)")
    from confluent_kafka import AcknowledgeType, ShareConsumer

    consumers = []
    for _ in range(2):
        c = ShareConsumer(
            {
                "bootstrap.servers": ctx.bootstrap,
                "group.id": ctx.group,
                "share.acknowledgement.mode": "explicit",
            }
        )
        c.subscribe([ctx.topic])
        consumers.append(c)
    try:
        for c in consumers:  # join (and start from here: share.auto.offset.reset=latest)
            c.poll(1.0)
        _produce(ctx, ctx.records, partition=0)
        accepted: list[bytes | None] = []
        released_again = False
        first_release: bytes | None = None
        deadline = time.monotonic() + ctx.timeout / 2
        while len(accepted) < ctx.records and time.monotonic() < deadline:
            for c in consumers:
                batch = [m for m in c.poll(0.3) if m.error() is None]
                for m in batch:
                    if first_release is None:
                        first_release = m.value()
                        c.acknowledge(m, AcknowledgeType.RELEASE)
                        continue
                    if m.value() == first_release:
                        released_again = m.delivery_count() == 2
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                    accepted.append(m.value())
                if batch:
                    c.commit_sync(15)
        expect_values(ctx, accepted, ctx.records)
        expect(released_again, "the released record did not come back at delivery 2")
    finally:
        for c in consumers:
            c.close()
    return f"{ctx.records} records accepted once by 2 share consumers, a release redelivered"


CELLS = {
    "produce-gzip": _codec("gzip"),
    "produce-snappy": _codec("snappy"),
    "produce-lz4": _codec("lz4"),
    "produce-zstd": _codec("zstd"),
    "produce-acks0": lambda ctx: _roundtrip(ctx, {"acks": 0}),
    "produce-acks1": lambda ctx: _roundtrip(ctx, {"acks": 1}),
    "idempotence": idempotence,
    "keys-headers": keys_headers,
    "large-message": large_message,
    "auto-create": auto_create,
    "consume-assign": consume_assign,
    "consume-subscribe": consume_subscribe,
    "list-offsets-time": list_offsets_time,
    "group-range": lambda ctx: _group_split(ctx, "range"),
    "group-roundrobin": lambda ctx: _group_split(ctx, "roundrobin"),
    "group-coop-sticky": lambda ctx: _group_split(ctx, "cooperative-sticky"),
    "static-members": lambda ctx: _group_split(ctx, "range", static=True),
    "group-consumer-protocol": lambda ctx: _group_split(ctx, "uniform", protocol="consumer"),
    "committed-offsets": committed_offsets,
    "admin-topics": admin_topics,
    "admin-partitions": admin_partitions,
    "admin-configs": admin_configs,
    "admin-groups": admin_groups,
    "admin-records": admin_records,
    "many-partitions": many_partitions,
    "compacted-topic": compacted_topic,
    "topic-ids": topic_ids,
    "oversize-refused": oversize_refused,
    "restart": restart,
    "transactions": transactions,
    "share-group": share_group,
}
