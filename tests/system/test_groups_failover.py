"""A group member that dies without leaving (SIGKILL): its partitions move to the others
once its session times out, and nothing is lost.

Records the killed member consumed but may not have committed are the only ones allowed to
be consumed twice (Kafka's at-least-once window); everything else exactly once.
"""

from __future__ import annotations

import time

from support.groups import (
    SESSION_TIMEOUT_MS,
    ProcessMember,
    duplicates,
    produce,
    wait_consumed,
    wait_for_cover,
)

PARTITIONS = 6
PER_PARTITION = 10


def test_killed_member_partitions_move_after_session_timeout(shared_gateway, group_run):
    run = group_run(shared_gateway, "grp-kill", PARTITIONS)
    survivors = run.members(["kafka-python", "aiokafka"])
    victim = run.adopt(
        ProcessMember("victim-confluent", run.bootstrap, run.group, [run.topic], run.sink)
    )
    run.start(survivors, cover=[*survivors, victim])
    victim_partitions = victim.assignment
    before = run.produce_round("before", PER_PARTITION)

    victim.kill()
    killed_at = time.monotonic()
    after = produce(run.bootstrap, run.topic, PARTITIONS, "after", PARTITIONS * PER_PARTITION)
    wait_for_cover(survivors, run.partitions, timeout=SESSION_TIMEOUT_MS / 1000 + 20)
    moved_after = time.monotonic() - killed_at
    wait_consumed(run.sink, after)
    run.stop()
    sink = run.sink

    # The coordinator noticed only when the session expired (a dead TCP connection is no
    # reason to drop a member), and not much later either.
    assert SESSION_TIMEOUT_MS / 1000 - 1.5 <= moved_after <= SESSION_TIMEOUT_MS / 1000 + 10
    assert victim_partitions, "the victim had partitions to lose"
    assert [m.stats.errors for m in survivors] == [[], []]
    assert {c.value for c in sink} == before | after
    victim_values = {c.value for c in sink if c.member == victim.name}
    assert set(duplicates(sink)) <= victim_values, "only uncommitted records may repeat"
    # Records of the victim's partitions produced after the kill went to the survivors.
    moved = {
        c.member for c in sink if c.value in after and (c.topic, c.partition) in victim_partitions
    }
    assert moved and victim.name not in moved
