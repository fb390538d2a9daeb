"""The segment log's flusher thread goes on with entries queued during an fsync: every
group is still reported durable once, in log order, only after its fsync, and a roll or a
seal still finds the file complete."""

from __future__ import annotations

import os
import random

import pytest
import trio

from core.segments import durable_writer
from core.segments import log as seglog
from core.segments.log import PendingAppend, SegmentLog


@pytest.fixture(params=["native", "threads"])
def writes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Writes into an open file by the native writer (when built), or all by the flush
    threads (the pure-Python fallback)."""
    if request.param == "native" and durable_writer.NATIVE is None:
        pytest.skip("the native writer is not built here (make compiled)")
    if request.param == "threads":
        monkeypatch.setattr(durable_writer, "NATIVE", None)
    return str(request.param)


def test_concurrent_appends_are_reported_in_order_and_replay_whole(
    tmp_path, monkeypatch, writes: str
) -> None:
    pipelined = []
    original = SegmentLog._earlier_group_durable

    def counting(self: SegmentLog, *args: object) -> None:
        pipelined.append(1)
        original(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(SegmentLog, "_earlier_group_durable", counting)
    durable: list[PendingAppend] = []
    batches: dict[int, bytes] = {}
    rolled: list[int] = []

    def on_durable(appended: list[PendingAppend]) -> None:
        for pending in appended:  # durable means written: the bytes are in the file
            assert log.durable_size >= pending.end
        durable.extend(appended)

    log = SegmentLog(
        str(tmp_path),
        7,
        on_durable,
        lambda failed, exc: None,
        roll_bytes=64 * 1024,
        on_rolled=lambda s: rolled.append(len(s.files)),
    )

    async def producer(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(150):
            batch = os.urandom(rng.randrange(20, 2000))
            pending = log.append(seed, bytearray(batch), None)
            batches[pending.position] = batch
            if rng.random() < 0.3:
                await trio.sleep(0)
            if rng.random() < 0.05:
                await trio.sleep(0.001)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(log.run_flusher)
            async with trio.open_nursery() as producers:
                for seed in range(8):
                    producers.start_soon(producer, seed)
            await log.wait_idle()
            log.seal()
        await log.drained.wait()

    trio.run(main)
    positions = [p.position for p in durable]
    assert positions == sorted(positions) and len(positions) == len(batches) == 8 * 150
    assert log.durable_size == log.logical_size
    if writes == "threads":
        assert pipelined  # some groups were written straight after the previous fsync
    assert len(rolled) >= 2  # rolled by size while appends went on, and at the seal
    assert all(f.closed for f in log.files)
    log.release()
    reopened = SegmentLog(
        str(tmp_path),
        7,
        lambda a: None,
        lambda f, e: None,
        existing_bases=[
            parsed[1]
            for name in os.listdir(tmp_path)
            if (parsed := seglog.parse_log_file_name(name)) is not None
        ],
    )
    replayed = {entry.position: entry.batch for entry in reopened.replay()}
    assert replayed == batches
    reopened.release()
