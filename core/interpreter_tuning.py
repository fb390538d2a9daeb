"""CPython settings for the gateway process: collector thresholds and the GIL's switch interval.

Collector. A gateway with 100,000 partitions keeps hundreds of thousands of objects alive
(partitions, their index arrays, chunk slices) and allocates a few per batch. With CPython's
default gen-0 threshold (700) the collector ran so often that it took about a quarter of the
gateway's CPU while one record went into each of 100,000 partitions (py-spy showed it in
whatever line allocated: `Partition(...)`, kio entities). Reference counting frees nearly
everything here; the cyclic collector only has to run now and then.

Switch interval. The event loop runs Python nearly all the time under load, while the flush
threads (write + fsync), tier-2 uploads and tier-1 reads each need the GIL back after every
system call. CPython makes a running thread let go of it only after the switch interval
(5 ms by default), so an fsync that took 0.3 ms could be reported 5 ms later, and the
producers waiting on it with it. At 0.5 ms: in three alternating runs each
(`compat/bench_kafka_vs_streamgate.py`, medians), 2,000 records/s produce p50 5.0 -> 4.2 ms,
p99 33 -> 22 ms; Kafka's producer-perf-test 32.9 -> 41.4 MB/s; 20,000 records/s unchanged.

Heap trim. glibc keeps freed heap pages (request buffers, chunk builds, tier-1 reads, much of
it freed by worker threads into their own arenas) mapped, so the gateway's RSS kept what a
burst once needed. `trim_heap_periodically` hands them back every 10 s (malloc_trim, in a
worker thread): one record into each of 100,000 partitions, RSS 293 -> 268 MiB.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys

import trio

GEN0_THRESHOLD = 20_000  # allocations (net) before a young-generation collection
GEN1_THRESHOLD = 20  # young collections per middle-generation collection
GEN2_THRESHOLD = 100  # middle collections per full one (CPython also waits for 25% growth)
SWITCH_INTERVAL_S = 0.0005  # longest a thread holding the GIL keeps one that waits for it


def tune() -> None:
    """Apply both (called once, before the server starts)."""
    gc.set_threshold(GEN0_THRESHOLD, GEN1_THRESHOLD, GEN2_THRESHOLD)
    sys.setswitchinterval(SWITCH_INTERVAL_S)


TRIM_INTERVAL_S = 10.0


def _malloc_trim() -> None:
    """glibc's malloc_trim(0); nothing where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    trim = getattr(libc, "malloc_trim", None)
    if trim is not None:
        trim(0)


async def trim_heap_periodically(interval_s: float = TRIM_INTERVAL_S) -> None:
    """Return freed heap pages to the OS every `interval_s` seconds, until cancelled."""
    while True:
        await trio.sleep(interval_s)
        await trio.to_thread.run_sync(_malloc_trim, abandon_on_cancel=True)
