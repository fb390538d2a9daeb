"""Persistent worker threads for the segment logs' writes and fsyncs.

`trio.to_thread.run_sync` passes through the scheduler an extra time per call (its capacity
limiter yields even when a thread is free) and names the worker thread per job; the
flushers make one such call per group commit. These threads take a job with no extra pass:
the limiter is taken without waiting when there is room, and the result comes back through
the trio token.

`run_sync` keeps `to_thread.run_sync`'s contract where the flushers rely on it: the call is
not cancellable once the thread has the job (it waits for the fsync), exceptions come back
to the caller, and the result is delivered through the trio token's FIFO callback queue, so
it comes after every callback the job queued with `run_sync_soon` itself.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import outcome
import trio

T = TypeVar("T")

# At most this many flush jobs at once (files fsync'd in parallel); more wait their turn.
MAX_THREADS = 32
# A thread idle this long exits; the next job starts a new one.
IDLE_EXIT_S = 10.0

_Job = tuple[Callable[..., Any], tuple[Any, ...], trio.lowlevel.Task, trio.lowlevel.TrioToken]


class _Worker:
    def __init__(self, pool: FlushThreads) -> None:
        self.pool = pool
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._main, name="streamgate-flush", daemon=True)
        self.thread.start()

    def _main(self) -> None:
        pool = self.pool
        while True:
            try:
                fn, args, task, token = self.jobs.get(timeout=IDLE_EXIT_S)
            except queue.Empty:
                with pool.lock:
                    if self in pool.idle:  # not handed a job meanwhile: leave
                        pool.idle.remove(self)
                        return
                continue
            result = outcome.capture(fn, *args)
            with pool.lock:  # idle again before the result is out: reusable at once
                pool.idle.append(self)
            with contextlib.suppress(trio.RunFinishedError):  # the loop is gone: nobody waits
                token.run_sync_soon(trio.lowlevel.reschedule, task, result)


class FlushThreads:
    """A pool of persistent threads; `await pool.run_sync(fn, *args)` runs fn in one."""

    def __init__(self, max_threads: int = MAX_THREADS) -> None:
        self.lock = threading.Lock()
        self.idle: list[_Worker] = []
        self.max_threads = max_threads
        self._limiter: tuple[trio.lowlevel.TrioToken, trio.CapacityLimiter] | None = None

    def _capacity(self, token: trio.lowlevel.TrioToken) -> trio.CapacityLimiter:
        # One limiter per trio run (tests start several runs in one process).
        if self._limiter is None or self._limiter[0] is not token:
            self._limiter = (token, trio.CapacityLimiter(self.max_threads))
        return self._limiter[1]

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        await trio.lowlevel.checkpoint_if_cancelled()
        task = trio.lowlevel.current_task()
        token = trio.lowlevel.current_trio_token()
        limiter = self._capacity(token)
        try:
            limiter.acquire_on_behalf_of_nowait(task)
        except trio.WouldBlock:  # only then a pass through the scheduler
            await limiter.acquire_on_behalf_of(task)
        try:
            with self.lock:
                worker = self.idle.pop() if self.idle else None
            if worker is None:
                worker = _Worker(self)
            worker.jobs.put((fn, args, task, token))

            def refuse(_: Any) -> trio.lowlevel.Abort:
                return trio.lowlevel.Abort.FAILED  # the thread has the job: wait for it

            result: T = await trio.lowlevel.wait_task_rescheduled(refuse)
            return result
        finally:
            limiter.release_on_behalf_of(task)


FLUSH_THREADS = FlushThreads()
