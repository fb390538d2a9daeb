"""The scaling policy: which segments to split or merge, given their measured rates (pure).

Pravega-like: `fixed` never scales; `data-rate` (KiB/s) and `event-rate` (events/s) compare
each open segment's rate over the window with the target rate T:

- split: a segment with rate > T splits into min(F, its partitions) parts, cut at partition
  boundaries so the measured per-partition rates are balanced (partition count when idle).
- merge: a run of 2+ adjacent segments whose combined rate is < T/2 merges into one, never
  leaving fewer than M open segments. The factor 1/2 is the hysteresis: a merged segment is
  at most T/2, far from the split threshold T; and split parts (each about rate/F with F >= 2
  and rate > T) never qualify for an immediate merge back unless the load halves.
- cooldown: a segment younger than the cooldown (the scaler uses two windows) is neither
  split nor merged, so its rate is measured over a full window before anything happens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .plan import Range, split_range

POLICIES = ("fixed", "data-rate", "event-rate")
MERGE_FRACTION = 0.5  # merge when the combined rate is below MERGE_FRACTION * target


@dataclass(frozen=True, slots=True)
class ScalingPolicy:
    kind: str = "fixed"
    target: float = 0.0  # KiB/s for data-rate, events/s for event-rate
    factor: int = 2
    min_segments: int = 1

    @classmethod
    def from_configs(cls, configs: Mapping[str, str]) -> ScalingPolicy:
        """The policy from a topic's (validated) `streamgate.scaling.*` configs."""
        return cls(
            configs.get("streamgate.scaling.policy", "fixed"),
            float(configs.get("streamgate.scaling.target.rate", "0")),
            int(configs.get("streamgate.scaling.scale.factor", "2")),
            int(configs.get("streamgate.scaling.min.segments", "1")),
        )


@dataclass(frozen=True, slots=True)
class SegmentLoad:
    """One open segment as measured: its rate in the policy's unit, per-partition rates
    (missing partitions count as 0) and its age in seconds."""

    segment_id: int
    first: int
    last: int
    rate: float
    age: float
    partition_rates: Mapping[int, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Decision:
    kind: str  # "split", "merge", or "move" (several nodes: core/scaling/gather.py)
    seal: list[int]
    new_ranges: list[Range]
    reason: str
    to_node: int | None = None  # "move": the node that takes the segment over


def decide(loads: Sequence[SegmentLoad], policy: ScalingPolicy, cooldown: float) -> list[Decision]:
    """The scale events to apply now; segments touched by one decision appear in no other.

    `loads` are the open segments sorted by partition range.
    """
    if policy.kind == "fixed" or policy.target <= 0:
        return []
    target = policy.target
    decisions: list[Decision] = []
    for load in loads:
        if load.rate > target and load.age >= cooldown and load.last > load.first:
            weights = [load.partition_rates.get(p, 0.0) for p in range(load.first, load.last + 1)]
            ranges = split_range(load.first, load.last, policy.factor, weights)
            decisions.append(
                Decision(
                    "split",
                    [load.segment_id],
                    ranges,
                    f"rate {load.rate:.1f} > target {target:g} ({policy.kind}); "
                    f"{len(ranges)} parts balanced on per-partition rate",
                )
            )
    decisions.extend(_merges(loads, policy, cooldown))
    return decisions


def _merges(loads: Sequence[SegmentLoad], policy: ScalingPolicy, cooldown: float) -> list[Decision]:
    limit = policy.target * MERGE_FRACTION
    open_count = len(loads)
    decisions: list[Decision] = []
    run: list[SegmentLoad] = []

    def flush() -> None:
        nonlocal open_count
        if len(run) >= 2:
            total = sum(load.rate for load in run)
            decisions.append(
                Decision(
                    "merge",
                    [load.segment_id for load in run],
                    [(run[0].first, run[-1].last)],
                    f"combined rate {total:.1f} of {len(run)} segments < {limit:g} "
                    f"(target {policy.target:g} x {MERGE_FRACTION}, {policy.kind})",
                )
            )
            open_count -= len(run) - 1
        run.clear()

    for load in loads:
        cold = load.age >= cooldown and load.rate < limit
        if not cold:
            flush()
            continue
        run_rate = sum(r.rate for r in run)
        # Grow the run while it stays below the limit and the stream keeps >= M segments.
        if run and (run_rate + load.rate >= limit or open_count - len(run) < policy.min_segments):
            flush()
        run.append(load)
    flush()
    return decisions
