"""The disk spool: an append-only queue of records in segment files, safe across crashes.

Layout of the spool folder:
- `NNNNNNNNNNNNNNNNNNNN.seg`: segment files, frames of `length u32 | crc32 u32 | body`;
- `position`: `SEGMENT OFFSET`, the first record not yet acknowledged by streamgate,
  replaced atomically (write, fsync, rename).
`append()` returns only after fsync, so an MQTT ack sent afterwards never loses the message.
A crash can leave a torn frame at the end of the last segment (never acknowledged to MQTT):
it is cut off on open. A crash after streamgate acked records but before `commit()` makes
them go out again (duplicates, as QoS 1 allows); nothing is lost.
Not thread-safe: one thread (the bridge's pipeline thread) owns it.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

_FRAME = struct.Struct(">II")
FRAME_OVERHEAD = _FRAME.size
MAX_RECORD = 64 << 20


class SpoolFull(Exception):
    """Appending would pass the size limit."""


@dataclass(frozen=True, order=True)
class Position:
    segment: int
    offset: int


def _name(segment: int) -> str:
    return f"{segment:020d}.seg"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Spool:
    def __init__(self, folder: Path, max_bytes: int, segment_bytes: int | None = None) -> None:
        self.folder = Path(folder)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes or max(64 << 10, min(16 << 20, max_bytes // 8))
        self.folder.mkdir(parents=True, exist_ok=True)
        self._sizes: dict[int, int] = {}
        self.records_pending = 0  # records appended and not yet committed (approximate on open)
        self._open()

    # -- opening and recovery
    def _open(self) -> None:
        segs = sorted(int(p.stem) for p in self.folder.glob("*.seg") if p.stem.isdigit())
        pos = self._read_position()
        if pos is None:
            pos = Position(segs[0] if segs else 1, 0)
        for s in segs:
            if s < pos.segment:  # fully committed before a crash
                (self.folder / _name(s)).unlink()
        segs = [s for s in segs if s >= pos.segment]
        if not segs:
            segs = [pos.segment]
            self._new_segment(pos.segment)
            pos = Position(pos.segment, 0)
        # Only the last segment can hold a torn frame: earlier ones were fsync'd before roll.
        last = segs[-1]
        valid = self._scan(last)
        path = self.folder / _name(last)
        if path.stat().st_size != valid:
            with path.open("r+b") as f:
                f.truncate(valid)
                os.fsync(f.fileno())
        for s in segs:
            self._sizes[s] = (self.folder / _name(s)).stat().st_size
        self.commit_pos = pos
        self.read_pos = pos
        self.write_segment = last
        self._writer = (self.folder / _name(last)).open("ab")
        self._reader: tuple[int, IO[bytes]] | None = None
        self.records_pending = sum(1 for _ in self._iter_from(pos))

    def _read_position(self) -> Position | None:
        try:
            seg, off = (self.folder / "position").read_text().split()
            return Position(int(seg), int(off))
        except (FileNotFoundError, ValueError):
            return None

    def _scan(self, segment: int) -> int:
        """Length of the valid prefix of a segment file."""
        with (self.folder / _name(segment)).open("rb") as f:
            data = f.read()
        pos = 0
        while pos + _FRAME.size <= len(data):
            length, crc = _FRAME.unpack_from(data, pos)
            end = pos + _FRAME.size + length
            if length > MAX_RECORD or end > len(data):
                break
            if zlib.crc32(data[pos + _FRAME.size : end]) != crc:
                break
            pos = end
        return pos

    def _iter_from(self, pos: Position) -> Iterator[int]:
        for seg in sorted(self._sizes):
            if seg < pos.segment:
                continue
            with (self.folder / _name(seg)).open("rb") as f:
                if seg == pos.segment:
                    f.seek(pos.offset)
                while True:
                    head = f.read(_FRAME.size)
                    if len(head) < _FRAME.size:
                        break
                    length, _ = _FRAME.unpack(head)
                    f.seek(length, os.SEEK_CUR)
                    yield seg

    def _new_segment(self, segment: int) -> None:
        (self.folder / _name(segment)).touch()
        _fsync_dir(self.folder)
        self._sizes[segment] = 0

    # -- state
    @property
    def size_bytes(self) -> int:
        return sum(self._sizes.values())

    def is_empty(self) -> bool:
        """Nothing left to read (records read but not committed do not count)."""
        return self.read_pos == self.end_pos()

    def end_pos(self) -> Position:
        return Position(self.write_segment, self._sizes[self.write_segment])

    def fits(self, nbytes: int) -> bool:
        return self.size_bytes + nbytes <= self.max_bytes

    # -- writing
    def append(self, bodies: list[bytes]) -> None:
        """Write and fsync; raises SpoolFull (writing nothing) past the size limit."""
        frames = [_FRAME.pack(len(b), zlib.crc32(b)) + b for b in bodies]
        total = sum(len(f) for f in frames)
        if not self.fits(total):
            raise SpoolFull
        if self._sizes[self.write_segment] and self._sizes[self.write_segment] + total > (
            self.segment_bytes
        ):
            os.fsync(self._writer.fileno())
            self._writer.close()
            self.write_segment += 1
            self._new_segment(self.write_segment)
            self._writer = (self.folder / _name(self.write_segment)).open("ab")
        self._writer.write(b"".join(frames))
        self._writer.flush()
        os.fdatasync(self._writer.fileno())
        self._sizes[self.write_segment] += total
        self.records_pending += len(bodies)

    # -- reading
    def read(self, max_records: int) -> list[tuple[bytes, Position]]:
        """Up to `max_records` bodies after the read position, each with the position after it."""
        out: list[tuple[bytes, Position]] = []
        while len(out) < max_records and self.read_pos < self.end_pos():
            seg = self.read_pos.segment
            if self.read_pos.offset >= self._sizes[seg]:
                self.read_pos = Position(seg + 1, 0)
                continue
            if self._reader is None or self._reader[0] != seg:
                self._close_reader()
                self._reader = (seg, (self.folder / _name(seg)).open("rb"))
            f = self._reader[1]
            f.seek(self.read_pos.offset)
            head = f.read(_FRAME.size)
            length, crc = _FRAME.unpack(head)
            body = f.read(length)
            if zlib.crc32(body) != crc:
                raise OSError(f"spool segment {seg} corrupt at {self.read_pos.offset}")
            self.read_pos = Position(seg, self.read_pos.offset + _FRAME.size + length)
            out.append((body, self.read_pos))
        return out

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader[1].close()
            self._reader = None

    def rewind(self) -> None:
        """Read again from the committed position (records read but never acknowledged)."""
        self.read_pos = self.commit_pos

    # -- committing
    def commit(self, pos: Position, records: int) -> None:
        """Everything before `pos` is in streamgate: persist that and drop whole segments."""
        if pos <= self.commit_pos:
            return
        if pos == self.end_pos() and pos.offset > 0:
            # Drained: start a fresh segment so the old one's bytes leave the disk.
            self._writer.close()
            self.write_segment += 1
            self._new_segment(self.write_segment)
            self._writer = (self.folder / _name(self.write_segment)).open("ab")
            pos = Position(self.write_segment, 0)
            self.read_pos = pos
        elif pos.segment < self.write_segment and pos.offset >= self._sizes[pos.segment]:
            pos = Position(pos.segment + 1, 0)  # a finished segment: step into the next one
        tmp = self.folder / "position.tmp"
        with tmp.open("w") as f:
            f.write(f"{pos.segment} {pos.offset}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.folder / "position")
        self.commit_pos = pos
        self.records_pending = max(0, self.records_pending - records)
        for seg in [s for s in self._sizes if s < pos.segment]:
            if self._reader is not None and self._reader[0] == seg:
                self._close_reader()
            with contextlib.suppress(FileNotFoundError):
                (self.folder / _name(seg)).unlink()
            del self._sizes[seg]
        _fsync_dir(self.folder)

    def close(self) -> None:
        self._close_reader()
        with contextlib.suppress(OSError):
            os.fsync(self._writer.fileno())
        self._writer.close()
