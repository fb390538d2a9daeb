"""The next-generation consumer group protocol (`group.protocol=consumer`) with confluent-kafka.

The gateway assigns (server-side assignors); members commit after processing and the test
waits for the commits before changing membership, so every record must be consumed exactly
once by the group as a whole. The gateway runs with a short heartbeat interval and session
timeout so that changes settle in a second or two.
"""

from __future__ import annotations

import argparse
import io
import time
import uuid

import pytest
from support.client import wait_until
from support.groups import (
    ROUND_PER_PARTITION,
    ConfluentConsumerProtocolMember,
    ConfluentMember,
    Consumed,
    create_topic,
    duplicates,
    produce,
    wait_consumed,
    wait_for_cover,
)

GATEWAY_ARGS = (
    "--group-consumer-heartbeat-interval-ms",
    "300",
    "--group-consumer-session-timeout-ms",
    "4000",
)
KIND = "confluent-consumer-protocol"


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_three_members_share_then_leave_and_join(shared_gateway, group_run, assignor):
    run = group_run(shared_gateway, f"kip848-{assignor}", 12)
    members = run.members([KIND] * 3, assignor)
    everyone = list(members)
    run.start(members)
    # A cover can come before the balance: a member may still hold partitions it is
    # about to revoke while the newest has only part of its share.
    wait_until(lambda: sorted(len(m.assignment) for m in members) == [4, 4, 4], timeout=20)
    values = [run.produce_round("joined", ROUND_PER_PARTITION)]

    leaver = members.pop(0)
    leaver.stop()
    wait_for_cover(members, run.partitions)
    values.append(run.produce_round("left", 2 * ROUND_PER_PARTITION))

    late = run.adopt(
        ConfluentConsumerProtocolMember(
            "late", run.bootstrap, run.group, [run.topic], run.sink, assignor
        )
    )
    everyone.append(late)
    members.append(late)
    run.start([late], cover=members)
    values.append(run.produce_round("late", 3 * ROUND_PER_PARTITION))
    run.stop()

    assert [m.stats.errors for m in everyone] == [[] for _ in everyone]
    assert duplicates(run.sink) == {}, "a record was consumed twice"
    assert set().union(*values) == {c.value for c in run.sink}


def test_regex_subscription_picks_up_a_new_topic(shared_gateway):
    prefix = f"rx{uuid.uuid4().hex[:8]}"
    first = create_topic(shared_gateway.bootstrap, f"{prefix}-a", 2)
    sink: list[Consumed] = []
    member = ConfluentConsumerProtocolMember(
        "rx", shared_gateway.bootstrap, f"group-{prefix}", [f"^{prefix}-.*"], sink, "uniform"
    )
    member.start()
    try:
        wait_for_cover([member], first)
        later = create_topic(shared_gateway.bootstrap, f"{prefix}-b", 3)
        wait_for_cover([member], first | later)
        values = produce(shared_gateway.bootstrap, f"{prefix}-b", 3, "late-topic", 30)
        wait_consumed(sink, values)
    finally:
        member.stop()
    assert member.stats.errors == []


def test_static_member_comes_back_to_its_partitions(shared_gateway, group_run):
    run = group_run(shared_gateway, "kip848-static", 4)
    a, b = (
        run.adopt(
            ConfluentConsumerProtocolMember(
                name, run.bootstrap, run.group, [run.topic], run.sink, "uniform", name
            )
        )
        for name in ("static-a", "static-b")
    )
    run.start([a, b])
    wait_until(lambda: len(a.assignment) == len(b.assignment) == 2, timeout=20)
    before = a.assignment
    a.stop()  # a static member leaves "for now": b does not take its partitions
    time.sleep(1.5)
    assert b.assignment == run.partitions - before
    again = run.adopt(
        ConfluentConsumerProtocolMember(
            "static-a", run.bootstrap, run.group, [run.topic], run.sink, "uniform", "static-a"
        )
    )
    again.start()
    wait_until(lambda: again.assignment == before, timeout=20, interval=0.05)
    assert b.assignment == run.partitions - before
    values = run.produce_round("static", ROUND_PER_PARTITION)
    assert duplicates(run.sink, values) == {}


def test_classic_members_of_the_same_group_are_refused(shared_gateway, group_run):
    """The two protocols do not mix in one group while it has members (the classic member
    gets INCONSISTENT_GROUP_PROTOCOL); a classic group in another id is unaffected."""
    run = group_run(shared_gateway, "kip848-mixed", 2)
    new = run.members([KIND], "uniform")[0]
    run.start([new])
    classic = run.adopt(
        ConfluentMember("classic", run.bootstrap, run.group, [run.topic], run.sink, "range")
    )
    classic.start()
    wait_until(lambda: classic.stats.errors, timeout=20, interval=0.05)
    assert "INCONSISTENT_GROUP_PROTOCOL" in classic.stats.errors[0]
    assert new.assignment == run.partitions


def test_listing_describing_and_offset_fetch_of_a_consumer_group(shared_gateway, group_run):
    """ListGroups v5 types, the admin client's describe (ConsumerGroupDescribe), `streamgate
    groups`, and OffsetFetch v9 checking the member epoch of a consumer group member."""
    from confluent_kafka import ConsumerGroupType
    from confluent_kafka.admin import AdminClient
    from kio.schema.offset_fetch.v9.request import OffsetFetchRequest, OffsetFetchRequestGroup
    from support.client import RawClient

    from cli.groups import run_groups

    run = group_run(shared_gateway, "kip848-admin", 3)
    member = run.members([KIND], "range")[0]
    run.start([member])
    run.produce_round("admin", ROUND_PER_PARTITION)

    admin = AdminClient({"bootstrap.servers": run.bootstrap})
    listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(20)
    assert run.group in {g.group_id for g in listed.valid}
    classic = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(20)
    assert run.group not in {g.group_id for g in classic.valid}
    described = admin.describe_consumer_groups([run.group])[run.group].result(20)
    assert described.type == ConsumerGroupType.CONSUMER
    assert [len(m.assignment.topic_partitions) for m in described.members] == [3]

    out = io.StringIO()
    assert run_groups(argparse.Namespace(groups_command="list", bootstrap=run.bootstrap), out) == 0
    assert any(
        run.group in line and line.split()[-1] == "consumer" for line in out.getvalue().splitlines()
    )
    out = io.StringIO()
    args = argparse.Namespace(groups_command="describe", group=run.group, bootstrap=run.bootstrap)
    assert run_groups(args, out) == 0
    assert out.getvalue().count("m0-confluent-consumer-protocol") == 3  # owner of each partition

    with RawClient(run.bootstrap) as client:
        response = client.request(
            OffsetFetchRequest(
                groups=(
                    OffsetFetchRequestGroup(group_id=run.group, topics=None),
                    OffsetFetchRequestGroup(
                        group_id=run.group, member_id="nobody", member_epoch=1, topics=None
                    ),
                ),
                require_stable=False,
            )
        )
    tools, stranger = response.groups
    assert tools.error_code == 0
    assert sorted(p.committed_offset for t in tools.topics for p in t.partitions) == [10, 10, 10]
    assert stranger.error_code == 25  # UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("version", [3, 4])
def test_api_versions_finalizes_group_version_1(shared_gateway, version):
    """Features in ApiVersions v3+: group.version and share.version finalized at 1;
    group.version's supported range (0-1) is left out before v4, whose clients cannot read
    a minimum of 0 (as Kafka 4 does)."""
    import importlib

    from support.client import RawClient

    module = importlib.import_module(f"kio.schema.api_versions.v{version}.request")
    body = module.ApiVersionsRequest(client_software_name="tests", client_software_version="1")
    with RawClient(shared_gateway.bootstrap) as client:
        response = client.request(body)
    assert response.error_code == 0
    finalized = {
        f.name: (f.min_version_level, f.max_version_level) for f in response.finalized_features
    }
    assert finalized == {
        "group.version": (1, 1),
        "share.version": (1, 1),
        "transaction.version": (2, 2),
    }
    supported = {f.name: (f.min_version, f.max_version) for f in response.supported_features}
    share = {"share.version": (1, 1)}  # a minimum of 1: every version shows it
    from_zero = {"group.version": (0, 1), "transaction.version": (0, 2)}
    assert supported == ({**from_zero, **share} if version >= 4 else share)
    keys = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert keys[68] == (0, 1) and keys[69] == (0, 1)


@pytest.mark.gateway_args(*GATEWAY_ARGS)
def test_members_rejoin_after_a_gateway_restart(gateway, group_run):
    """Membership is not durable, committed offsets are: after a restart the members'
    heartbeats get UNKNOWN_MEMBER_ID, they join again with epoch 0 and resume at their
    commits, so nothing is consumed twice."""
    run = group_run(gateway, "kip848-restart", 4)
    members = run.members([KIND] * 2, "uniform")
    run.start(members)
    before = run.produce_round("before", ROUND_PER_PARTITION)
    gateway.restart()
    # both members back, and the group settled: the same disjoint cover for a second (a
    # busy machine may still be moving partitions right after the first cover)
    wait_for_cover(members, run.partitions)
    seen = [sorted(m.assignment) for m in members]
    settled = time.monotonic()
    while time.monotonic() - settled < 1.0:
        time.sleep(0.05)
        now = [sorted(m.assignment) for m in members]
        if now != seen:
            wait_for_cover(members, run.partitions)
            seen, settled = [sorted(m.assignment) for m in members], time.monotonic()
    after = run.produce_round("after", 2 * ROUND_PER_PARTITION)
    run.stop()
    assert duplicates(run.sink) == {}
    assert before | after == {c.value for c in run.sink}
