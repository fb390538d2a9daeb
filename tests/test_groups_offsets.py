"""Committed offsets are durable: they survive a gateway restart (and a crash), and a
restarted group resumes exactly where it committed."""

from __future__ import annotations

import pytest
from group_members import (
    Consumed,
    committed_offsets,
    create_topic,
    duplicates,
    end_offsets,
    make_members,
    produce,
    stop_all,
    wait_committed,
    wait_consumed,
    wait_for_cover,
)
from helpers import RawClient, unique_topic
from kio.schema.list_groups.v4.request import ListGroupsRequest

PARTITIONS = 3
PER_PARTITION = 10


def listed_groups(bootstrap: str) -> dict[str, str]:
    with RawClient(bootstrap) as client:
        response = client.request(ListGroupsRequest(states_filter=()))
    return {g.group_id: g.group_state for g in response.groups}


@pytest.mark.parametrize("how", ["restart", "kill"])
def test_committed_offsets_survive_restart_and_group_resumes(gateway, how):
    bootstrap = gateway.bootstrap
    topic = unique_topic("grp-durable")
    group = f"group-{topic}"
    partitions = create_topic(bootstrap, topic, PARTITIONS)
    sink: list[Consumed] = []
    members = make_members(["confluent", "kafka-python"], bootstrap, group, [topic], sink, "range")
    try:
        for member in members:
            member.start()
        wait_for_cover(members, partitions)
        first = produce(bootstrap, topic, PARTITIONS, "first", PARTITIONS * PER_PARTITION)
        wait_consumed(sink, first)
        wait_committed(bootstrap, group, end_offsets(partitions, PER_PARTITION))
    finally:
        stop_all(members)
    committed = committed_offsets(bootstrap, group)

    if how == "restart":
        gateway.restart()
    else:
        gateway.kill()  # acknowledged commits are fsync'd: a crash loses none
        gateway.start()

    assert committed_offsets(bootstrap, group) == committed
    assert listed_groups(bootstrap).get(group) == "Empty"
    second = produce(bootstrap, topic, PARTITIONS, "second", PARTITIONS * PER_PARTITION)
    # A new incarnation of the group (other clients, even) starts from the commits, not from
    # the beginning (auto.offset.reset is earliest).
    resumed = make_members(["aiokafka", "confluent"], bootstrap, group, [topic], sink, "range", "r")
    try:
        for member in resumed:
            member.start()
        wait_for_cover(resumed, partitions)
        wait_consumed(sink, second)
        wait_committed(bootstrap, group, end_offsets(partitions, 2 * PER_PARTITION))
    finally:
        stop_all(resumed)
    assert duplicates(sink) == {}
    assert {c.value for c in sink if c.member.startswith("r")} == second


def test_live_group_reforms_after_gateway_restart(gateway):
    """Membership is not durable: members find out on their next request (UNKNOWN_MEMBER_ID
    or a dead connection), rejoin, and continue from the committed offsets."""
    bootstrap = gateway.bootstrap
    topic = unique_topic("grp-live")
    group = f"group-{topic}"
    partitions = create_topic(bootstrap, topic, PARTITIONS)
    sink: list[Consumed] = []
    kinds = ["kafka-python", "confluent", "aiokafka"]
    members = make_members(kinds, bootstrap, group, [topic], sink, "range")
    try:
        for member in members:
            member.start()
        wait_for_cover(members, partitions)
        first = produce(bootstrap, topic, PARTITIONS, "first", PARTITIONS * PER_PARTITION)
        wait_consumed(sink, first)
        wait_committed(bootstrap, group, end_offsets(partitions, PER_PARTITION))
        gateway.restart()
        second = produce(bootstrap, topic, PARTITIONS, "second", PARTITIONS * PER_PARTITION)
        wait_for_cover(members, partitions, timeout=60)
        wait_consumed(sink, second, timeout=60)
        wait_committed(bootstrap, group, end_offsets(partitions, 2 * PER_PARTITION))
    finally:
        stop_all(members)
    assert [m.stats.errors for m in members] == [[], [], []]
    # What was committed before the restart is never read again; records consumed while
    # the group re-formed may be (commits of a superseded generation are refused).
    assert duplicates(sink, first) == {}
    assert {c.value for c in sink} == first | second
