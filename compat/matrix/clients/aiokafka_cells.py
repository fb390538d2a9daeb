"""aiokafka cells (each cell runs its own asyncio loop)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from compat.matrix.clients.common import (
    LARGE_RECORDS,
    LARGE_VALUE_BYTES,
    expect_split,
    expect_values,
    in_order_per_partition,
)
from compat.matrix.model import CellContext, ClientLacks, expect


def _sync(fn: Callable[[CellContext], Awaitable[str]]) -> Callable[[CellContext], str]:
    return lambda ctx: asyncio.run(asyncio.wait_for(fn(ctx), ctx.timeout - 5))


async def _produce(
    ctx: CellContext,
    n: int,
    conf: dict[str, Any] | None = None,
    *,
    partition: int | None = None,
    headers: bool = False,
    timestamp: int | None = None,
    start: int = 0,
    value_size: int = 0,
    topic: str | None = None,
) -> list[tuple[int, int]]:
    p = AIOKafkaProducer(
        bootstrap_servers=ctx.bootstrap,
        linger_ms=5,
        max_request_size=2 * 1024 * 1024,
        **(conf or {}),
    )
    await p.start()
    try:
        futures = []
        for i in range(start, start + n):
            value = ctx.value(i)
            if value_size:
                value = value + b"x" * (value_size - len(value))
            futures.append(
                await p.send(
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
        metas = await asyncio.gather(*futures)
    finally:
        await p.stop()
    return [(m.partition, m.offset) if m is not None else (-1, -1) for m in metas]


def _consumer(ctx: CellContext, group: str | None = None, **conf: Any) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        bootstrap_servers=ctx.bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **conf,
    )


async def _poll(c: AIOKafkaConsumer, n: int, timeout: float) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        for records in (await c.getmany(timeout_ms=200)).values():
            got.extend(records)
    return got


async def _read(
    ctx: CellContext,
    n: int,
    *,
    partitions: int | None = None,
    offsets: dict[int, int | None] | None = None,
    **conf: Any,
) -> list[Any]:
    c = _consumer(ctx, **conf)
    await c.start()
    try:
        parts = partitions if partitions is not None else ctx.partitions
        wanted = offsets if offsets is not None else {p: None for p in range(parts)}
        tps = {p: TopicPartition(ctx.topic, p) for p in wanted}
        c.assign(list(tps.values()))
        for p, off in wanted.items():
            if off is None:
                await c.seek_to_beginning(tps[p])
            else:
                c.seek(tps[p], off)
        return await _poll(c, n, ctx.timeout / 2)
    finally:
        await c.stop()


def _roundtrip(conf: dict[str, Any]) -> Callable[[CellContext], str]:
    async def cell(ctx: CellContext) -> str:
        await _produce(ctx, ctx.records, conf)
        expect_values(ctx, (r.value for r in await _read(ctx, ctx.records)), ctx.records)
        return f"{ctx.records} records"

    return _sync(cell)


async def idempotence(ctx: CellContext) -> str:
    await _produce(ctx, ctx.records, {"enable_idempotence": True})
    recs = await _read(ctx, ctx.records)
    expect_values(ctx, (r.value for r in recs), ctx.records)
    expect(in_order_per_partition((r.partition, r.value) for r in recs), "out of order")
    return f"{ctx.records} records in order"


async def keys_headers(ctx: CellContext) -> str:
    await _produce(ctx, ctx.records, headers=True)
    recs = await _read(ctx, ctx.records)
    expect_values(ctx, (r.value for r in recs), ctx.records)
    for r in recs:
        i = int(r.value.rsplit(b"-v", 1)[1])
        expect(r.key == ctx.key(i), f"key {r.key!r} for record {i}")
        expect(
            list(r.headers) == [("h-index", str(i).encode()), ("h-const", b"compat")],
            f"headers {r.headers!r}",
        )
    return f"{ctx.records} keys and header pairs"


async def large_message(ctx: CellContext) -> str:
    await _produce(ctx, LARGE_RECORDS, value_size=LARGE_VALUE_BYTES)
    recs = await _read(ctx, LARGE_RECORDS)
    expect(len(recs) == LARGE_RECORDS, f"{len(recs)} of {LARGE_RECORDS} read back")
    expect(all(len(r.value) == LARGE_VALUE_BYTES for r in recs), "a value lost bytes")
    return f"{LARGE_RECORDS} x {LARGE_VALUE_BYTES} bytes"


async def auto_create(ctx: CellContext) -> str:
    await _produce(ctx, 3)
    a = await _admin(ctx)
    try:
        parts = (await a.describe_topics([ctx.topic]))[0]["partitions"]
    finally:
        await a.close()
    expect(parts, "topic has no partitions")
    expect_values(ctx, (r.value for r in await _read(ctx, 3, partitions=len(parts))), 3)
    return "created on first produce"


async def consume_assign(ctx: CellContext) -> str:
    await _produce(ctx, ctx.records, partition=0)
    start = ctx.records // 2
    recs = await _read(ctx, ctx.records - start, offsets={0: start})
    expect(recs and recs[0].offset == start, "did not start at the sought offset")
    expect_values(ctx, (r.value for r in recs), ctx.records, start)
    return f"partition 0 from offset {start}"


async def consume_subscribe(ctx: CellContext) -> str:
    await _produce(ctx, ctx.records)
    c = _consumer(ctx, ctx.group)
    await c.start()
    try:
        c.subscribe([ctx.topic])
        recs = await _poll(c, ctx.records, ctx.timeout / 2)
    finally:
        await c.stop()
    expect_values(ctx, (r.value for r in recs), ctx.records)
    return f"{ctx.records} records via group {ctx.group}"


async def list_offsets_time(ctx: CellContext) -> str:
    t0 = int(time.time() * 1000) - 60_000
    half = ctx.records // 2
    await _produce(ctx, half, partition=0, timestamp=t0)
    await _produce(ctx, ctx.records - half, partition=0, timestamp=t0 + 10_000, start=half)
    c = _consumer(ctx)
    await c.start()
    try:
        tp = TopicPartition(ctx.topic, 0)
        got = (await c.offsets_for_times({tp: t0 + 5_000}))[tp]
        late = (await c.offsets_for_times({tp: t0 + 20_000}))[tp]
    finally:
        await c.stop()
    expect(got is not None and got.offset == half, f"offset for t0+5s is {got}, want {half}")
    expect(late is None, f"offset after the last record is {late}")
    return f"t0+5s -> {half}"


async def _wait(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.2)


def _group_split(assignor: Any, static: bool = False) -> Callable[[CellContext], str]:
    async def cell(ctx: CellContext) -> str:
        conf: dict[str, Any] = {
            "partition_assignment_strategy": (assignor,),
            "session_timeout_ms": 30000,
            "heartbeat_interval_ms": 500,
        }
        members: list[AIOKafkaConsumer] = []

        async def member(i: int) -> AIOKafkaConsumer:
            extra = {"group_instance_id": f"member-{i}"} if static else {}
            c = _consumer(ctx, ctx.group, **conf, **extra)
            await c.start()
            c.subscribe([ctx.topic])
            return c

        def sets() -> list[set[int]]:
            return [{tp.partition for tp in m.assignment()} for m in members]

        def split() -> list[set[int]] | None:
            s = sets()
            if all(s) and not (s[0] & s[1]) and len(s[0] | s[1]) == ctx.partitions:
                return s
            return None

        async def pump(m: AIOKafkaConsumer) -> None:
            # the group protocol runs in the background; getmany keeps the member polling
            while True:
                await m.getmany(timeout_ms=100)

        tasks: list[asyncio.Task[None]] = []
        try:
            members.append(await member(0))
            tasks.append(asyncio.create_task(pump(members[0])))
            await _wait(lambda: sets()[0], ctx.timeout / 3, "the first assignment")
            members.append(await member(1))
            tasks.append(asyncio.create_task(pump(members[1])))
            got = await _wait(split, ctx.timeout / 2, "a complete, disjoint assignment")
            detail = expect_split(got, ctx.partitions, assignor.name)
            if static:
                tasks[0].cancel()
                await members[0].stop()
                members[0] = await member(0)
                tasks[0] = asyncio.create_task(pump(members[0]))
                again = await _wait(split, ctx.timeout / 2, "the static member's assignment")
                expect(again == got, f"assignment changed: {got} -> {again}")
                detail += "; rejoined with the same partitions"
            return detail
        finally:
            for t in tasks:
                t.cancel()
            for m in members:
                await m.stop()

    return _sync(cell)


def coop_sticky(ctx: CellContext) -> str:
    raise ClientLacks("aiokafka has no cooperative-sticky assignor (eager protocol only)")


async def _commit_mid(ctx: CellContext, mid: int) -> None:
    c = _consumer(ctx, ctx.group)
    await c.start()
    try:
        c.subscribe([ctx.topic])
        await _poll(c, 1, 5)  # joins the group
        await c.commit({TopicPartition(ctx.topic, 0): mid})
    finally:
        await c.stop()


async def committed_offsets(ctx: CellContext) -> str:
    await _produce(ctx, ctx.records, partition=0)
    mid = ctx.records // 2
    await _commit_mid(ctx, mid)
    c = _consumer(ctx, ctx.group)
    await c.start()
    try:
        committed = await c.committed(TopicPartition(ctx.topic, 0))
        expect(committed == mid, f"committed {committed}, want {mid}")
        c.subscribe([ctx.topic])
        recs = await _poll(c, ctx.records - mid, ctx.timeout / 2)
    finally:
        await c.stop()
    expect(recs and recs[0].offset == mid, "did not resume at the committed offset")
    expect_values(ctx, (r.value for r in recs), ctx.records, mid)
    return f"resumed at {mid}"


async def _admin(ctx: CellContext) -> AIOKafkaAdminClient:
    a = AIOKafkaAdminClient(bootstrap_servers=ctx.bootstrap)
    await a.start()
    return a


async def admin_topics(ctx: CellContext) -> str:
    a = await _admin(ctx)
    try:
        await a.create_topics([NewTopic(ctx.topic, 2, 1)])
        # Kafka's brokers learn of a new topic asynchronously (its AdminClient says so): a
        # user lists again until it shows, as here
        await _wait_async(lambda: a.list_topics(), lambda t: ctx.topic in t, 10)
        desc = await a.describe_topics([ctx.topic])
        expect(len(desc[0]["partitions"]) == 2, f"described {desc}")
        await a.delete_topics([ctx.topic])
        await _wait_async(lambda: a.list_topics(), lambda t: ctx.topic not in t, 20)
    finally:
        await a.close()
    return "create, list, describe, delete"


async def _wait_async(
    get: Callable[[], Awaitable[Any]], ok: Callable[[Any], bool], timeout: float
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await get()
        if ok(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached in {timeout:.0f}s: {str(value)[:200]}")
        await asyncio.sleep(0.3)


async def admin_partitions(ctx: CellContext) -> str:
    a = await _admin(ctx)
    try:
        await a.create_partitions({ctx.topic: NewPartitions(5)})
        await _wait_async(
            lambda: a.describe_topics([ctx.topic]), lambda d: len(d[0]["partitions"]) == 5, 20
        )
    finally:
        await a.close()
    await _produce(ctx, 2, partition=4)
    expect_values(ctx, (r.value for r in await _read(ctx, 2, offsets={4: None})), 2)
    return f"{ctx.partitions} -> 5, produced to the new partition 4"


def _configs(responses: list[Any], topic: str) -> dict[str, str]:
    for resp in responses:
        for res in resp.resources:
            error_code, _msg, _rtype, name, entries = res[:5]
            if name == topic:
                expect(error_code == 0, f"error {error_code} describing {topic}")
                return {e[0]: e[1] for e in entries}
    raise AssertionError(f"no configs for {topic}")


async def admin_configs(ctx: CellContext) -> str:
    a = await _admin(ctx)
    try:
        res = ConfigResource(ConfigResourceType.TOPIC, ctx.topic)
        before = _configs(await a.describe_configs([res]), ctx.topic)
        expect("retention.ms" in before, "retention.ms not described")
        altered = await a.alter_configs(
            [
                ConfigResource(
                    ConfigResourceType.TOPIC, ctx.topic, configs={"retention.ms": "123456789"}
                )
            ]
        )
        expect(
            "error_code=0" in str(altered)
            or all(r[0] == 0 for resp in altered for r in resp.resources),
            f"alter: {altered}",
        )
        # Kafka's brokers apply a config change asynchronously: describe again until it shows
        after = _configs(await a.describe_configs([res]), ctx.topic)
        deadline = time.monotonic() + 10
        while after.get("retention.ms") != "123456789" and time.monotonic() < deadline:
            await asyncio.sleep(0.3)
            after = _configs(await a.describe_configs([res]), ctx.topic)
    finally:
        await a.close()
    expect(after["retention.ms"] == "123456789", f"retention.ms={after['retention.ms']}")
    return f"{len(before)} configs described; retention.ms altered"


async def admin_groups(ctx: CellContext) -> str:
    c = _consumer(ctx, ctx.group)
    await c.start()
    a = await _admin(ctx)
    try:
        c.subscribe([ctx.topic])
        await _poll(c, 1, 5)
        await c.commit({TopicPartition(ctx.topic, 0): 0})
        groups = await a.list_consumer_groups()
        expect(any(g[0] == ctx.group for g in groups), "group not listed")
        desc = await a.describe_consumer_groups([ctx.group])
        expect("Stable" in str(desc), f"not Stable: {str(desc)[:300]}")
    finally:
        await c.stop()
        await a.close()
    return "list, describe (Stable); aiokafka has no delete-groups API"


async def admin_records(ctx: CellContext) -> str:
    await _produce(ctx, ctx.records, partition=0)
    mid = ctx.records // 2
    a = await _admin(ctx)
    try:
        tp = TopicPartition(ctx.topic, 0)
        out = await a.delete_records({tp: RecordsToDelete(mid)})
        expect(out[tp] == mid, f"low watermark {out}")
    finally:
        await a.close()
    recs = await _read(ctx, ctx.records - mid, offsets={0: None})
    expect_values(ctx, (r.value for r in recs), ctx.records, mid)
    return f"log start {mid}"


async def many_partitions(ctx: CellContext) -> str:
    p = AIOKafkaProducer(bootstrap_servers=ctx.bootstrap, linger_ms=5)
    await p.start()
    try:
        futures = [
            await p.send(ctx.topic, value=ctx.value(i), partition=i) for i in range(ctx.partitions)
        ]
        await asyncio.gather(*futures)
    finally:
        await p.stop()
    recs = await _read(ctx, ctx.partitions)
    expect_values(ctx, (r.value for r in recs), ctx.partitions)
    expect(all(r.value == ctx.value(r.partition) for r in recs), "record in wrong partition")
    return f"{ctx.partitions} partitions"


async def restart(ctx: CellContext) -> str:
    mid = ctx.records // 2
    if ctx.phase == "before":
        await _produce(ctx, ctx.records, {"acks": "all"}, partition=0)
        await _commit_mid(ctx, mid)
        return f"{ctx.records} produced, {mid} committed"
    recs = await _read(ctx, ctx.records, offsets={0: None})
    expect_values(ctx, (r.value for r in recs), ctx.records)
    c = _consumer(ctx, ctx.group)
    await c.start()
    try:
        deadline = time.monotonic() + 20
        committed = await c.committed(TopicPartition(ctx.topic, 0))
        while committed is None and time.monotonic() < deadline:
            await asyncio.sleep(0.5)  # Kafka may still be loading its offsets topic
            committed = await c.committed(TopicPartition(ctx.topic, 0))
    finally:
        await c.stop()
    expect(committed == mid, f"committed {committed}, want {mid}")
    return "records and commit intact"


async def transactions(ctx: CellContext) -> str:
    p = AIOKafkaProducer(
        bootstrap_servers=ctx.bootstrap,
        transactional_id=f"{ctx.topic}-tx",
        request_timeout_ms=20_000,
    )
    await asyncio.wait_for(p.start(), min(20.0, ctx.timeout / 3))
    try:
        async with p.transaction():
            for i in range(3):
                await p.send_and_wait(ctx.topic, value=ctx.value(i), partition=0)
    finally:
        await p.stop()
    recs = await _read(ctx, 3, offsets={0: None}, isolation_level="read_committed")
    expect_values(ctx, (r.value for r in recs), 3)
    return "committed transaction read back"


def _created(resp: Any, topic: str) -> None:
    """aiokafka's create_topics returns the raw response: look at the topic's error code
    (a describe would auto-create the topic and hide a refusal)."""
    for entry in getattr(resp, "topic_errors", None) or getattr(resp, "topics", []):
        name, code = entry[0], entry[1]
        message = entry[2] if len(entry) > 2 and isinstance(entry[2], str) else ""
        if name == topic:
            expect(code == 0, f"CreateTopics error {code}: {message}")
            return
    raise AssertionError(f"{topic} not in the CreateTopics response {str(resp)[:200]}")


async def compacted_topic(ctx: CellContext) -> str:
    a = await _admin(ctx)
    try:
        _created(
            await a.create_topics(
                [NewTopic(ctx.topic, 1, 1, topic_configs={"cleanup.policy": "compact"})]
            ),
            ctx.topic,
        )
    finally:
        await a.close()
    await _produce(ctx, ctx.records)
    recs = await _read(ctx, ctx.records, partitions=1)
    expect_values(ctx, (r.value for r in recs), ctx.records)
    return "compacted topic created and read back"


async def oversize_refused(ctx: CellContext) -> str:
    from aiokafka.errors import MessageSizeTooLargeError

    a = await _admin(ctx)
    try:
        _created(
            await a.create_topics(
                [NewTopic(ctx.topic, 1, 1, topic_configs={"max.message.bytes": "10000"})]
            ),
            ctx.topic,
        )
    finally:
        await a.close()
    try:
        await _produce(ctx, 1, value_size=20_000)
    except MessageSizeTooLargeError as exc:
        return f"refused: {type(exc).__name__}"
    raise AssertionError("a 20000-byte record was accepted by a max.message.bytes=10000 topic")


CELLS = {
    "produce-gzip": _roundtrip({"compression_type": "gzip", "acks": "all"}),
    "produce-snappy": _roundtrip({"compression_type": "snappy", "acks": "all"}),
    "produce-lz4": _roundtrip({"compression_type": "lz4", "acks": "all"}),
    "produce-zstd": _roundtrip({"compression_type": "zstd", "acks": "all"}),
    "produce-acks0": _roundtrip({"acks": 0}),
    "produce-acks1": _roundtrip({"acks": 1}),
    "idempotence": _sync(idempotence),
    "keys-headers": _sync(keys_headers),
    "large-message": _sync(large_message),
    "auto-create": _sync(auto_create),
    "consume-assign": _sync(consume_assign),
    "consume-subscribe": _sync(consume_subscribe),
    "list-offsets-time": _sync(list_offsets_time),
    "group-range": _group_split(RangePartitionAssignor),
    "group-roundrobin": _group_split(RoundRobinPartitionAssignor),
    "group-coop-sticky": coop_sticky,
    "static-members": _group_split(RangePartitionAssignor, static=True),
    "committed-offsets": _sync(committed_offsets),
    "admin-topics": _sync(admin_topics),
    "admin-partitions": _sync(admin_partitions),
    "admin-configs": _sync(admin_configs),
    "admin-groups": _sync(admin_groups),
    "admin-records": _sync(admin_records),
    "many-partitions": _sync(many_partitions),
    "compacted-topic": _sync(compacted_topic),
    "oversize-refused": _sync(oversize_refused),
    "restart": _sync(restart),
    "transactions": _sync(transactions),
}
