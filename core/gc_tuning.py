"""Garbage-collector thresholds for a process that holds many long-lived small objects.

A gateway with 100,000 partitions keeps hundreds of thousands of objects alive (partitions,
their index arrays, chunk slices) and allocates a few per batch. With CPython's default
gen-0 threshold (700) the collector ran so often that it took about a quarter of the
gateway's CPU while one record went into each of 100,000 partitions (py-spy showed it
in whatever line allocated: `Partition(...)`, kio entities). Reference counting frees
nearly everything here; the cyclic collector only has to run now and then.
"""

from __future__ import annotations

import gc

GEN0_THRESHOLD = 20_000  # allocations (net) before a young-generation collection
GEN1_THRESHOLD = 20  # young collections per middle-generation collection
GEN2_THRESHOLD = 100  # middle collections per full one (CPython also waits for 25% growth)


def tune() -> None:
    """Raise the collection thresholds (called once, before the server starts)."""
    gc.set_threshold(GEN0_THRESHOLD, GEN1_THRESHOLD, GEN2_THRESHOLD)
