"""The flushers' thread pool keeps `trio.to_thread.run_sync`'s contract where the segment logs
rely on it: results and exceptions come back, a job the thread has is waited for even when
the caller is cancelled, the job's progress reports reach the loop in order before its
result, threads are reused, concurrency is bounded, and idle threads leave."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import trio

from core.segments import flush_threads
from core.segments.flush_threads import FlushThreads


def test_results_and_exceptions_come_back() -> None:
    pool = FlushThreads()

    def fail() -> None:
        raise OSError(28, "No space left on device")

    async def main() -> None:
        assert await pool.run_sync(lambda a, b: a + b, 2, 3) == 5
        with pytest.raises(OSError, match="No space"):
            await pool.run_sync(fail)
        assert await pool.run_sync(threading.get_ident) != threading.get_ident()

    trio.run(main)


def test_a_started_job_is_waited_for_when_cancelled() -> None:
    pool = FlushThreads()
    finished: list[str] = []

    def slow() -> str:
        time.sleep(0.3)
        finished.append("fsync")
        return "done"

    async def main() -> None:
        with trio.move_on_after(0.05) as scope:
            assert await pool.run_sync(slow) == "done"
        assert not scope.cancelled_caught  # the cancel did not cut the job short
        assert finished == ["fsync"]

    trio.run(main)


def test_progress_reports_reach_the_loop_in_order_before_the_result() -> None:
    pool = FlushThreads()
    seen: list[tuple[int, bool]] = []
    loop_thread = threading.get_ident()

    def job(report: Callable[[int], None], count: int) -> int:
        for i in range(count):
            report(i)
            if i == 2:
                time.sleep(0.05)  # some reports arrive while the task waits
        return count

    def on_progress(item: int) -> None:
        seen.append((item, threading.get_ident() == loop_thread))

    async def main() -> None:
        assert await pool.run_sync(job, 5, on_progress=on_progress) == 5
        assert seen == [(i, True) for i in range(5)]
        seen.clear()
        assert await pool.run_sync(job, 3, on_progress=on_progress) == 3  # the same thread
        assert seen == [(i, True) for i in range(3)]

    trio.run(main)


def test_a_failed_job_leaves_its_thread_reusable() -> None:
    pool = FlushThreads(max_threads=1)

    def fail(report: Callable[[str], None]) -> None:
        report("written")
        raise OSError(5, "Input/output error")

    async def main() -> None:
        seen: list[str] = []
        with pytest.raises(OSError, match="Input/output"):
            await pool.run_sync(fail, on_progress=seen.append)
        assert seen == ["written"]
        assert await pool.run_sync(lambda: 9) == 9

    trio.run(main)
    assert len(pool.idle) == 1


def test_threads_are_reused_and_bounded() -> None:
    pool = FlushThreads(max_threads=3)
    running = 0
    most = 0
    lock = threading.Lock()
    idents: set[int] = set()

    def job() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            idents.add(threading.get_ident())
        time.sleep(0.02)
        with lock:
            running -= 1

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(12):
                nursery.start_soon(pool.run_sync, job)
        for _ in range(20):  # one after another: the same idle thread each time
            await pool.run_sync(job)

    trio.run(main)
    assert most == 3
    assert len(idents) == 3
    assert len(pool.idle) == 3


def test_idle_threads_leave(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flush_threads, "IDLE_EXIT_S", 0.05)
    pool = FlushThreads()

    async def main() -> None:
        await pool.run_sync(int)
        worker = pool.idle[0]
        await trio.sleep(0.3)
        assert pool.idle == []
        worker.thread.join(timeout=5)
        assert not worker.thread.is_alive()
        assert await pool.run_sync(lambda: 7) == 7  # a new thread takes the next job

    trio.run(main)


def test_each_trio_run_gets_its_own_limiter() -> None:
    pool = FlushThreads(max_threads=1)
    trio.run(pool.run_sync, int)
    trio.run(pool.run_sync, int)  # a limiter of the finished run would not be reused
