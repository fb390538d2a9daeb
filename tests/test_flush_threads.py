"""The flushers' thread pool keeps `trio.to_thread.run_sync`'s contract where the segment logs
rely on it: results and exceptions come back, a job the thread has is waited for even when
the caller is cancelled, callbacks the job queued come before its result, threads are reused,
concurrency is bounded, and idle threads leave."""

from __future__ import annotations

import threading
import time

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


def test_callbacks_queued_by_the_job_run_before_its_result() -> None:
    pool = FlushThreads()
    seen: list[int] = []

    async def main() -> None:
        token = trio.lowlevel.current_trio_token()

        def job() -> int:
            for i in range(5):
                token.run_sync_soon(seen.append, i)
            return 5

        seen.append(await pool.run_sync(job))

    trio.run(main)
    assert seen == [0, 1, 2, 3, 4, 5]


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
