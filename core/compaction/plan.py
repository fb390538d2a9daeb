"""What to compact: per partition, the cleanable tier-2 slices and whether they are due.

Pure functions over the in-memory index (no I/O), so the rules can be read in one place:
- the cleanable range of a partition is its tier-2 slices from the log start offset on,
  up to the first slice holding a record younger than `min.compaction.lag.ms` (data still
  only in tier 1 is never cleaned, like Kafka's active segment);
- the dirty part is what lies at or after the partition's compacted end (the cleaner's
  checkpoint); the partition is due when dirty bytes / cleanable bytes reach
  `min.cleanable.dirty.ratio`, when dirty data was sealed more than
  `max.compaction.lag.ms` ago, or when kept tombstones passed their delete horizon.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..configs.topic_defs import split_list
from ..metadata import ChunkRecord, ChunkSlice
from ..partition import Partition

LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    compact: bool
    delete: bool
    min_lag_ms: int = 0
    max_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 86_400_000
    min_dirty_ratio: float = 0.5

    @classmethod
    def of(cls, configs: Mapping[str, str]) -> CompactionConfig:
        policy = split_list(configs.get("cleanup.policy", "delete"))
        return cls(
            compact="compact" in policy,
            delete="delete" in policy,
            min_lag_ms=_int(configs, "min.compaction.lag.ms", 0),
            max_lag_ms=_int(configs, "max.compaction.lag.ms", LONG_MAX),
            delete_retention_ms=_int(configs, "delete.retention.ms", 86_400_000),
            min_dirty_ratio=_float(configs, "min.cleanable.dirty.ratio", 0.5),
        )


@dataclass(slots=True)
class PartitionPlan:
    index: int
    slices: list[ChunkSlice]  # the cleanable range, in offset order
    dirty: list[ChunkSlice]  # its part at or after the compacted end
    range_end: int  # last offset of the cleanable range (never removed)
    cleanable_bytes: int
    dirty_bytes: int
    due: bool
    reason: str = ""
    # filled while running: key -> latest offset over the dirty part
    latest: dict[bytes, int] = field(default_factory=dict)

    @property
    def dirty_ratio(self) -> float:
        return self.dirty_bytes / self.cleanable_bytes if self.cleanable_bytes else 0.0


def plan_partition(
    index: int,
    partition: Partition,
    chunks: Mapping[int, ChunkRecord],
    config: CompactionConfig,
    now_ms: int,
    tombstones_due: bool = False,
) -> PartitionPlan | None:
    """The partition's cleanable range and whether it is due; None when it has none."""
    start = partition.log_start_offset
    cleanable: list[ChunkSlice] = []
    for s in partition.slices():
        if s.last_offset < start:
            continue
        if s.chunk_id not in chunks:
            break  # deleted meanwhile: the rest waits for the next run
        if config.min_lag_ms > 0 and s.max_timestamp > now_ms - config.min_lag_ms:
            break
        cleanable.append(s)
    if not cleanable:
        return None
    dirty = [s for s in cleanable if s.last_offset >= partition.compacted_end]
    total = sum(s.byte_length for s in cleanable)
    dirty_bytes = sum(s.byte_length for s in dirty)
    plan = PartitionPlan(
        index, cleanable, dirty, cleanable[-1].last_offset, total, dirty_bytes, False
    )
    if dirty and plan.dirty_ratio >= config.min_dirty_ratio:
        plan.due, plan.reason = True, f"dirty ratio {plan.dirty_ratio:.2f}"
    elif dirty and config.max_lag_ms < LONG_MAX:
        sealed = min(chunks[s.chunk_id].created_ms for s in dirty)
        if sealed <= now_ms - config.max_lag_ms:
            plan.due, plan.reason = True, "max.compaction.lag.ms"
    if not plan.due and tombstones_due and partition.compacted_end > start:
        plan.due, plan.reason = True, "tombstones past delete.retention.ms"
    return plan


def oldest_dirty_ms(plans: list[PartitionPlan], chunks: Mapping[int, ChunkRecord]) -> int | None:
    """When the oldest dirty data was sealed (for the compaction lag figure)."""
    times = [chunks[s.chunk_id].created_ms for p in plans for s in p.dirty if s.chunk_id in chunks]
    return min(times) if times else None


def _int(configs: Mapping[str, str], name: str, default: int) -> int:
    try:
        return int(configs.get(name, default))
    except ValueError:
        return default


def _float(configs: Mapping[str, str], name: str, default: float) -> float:
    try:
        return float(configs.get(name, default))
    except ValueError:
        return default
