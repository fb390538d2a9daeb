"""How long the segment logs' group commits take (write + fsync, in the flush threads).

An acknowledgement waits for its group's commit, so this is the disk's share of produce
latency. The figure operators need when latency jumps (Kafka reports LogFlushStats): on a
shared or throttled disk an fsync can stall for hundreds of milliseconds while other files
are written. Counted here, read by the metrics endpoint as a histogram.
"""

from __future__ import annotations

import bisect
import threading

# Upper bounds of the buckets, seconds (a last one, +Inf, takes the rest).
BOUNDS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class CommitTimes:
    """Counts per bucket and the total, for every group commit of this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # flush threads commit in parallel
        self._counts = [0] * (len(BOUNDS_S) + 1)
        self._sum_s = 0.0

    def observe(self, seconds: float) -> None:
        i = bisect.bisect_left(BOUNDS_S, seconds)
        with self._lock:
            self._counts[i] += 1
            self._sum_s += seconds

    def cumulative(self) -> tuple[list[tuple[str, int]], float]:
        """Prometheus buckets (upper bound, commits at or below it) and the sum."""
        with self._lock:
            counts, total_s = list(self._counts), self._sum_s
        buckets, running = [], 0
        for bound, count in zip((*map(str, BOUNDS_S), "+Inf"), counts, strict=True):
            running += count
            buckets.append((bound, running))
        return buckets, total_s


COMMIT_TIMES = CommitTimes()
