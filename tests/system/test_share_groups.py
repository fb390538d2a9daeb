"""Share groups (KIP-932) with confluent-kafka's ShareConsumer: records shared between
members, release, reject, lock timeout, the delivery limit, and a SIGKILL of the gateway."""

from __future__ import annotations

import time

import pytest
from support.client import unique_topic
from support.nodes import gateway_args as node_args
from support.nodes import pg_url, postgres, requires_postgres  # noqa: F401
from support.share import (
    ACCEPT,
    REJECT,
    RELEASE,
    create_topic,
    poll_nothing,
    poll_records,
    produce,
    share_consumer,
)

from harness.gateway import Gateway

LOCK_MS = 1500
LIMIT = 3
GATEWAY_ARGS = (
    "--share-record-lock-ms",
    str(LOCK_MS),
    "--share-delivery-count-limit",
    str(LIMIT),
    "--share-auto-offset-reset",
    "earliest",
)
pytestmark = pytest.mark.timeout(120)


def _values(count: int, tag: str = "v") -> list[bytes]:
    return [f"{tag}{i}".encode() for i in range(count)]


# Kafka's default lock: a member's prefetched records stay its own while the test polls the
# other member (a short lock would hand them over, correctly, and deliver them twice).
@pytest.mark.gateway_args("--share-auto-offset-reset", "earliest")
def test_two_members_share_one_partition_without_duplicates(gateway) -> None:
    bs, topic, group = gateway.bootstrap, unique_topic("share2"), unique_topic("g")
    create_topic(bs, topic)
    first = share_consumer(bs, group, topic, explicit=True)
    second = share_consumer(bs, group, topic, explicit=True)
    try:
        seen: list[tuple[str, int]] = []
        for wave in range(4):
            produce(bs, topic, _values(10, f"w{wave}-"))
            for name, consumer in (("a", first), ("b", second)):
                got = poll_records(consumer, lambda r: bool(r), timeout=1.5, ack=ACCEPT)
                seen.extend((name, m.offset()) for m in got)
        while len(seen) < 40:
            got = poll_records(first, lambda r: bool(r), timeout=1.5, ack=ACCEPT)
            if not got:
                break
            seen.extend(("a", m.offset()) for m in got)
        offsets = [offset for _, offset in seen]
        assert sorted(offsets) == list(range(40))  # every record once, none twice
        assert {name for name, _ in seen} == {"a", "b"}  # both members got work
    finally:
        first.close()
        second.close()


def test_release_redelivers_and_reject_archives(shared_gateway) -> None:
    bs, topic, group = shared_gateway.bootstrap, unique_topic("share-rel"), unique_topic("g")
    create_topic(bs, topic)
    produce(bs, topic, _values(4))
    consumer = share_consumer(bs, group, topic, explicit=True)
    try:
        got = poll_records(consumer, lambda r: len(r) >= 4)
        assert [m.offset() for m in got] == [0, 1, 2, 3]
        assert all(m.delivery_count() == 1 for m in got)
        for m in got:
            consumer.acknowledge(m, RELEASE if m.offset() < 2 else REJECT)
        consumer.commit_sync(15)
        again = poll_records(consumer, lambda r: len(r) >= 2, ack=ACCEPT)
        assert [(m.offset(), m.delivery_count()) for m in again] == [(0, 2), (1, 2)]
        assert poll_nothing(consumer, LOCK_MS / 1000 + 1) == []  # rejected: never again
    finally:
        consumer.close()


def test_unacknowledged_record_returns_after_the_lock(shared_gateway) -> None:
    bs, topic, group = shared_gateway.bootstrap, unique_topic("share-lock"), unique_topic("g")
    create_topic(bs, topic)
    produce(bs, topic, _values(3))
    holder = share_consumer(bs, group, topic, explicit=True)
    other = share_consumer(bs, group, topic, explicit=True)
    try:
        held = poll_records(holder, lambda r: len(r) >= 3)
        assert len(held) == 3
        # the holder never acknowledges: after the lock the records go to the other member
        got = poll_records(other, lambda r: len(r) >= 3, timeout=LOCK_MS / 1000 + 10, ack=ACCEPT)
        assert sorted(m.offset() for m in got) == [0, 1, 2]
        # 2, or more if the holder's client fetched them again in the background meanwhile
        assert all(m.delivery_count() >= 2 for m in got)
    finally:
        other.close()
        holder.close()


def test_poison_record_is_archived_after_the_delivery_limit(shared_gateway) -> None:
    bs, topic, group = shared_gateway.bootstrap, unique_topic("share-poison"), unique_topic("g")
    create_topic(bs, topic)
    produce(bs, topic, [b"poison", b"good"])
    consumer = share_consumer(bs, group, topic, explicit=True)
    try:
        deliveries = []
        for _ in range(LIMIT):
            got = poll_records(consumer, lambda r: bool(r), timeout=10)
            for m in got:
                deliveries.append((m.value(), m.delivery_count()))
                consumer.acknowledge(m, RELEASE if m.value() == b"poison" else ACCEPT)
            if got:
                consumer.commit_sync(15)
        poison = [count for value, count in deliveries if value == b"poison"]
        assert poison == list(range(1, LIMIT + 1))  # then archived, never delivered again
        assert [count for value, count in deliveries if value == b"good"] == [1]
        assert poll_nothing(consumer, 1.5) == []
    finally:
        consumer.close()


@pytest.mark.gateway_args("--share-auto-offset-reset", "earliest")
def test_sigkill_loses_no_acknowledgement(gateway) -> None:
    _sigkill_mid_run(gateway)


@requires_postgres
def test_sigkill_loses_no_acknowledgement_postgresql(tmp_path, pg_url) -> None:  # noqa: F811
    """The same with the metadata (and so the share state) in PostgreSQL."""
    args = [*node_args(pg_url), "--share-auto-offset-reset", "earliest"]
    gw = Gateway(tmp_path / "data", tmp_path / "server.log", args, default_partitions=1)
    gw.start_fresh()
    try:
        _sigkill_mid_run(gw)
    finally:
        gw.close()


def _sigkill_mid_run(gateway: Gateway) -> None:
    """Accepted records are never delivered again after a SIGKILL; every other record
    (acquired but unacknowledged ones included) is delivered after the restart."""
    bs, topic, group = gateway.bootstrap, unique_topic("share-kill"), unique_topic("g")
    create_topic(bs, topic)
    total = 100
    for start in range(0, total, 10):
        produce(bs, topic, _values(10, f"b{start}-"))
    before = share_consumer(bs, group, topic, explicit=True, **{"max.poll.records": 10})
    accepted: set[int] = set()
    held: set[int] = set()
    try:
        while len(accepted) < total // 2:
            got = poll_records(before, lambda r: bool(r), timeout=5)
            assert got, "no records before the kill"
            for m in got:
                before.acknowledge(m, ACCEPT)
            results = before.commit_sync(15)
            assert all(error is None for error in results.values()), results
            accepted.update(m.offset() for m in got)
        held = {m.offset() for m in poll_records(before, lambda r: bool(r), timeout=5)}
        gateway.kill()
        gateway.start()
    finally:
        before.close()
    after = share_consumer(bs, group, topic, explicit=True)
    try:
        rest = poll_records(after, lambda r: len(r) >= total - len(accepted), ack=ACCEPT)
        offsets = [m.offset() for m in rest]
        assert not accepted & set(offsets)  # no accepted record comes back
        assert sorted(accepted | set(offsets)) == list(range(total))
        assert len(offsets) == len(set(offsets))
        counts = {m.offset(): m.delivery_count() for m in rest}
        assert held and all(counts[o] >= 2 for o in held)  # counts survive the restart
    finally:
        after.close()


def test_admin_apis_show_and_move_the_share_start_offset(shared_gateway) -> None:
    """ListGroups lists the share group, ShareGroupDescribe its member, the offset admin
    APIs read, move and delete the share-partition start offset; ApiVersions advertises
    share.version."""
    from kio.schema.alter_share_group_offsets.v0 import request as alter
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    from kio.schema.delete_share_group_offsets.v0 import request as delete
    from kio.schema.describe_share_group_offsets.v1 import request as describe
    from kio.schema.list_groups.v4.request import ListGroupsRequest
    from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
    from support.client import RawClient

    bs, topic, group = shared_gateway.bootstrap, unique_topic("share-admin"), unique_topic("g")
    create_topic(bs, topic)
    produce(bs, topic, _values(5))
    consumer = share_consumer(bs, group, topic, explicit=True)
    got = poll_records(consumer, lambda r: len(r) >= 5, ack=ACCEPT)
    assert len(got) == 5
    describe_offsets = describe.DescribeShareGroupOffsetsRequest(
        groups=(describe.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None),)
    )
    with RawClient(bs) as raw:
        listed = raw.request(ListGroupsRequest(states_filter=()))
        assert (group, "share") in {(g.group_id, g.protocol_type) for g in listed.groups}
        described = raw.request(
            ShareGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False)
        )
        (info,) = described.groups
        assert info.group_state == "Stable" and len(info.members) == 1
        assert info.members[0].assignment.topic_partitions[0].topic_name == topic
        offsets = raw.request(describe_offsets)
        (part,) = offsets.groups[0].topics[0].partitions
        assert (part.start_offset, part.lag) == (5, 0)
        consumer.close()
        moved = raw.request(
            alter.AlterShareGroupOffsetsRequest(
                group_id=group,
                topics=(
                    alter.AlterShareGroupOffsetsRequestTopic(
                        topic_name=topic,
                        partitions=(
                            alter.AlterShareGroupOffsetsRequestPartition(
                                partition_index=0, start_offset=2
                            ),
                        ),
                    ),
                ),
            )
        )
        assert moved.error_code == 0, moved
        (part,) = raw.request(describe_offsets).groups[0].topics[0].partitions
        assert (part.start_offset, part.lag) == (2, 3)
        deleted = raw.request(
            delete.DeleteShareGroupOffsetsRequest(
                group_id=group,
                topics=(delete.DeleteShareGroupOffsetsRequestTopic(topic_name=topic),),
            )
        )
        assert deleted.error_code == 0 and deleted.responses[0].error_code == 0
        assert raw.request(describe_offsets).groups[0].topics == ()
        versions = raw.request(
            ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
        assert "share.version" in {f.name for f in versions.finalized_features}
        from kio.schema.delete_groups.v2.request import DeleteGroupsRequest

        gone = raw.request(DeleteGroupsRequest(groups_names=(group, "no-such-group")))
        assert [int(r.error_code) for r in gone.results] == [0, 69]  # GROUP_ID_NOT_FOUND
        listed = raw.request(ListGroupsRequest(states_filter=()))
        assert group not in {g.group_id for g in listed.groups}
    # the state was deleted: the share partition starts afresh (earliest), all five again
    again = share_consumer(bs, group, topic, explicit=True)
    try:
        redelivered = poll_records(again, lambda r: len(r) >= 5, timeout=8, ack=ACCEPT)
    finally:
        again.close()
    assert sorted(m.offset() for m in redelivered) == [0, 1, 2, 3, 4]


@pytest.mark.gateway_args(
    "--share-auto-offset-reset", "earliest", "--metrics-listen", "127.0.0.1:0"
)
def test_share_state_survives_a_segment_split_and_merge(gateway) -> None:
    """Share state is per virtual partition: across a split and a merge of the segments
    under a topic, nothing accepted comes back and every later record is delivered once."""
    from support.scaling import scale

    bs, topic, group = gateway.bootstrap, unique_topic("share-scale"), unique_topic("g")
    partitions = 4
    create_topic(bs, topic, partitions)

    def wave(tag: str) -> None:
        for p in range(partitions):
            produce(bs, topic, _values(5, f"{tag}{p}-"), partition=p)

    def consume(count: int) -> list[tuple[int, int]]:
        consumer = share_consumer(bs, group, topic, explicit=True)
        try:
            got = poll_records(consumer, lambda r: len(r) >= count, ack=ACCEPT)
            extra = poll_nothing(consumer, 1)
        finally:
            consumer.close()
        return [(m.partition(), m.offset()) for m in got + extra]

    wave("a")
    first = consume(20)
    split = scale(gateway, topic, {"split": 0, "parts": 2})
    wave("b")
    second = consume(20)
    left, right = (s["segment_id"] for s in split["successors"])
    scale(gateway, topic, {"merge": [left, right]})
    wave("c")
    third = consume(20)
    seen = first + second + third
    assert len(seen) == len(set(seen)) == 60  # nothing twice
    assert sorted(seen) == [(p, o) for p in range(partitions) for o in range(15)]


@pytest.mark.gateway_args("--share-auto-offset-reset", "earliest")
def test_four_members_two_partitions_each_record_accepted_once(gateway) -> None:
    """4 members share 2 partitions; one member releases every first delivery it gets:
    those records come back (delivery count 2) and every record is accepted exactly once."""
    bs, topic, group = gateway.bootstrap, unique_topic("share-4x2"), unique_topic("g")
    create_topic(bs, topic, 2)
    for p in range(2):
        for start in range(0, 100, 10):
            produce(bs, topic, _values(10, f"p{p}-{start}-"), partition=p)
    members = [
        share_consumer(bs, group, topic, explicit=True, **{"max.poll.records": 10})
        for _ in range(4)
    ]
    accepted: list[tuple[int, int]] = []
    released: set[tuple[int, int]] = set()
    redelivered: dict[tuple[int, int], int] = {}
    try:
        deadline = time.monotonic() + 60
        while len(accepted) < 200 and time.monotonic() < deadline:
            for index, consumer in enumerate(members):
                batch = [m for m in consumer.poll(0.2) if m.error() is None]
                for m in batch:
                    key = (m.partition(), m.offset())
                    if index == 0 and m.delivery_count() == 1:
                        consumer.acknowledge(m, RELEASE)
                        released.add(key)
                        continue
                    if key in released:
                        redelivered[key] = m.delivery_count()
                    consumer.acknowledge(m, ACCEPT)
                    accepted.append(key)
                if batch:
                    consumer.commit_sync(15)
    finally:
        for consumer in members:
            consumer.close()
    assert sorted(accepted) == [(p, o) for p in range(2) for o in range(100)]
    assert released and set(redelivered) == released
    assert all(count == 2 for count in redelivered.values())
