"""Three-member consumer groups of real clients: assignment, a member leaving, a late joiner.

Each case runs three members (one library, or all three mixed) against the gateway. After
every membership change the members' assignments must be disjoint and cover every
partition, and every record produced must be consumed by exactly one member: the members
commit after processing, and the test waits for the commits before changing membership, so
there is no at-least-once window to excuse a duplicate.
"""

from __future__ import annotations

import pytest
from support.groups import MEMBER_KINDS, ROUND_PER_PARTITION, Member, duplicates, wait_for_cover

PARTITIONS = 6
PER_PARTITION = ROUND_PER_PARTITION

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
def test_three_members_then_leave_then_late_join(shared_gateway, group_run, kinds, strategy):
    run = group_run(shared_gateway, f"grp-{strategy}", PARTITIONS)
    members: list[Member] = run.members(kinds, strategy)
    everyone = list(members)
    run.start(members)
    phase_values = [run.produce_round("joined", PER_PARTITION)]

    # The middle member leaves: the other two take over its partitions.
    leaver = members.pop(1)
    leaver.stop()
    wait_for_cover(members, run.partitions)
    phase_values.append(run.produce_round("left", 2 * PER_PARTITION))

    # A late joiner (of the leaver's kind) gets a share of the partitions.
    late = run.adopt(
        MEMBER_KINDS[leaver.kind](
            f"late-{leaver.kind}", run.bootstrap, run.group, [run.topic], run.sink, strategy
        )
    )
    everyone.append(late)
    members.append(late)
    run.start([late], cover=members)
    phase_values.append(run.produce_round("late", 3 * PER_PARTITION))
    run.stop()
    sink = run.sink

    assert [m.stats.errors for m in everyone] == [[] for _ in everyone]
    assert duplicates(sink) == {}, "a record was consumed twice"
    consumed = {c.value for c in sink}
    assert set().union(*phase_values) == consumed
    # Every member of each phase did some of the work.
    late_values = {c.member for c in sink if c.value in phase_values[2]}
    assert late_values == {m.name for m in members}
