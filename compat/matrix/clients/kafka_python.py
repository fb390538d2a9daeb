"""kafka-python cells."""

from __future__ import annotations

import time
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.structs import OffsetAndMetadata

from compat.matrix.clients.common import (
    LARGE_RECORDS,
    LARGE_VALUE_BYTES,
    expect_split,
    expect_values,
    in_order_per_partition,
    wait_for,
)
from compat.matrix.model import CellContext, expect


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
    p = KafkaProducer(
        bootstrap_servers=ctx.bootstrap,
        linger_ms=5,
        max_request_size=2 * 1024 * 1024,
        **(conf or {}),
    )
    try:
        futures = []
        for i in range(start, start + n):
            value = ctx.value(i)
            if value_size:
                value = value + b"x" * (value_size - len(value))
            futures.append(
                p.send(
                    topic or ctx.topic,
                    value=value,
                    key=ctx.key(i),
                    partition=partition,
                    timestamp_ms=timestamp,
                    headers=[("h-index", str(i).encode()), ("h-const", b"compat")]
                    if headers
                    else None,
                )
            )
        p.flush(timeout=ctx.timeout / 2)
        metas = [f.get(timeout=ctx.timeout / 2) for f in futures]
    finally:
        p.close(timeout=5)
    return [(m.partition, m.offset) for m in metas]


def _consumer(ctx: CellContext, group: str | None = None, **conf: Any) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=ctx.bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **conf,
    )


def _poll(c: KafkaConsumer, n: int, timeout: float) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        for records in c.poll(timeout_ms=200).values():
            got.extend(records)
    return got


def _read(
    ctx: CellContext,
    n: int,
    *,
    partitions: int | None = None,
    offsets: dict[int, int | None] | None = None,
    **conf: Any,
) -> list[Any]:
    c = _consumer(ctx, **conf)
    try:
        parts = partitions if partitions is not None else ctx.partitions
        wanted = offsets if offsets is not None else {p: None for p in range(parts)}
        tps = {p: TopicPartition(ctx.topic, p) for p in wanted}
        c.assign(list(tps.values()))
        for p, off in wanted.items():
            if off is None:
                c.seek_to_beginning(tps[p])
            else:
                c.seek(tps[p], off)
        return _poll(c, n, ctx.timeout / 2)
    finally:
        c.close()


def _roundtrip(ctx: CellContext, conf: dict[str, Any]) -> str:
    _produce(ctx, ctx.records, conf)
    expect_values(ctx, (r.value for r in _read(ctx, ctx.records)), ctx.records)
    return f"{ctx.records} records"


def _codec(codec: str):  # type: ignore[no-untyped-def]
    return lambda ctx: _roundtrip(ctx, {"compression_type": codec, "acks": "all"})


def idempotence(ctx: CellContext) -> str:
    _produce(ctx, ctx.records, {"enable_idempotence": True, "acks": "all"})
    recs = _read(ctx, ctx.records)
    expect_values(ctx, (r.value for r in recs), ctx.records)
    expect(in_order_per_partition((r.partition, r.value) for r in recs), "out of order")
    return f"{ctx.records} records in order"


def keys_headers(ctx: CellContext) -> str:
    _produce(ctx, ctx.records, headers=True)
    recs = _read(ctx, ctx.records)
    expect_values(ctx, (r.value for r in recs), ctx.records)
    for r in recs:
        i = int(r.value.rsplit(b"-v", 1)[1])
        expect(r.key == ctx.key(i), f"key {r.key!r} for record {i}")
        expect(
            list(r.headers) == [("h-index", str(i).encode()), ("h-const", b"compat")],
            f"headers {r.headers!r}",
        )
    return f"{ctx.records} keys and header pairs"


def large_message(ctx: CellContext) -> str:
    _produce(ctx, LARGE_RECORDS, value_size=LARGE_VALUE_BYTES)
    recs = _read(ctx, LARGE_RECORDS)
    expect(len(recs) == LARGE_RECORDS, f"{len(recs)} of {LARGE_RECORDS} read back")
    expect(all(len(r.value) == LARGE_VALUE_BYTES for r in recs), "a value lost bytes")
    return f"{LARGE_RECORDS} x {LARGE_VALUE_BYTES} bytes"


def auto_create(ctx: CellContext) -> str:
    _produce(ctx, 3)
    c = _consumer(ctx)
    try:
        parts = c.partitions_for_topic(ctx.topic) or set()
    finally:
        c.close()
    expect(parts, "topic has no partitions")
    expect_values(ctx, (r.value for r in _read(ctx, 3, partitions=len(parts))), 3)
    return "created on first produce"


def consume_assign(ctx: CellContext) -> str:
    _produce(ctx, ctx.records, partition=0)
    start = ctx.records // 2
    recs = _read(ctx, ctx.records - start, offsets={0: start})
    expect(recs and recs[0].offset == start, "did not start at the sought offset")
    expect_values(ctx, (r.value for r in recs), ctx.records, start)
    return f"partition 0 from offset {start}"


def consume_subscribe(ctx: CellContext) -> str:
    _produce(ctx, ctx.records)
    c = _consumer(ctx, ctx.group)
    try:
        c.subscribe([ctx.topic])
        recs = _poll(c, ctx.records, ctx.timeout / 2)
    finally:
        c.close()
    expect_values(ctx, (r.value for r in recs), ctx.records)
    return f"{ctx.records} records via group {ctx.group}"


def list_offsets_time(ctx: CellContext) -> str:
    t0 = int(time.time() * 1000) - 60_000
    half = ctx.records // 2
    _produce(ctx, half, partition=0, timestamp=t0)
    _produce(ctx, ctx.records - half, partition=0, timestamp=t0 + 10_000, start=half)
    c = _consumer(ctx)
    try:
        tp = TopicPartition(ctx.topic, 0)
        got = c.offsets_for_times({tp: t0 + 5_000})[tp]
        late = c.offsets_for_times({tp: t0 + 20_000})[tp]
    finally:
        c.close()
    expect(got is not None and got.offset == half, f"offset for t0+5s is {got}, want {half}")
    expect(late is None, f"offset after the last record is {late}")
    return f"t0+5s -> {half}"


def _assigned(c: KafkaConsumer) -> set[int]:
    c.poll(timeout_ms=300)
    return {tp.partition for tp in c.assignment()}


def _group_split(ctx: CellContext, assignor: Any, static: bool = False) -> str:
    conf: dict[str, Any] = {
        "partition_assignment_strategy": (assignor,),
        "session_timeout_ms": 30000,
        "heartbeat_interval_ms": 500,
    }
    members: list[KafkaConsumer] = []

    def member(i: int) -> KafkaConsumer:
        extra = {"group_instance_id": f"member-{i}"} if static else {}
        c = _consumer(ctx, ctx.group, **conf, **extra)
        c.subscribe([ctx.topic])
        return c

    def split() -> list[set[int]] | None:
        sets = [_assigned(m) for m in members]
        if all(sets) and not (sets[0] & sets[1]) and len(sets[0] | sets[1]) == ctx.partitions:
            return sets
        return None

    try:
        members.append(member(0))
        wait_for(lambda: _assigned(members[0]), ctx.timeout / 2, "the first assignment")
        members.append(member(1))
        sets = wait_for(split, ctx.timeout / 2, "a complete, disjoint assignment")
        detail = expect_split(sets, ctx.partitions, assignor.name)
        if static:
            members[0].close()
            members[0] = member(0)
            again = wait_for(split, ctx.timeout / 2, "the static member's assignment back")
            expect(again == sets, f"assignment changed: {sets} -> {again}")
            detail += "; rejoined with the same partitions"
        return detail
    finally:
        for m in members:
            m.close()


def _commit_mid(ctx: CellContext, mid: int) -> None:
    c = _consumer(ctx, ctx.group)
    try:
        c.subscribe([ctx.topic])
        wait_for(lambda: _assigned(c), ctx.timeout / 3, "an assignment")
        c.commit({TopicPartition(ctx.topic, 0): OffsetAndMetadata(mid, "", -1)})
    finally:
        c.close()


def committed_offsets(ctx: CellContext) -> str:
    _produce(ctx, ctx.records, partition=0)
    mid = ctx.records // 2
    _commit_mid(ctx, mid)
    c = _consumer(ctx, ctx.group)
    try:
        committed = c.committed(TopicPartition(ctx.topic, 0))
        expect(committed == mid, f"committed {committed}, want {mid}")
        c.subscribe([ctx.topic])
        recs = _poll(c, ctx.records - mid, ctx.timeout / 2)
    finally:
        c.close()
    expect(recs and recs[0].offset == mid, "did not resume at the committed offset")
    expect_values(ctx, (r.value for r in recs), ctx.records, mid)
    return f"resumed at {mid}"


def _admin(ctx: CellContext) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=ctx.bootstrap)


def admin_topics(ctx: CellContext) -> str:
    a = _admin(ctx)
    try:
        a.create_topics([NewTopic(ctx.topic, 2, 1)])
        # Kafka's brokers learn of a new topic asynchronously: list again until it shows
        wait_for(lambda: ctx.topic in a.list_topics(), 10, "the created topic to be listed")
        desc = a.describe_topics([ctx.topic])
        expect(len(desc[0]["partitions"]) == 2, f"described {desc}")
        a.delete_topics([ctx.topic])
        wait_for(lambda: ctx.topic not in a.list_topics(), 20, "the topic to go")
    finally:
        a.close()
    return "create, list, describe, delete"


def admin_partitions(ctx: CellContext) -> str:
    a = _admin(ctx)
    try:
        a.create_partitions({ctx.topic: 5})
        wait_for(
            lambda: len(a.describe_topics([ctx.topic])[0]["partitions"]) == 5,
            20,
            "5 partitions in metadata",
        )
    finally:
        a.close()
    _produce(ctx, 2, partition=4)
    expect_values(ctx, (r.value for r in _read(ctx, 2, offsets={4: None})), 2)
    return f"{ctx.partitions} -> 5, produced to the new partition 4"


def _topic_configs(a: KafkaAdminClient, topic: str) -> dict[str, Any]:
    out = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    return _find_configs(out, topic)


def _find_configs(out: Any, topic: str) -> dict[str, Any]:
    """The {name: value} of one topic in describe_configs' nested answer (dicts or lists)."""
    stack = [out]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if topic in node and isinstance(node[topic], dict):
                return {
                    k: (v.get("value") if isinstance(v, dict) else v)
                    for k, v in node[topic].items()
                }
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
    raise AssertionError(f"no configs for {topic} in {str(out)[:300]}")


def admin_configs(ctx: CellContext) -> str:
    a = _admin(ctx)
    try:
        before = _topic_configs(a, ctx.topic)
        expect("retention.ms" in before, f"retention.ms not described: {sorted(before)[:10]}")
        a.alter_configs(
            [
                ConfigResource(
                    ConfigResourceType.TOPIC, ctx.topic, configs={"retention.ms": "123456789"}
                )
            ],
            incremental=True,
        )
        # Kafka's brokers apply a config change asynchronously: describe again until it shows
        after = _topic_configs(a, ctx.topic)
        deadline = time.monotonic() + 10
        while after.get("retention.ms") != "123456789" and time.monotonic() < deadline:
            time.sleep(0.3)
            after = _topic_configs(a, ctx.topic)
    finally:
        a.close()
    expect(after["retention.ms"] == "123456789", f"retention.ms={after['retention.ms']}")
    return f"{len(before)} configs described; retention.ms altered"


def admin_groups(ctx: CellContext) -> str:
    c = _consumer(ctx, ctx.group)
    a = _admin(ctx)
    try:
        c.subscribe([ctx.topic])
        wait_for(lambda: _assigned(c), ctx.timeout / 3, "an assignment")
        c.commit({TopicPartition(ctx.topic, 0): OffsetAndMetadata(0, "", -1)})
        listed = a.list_groups()
        expect(ctx.group in str(listed), "group not listed")
        desc = a.describe_groups([ctx.group])
        text = str(desc)
        expect("Stable" in text, f"not Stable: {text[:300]}")
        c.close()
        a.delete_groups([ctx.group])
        expect(ctx.group not in str(a.list_groups()), "deleted group still listed")
    finally:
        c.close()
        a.close()
    return "list, describe (Stable), delete"


def admin_records(ctx: CellContext) -> str:
    _produce(ctx, ctx.records, partition=0)
    mid = ctx.records // 2
    a = _admin(ctx)
    try:
        a.delete_records({TopicPartition(ctx.topic, 0): mid})
    finally:
        a.close()
    c = _consumer(ctx)
    try:
        tp = TopicPartition(ctx.topic, 0)
        low = c.beginning_offsets([tp])[tp]
    finally:
        c.close()
    expect(low == mid, f"beginning offset {low}, want {mid}")
    recs = _read(ctx, ctx.records - mid, offsets={0: None})
    expect_values(ctx, (r.value for r in recs), ctx.records, mid)
    return f"log start {mid}"


def many_partitions(ctx: CellContext) -> str:
    p = KafkaProducer(bootstrap_servers=ctx.bootstrap, linger_ms=5)
    try:
        futures = [
            p.send(ctx.topic, value=ctx.value(i), partition=i) for i in range(ctx.partitions)
        ]
        p.flush(timeout=ctx.timeout / 2)
        for f in futures:
            f.get(timeout=10)
    finally:
        p.close(timeout=5)
    recs = _read(ctx, ctx.partitions)
    expect_values(ctx, (r.value for r in recs), ctx.partitions)
    expect(all(r.value == ctx.value(r.partition) for r in recs), "record in wrong partition")
    return f"{ctx.partitions} partitions"


def restart(ctx: CellContext) -> str:
    mid = ctx.records // 2
    if ctx.phase == "before":
        _produce(ctx, ctx.records, {"acks": "all"}, partition=0)
        _commit_mid(ctx, mid)
        return f"{ctx.records} produced, {mid} committed"
    expect_values(ctx, (r.value for r in _read(ctx, ctx.records, offsets={0: None})), ctx.records)
    c = _consumer(ctx, ctx.group)
    try:
        committed = c.committed(TopicPartition(ctx.topic, 0))
    finally:
        c.close()
    expect(committed == mid, f"committed {committed}, want {mid}")
    return "records and commit intact"


def transactions(ctx: CellContext) -> str:
    p = KafkaProducer(
        bootstrap_servers=ctx.bootstrap,
        transactional_id=f"{ctx.topic}-tx",
        max_block_ms=int(min(20.0, ctx.timeout / 3) * 1000),
    )
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(3):
            p.send(ctx.topic, value=ctx.value(i), partition=0)
        p.commit_transaction()
    finally:
        p.close(timeout=5)
    recs = _read(ctx, 3, offsets={0: None}, isolation_level="read_committed")
    expect_values(ctx, (r.value for r in recs), 3)
    return "committed transaction read back"


def compacted_topic(ctx: CellContext) -> str:
    a = _admin(ctx)
    try:
        a.create_topics([NewTopic(ctx.topic, 1, 1, topic_configs={"cleanup.policy": "compact"})])
    finally:
        a.close()
    _produce(ctx, ctx.records)
    expect_values(ctx, (r.value for r in _read(ctx, ctx.records, partitions=1)), ctx.records)
    return "compacted topic created and read back"


def topic_ids(ctx: CellContext) -> str:
    a = _admin(ctx)
    try:
        desc = a.describe_topics([ctx.topic])[0]
    finally:
        a.close()
    tid = desc.get("topic_id")
    zero = {"None", "", "0", "00000000-0000-0000-0000-000000000000", "AAAAAAAAAAAAAAAAAAAAAA"}
    expect(str(tid) not in zero, f"topic id {tid!r} (zero)")
    return f"topic id {tid}"


def oversize_refused(ctx: CellContext) -> str:
    from kafka.errors import MessageSizeTooLargeError

    a = _admin(ctx)
    try:
        a.create_topics([NewTopic(ctx.topic, 1, 1, topic_configs={"max.message.bytes": "10000"})])
    finally:
        a.close()
    try:
        _produce(ctx, 1, value_size=20_000)
    except MessageSizeTooLargeError as exc:
        return f"refused: {type(exc).__name__}"
    raise AssertionError("a 20000-byte record was accepted by a max.message.bytes=10000 topic")


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
    "group-range": lambda ctx: _group_split(ctx, RangePartitionAssignor),
    "group-roundrobin": lambda ctx: _group_split(ctx, RoundRobinPartitionAssignor),
    "group-coop-sticky": lambda ctx: _group_split(ctx, CooperativeStickyAssignor),
    "static-members": lambda ctx: _group_split(ctx, RangePartitionAssignor, static=True),
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
}
