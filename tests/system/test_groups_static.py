"""Static membership (KIP-345): a member with a group.instance.id that restarts within its
session timeout gets its partitions back without the rest of the group rebalancing."""

from __future__ import annotations

import time

import pytest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from support.client import RawClient, wait_until
from support.groups import ConfluentMember, KafkaPythonMember, duplicates

PARTITIONS = 6
PER_PARTITION = 5


def describe(bootstrap: str, group: str):
    with RawClient(bootstrap) as client:
        response = client.request(
            DescribeGroupsRequest(groups=(group,), include_authorized_operations=False)
        )
    return response.groups[0]


@pytest.mark.parametrize("kind", [ConfluentMember, KafkaPythonMember], ids=["confluent", "kp"])
def test_static_member_restart_keeps_partitions_without_rebalance(shared_gateway, group_run, kind):
    run = group_run(shared_gateway, "grp-static", PARTITIONS)
    bootstrap, group, topic, sink = run.bootstrap, run.group, run.topic, run.sink
    others = run.members(["confluent", "confluent"])
    static = run.adopt(
        kind("static-1", bootstrap, group, [topic], sink, "range", instance_id="instance-1")
    )
    restarted = run.adopt(
        kind("static-2", bootstrap, group, [topic], sink, "range", instance_id="instance-1")
    )
    run.start([*others, static])
    run.produce_round("first", PER_PARTITION, per_partition=PER_PARTITION)
    before = describe(bootstrap, group)
    assert before.group_state == "Stable"
    callbacks = [(m.stats.assigned_calls, m.stats.revoked_calls) for m in others]
    static_partitions = static.assignment
    old_member_id = next(m.member_id for m in before.members if m.group_instance_id == "instance-1")

    static.stop()  # a static member does not send LeaveGroup: the group stays as it is
    restarted.start()
    wait_until(lambda: restarted.assignment == static_partitions, timeout=10)
    second = run.produce_round("second", per_partition=PER_PARTITION)
    time.sleep(1.0)  # would-be rebalances have time to show
    after = describe(bootstrap, group)
    callbacks_after = [(m.stats.assigned_calls, m.stats.revoked_calls) for m in others]
    run.stop()

    assert after.group_state == "Stable"
    assert len(after.members) == 3
    new_member_id = next(m.member_id for m in after.members if m.group_instance_id == "instance-1")
    assert new_member_id != old_member_id
    # Nobody else noticed: no revocation, no new assignment.
    assert callbacks_after == callbacks
    assert all(m.stats.errors == [] for m in [*others, static, restarted])
    # The restarted member resumed from the committed offsets of its predecessor.
    assert duplicates(sink) == {}
    assert {
        c.member for c in sink if c.value in second and (c.topic, c.partition) in static_partitions
    } == {"static-2"}
