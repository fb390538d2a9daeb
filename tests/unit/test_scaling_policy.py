"""Unit tests (no gateway): scale request validation, split balancing, policy decisions,
and a scale event against a store in-process (sealed segments readable, offsets continue)."""

from __future__ import annotations

import os

import pytest
import trio
from support.client import Rec, build_record_batch

from core.api import AppendResult
from core.scaling.plan import ScaleError, check_scale, split_range
from core.scaling.policy import ScalingPolicy, SegmentLoad, decide
from core.store import StoreSettings, StreamStore

OWNERS = [(0, 3, 1), (4, 7, 2), (8, 15, 3)]


def test_check_scale_split_and_merge() -> None:
    assert check_scale(OWNERS, [1], [(2, 3), (0, 1)]) == ("split", [(0, 1), (2, 3)])
    assert check_scale(OWNERS, [2, 1], [(0, 7)]) == ("merge", [(0, 7)])
    assert check_scale(OWNERS, [1, 2, 3], [(0, 15)])[0] == "merge"


@pytest.mark.parametrize(
    ("seal", "ranges", "message"),
    [
        ([9], [(0, 1), (2, 3)], "not an open segment"),
        ([1, 3], [(0, 3), (8, 15)], "not adjacent"),
        ([1], [(0, 1), (3, 3)], "must start at partition 2"),
        ([1], [(0, 1), (2, 4)], "must end at 3"),
        ([1], [(0, 3)], "at least two"),
        ([1, 2], [(0, 3), (4, 7)], "split (1 -> n) or a merge"),
        ([1], [(0, 0), (1, 0), (1, 3)], "empty range"),
        ([], [(0, 3)], "nothing to seal"),
        ([1, 1], [(0, 3)], "twice"),
    ],
)
def test_check_scale_refuses(seal, ranges, message) -> None:
    with pytest.raises(ScaleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_scale(OWNERS, seal, ranges)


def test_split_range_by_count_and_by_rate() -> None:
    assert split_range(0, 15, 2) == [(0, 7), (8, 15)]
    assert split_range(0, 9, 3) == [(0, 3), (4, 6), (7, 9)]
    assert split_range(4, 5, 8) == [(4, 4), (5, 5)]  # min(F, partitions)
    # One hot partition at the end gets a range of its own.
    assert split_range(0, 3, 2, [0, 0, 0, 10]) == [(0, 2), (3, 3)]
    assert split_range(0, 3, 2, [10, 0, 0, 0]) == [(0, 0), (1, 3)]
    assert split_range(0, 5, 2, [1, 1, 1, 1, 4, 4]) == [(0, 4), (5, 5)]
    with pytest.raises(ScaleError, match="cannot split further"):
        split_range(3, 3, 2)


def _load(sid, first, last, rate, age=100.0, rates=None):
    return SegmentLoad(sid, first, last, rate, age, rates or {})


def test_policy_fixed_never_scales() -> None:
    assert decide([_load(0, 0, 15, 1e9)], ScalingPolicy(), cooldown=0) == []


def test_policy_splits_hot_segment_into_factor_parts() -> None:
    policy = ScalingPolicy("data-rate", target=100, factor=4)
    (decision,) = decide([_load(0, 0, 15, 150)], policy, cooldown=10)
    assert decision.kind == "split" and decision.seal == [0]
    assert decision.new_ranges == [(0, 3), (4, 7), (8, 11), (12, 15)]
    assert "150.0 > target 100" in decision.reason


def test_policy_respects_cooldown_and_single_partition() -> None:
    policy = ScalingPolicy("event-rate", target=100)
    assert decide([_load(0, 0, 15, 500, age=5)], policy, cooldown=10) == []
    assert decide([_load(0, 3, 3, 500)], policy, cooldown=10) == []


def test_policy_merges_cold_neighbours_with_hysteresis() -> None:
    policy = ScalingPolicy("data-rate", target=100)
    loads = [_load(1, 0, 3, 20), _load(2, 4, 7, 20), _load(3, 8, 11, 20), _load(4, 12, 15, 90)]
    (decision,) = decide(loads, policy, cooldown=10)
    # 20 + 20 < 50 but 20 + 20 + 20 is not: only the first two merge; 90 is not cold.
    assert decision.kind == "merge" and decision.seal == [1, 2]
    assert decision.new_ranges == [(0, 7)]
    # Two halves of a just-split segment (each > T/2) never merge back.
    assert decide([_load(1, 0, 7, 60), _load(2, 8, 15, 60)], policy, cooldown=10) == []


def test_policy_merge_keeps_min_segments() -> None:
    loads = [_load(i, 4 * i, 4 * i + 3, 0) for i in range(4)]
    (decision,) = decide(loads, ScalingPolicy("data-rate", 100, min_segments=1), 10)
    assert decision.seal == [0, 1, 2, 3]
    decisions = decide(loads, ScalingPolicy("data-rate", 100, min_segments=3), 10)
    assert [d.seal for d in decisions] == [[0, 1]]
    assert decide(loads, ScalingPolicy("data-rate", 100, min_segments=4), 10) == []
    # Young segments are not merged.
    assert (
        decide([_load(0, 0, 3, 0, age=1), _load(1, 4, 7, 0)], ScalingPolicy("data-rate", 100), 10)
        == []
    )


def test_policy_from_configs() -> None:
    policy = ScalingPolicy.from_configs(
        {
            "streamgate.scaling.policy": "event-rate",
            "streamgate.scaling.target.rate": "1000",
            "streamgate.scaling.scale.factor": "3",
            "streamgate.scaling.min.segments": "2",
        }
    )
    assert policy == ScalingPolicy("event-rate", 1000.0, 3, 2)


def test_scale_in_process_keeps_offsets_and_reads(tmp_path) -> None:
    async def main() -> None:
        store = StreamStore(StoreSettings(str(tmp_path)))
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            stream = store.create_topic("t", 4)
            for p in range(4):
                assert (
                    await stream.append(p, build_record_batch([Rec(b"k", b"a")]), -1)
                ).error == 0
            # Queued but not yet durable when the split happens: drained by the sealed log.
            pending = [
                stream.start_append(p, build_record_batch([Rec(b"k", b"b")]), -1) for p in range(4)
            ]
            store.split("t", 0, 2)
            after = [
                await stream.append(p, build_record_batch([Rec(b"k", b"c")]), -1) for p in range(4)
            ]
            assert [r.base_offset for r in after] == [2, 2, 2, 2]
            for started in pending:
                assert not isinstance(started, AppendResult)
                assert (await started.wait()).error == 0
            store.merge("t", [1, 2])
            assert stream.owners() == [(0, 3, 3)]
            assert len((await stream.read(2, 0, 1 << 20)).batches) == 3
            with pytest.raises(ScaleError):
                store.split("t", 0)  # sealed
            store.stop()
        # Orphan file of an uncommitted scale event is removed on start.
        orphan = os.path.join(stream.directory, "segment-99.00000000000000000000.log")
        legacy_orphan = os.path.join(stream.directory, "segment-98.log")
        open(orphan, "wb").close()
        open(legacy_orphan, "wb").close()
        store = StreamStore(StoreSettings(str(tmp_path)))
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            stream = store.streams["t"]
            assert not os.path.exists(orphan) and not os.path.exists(legacy_orphan)
            assert stream.owners() == [(0, 3, 3)] and stream.epoch == 2
            assert [stream.partition(p).next_offset for p in range(4)] == [3, 3, 3, 3]
            assert (
                await stream.append(1, build_record_batch([Rec(b"k", b"d")]), -1)
            ).base_offset == 3
            store.stop()

    trio.run(main)
