"""The group APIs on the wire, driven with raw kio requests: every advertised version, the
member-id handshake, protocol selection, heartbeats and their errors, timeouts, static
membership fencing, LeaveGroup batches, and the offset commit/fetch/delete rules."""

from __future__ import annotations

import dataclasses
import datetime
import struct
import time
import types
import typing
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.static.primitive import i32Timedelta, i64Timedelta
from support.client import RawClient, unique_topic

GATEWAY_ARGS = ("--group-initial-rebalance-delay-ms", "100")

NONE, UNKNOWN_TOPIC = 0, 3
OFFSET_METADATA_TOO_LARGE, ILLEGAL_GENERATION, INCONSISTENT_PROTOCOL = 12, 22, 23
UNKNOWN_MEMBER, REBALANCE_IN_PROGRESS = 25, 27
NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, MEMBER_ID_REQUIRED, FENCED = 68, 69, 79, 82
GROUP_SUBSCRIBED_TO_TOPIC = 86

ADVERTISED = {
    8: (2, 9),  # OffsetCommit
    9: (1, 9),  # OffsetFetch
    10: (0, 5),  # FindCoordinator
    11: (0, 9),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 6),  # DescribeGroups
    16: (0, 5),  # ListGroups
    42: (0, 2),  # DeleteGroups
    47: (0, 0),  # OffsetDelete
    68: (0, 1),  # ConsumerGroupHeartbeat
    69: (0, 1),  # ConsumerGroupDescribe
}


def build(cls: type, values: dict[str, Any]) -> Any:
    """A kio entity from a dict; keys the version lacks are ignored, nested dicts/lists
    become entities/tuples, and ints for timedelta fields are milliseconds."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        value, tp = values[f.name], hints[f.name]
        if typing.get_origin(tp) in (typing.Union, types.UnionType):
            tp = next(a for a in typing.get_args(tp) if a is not type(None))
        if typing.get_origin(tp) is tuple and value is not None:
            item = typing.get_args(tp)[0]
            if dataclasses.is_dataclass(item):
                value = tuple(build(item, v) for v in value)
            else:
                value = tuple(value)
        elif tp in (i32Timedelta, i64Timedelta):
            value = tp.parse(datetime.timedelta(milliseconds=value))
        kwargs[f.name] = value
    return cls(**kwargs)


def request(api_key: int, version: int, **values: Any) -> Any:
    return build(load_request_schema(api_key, version), values)


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: the topics, no user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def join(
    group: str,
    member_id: str = "",
    protocols: tuple[str, ...] = ("range",),
    metadata: bytes = b"",
    version: int = 7,
    session_ms: int = 10_000,
    rebalance_ms: int = 10_000,
    instance: str | None = None,
    protocol_type: str = "consumer",
) -> Any:
    return request(
        11,
        version,
        group_id=group,
        session_timeout=session_ms,
        rebalance_timeout=rebalance_ms,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type=protocol_type,
        protocols=[{"name": p, "metadata": metadata} for p in protocols],
    )


def sync(group: str, generation: int, member_id: str, assignments=(), **extra: Any) -> Any:
    return request(
        14,
        5,
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        assignments=[{"member_id": m, "assignment": a} for m, a in assignments],
        **extra,
    )


def heartbeat(group: str, generation: int, member_id: str, instance: str | None = None) -> Any:
    return request(
        12,
        4,
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance,
    )


def join_member(client: RawClient, group: str, **kwargs: Any) -> Any:
    """Join with the v7 handshake (MEMBER_ID_REQUIRED, then again with the id)."""
    first = client.request(join(group, **kwargs))
    assert first.error_code == MEMBER_ID_REQUIRED and first.member_id
    return client.request(join(group, member_id=first.member_id, **kwargs))


@pytest.fixture
def group() -> str:
    return unique_topic("g")


@pytest.fixture
def topic(shared_gateway) -> str:
    name = unique_topic("t")
    with RawClient(shared_gateway.bootstrap) as client:
        response = client.request(
            request(
                19,
                5,
                topics=[
                    {
                        "name": name,
                        "num_partitions": 2,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                timeout=10_000,
            )
        )
    assert response.topics[0].error_code == NONE
    return name


# --- every advertised version ------------------------------------------------------------


def _minimal(api_key: int, version: int, topic: str, group: str) -> tuple[Any, Any]:
    """A request of this version and a check of its response."""
    if api_key == 8:
        partition = {"partition_index": 0, "committed_offset": 1, "committed_metadata": None}
        body = request(
            8,
            version,
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            retention_time=-1,
            topics=[{"name": topic, "partitions": [partition]}],
        )
        return body, lambda r: r.topics[0].partitions[0].error_code == NONE
    if api_key == 9 and version >= 8:
        wanted = [{"name": topic, "partition_indexes": [0, 1]}]
        body = request(9, version, groups=[{"group_id": group, "topics": wanted}])
        return (
            body,
            lambda r: [p.committed_offset for p in r.groups[0].topics[0].partitions] == [-1, -1],
        )
    if api_key == 9:
        body = request(
            9, version, group_id=group, topics=[{"name": topic, "partition_indexes": [0, 1]}]
        )
        return body, lambda r: [p.committed_offset for p in r.topics[0].partitions] == [-1, -1]
    if api_key == 68:
        body = request(
            68,
            version,
            group_id=group,
            member_id="m",
            member_epoch=0,
            rebalance_timeout=30_000,
            subscribed_topic_names=[topic],
            topic_partitions=[],
        )
        return body, lambda r: r.error_code == NONE and r.member_epoch == 1
    if api_key == 69:
        body = request(69, version, group_ids=[group], include_authorized_operations=False)
        return body, lambda r: r.groups[0].error_code == GROUP_ID_NOT_FOUND
    if api_key == 10 and version >= 4:
        return request(10, version, coordinator_keys=[group, "other"], key_type=0), (
            lambda r: [(c.key, c.node_id) for c in r.coordinators] == [(group, 1), ("other", 1)]
        )
    if api_key == 10:
        return request(10, version, key=group, key_type=0), lambda r: r.node_id == 1 and r.port > 0
    if api_key == 11:
        expected = MEMBER_ID_REQUIRED if version >= 4 else NONE
        return join(group, version=version), lambda r: r.error_code == expected and r.member_id
    if api_key == 12:
        return request(12, version, group_id=group, generation_id=1, member_id="x"), (
            lambda r: r.error_code == UNKNOWN_MEMBER
        )
    if api_key == 13:
        body = request(13, version, group_id=group, member_id="x", members=[{"member_id": "x"}])
        if version < 3:
            return body, lambda r: r.error_code == UNKNOWN_MEMBER
        return body, lambda r: r.error_code == NONE and r.members[0].error_code == UNKNOWN_MEMBER
    if api_key == 14:
        body = request(14, version, group_id=group, generation_id=1, member_id="x", assignments=[])
        return body, lambda r: r.error_code == UNKNOWN_MEMBER
    if api_key == 15:
        body = request(15, version, groups=[group], include_authorized_operations=False)
        expected = GROUP_ID_NOT_FOUND if version >= 6 else NONE
        return (
            body,
            lambda r: (
                (r.groups[0].group_state, r.groups[0].error_code)
                == (
                    "Dead",
                    expected,
                )
            ),
        )
    if api_key == 16:
        return request(16, version, states_filter=[]), lambda r: r.error_code == NONE
    if api_key == 42:
        return request(42, version, groups_names=[group]), (
            lambda r: r.results[0].error_code == GROUP_ID_NOT_FOUND
        )
    body = request(
        47,
        version,
        group_id=group,
        topics=[{"name": topic, "partitions": [{"partition_index": 0}]}],
    )
    return body, lambda r: r.error_code == GROUP_ID_NOT_FOUND


@pytest.mark.parametrize(
    ("api_key", "version"),
    [(k, v) for k, (lo, hi) in ADVERTISED.items() for v in range(lo, hi + 1)],
)
def test_every_advertised_version_answers(shared_gateway, topic, api_key, version):
    group = unique_topic(f"v-{api_key}-{version}")
    body, check = _minimal(api_key, version, topic, group)
    with RawClient(shared_gateway.bootstrap) as client:
        response = client.request(body)
    assert check(response), response


def test_api_versions_advertises_group_apis(shared_gateway):
    from support.client import api_versions_request

    with RawClient(shared_gateway.bootstrap) as client:
        response = client.request(api_versions_request())
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert {k: ranges.get(k) for k in ADVERTISED} == ADVERTISED


# --- membership ----------------------------------------------------------------------------


def test_handshake_leader_sync_and_heartbeat_errors(shared_gateway, group):
    with RawClient(shared_gateway.bootstrap) as client:
        joined = join_member(client, group, protocols=("range", "roundrobin"))
        assert joined.error_code == NONE
        assert joined.generation_id == 1 and joined.protocol_name == "range"
        assert joined.protocol_type == "consumer"
        assert joined.leader == joined.member_id
        assert [m.member_id for m in joined.members] == [joined.member_id]
        me, gen = joined.member_id, joined.generation_id

        synced = client.request(sync(group, gen, me, [(me, b"mine")]))
        assert (synced.error_code, synced.assignment) == (NONE, b"mine")
        assert synced.protocol_name == "range"
        assert client.request(heartbeat(group, gen, me)).error_code == NONE
        assert client.request(heartbeat(group, gen + 1, me)).error_code == ILLEGAL_GENERATION
        assert client.request(heartbeat(group, gen, "stranger")).error_code == UNKNOWN_MEMBER
        assert client.request(sync(group, gen + 1, me)).error_code == ILLEGAL_GENERATION
        # A stable follower-style rejoin with nothing changed is a leader rejoin here:
        # it rebalances into the next generation.
        again = client.request(join(group, member_id=me, protocols=("range", "roundrobin")))
        assert (again.error_code, again.generation_id) == (NONE, gen + 1)
        # Protocols are checked before the member id handshake.
        refused = client.request(join(group, protocols=("other",)))
        assert refused.error_code == INCONSISTENT_PROTOCOL


def test_second_member_rebalances_and_protocol_is_common(shared_gateway, group):
    bootstrap = shared_gateway.bootstrap
    with RawClient(bootstrap) as a, RawClient(bootstrap) as b:
        first = join_member(a, group, protocols=("range", "roundrobin"))
        a.request(sync(group, first.generation_id, first.member_id, [(first.member_id, b"a")]))

        handshake = b.request(join(group, protocols=("roundrobin",)))
        b_id = handshake.member_id
        b_join = join(group, member_id=b_id, protocols=("roundrobin",))
        b_corr = b.send(b_join)  # waits for the rebalance: read later
        b.wait_request_taken()
        # b's join has started the rebalance: a hears of it from its next heartbeat
        beat = a.request(heartbeat(group, first.generation_id, first.member_id))
        assert beat.error_code == REBALANCE_IN_PROGRESS
        a_join = a.request(
            join(group, member_id=first.member_id, protocols=("range", "roundrobin"))
        )
        b_joined = b.receive(b_join, b_corr)

        assert a_join.generation_id == b_joined.generation_id == first.generation_id + 1
        assert a_join.protocol_name == b_joined.protocol_name == "roundrobin"
        assert a_join.leader == b_joined.leader == first.member_id
        assert {m.member_id for m in a_join.members} == {first.member_id, b_id}
        assert b_joined.members == ()  # only the leader sees the members

        gen = a_join.generation_id
        b_sync = sync(group, gen, b_id)
        b_corr = b.send(b_sync)  # the follower waits for the leader's assignment
        b.wait_request_taken()
        a_synced = a.request(
            sync(group, gen, first.member_id, [(first.member_id, b"A"), (b_id, b"B")])
        )
        assert a_synced.assignment == b"A"
        assert b.receive(b_sync, b_corr).assignment == b"B"

        # A third member with no protocol in common is refused.
        with RawClient(bootstrap) as c:
            refused = c.request(join(group, protocols=("range",), version=3))
            assert refused.error_code == INCONSISTENT_PROTOCOL
            assert (
                c.request(
                    join(group, protocol_type="connect", protocols=("roundrobin",), version=3)
                ).error_code
                == INCONSISTENT_PROTOCOL
            )


def test_member_that_does_not_rejoin_is_dropped_at_rebalance_timeout(shared_gateway, group):
    bootstrap = shared_gateway.bootstrap
    timeouts = {"session_ms": 30_000, "rebalance_ms": 1_000}
    with RawClient(bootstrap) as a, RawClient(bootstrap) as b, RawClient(bootstrap) as c:
        # a and b form generation 1 (b's join waits for a's, within the initial delay)
        a_first = a.request(join(group, **timeouts))
        b_first = b.request(join(group, **timeouts))
        a_req = join(group, member_id=a_first.member_id, **timeouts)
        a_corr = a.send(a_req)
        b_gen1 = b.request(join(group, member_id=b_first.member_id, **timeouts))
        a_gen1 = a.receive(a_req, a_corr)
        assert a_gen1.generation_id == b_gen1.generation_id == 1
        leader = a_gen1.leader
        (a if leader == a_gen1.member_id else b).request(sync(group, 1, leader))

        # c joins; only a rejoins; b stays silent and is dropped after the rebalance timeout
        c_first = c.request(join(group, **timeouts))
        c_req = join(group, member_id=c_first.member_id, **timeouts)
        c_corr = c.send(c_req)
        # a rejoins only once c's join has started the rebalance (on a loaded machine a's
        # request could otherwise overtake c's and find the group still Stable).
        while a.request(heartbeat(group, 1, a_gen1.member_id)).error_code != REBALANCE_IN_PROGRESS:
            time.sleep(0.01)
        started = time.monotonic()
        a_gen2 = a.request(join(group, member_id=a_gen1.member_id, **timeouts))
        elapsed = time.monotonic() - started
        c_gen2 = c.receive(c_req, c_corr)
    assert a_gen2.generation_id == c_gen2.generation_id == 2
    assert 0.7 <= elapsed <= 5
    members = {m.member_id for m in (a_gen2.members or c_gen2.members)}
    assert members == {a_gen1.member_id, c_first.member_id}


def test_session_timeout_expires_a_silent_member(shared_gateway, group):
    bootstrap = shared_gateway.bootstrap
    timeouts = {"session_ms": 1_000, "rebalance_ms": 5_000}
    with RawClient(bootstrap) as a, RawClient(bootstrap) as b:
        a_gen1 = join_member(a, group, **timeouts)
        a_id = a_gen1.member_id
        a.request(sync(group, 1, a_id))
        # b joins: a learns about it from its heartbeat and rejoins: generation 2
        b_id = b.request(join(group, **timeouts)).member_id
        b_req = join(group, member_id=b_id, **timeouts)
        b_corr = b.send(b_req)
        b.wait_request_taken()
        assert a.request(heartbeat(group, 1, a_id)).error_code == REBALANCE_IN_PROGRESS
        assert a.request(join(group, member_id=a_id, **timeouts)).generation_id == 2
        assert b.receive(b_req, b_corr).generation_id == 2
        b_sync = sync(group, 2, b_id)
        b_corr = b.send(b_sync)
        a.request(sync(group, 2, a_id, [(a_id, b"a"), (b_id, b"b")]))
        assert b.receive(b_sync, b_corr).assignment == b"b"
        silent_since = time.monotonic()
        # From now on only a heartbeats: b's session runs out after a second.
        while (error := a.request(heartbeat(group, 2, a_id)).error_code) == NONE:
            assert time.monotonic() - silent_since < 5, "b never expired"
            time.sleep(0.1)
        expired_after = time.monotonic() - silent_since
        assert error == REBALANCE_IN_PROGRESS
        alone = a.request(join(group, member_id=a_id, **timeouts))
        assert b.request(heartbeat(group, 2, b_id)).error_code == UNKNOWN_MEMBER
    assert 0.8 <= expired_after <= 2.5
    assert alone.generation_id == 3
    assert [m.member_id for m in alone.members] == [a_id]


def test_leave_group_batch_and_static_removal(shared_gateway, group):
    bootstrap = shared_gateway.bootstrap
    with RawClient(bootstrap) as a, RawClient(bootstrap) as b:
        a_req = join(group, instance="inst-a", version=5)
        a_corr = a.send(a_req)
        b_joined = b.request(join(group, instance="inst-b", version=5))
        a_joined = a.receive(a_req, a_corr)
        assert a_joined.error_code == b_joined.error_code == NONE  # static: no handshake
        assert a_joined.member_id.startswith("inst-a-")
        left = a.request(
            request(
                13,
                4,
                group_id=group,
                members=[
                    {"member_id": a_joined.member_id, "group_instance_id": "inst-a"},
                    {"member_id": "", "group_instance_id": "inst-b"},  # by instance id alone
                    {"member_id": "nobody"},
                    {"member_id": "", "group_instance_id": "inst-z"},
                ],
            )
        )
    assert left.error_code == NONE
    assert [m.error_code for m in left.members] == [NONE, NONE, UNKNOWN_MEMBER, UNKNOWN_MEMBER]
    with RawClient(bootstrap) as client:
        described = client.request(
            request(15, 5, groups=[group], include_authorized_operations=False)
        )
    assert described.groups[0].group_state == "Empty"


def test_static_member_rejoin_is_fenced_and_keeps_assignment(shared_gateway, group):
    bootstrap = shared_gateway.bootstrap
    with RawClient(bootstrap) as old, RawClient(bootstrap) as new:
        first = old.request(join(group, instance="inst-1"))
        assert first.leader == first.member_id
        old.request(sync(group, 1, first.member_id, [(first.member_id, b"p0,p1")]))

        # The restarted instance: same instance id, no member id. No rebalance: the same
        # generation, and the old leader id so that it does not try to assign.
        second = new.request(join(group, instance="inst-1"))
        assert second.error_code == NONE
        assert second.member_id != first.member_id
        assert (second.generation_id, second.leader) == (1, first.member_id)
        assert second.members == ()
        synced = new.request(sync(group, 1, second.member_id, instance="inst-1"))
        assert synced.assignment == b"p0,p1"

        stale = old.request(heartbeat(group, 1, first.member_id, instance="inst-1"))
        assert stale.error_code == FENCED
        assert new.request(heartbeat(group, 1, second.member_id, "inst-1")).error_code == NONE


# --- offsets ---------------------------------------------------------------------------------


def commit(
    group: str,
    topic: str,
    offsets: dict[int, int],
    generation: int = -1,
    member_id: str = "",
    metadata: str | None = "meta",
) -> Any:
    partitions = [
        {"partition_index": p, "committed_offset": o, "committed_metadata": metadata}
        for p, o in offsets.items()
    ]
    topics = [{"name": topic, "partitions": partitions}]
    return request(
        8,
        8,
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        topics=topics,
    )


def commit_errors(response: Any) -> list[int]:
    return [p.error_code for t in response.topics for p in t.partitions]


def fetch_all(client: RawClient, group: str) -> dict[tuple[str, int], tuple[int, str | None]]:
    response = client.request(request(9, 7, group_id=group, topics=None))
    assert response.error_code == NONE
    return {
        (t.name, p.partition_index): (p.committed_offset, p.metadata)
        for t in response.topics
        for p in t.partitions
    }


def test_offset_commit_fetch_delete_rules(shared_gateway, group, topic):
    bootstrap = shared_gateway.bootstrap
    with RawClient(bootstrap) as client, RawClient(bootstrap) as member:
        # Without group management (generation -1) into a group that has no members.
        assert commit_errors(client.request(commit(group, topic, {0: 5, 1: 7}))) == [NONE, NONE]
        assert fetch_all(client, group) == {(topic, 0): (5, "meta"), (topic, 1): (7, "meta")}
        missing = client.request(commit(group, "no-such-topic", {0: 1}))
        assert commit_errors(missing) == [UNKNOWN_TOPIC]
        assert commit_errors(client.request(commit(group, topic, {9: 1}))) == [UNKNOWN_TOPIC]
        too_big = client.request(commit(group, topic, {0: 6}, metadata="x" * 5000))
        assert commit_errors(too_big) == [OFFSET_METADATA_TOO_LARGE]

        joined = join_member(member, group, metadata=subscription(topic))
        me, gen = joined.member_id, joined.generation_id
        member.request(sync(group, gen, me, [(me, b"")]))
        # Now the group has a member: only it may commit, with its generation.
        assert commit_errors(client.request(commit(group, topic, {0: 6}))) == [UNKNOWN_MEMBER]
        wrong = client.request(commit(group, topic, {0: 6}, generation=gen + 1, member_id=me))
        assert commit_errors(wrong) == [ILLEGAL_GENERATION]
        right = member.request(commit(group, topic, {0: 8}, generation=gen, member_id=me))
        assert commit_errors(right) == [NONE]
        assert fetch_all(client, group)[(topic, 0)] == (8, "meta")

        # OffsetDelete: the group subscribes to the topic, so its offsets stay.
        partition_1 = [{"name": topic, "partitions": [{"partition_index": 1}]}]
        delete = request(47, 0, group_id=group, topics=partition_1)
        deleted = client.request(delete)
        assert deleted.topics[0].partitions[0].error_code == GROUP_SUBSCRIBED_TO_TOPIC
        # DeleteGroups: not while it has members.
        refused = client.request(request(42, 2, groups_names=[group]))
        assert refused.results[0].error_code == NON_EMPTY_GROUP
        states = client.request(request(16, 4, states_filter=["stable"]))
        assert group in {g.group_id for g in states.groups}

        member.request(request(13, 4, group_id=group, members=[{"member_id": me}]))
        deleted = client.request(delete)
        assert (deleted.error_code, deleted.topics[0].partitions[0].error_code) == (NONE, NONE)
        assert fetch_all(client, group) == {(topic, 0): (8, "meta")}
        states = client.request(request(16, 4, states_filter=["Empty"]))
        assert group in {g.group_id for g in states.groups}
        gone = client.request(request(42, 2, groups_names=[group]))
        assert gone.results[0].error_code == NONE
        assert fetch_all(client, group) == {}
        assert group not in {g.group_id for g in client.request(request(16, 4)).groups}


def test_offsets_of_a_deleted_topic_are_forgotten(shared_gateway, group, topic):
    with RawClient(shared_gateway.bootstrap) as client:
        assert commit_errors(client.request(commit(group, topic, {0: 3}))) == [NONE]
        deleted = client.request(request(20, 4, topic_names=[topic], timeout=10_000))
        assert deleted.responses[0].error_code == NONE
        assert fetch_all(client, group) == {}
