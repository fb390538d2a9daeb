"""The native durable writer (core/segments/durable_writer.c): what it writes lands whole at
its position, errors come back as the OSError the write met, many writes at once each wake
their own task, and STREAMGATE_PURE_PYTHON or a missing build leaves the logs on the flush
threads."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio

import hotpath
from core.segments import durable_writer
from core.segments.durable_writer import WakeFd

ROOT = Path(__file__).resolve().parents[2]


async def write_durably(
    native: ModuleType, wake: WakeFd, fd: int, buffers: Sequence[Any], position: int
) -> float:
    """One write, waited for as the segment log's flusher does."""
    write = native.submit(fd, buffers, position, wake.fd)
    while not write.done:
        await trio.lowlevel.wait_readable(wake.fd)
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(wake.fd)
    seconds: float = write.result()
    return seconds


NATIVE = durable_writer.NATIVE
needs_native = pytest.mark.skipif(
    NATIVE is None, reason="the C extension is not built here (make compiled)"
)


def _write(path: Path, buffers: list, position: int, *, create: bool = True) -> float:
    assert NATIVE is not None
    fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
    wake = WakeFd()
    try:
        return trio.run(write_durably, NATIVE, wake, fd, buffers, position)
    finally:
        wake.close()
        os.close(fd)


@needs_native
def test_buffers_of_every_kind_land_at_their_position(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"." * 10)
    pieces = [b"head", bytearray(b"-middle-"), memoryview(b"xxtailxx")[2:6], b""]
    seconds = _write(path, pieces, 6)
    assert path.read_bytes() == b"......head-middle-tail"
    assert 0 <= seconds < 60


@needs_native
def test_more_buffers_than_one_system_call_takes(tmp_path: Path) -> None:
    pieces = [bytes([i % 251]) * (1 + i % 7) for i in range(5000)]  # > IOV_MAX (1024)
    path = tmp_path / "log"
    _write(path, pieces, 0)
    assert path.read_bytes() == b"".join(pieces)


@needs_native
def test_a_failed_write_raises_its_error(tmp_path: Path) -> None:
    assert NATIVE is not None
    fd = os.open(tmp_path / "ro", os.O_RDONLY | os.O_CREAT, 0o644)  # not open for writing
    wake = WakeFd()
    try:
        with pytest.raises(OSError) as caught:
            trio.run(write_durably, NATIVE, wake, fd, [b"data"], 0)
    finally:
        wake.close()
        os.close(fd)
    assert caught.value.errno == errno.EBADF


@needs_native
def test_a_file_size_limit_fails_the_write_with_efbig(tmp_path: Path) -> None:
    """What a full disk looks like to the writer (the disk-full system test's limit):
    in a child process, under RLIMIT_FSIZE, a write past it fails with EFBIG."""
    code = textwrap.dedent(
        f"""
        import errno, os, resource, time
        from core.segments import durable_writer
        from core.segments.durable_writer import WakeFd
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
        fd = os.open({str(tmp_path / "limited")!r}, os.O_RDWR | os.O_CREAT, 0o644)
        wake = WakeFd()

        def write(data, position):
            write = durable_writer.NATIVE.submit(fd, [data], position, wake.fd)
            while not write.done:
                time.sleep(0.001)
            return write.result()

        write(b"a" * 3000, 0)
        try:
            write(b"b" * 3000, 3000)
        except OSError as exc:
            print("errno", exc.errno == errno.EFBIG, os.fstat(fd).st_size)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["errno", "True", "4096"], out.stderr  # a short write, then EFBIG


@needs_native
def test_many_writes_at_once_each_wake_their_own_task(tmp_path: Path) -> None:
    assert NATIVE is not None
    native = NATIVE
    files = 40  # more than the pool's threads: some wait their turn
    expected = {i: [os.urandom(100 + i) for _ in range(30)] for i in range(files)}

    async def writer(i: int) -> None:
        fd = os.open(tmp_path / f"f{i}", os.O_RDWR | os.O_CREAT, 0o644)
        wake = WakeFd()
        position = 0
        try:
            for piece in expected[i]:
                await write_durably(native, wake, fd, [piece], position)
                position += len(piece)
        finally:
            wake.close()
            os.close(fd)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for i in range(files):
                nursery.start_soon(writer, i)

    trio.run(main)
    for i, pieces in expected.items():
        assert (tmp_path / f"f{i}").read_bytes() == b"".join(pieces)
    assert 1 <= native.thread_count() <= 32


@needs_native
def test_a_result_is_taken_once_and_only_when_done(tmp_path: Path) -> None:
    assert NATIVE is not None
    fd = os.open(tmp_path / "log", os.O_RDWR | os.O_CREAT, 0o644)
    wake = WakeFd()
    try:
        write = NATIVE.submit(fd, [b"x" * 10], 0, wake.fd)
        while not write.done:  # no event loop here: poll
            time.sleep(0.001)
        assert write.result() >= 0
        with pytest.raises(RuntimeError):
            write.result()
    finally:
        wake.close()
        os.close(fd)


def test_pure_python_leaves_the_logs_on_the_flush_threads() -> None:
    env = {**os.environ, hotpath.PURE_PYTHON_ENV: "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", "from core.segments import durable_writer as d; print(d.NATIVE)"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "None"
