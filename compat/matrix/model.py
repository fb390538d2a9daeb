"""What a cell gets and what it answers."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PASS, FAIL, NA = "pass", "fail", "n/a"


class CellFailure(AssertionError):
    """A cell's assertion did not hold."""


class ClientLacks(Exception):
    """The client itself has no API for this feature: the cell is n/a, not a server failure."""


def expect(condition: object, message: str) -> None:
    if not condition:
        raise CellFailure(message)


@dataclass
class CellContext:
    bootstrap: str
    topic: str  # created by the runner with the row's partition count (or not, when 0)
    partitions: int
    group: str
    records: int
    phase: str = ""  # "before" / "after" for phased rows
    work_dir: Path = field(default_factory=lambda: Path("."))
    timeout: float = 60.0

    def value(self, i: int) -> bytes:
        return f"{self.topic}-v{i:06d}".encode()

    def key(self, i: int) -> bytes:
        return f"k{i:06d}".encode()


@dataclass
class CellResult:
    target: str
    row: str
    column: str
    status: str
    detail: str
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
