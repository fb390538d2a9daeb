"""Group administration through real admin clients and the `streamgate groups` CLI:
ListGroups, DescribeGroups, DeleteGroups, OffsetFetch (and simple, generation -1 commits)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError
from confluent_kafka import TopicPartition as ConfluentTP
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka.structs import TopicPartition
from support.groups import Member

PARTITIONS = 3
PER_PARTITION = 10
TIMEOUT = 20
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Groups:
    topic: str
    active: str  # two confluent members, everything consumed and committed
    empty: str  # no members, offsets committed with generation -1: {0: 4, 1: 10}
    members: list[Member]


def simple_commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit without joining the group (generation -1), like a consumer using assign()."""
    consumer = ConfluentConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(
            offsets=[ConfluentTP(topic, p, o) for p, o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


@pytest.fixture
def groups(shared_gateway, group_run) -> Groups:
    run = group_run(shared_gateway, "grp-admin", PARTITIONS)
    active = f"active-{run.topic}"
    run.group = active
    members = run.members(["confluent", "confluent"])
    run.start(members)
    run.produce_round("v", PER_PARTITION)
    empty = f"empty-{run.topic}"
    simple_commit(run.bootstrap, empty, run.topic, {0: 4, 1: 10})
    return Groups(run.topic, active, empty, members)


def test_confluent_admin_client(shared_gateway, groups):
    admin = AdminClient({"bootstrap.servers": shared_gateway.bootstrap})

    listed = admin.list_consumer_groups(request_timeout=TIMEOUT).result()
    states = {g.group_id: g for g in listed.valid}
    assert states[groups.active].state == ConsumerGroupState.STABLE
    assert not states[groups.active].is_simple_consumer_group
    assert states[groups.empty].state == ConsumerGroupState.EMPTY
    assert states[groups.empty].is_simple_consumer_group
    only_empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result()
    only_empty_ids = {g.group_id for g in only_empty.valid}
    assert groups.empty in only_empty_ids and groups.active not in only_empty_ids

    described = admin.describe_consumer_groups([groups.active, groups.empty])
    active = described[groups.active].result()
    assert active.state == ConsumerGroupState.STABLE
    assert active.partition_assignor == "range"
    assert {m.client_id for m in active.members} == {m.name for m in groups.members}
    assert {m.host for m in active.members} == {"/127.0.0.1"}
    assigned = [tp.partition for m in active.members for tp in m.assignment.topic_partitions]
    assert sorted(assigned) == list(range(PARTITIONS))
    empty = described[groups.empty].result()
    assert empty.state == ConsumerGroupState.EMPTY and empty.members == []

    request = [ConsumerGroupTopicPartitions(groups.empty)]
    offsets = admin.list_consumer_group_offsets(request)[groups.empty].result()
    assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == {0: 4, 1: 10}

    results = admin.delete_consumer_groups([groups.active, groups.empty], request_timeout=TIMEOUT)
    with pytest.raises(Exception) as refused:
        results[groups.active].result()
    assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    results[groups.empty].result()
    remaining = {g.group_id for g in admin.list_consumer_groups().result().valid}
    assert groups.empty not in remaining and groups.active in remaining
    offsets = admin.list_consumer_group_offsets(request)[groups.empty].result()
    assert all(tp.offset < 0 for tp in offsets.topic_partitions)


def test_kafka_python_admin_client(shared_gateway, groups):
    admin = KafkaAdminClient(bootstrap_servers=shared_gateway.bootstrap)
    try:
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert listed[groups.active]["protocol_type"] == "consumer"
        assert listed[groups.empty]["protocol_type"] == ""
        stable = {g["group_id"] for g in admin.list_groups(states_filter=["Stable"])}
        assert groups.active in stable and groups.empty not in stable

        described = admin.describe_groups([groups.active, groups.empty])
        active = described[groups.active]
        assert active["error"] is None
        assert active["group_state"] == "Stable"
        assert active["protocol_data"] == "range"
        assert len(active["members"]) == 2
        assert {m["client_id"] for m in active["members"]} == {m.name for m in groups.members}
        assert described[groups.empty]["group_state"] == "Empty"

        offsets = admin.list_group_offsets([groups.active, groups.empty])
        assert {tp: om.offset for tp, om in offsets[groups.active].items()} == {
            TopicPartition(groups.topic, p): PER_PARTITION for p in range(PARTITIONS)
        }
        assert {tp.partition: om.offset for tp, om in offsets[groups.empty].items()} == {
            0: 4,
            1: 10,
        }

        deleted = admin.delete_groups([groups.empty, groups.active])
        assert deleted == {groups.empty: "OK", groups.active: "NonEmptyGroupError"}
        assert groups.empty not in {g["group_id"] for g in admin.list_groups()}
    finally:
        admin.close()


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "groups", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )


def table(output: str) -> list[dict[str, str]]:
    lines = [line for line in output.splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if line.startswith("GROUP"))
    headers = lines[start].split()
    return [dict(zip(headers, line.split(), strict=True)) for line in lines[start + 1 :]]


def test_cli_list_and_describe_show_lag(shared_gateway, groups):
    bootstrap = shared_gateway.bootstrap
    listed = run_cli("list", "--bootstrap", bootstrap)
    assert listed.returncode == 0, listed.stderr
    states = {row["GROUP"]: row["STATE"] for row in table(listed.stdout)}
    assert states[groups.active] == "Stable" and states[groups.empty] == "Empty"

    # The empty group: partition 0 committed at 4 of 10 (lag 6), partition 1 caught up.
    described = run_cli("describe", groups.empty, "--bootstrap", bootstrap)
    assert described.returncode == 0, described.stderr
    assert "has no active members" in described.stdout
    rows = {int(r["PARTITION"]): r for r in table(described.stdout)}
    assert set(rows) == {0, 1}
    assert (rows[0]["CURRENT-OFFSET"], rows[0]["LOG-END-OFFSET"], rows[0]["LAG"]) == (
        "4",
        "10",
        "6",
    )
    assert rows[1]["LAG"] == "0" and rows[1]["CONSUMER-ID"] == "-"

    # The active group: every partition owned by one of its members, nothing left to read.
    described = run_cli("describe", groups.active, "--bootstrap", bootstrap)
    assert described.returncode == 0, described.stderr
    rows = {int(r["PARTITION"]): r for r in table(described.stdout)}
    assert set(rows) == set(range(PARTITIONS))
    assert {r["LAG"] for r in rows.values()} == {"0"}
    assert {r["CLIENT-ID"] for r in rows.values()} <= {m.name for m in groups.members}
    assert {r["HOST"] for r in rows.values()} == {"/127.0.0.1"}
    assert all(r["CONSUMER-ID"].startswith(r["CLIENT-ID"]) for r in rows.values())

    missing = run_cli("describe", "no-such-group", "--bootstrap", bootstrap)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
