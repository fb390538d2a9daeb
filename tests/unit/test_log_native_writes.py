"""The segment log's flusher with two native writes in flight: groups become durable in log
order whichever write finishes first, and a failed write fails the group after it too (even
one that was written), cuts the file back to where it started, and replay finds only what
was reported durable. A small write that grows the file carries zero padding, goes out
alone, and replay cuts the zeros quietly.

The native module is replaced by one whose writes the test finishes, in the order it picks
(the real one's ordering is the kernel's); what they write goes to the file for real.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import Any

import trio

from core.segments import durable_writer
from core.segments import log as seglog
from core.segments.log import PendingAppend, SegmentLog


class _Write:
    def __init__(self, wake_fd: int, error: int) -> None:
        self.wake_fd = os.dup(wake_fd)
        self.error = error
        self.done = False

    def finish(self) -> None:
        self.done = True
        os.eventfd_write(self.wake_fd, 1)
        os.close(self.wake_fd)

    def result(self) -> float:
        if self.error:
            raise OSError(self.error, os.strerror(self.error))
        return 0.001


class _HeldWrites:
    """Writes the bytes at once, reports done only when the test says."""

    def __init__(self, fail: set[int], ended_at_once: bool = False) -> None:
        self.fail = fail  # numbers of the writes that fail (nothing written)
        self.ended_at_once = ended_at_once
        self.writes: list[_Write] = []
        self.pieces: list[list[int]] = []  # each write's piece lengths

    def submit(self, fd: int, buffers: list[Any], position: int, wake_fd: int) -> _Write:
        number = len(self.writes)
        self.pieces.append([len(b) for b in buffers])
        if number not in self.fail:
            os.pwritev(fd, buffers, position)
        write = _Write(wake_fd, errno.EIO if number in self.fail else 0)
        self.writes.append(write)
        if self.ended_at_once:
            write.finish()
        return write


def _open_log(path: Path, durable: list[PendingAppend], failed: list[PendingAppend]) -> SegmentLog:
    return SegmentLog(
        str(path),
        3,
        durable.extend,
        lambda appends, exc: failed.extend(appends),
    )


def _replayed(path: Path) -> list[bytes]:
    bases = [p[1] for n in os.listdir(path) if (p := seglog.parse_log_file_name(n)) is not None]
    log = SegmentLog(str(path), 3, lambda a: None, lambda f, e: None, existing_bases=bases)
    try:
        return [bytes(entry.batch) for entry in log.replay()]
    finally:
        log.release()


def _run(
    path: Path, fake: _HeldWrites, script: Any, monkeypatch: Any, pad: bool = False
) -> SegmentLog:
    monkeypatch.setattr(durable_writer, "NATIVE", fake)
    if not pad:  # the order tests want every small write free to go out beside another
        monkeypatch.setattr(seglog, "_PAD_GROUPS_UP_TO", 0)
    durable: list[PendingAppend] = []
    failed: list[PendingAppend] = []
    log = _open_log(path, durable, failed)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(log.run_flusher)
            await script(log, durable, failed)
            log.close()
        await log.drained.wait()

    trio.run(main)
    log.release()
    return log


async def _until(condition: Any) -> None:
    with trio.fail_after(5):
        while not condition():
            await trio.sleep(0.001)


async def _kept_then_two_in_flight(
    log: SegmentLog, durable: list, fake: _HeldWrites, first: bytes, second: bytes
) -> None:
    """`kept` durable (a new file), then `first` and `second` each in a native write."""
    log.append(0, b"kept", None)
    await _until(lambda: len(durable) == 1)
    log.append(0, first, None)
    await _until(lambda: len(fake.writes) == 1)
    log.append(0, second, None)  # sent while the first is in flight
    await _until(lambda: len(fake.writes) == 2)


def test_groups_are_durable_in_log_order_whichever_write_ends_first(
    tmp_path: Path, monkeypatch: Any
) -> None:
    fake = _HeldWrites(fail=set())

    async def script(log: SegmentLog, durable: list, failed: list) -> None:
        log.append(0, b"first", None)  # a new file: the flush threads write it
        await _until(lambda: len(durable) == 1)
        log.append(0, b"second", None)
        await _until(lambda: len(fake.writes) == 1)
        log.append(1, b"third", None)  # sent while the second is in flight
        await _until(lambda: len(fake.writes) == 2)
        fake.writes[1].finish()
        await trio.sleep(0.05)
        assert len(durable) == 1  # the third waits for the second
        fake.writes[0].finish()
        await _until(lambda: len(durable) == 3)
        assert [p.position for p in durable] == sorted(p.position for p in durable)
        assert not failed

    _run(tmp_path, fake, script, monkeypatch)
    assert _replayed(tmp_path) == [b"first", b"second", b"third"]


def test_a_failed_write_fails_the_one_after_it_and_cuts_the_file(
    tmp_path: Path, monkeypatch: Any
) -> None:
    fake = _HeldWrites(fail={0})

    async def script(log: SegmentLog, durable: list, failed: list) -> None:
        # lost-b is written to the file, but after a failed write
        await _kept_then_two_in_flight(log, durable, fake, b"lost-a", b"lost-b")
        fake.writes[1].finish()
        fake.writes[0].finish()
        await _until(lambda: len(failed) == 2)
        assert len(durable) == 1
        assert log.durable_size == log.logical_size == durable[0].end
        log.append(0, b"after", None)
        await _until(lambda: len(fake.writes) == 3)
        fake.writes[2].finish()
        await _until(lambda: len(durable) == 2)

    _run(tmp_path, fake, script, monkeypatch)
    assert _replayed(tmp_path) == [b"kept", b"after"]


def test_one_requests_appends_go_out_together_as_it_ends(tmp_path: Path, monkeypatch: Any) -> None:
    fake = _HeldWrites(fail=set())

    async def script(log: SegmentLog, durable: list, failed: list) -> None:
        log.append(0, b"first", None)  # a new file, by a flush thread
        await _until(lambda: len(durable) == 1)
        log.append(0, b"second", None)  # the log's first native write, by the flusher
        await _until(lambda: len(fake.writes) == 1)
        fake.writes[0].finish()
        await _until(lambda: len(durable) == 2)
        with seglog.appends_sent_together():
            log.append(0, b"a", None)
            log.append(1, b"b", None)
            assert len(fake.writes) == 1  # nothing sent before the request's end
        assert len(fake.writes) == 2  # sent as it ended, by the appending task
        fake.writes[1].finish()
        await _until(lambda: len(durable) == 4)

    _run(tmp_path, fake, script, monkeypatch)
    assert _replayed(tmp_path) == [b"first", b"second", b"a", b"b"]


def test_a_failure_waits_for_every_later_write_whatever_order_they_end_in(
    tmp_path: Path, monkeypatch: Any
) -> None:
    fake = _HeldWrites(fail={0})

    async def script(log: SegmentLog, durable: list, failed: list) -> None:
        await _kept_then_two_in_flight(log, durable, fake, b"x", b"y")
        fake.writes[0].finish()  # fails: the flusher now waits for the writes after it
        await trio.sleep(0.05)
        with seglog.appends_sent_together():  # a request meanwhile: a third write
            log.append(0, b"z", None)
        assert len(fake.writes) == 3
        fake.writes[2].finish()
        await trio.sleep(0.05)
        assert not failed  # the second is still being written: the file is not cut yet
        fake.writes[1].finish()
        await _until(lambda: len(failed) == 3)
        assert len(durable) == 1 and log.durable_size == log.logical_size == durable[0].end

    _run(tmp_path, fake, script, monkeypatch)
    assert _replayed(tmp_path) == [b"kept"]


def test_nothing_is_sent_natively_while_a_flush_thread_writes(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A flush thread that made a new file (after a roll) goes on with what was queued after
    each group it reports; a request ending meanwhile must leave its appends queued, not
    write them where the thread is writing."""
    fake = _HeldWrites(fail=set(), ended_at_once=True)
    real = seglog._write_durably
    slow = [False]

    def write(fd: int, buffers: Any, position: int) -> None:
        if slow[0]:
            time.sleep(0.05)
        real(fd, buffers, position)

    monkeypatch.setattr(seglog, "_write_durably", write)
    monkeypatch.setattr(seglog, "_PIPELINE_S", 5.0)  # the thread goes on for seconds

    async def script(log: SegmentLog, durable: list, failed: list) -> None:
        log.append(0, b"A", None)  # a new file: a flush thread
        await _until(lambda: len(durable) == 1)
        log.append(0, b"B", None)  # a native write: the log's eventfd exists from here
        await _until(lambda: len(durable) == 2)
        log.request_roll()
        slow[0] = True
        log.append(0, b"D" * 10, None)  # after the roll, a new file: a flush thread, slowly
        await trio.sleep(0.01)
        log.append(0, b"E" * 10, None)  # the thread takes it after D
        await _until(lambda: len(durable) == 3)  # D reported; the thread writes E now
        with seglog.appends_sent_together():
            log.append(0, b"C" * 10, None)
        await _until(lambda: len(durable) == 5)

    _run(tmp_path, fake, script, monkeypatch)
    assert _replayed(tmp_path) == [b"A", b"B", b"D" * 10, b"E" * 10, b"C" * 10]


def test_a_small_write_that_grows_the_file_carries_zeros_and_goes_out_alone(
    tmp_path: Path, monkeypatch: Any, caplog: Any
) -> None:
    fake = _HeldWrites(fail=set())
    pad = len(seglog._ZERO_PAD)

    async def script(log: SegmentLog, durable: list, failed: list) -> None:
        log.append(0, b"kept", None)  # a new file, by a flush thread
        await _until(lambda: len(durable) == 1)
        log.append(0, b"grows", None)
        await _until(lambda: len(fake.writes) == 1)
        assert fake.pieces[0][-1] == pad  # the entry, then the zeros
        log.append(1, b"inside", None)
        await trio.sleep(0.05)
        assert len(fake.writes) == 1  # not beside a write whose zeros it would land in
        fake.writes[0].finish()
        await _until(lambda: len(fake.writes) == 2)
        assert pad not in fake.pieces[1]  # it lands in the zeros: nothing grows
        fake.writes[1].finish()
        await _until(lambda: len(durable) == 3)
        assert not failed

    log = _run(tmp_path, fake, script, monkeypatch, pad=True)
    (name,) = [n for n in os.listdir(tmp_path) if seglog.parse_log_file_name(n)]
    grows_end = log.files[0].size - (seglog.ENTRY_HEADER.size + len(b"inside"))
    assert os.path.getsize(tmp_path / name) == grows_end + pad
    with caplog.at_level("WARNING", logger="core.segments.log"):
        assert _replayed(tmp_path) == [b"kept", b"grows", b"inside"]
    assert "torn or corrupt" not in caplog.text  # the zeros are cut without a warning
    assert os.path.getsize(tmp_path / name) == log.files[0].size


def test_after_a_failed_write_the_log_writes_without_zeros(
    tmp_path: Path, monkeypatch: Any
) -> None:
    fake = _HeldWrites(fail={0})
    pad = len(seglog._ZERO_PAD)

    async def script(log: SegmentLog, durable: list, failed: list) -> None:
        log.append(0, b"kept", None)
        await _until(lambda: len(durable) == 1)
        log.append(0, b"lost", None)
        await _until(lambda: len(fake.writes) == 1)
        fake.writes[0].finish()
        await _until(lambda: len(failed) == 1)
        log.append(0, b"after", None)  # near a full disk the zeros may be what fails
        await _until(lambda: len(fake.writes) == 2)
        assert fake.pieces[0][-1] == pad
        assert pad not in fake.pieces[1]
        fake.writes[1].finish()
        await _until(lambda: len(durable) == 2)

    _run(tmp_path, fake, script, monkeypatch, pad=True)
    assert _replayed(tmp_path) == [b"kept", b"after"]
