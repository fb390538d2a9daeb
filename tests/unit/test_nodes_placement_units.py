"""Units of placement and per-partition leaders (no server): where a new topic's segments
go, which node leads a partition, and the Metadata encoding of per-partition leaders
(byte-identical to kio's)."""

from __future__ import annotations

from typing import Any

import pytest

from core.cluster.view import ClusterView
from core.scaling.placement import least_loaded_other, place_segments
from core.scaling.plan import ScaleError, check_scale
from kafkawire.codec import RequestHeader, encode_response
from kafkawire.metadata_response import TopicMetadata, encode_metadata_response


def test_place_segments_least_loaded_first() -> None:
    assert place_segments({1: 2, 2: 0, 3: 1}, 6, 1) == [2, 3, 1]
    assert place_segments({1: 0, 2: 0, 3: 0}, 2, 3) == [1, 2]  # ties: lower id
    assert place_segments({1: 5, 2: 5}, 1, 2) == [1]
    assert place_segments({}, 4, 7) == [7]  # no view yet: this node


def test_least_loaded_other() -> None:
    assert least_loaded_other({1: 3, 2: 1, 3: 2}, 1) == 2
    assert least_loaded_other({1: 1, 2: 1}, 1) is None  # nobody is less loaded
    assert least_loaded_other({1: 4}, 1) is None


def test_a_move_is_one_successor_with_the_same_range() -> None:
    owners = [(0, 3, 0), (4, 7, 1)]
    assert check_scale(owners, [1], [(4, 7)], allow_move=True) == ("move", [(4, 7)])
    with pytest.raises(ScaleError):
        check_scale(owners, [1], [(4, 7)])


def _view() -> ClusterView:
    view = ClusterView()
    view.enabled, view.node_id = True, 2
    view.set_segments("t", [(3, 0, 1, 1), (4, 2, 5, 2), (5, 6, 7, 3)])
    return view


def test_leaders_per_partition() -> None:
    view = _view()
    assert [view.leader("t", p) for p in range(8)] == [1, 1, 2, 2, 2, 2, 3, 3]
    assert [view.is_local("t", p) for p in (0, 2, 7)] == [False, True, False]
    assert view.segment_is_local("t", 4) and not view.segment_is_local("t", 3)
    assert not view.segment_is_local("t", 9)  # unknown: not appended to before a sync
    assert not view.is_local("unsynced")  # not served before the sync knows it
    view.moving["t"] = {3}
    assert not view.is_local("t", 3) and view.is_local("t", 4)
    assert view.leader_ranges("t", 10) == [(0, 1, 1), (2, 5, 2), (6, 7, 3), (8, 9, -1)]
    assert view.open_segment_counts() == {}  # no live brokers known
    view.brokers = [(1, "h", 1), (2, "h", 2), (3, "h", 3), (4, "h", 4)]
    assert view.open_segment_counts() == {1: 1, 2: 1, 3: 1, 4: 0}
    single = ClusterView()
    assert single.is_local("anything", 5) and single.leader("anything") is None


def _kio_body(partitions: int, leaders: list[int]) -> dict[str, Any]:
    return {
        "brokers": [{"node_id": n, "host": "gw", "port": 9000 + n} for n in (1, 2)],
        "cluster_id": "c",
        "controller_id": 1,
        "topics": [
            {
                "error_code": 0,
                "name": "t",
                "partitions": [
                    {
                        "error_code": 0,
                        "partition_index": i,
                        "leader_id": leaders[i],
                        "leader_epoch": 0,
                        "replica_nodes": [leaders[i]],
                        "isr_nodes": [leaders[i]],
                    }
                    for i in range(partitions)
                ],
            }
        ],
        "cluster_authorized_operations": -(2**31),
    }


@pytest.mark.parametrize("version", range(13))
def test_per_partition_leaders_encode_like_kio(version: int) -> None:
    ranges = ((0, 1, 2), (2, 4, -1), (5, 5, 2))  # -1: this node (1)
    topic = TopicMetadata(0, "t", 6, leader_ranges=ranges)
    header = RequestHeader(3, version, 7, "c", version >= 9)
    expected = encode_response(header, _kio_body(6, [2, 2, 1, 1, 1, 2]))
    brokers = [(1, "gw", 9001), (2, "gw", 9002)]
    assert encode_metadata_response(7, version, brokers, "c", 1, [topic], 1) == expected


def test_an_unknown_placement_is_refused_with_a_clear_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import subprocess
    import sys

    env = {**os.environ, "STREAMGATE_PLACEMENT": "random"}
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--listen", "127.0.0.1:0"]
        + ["--data-dir", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "STREAMGATE_PLACEMENT must be one of least-loaded, creator" in proc.stderr


def test_gather_moves_a_cold_segment_towards_a_lower_live_neighbour() -> None:
    from core.scaling.gather import gather_move
    from core.scaling.policy import ScalingPolicy, SegmentLoad

    policy = ScalingPolicy("data-rate", 100.0)
    owners = {0: 1, 1: 1, 2: 2, 3: 2, 4: 3, 5: 3}  # partition -> node of its open segment
    mine = [SegmentLoad(7, 2, 3, rate=1.0, age=10.0)]  # node 2's cold segment
    move = gather_move(mine, policy, 3.0, 2, owners.get, {1, 2, 3})
    assert move is not None and move.kind == "move" and move.to_node == 1
    assert move.seal == [7] and move.new_ranges == [(2, 3)]
    # never towards a higher id (no swaps), a dead node, a hot or young segment, or one
    # that this evaluation already scales
    assert gather_move(mine, policy, 3.0, 2, {1: 3, 4: 3}.get, {1, 2, 3}) is None
    assert gather_move(mine, policy, 3.0, 2, owners.get, {2, 3}) is None
    hot = [SegmentLoad(7, 2, 3, rate=60.0, age=10.0)]
    assert gather_move(hot, policy, 3.0, 2, owners.get, {1, 2, 3}) is None
    young = [SegmentLoad(7, 2, 3, rate=1.0, age=1.0)]
    assert gather_move(young, policy, 3.0, 2, owners.get, {1, 2, 3}) is None
    assert gather_move(mine, policy, 3.0, 2, owners.get, {1, 2, 3}, busy={7}) is None
    assert gather_move(mine, ScalingPolicy(), 3.0, 2, owners.get, {1, 2, 3}) is None
