"""Validation of scale events and partition-boundary split helpers (pure functions).

A scale event seals some open segments and opens successors. The successors' ranges must
cover exactly the partitions of the sealed segments: contiguous, in order, no overlap, no
gap. Two shapes are allowed, as in Pravega: one segment split into 2+ successors, or 2+
adjacent segments merged into one.
"""

from __future__ import annotations

from collections.abc import Sequence

Range = tuple[int, int]  # (first partition, last partition), inclusive


class ScaleError(ValueError):
    """A scale request was refused; nothing changed."""


def check_scale(
    owners: Sequence[tuple[int, int, int]],
    seal: Sequence[int],
    new_ranges: Sequence[Range],
    allow_move: bool = False,
) -> tuple[str, list[Range]]:
    """Validate a scale request against the open segments `owners` ((first, last, id), sorted).

    Returns ("split" | "merge", the new ranges sorted); with `allow_move` a segment may
    also be replaced by one successor with the same range ("move": to another node).
    Raises ScaleError when a segment is unknown or not open, the sealed segments are not
    adjacent, the new ranges do not tile their partitions exactly, or the shape is neither
    a split nor a merge.
    """
    if not seal:
        raise ScaleError("nothing to seal")
    if len(set(seal)) != len(seal):
        raise ScaleError("a segment is listed twice")
    by_id = {segment_id: (first, last) for first, last, segment_id in owners}
    for segment_id in seal:
        if segment_id not in by_id:
            raise ScaleError(f"segment {segment_id} is not an open segment of this stream")
    sealed = sorted(by_id[s] for s in seal)
    for (_f1, last), (first, _l2) in zip(sealed, sealed[1:], strict=False):
        if first != last + 1:
            raise ScaleError("the sealed segments are not adjacent")
    ranges = sorted(new_ranges)
    if not ranges:
        raise ScaleError("no successor ranges")
    expected = sealed[0][0]
    for first, last in ranges:
        if first != expected:
            raise ScaleError(f"successor ranges must start at partition {expected}, got {first}")
        if last < first:
            raise ScaleError(f"empty range [{first}, {last}]")
        expected = last + 1
    if expected != sealed[-1][1] + 1:
        raise ScaleError(
            f"successor ranges end at partition {expected - 1}, must end at {sealed[-1][1]}"
        )
    if len(sealed) == 1 and len(ranges) >= 2:
        return "split", ranges
    if len(sealed) >= 2 and len(ranges) == 1:
        return "merge", ranges
    if len(sealed) == 1 and allow_move:
        return "move", ranges
    if len(sealed) == 1:
        raise ScaleError("a split needs at least two successors")
    raise ScaleError("a scale event is a split (1 -> n) or a merge (n -> 1)")


def split_range(first: int, last: int, parts: int, weights: Sequence[float] = ()) -> list[Range]:
    """Cut [first, last] at partition boundaries into min(parts, partition count) ranges.

    With `weights` (one per partition, e.g. measured rates) the cuts balance the weight;
    without weights, or when they are all zero, they balance the partition count. Every
    range owns at least one partition. ScaleError if the range has a single partition.
    """
    count = last - first + 1
    parts = min(parts, count)
    if parts < 2:
        raise ScaleError(f"segment owning [{first}, {last}] cannot split further")
    total = float(sum(weights)) if len(weights) == count else 0.0
    if total <= 0:
        weights, total = [1.0] * count, float(count)
    cuts: list[int] = []  # index (relative) of the first partition of each later range
    running = 0.0
    for i, weight in enumerate(weights[:-1]):
        running += weight
        remaining_parts = parts - 1 - len(cuts)
        if remaining_parts == 0:
            break
        target = total * (len(cuts) + 1) / parts
        # Cut after i once the running weight reaches the next quantile, or when the
        # partitions left are only just enough to give each remaining range one.
        must_cut = count - (i + 1) == remaining_parts
        if running >= target or must_cut:
            cuts.append(i + 1)
    bounds = [0, *cuts, count]
    return [(first + a, first + b - 1) for a, b in zip(bounds, bounds[1:], strict=False)]
