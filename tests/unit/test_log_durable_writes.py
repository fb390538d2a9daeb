"""Tier-1 group writes: one pwritev with RWF_DSYNC when the kernel has it, else pwritev then
fsync; a short write is finished and synced; the bytes land where they belong either way."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from core.gathered_io import IOV_MAX
from core.segments import log as seglog

BUFFERS: list[bytes | bytearray | memoryview] = [
    b"head",
    bytearray(b"-middle-"),
    memoryview(b"tail"),
]


def _file(tmp_path: Path) -> int:
    fd = os.open(tmp_path / "f.log", os.O_RDWR | os.O_CREAT)
    os.pwrite(fd, b"0123456789", 0)
    return fd


def _calls(monkeypatch: pytest.MonkeyPatch, short_by: int = 0, refuse: int | None = None):
    calls: list[tuple[str, Any]] = []
    real_pwritev, real_fsync = os.pwritev, os.fsync

    def pwritev(fd: int, buffers: Any, position: int, *flags: int) -> int:
        calls.append(("pwritev", flags))
        if flags and refuse is not None:
            raise OSError(refuse, os.strerror(refuse))
        if flags and short_by:
            data = b"".join(bytes(b) for b in buffers)
            return real_pwritev(fd, [data[:-short_by]], position, *flags)
        return real_pwritev(fd, buffers, position, *flags)

    def fsync(fd: int) -> None:
        calls.append(("fsync", ()))
        real_fsync(fd)

    monkeypatch.setattr(os, "pwritev", pwritev)
    monkeypatch.setattr(os, "fsync", fsync)
    return calls


@pytest.mark.skipif(not hasattr(os, "RWF_DSYNC"), reason="no RWF_DSYNC on this platform")
def test_one_synced_write_per_group(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(seglog, "_dsync_writes", True)
    calls = _calls(monkeypatch)
    fd = _file(tmp_path)
    seglog._write_durably(fd, BUFFERS, 4)
    assert calls == [("pwritev", (os.RWF_DSYNC,))]
    assert os.pread(fd, 100, 0) == b"0123head-middle-tail"


@pytest.mark.skipif(not hasattr(os, "RWF_DSYNC"), reason="no RWF_DSYNC on this platform")
def test_short_synced_write_is_finished_and_fsynced(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(seglog, "_dsync_writes", True)
    calls = _calls(monkeypatch, short_by=5)
    fd = _file(tmp_path)
    seglog._write_durably(fd, BUFFERS, 10)
    assert calls[0] == ("pwritev", (os.RWF_DSYNC,)) and calls[-1] == ("fsync", ())
    assert os.pread(fd, 100, 0) == b"0123456789head-middle-tail"


@pytest.mark.skipif(not hasattr(os, "RWF_DSYNC"), reason="no RWF_DSYNC on this platform")
def test_a_file_system_without_it_falls_back_to_fsync(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(seglog, "_dsync_writes", True)
    calls = _calls(monkeypatch, refuse=errno.EOPNOTSUPP)
    fd = _file(tmp_path)
    seglog._write_durably(fd, BUFFERS, 0)
    assert calls == [("pwritev", (os.RWF_DSYNC,)), ("pwritev", ()), ("fsync", ())]
    assert seglog._dsync_writes is False  # the next groups skip the refused call
    assert os.pread(fd, 100, 0) == b"head-middle-tail"


def test_other_write_errors_are_raised(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(seglog, "_dsync_writes", hasattr(os, "RWF_DSYNC"))
    fd = _file(tmp_path)
    monkeypatch.setattr(
        os, "pwritev", lambda *a: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full"))
    )
    with pytest.raises(OSError) as caught:
        seglog._write_durably(fd, BUFFERS, 0)
    assert caught.value.errno == errno.ENOSPC


def test_more_buffers_than_one_call_takes(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(seglog, "_dsync_writes", hasattr(os, "RWF_DSYNC"))
    calls = _calls(monkeypatch)
    fd = _file(tmp_path)
    many = [bytes([65 + i % 26]) for i in range(IOV_MAX * 2 + 3)]
    seglog._write_durably(fd, many, 0)
    assert [name for name, _ in calls] == ["pwritev", "pwritev", "pwritev", "fsync"]
    assert os.pread(fd, len(many) + 100, 0) == b"".join(many)
