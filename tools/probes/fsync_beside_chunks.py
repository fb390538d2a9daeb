"""What a tier-2 chunk written to the same disk does to the tier-1 log's fsyncs.

The embedded tier 2 is a folder, by default on the disk that holds the tier-1 logs. Every
acknowledgement waits for a tier-1 group commit (a write, then an fsync); meanwhile the
uploader writes 8 MiB chunks beside it. This probe runs that pair with no server: one
thread appends 128 KiB and fsyncs, again and again (a busy log's group commits), while
another writes an 8 MiB chunk every 150 ms in one of three ways, alternating run by run:

  none    no chunks (the disk to itself)
  whole   one gathered write, then one fsync (the folder store before the change)
  steps   the folder store's way now: `SYNC_STEP_BYTES` at a time, an fdatasync after each

and reports the appends' fsyncs per second, p50 / p99 / p99.9 / max, and how many stalled
over 20 ms.

    python -m tools.probes.fsync_beside_chunks [--runs 3] [--seconds 6] [--dir DATA_DISK_DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from core.gathered_io import views_of, write_all
from core.segments.objectstore import SYNC_STEP_BYTES, _write_in_synced_steps

_APPEND = 128 * 1024
_CHUNK = 8 * 1024 * 1024
_CHUNK_EVERY_S = 0.15
_STALL_S = 0.020


def _whole(fd: int, data: bytes) -> None:
    write_all(lambda views: os.writev(fd, views), views_of([data]))


def _steps(fd: int, data: bytes) -> None:
    view = memoryview(data)
    _write_in_synced_steps(fd, [view[i : i + 16384] for i in range(0, len(data), 16384)])


_WRITERS: dict[str, Callable[[int, bytes], None] | None] = {
    "none": None,
    "whole": _whole,
    "steps": _steps,
}


def _appends(folder: str, stop: threading.Event, latencies: list[float]) -> None:
    fd = os.open(os.path.join(folder, "log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    data, position = os.urandom(_APPEND), 0
    try:
        while not stop.is_set():
            started = time.perf_counter()
            os.pwrite(fd, data, position)
            os.fsync(fd)
            latencies.append(time.perf_counter() - started)
            position += _APPEND
    finally:
        os.close(fd)


def _chunks(folder: str, stop: threading.Event, write: Callable[[int, bytes], None]) -> None:
    data, n = os.urandom(_CHUNK), 0
    while not stop.is_set():
        path = os.path.join(folder, f"chunk-{n}")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.unlink(path)
        n += 1
        time.sleep(_CHUNK_EVERY_S)


def run_once(mode: str, seconds: float, parent: str | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="fsync-probe-", dir=parent) as folder:
        stop, latencies = threading.Event(), list[float]()
        threads = [threading.Thread(target=_appends, args=(folder, stop, latencies))]
        writer = _WRITERS[mode]
        if writer is not None:
            threads.append(threading.Thread(target=_chunks, args=(folder, stop, writer)))
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
    latencies.sort()

    def ms(q: float) -> float:
        return round(latencies[int(q * (len(latencies) - 1))] * 1000, 2)

    return {
        "fsyncs_per_s": round(len(latencies) / seconds),
        "p50_ms": ms(0.5),
        "p99_ms": ms(0.99),
        "p999_ms": ms(0.999),
        "max_ms": ms(1.0),
        "stalls_over_20ms": len([x for x in latencies if x > _STALL_S]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--dir", help="a folder on the disk to measure (default: the temp dir)")
    args = parser.parse_args()
    results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in _WRITERS}
    print(f"chunk writes in steps of {SYNC_STEP_BYTES // 1024} KiB for `steps`")
    for run in range(args.runs):
        modes = list(_WRITERS)
        for mode in modes[run % len(modes) :] + modes[: run % len(modes)]:
            result = run_once(mode, args.seconds, args.dir)
            results[mode].append(result)
            print(f"run {run + 1} {mode:>5}: {result}", flush=True)
    print("medians:")
    for mode, runs in results.items():
        figures = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"  {mode:>5}: " + ", ".join(f"{k} {v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
