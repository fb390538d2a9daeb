"""Three-member consumer groups of real clients: assignment, a member leaving, a late joiner.

Each case runs three members (one library, or all three mixed) against the gateway. After
every membership change the members' assignments must be disjoint and cover every
partition, and every record produced must be consumed by exactly one member: the members
commit after processing, and the test waits for the commits before changing membership, so
there is no at-least-once window to excuse a duplicate.
"""

from __future__ import annotations

import pytest
from group_members import (
    MEMBER_KINDS,
    Consumed,
    Member,
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
from helpers import unique_topic

PARTITIONS = 6
PER_PARTITION = 10

CASES = [
    pytest.param(["kafka-python"] * 3, "range", id="kafka-python-range"),
    pytest.param(["kafka-python"] * 3, "roundrobin", id="kafka-python-roundrobin"),
    pytest.param(["confluent"] * 3, "range", id="confluent-range"),
    pytest.param(["confluent"] * 3, "roundrobin", id="confluent-roundrobin"),
    pytest.param(["confluent"] * 3, "cooperative-sticky", id="confluent-cooperative-sticky"),
    pytest.param(["aiokafka"] * 3, "roundrobin", id="aiokafka-roundrobin"),
    pytest.param(["kafka-python", "confluent", "aiokafka"], "range", id="mixed-range"),
    pytest.param(["aiokafka", "kafka-python", "confluent"], "roundrobin", id="mixed-roundrobin"),
]


@pytest.mark.parametrize(("kinds", "strategy"), CASES)
def test_three_members_then_leave_then_late_join(shared_gateway, kinds, strategy):
    bootstrap = shared_gateway.bootstrap
    topic = unique_topic(f"grp-{strategy}")
    group = f"group-{topic}"
    partitions = create_topic(bootstrap, topic, PARTITIONS)
    sink: list[Consumed] = []
    members: list[Member] = make_members(kinds, bootstrap, group, [topic], sink, strategy)
    everyone = list(members)
    try:
        for member in members:
            member.start()
        wait_for_cover(members, partitions)
        phase_values = [produce(bootstrap, topic, PARTITIONS, "joined", PARTITIONS * PER_PARTITION)]
        wait_consumed(sink, phase_values[-1])
        wait_committed(bootstrap, group, end_offsets(partitions, PER_PARTITION))

        # The middle member leaves: the other two take over its partitions.
        leaver = members.pop(1)
        leaver.stop()
        wait_for_cover(members, partitions)
        phase_values.append(
            produce(bootstrap, topic, PARTITIONS, "left", PARTITIONS * PER_PARTITION)
        )
        wait_consumed(sink, phase_values[-1])
        wait_committed(bootstrap, group, end_offsets(partitions, 2 * PER_PARTITION))

        # A late joiner (of the leaver's kind) gets a share of the partitions.
        late = MEMBER_KINDS[leaver.kind](
            f"late-{leaver.kind}", bootstrap, group, [topic], sink, strategy
        )
        everyone.append(late)
        members.append(late.start())
        wait_for_cover(members, partitions)
        phase_values.append(
            produce(bootstrap, topic, PARTITIONS, "late", PARTITIONS * PER_PARTITION)
        )
        wait_consumed(sink, phase_values[-1])
        wait_committed(bootstrap, group, end_offsets(partitions, 3 * PER_PARTITION))
    finally:
        stop_all(everyone)

    assert [m.stats.errors for m in everyone] == [[] for _ in everyone]
    assert duplicates(sink) == {}, "a record was consumed twice"
    consumed = {c.value for c in sink}
    assert set().union(*phase_values) == consumed
    # Every member of each phase did some of the work.
    late_values = {c.member for c in sink if c.value in phase_values[2]}
    assert late_values == {m.name for m in members}
