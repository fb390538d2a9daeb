"""Committed offsets are durable: they survive a gateway restart (and a crash), and a
restarted group resumes exactly where it committed."""

from __future__ import annotations

import pytest
from kio.schema.list_groups.v4.request import ListGroupsRequest
from support.client import RawClient
from support.groups import (
    committed_offsets,
    duplicates,
    end_offsets,
    produce,
    stop_all,
    wait_committed,
    wait_consumed,
    wait_for_cover,
)

PARTITIONS = 3
PER_PARTITION = 10


def listed_groups(bootstrap: str) -> dict[str, str]:
    with RawClient(bootstrap) as client:
        response = client.request(ListGroupsRequest(states_filter=()))
    return {g.group_id: g.group_state for g in response.groups}


@pytest.mark.parametrize("how", ["restart", "kill"])
def test_committed_offsets_survive_restart_and_group_resumes(gateway, group_run, how):
    run = group_run(gateway, "grp-durable", PARTITIONS)
    bootstrap, group, sink = run.bootstrap, run.group, run.sink
    members = run.members(["confluent", "kafka-python"])
    run.start(members)
    run.produce_round("first", PER_PARTITION)
    stop_all(members)
    committed = committed_offsets(bootstrap, group)

    if how == "restart":
        gateway.restart()
    else:
        gateway.kill()  # acknowledged commits are fsync'd: a crash loses none
        gateway.start()

    assert committed_offsets(bootstrap, group) == committed
    assert listed_groups(bootstrap).get(group) == "Empty"
    second = produce(bootstrap, run.topic, PARTITIONS, "second", PARTITIONS * PER_PARTITION)
    # A new incarnation of the group (other clients, even) starts from the commits, not from
    # the beginning (auto.offset.reset is earliest).
    resumed = run.members(["aiokafka", "confluent"], prefix="r")
    run.start(resumed)
    wait_consumed(sink, second)
    wait_committed(bootstrap, group, end_offsets(run.partitions, 2 * PER_PARTITION))
    run.stop()
    assert duplicates(sink) == {}
    assert {c.value for c in sink if c.member.startswith("r")} == second


def test_live_group_reforms_after_gateway_restart(gateway, group_run):
    """Membership is not durable: members find out on their next request (UNKNOWN_MEMBER_ID
    or a dead connection), rejoin, and continue from the committed offsets."""
    run = group_run(gateway, "grp-live", PARTITIONS)
    members = run.members(["kafka-python", "confluent", "aiokafka"])
    run.start(members)
    first = run.produce_round("first", PER_PARTITION)
    gateway.restart()
    second = produce(run.bootstrap, run.topic, PARTITIONS, "second", PARTITIONS * PER_PARTITION)
    wait_for_cover(members, run.partitions, timeout=60)
    wait_consumed(run.sink, second, timeout=60)
    wait_committed(run.bootstrap, run.group, end_offsets(run.partitions, 2 * PER_PARTITION))
    run.stop()
    sink = run.sink
    assert [m.stats.errors for m in members] == [[], [], []]
    # What was committed before the restart is never read again; records consumed while
    # the group re-formed may be (commits of a superseded generation are refused).
    assert duplicates(sink, first) == {}
    assert {c.value for c in sink} == first | second
