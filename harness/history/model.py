"""The history model: operations, histories, violations, and the recorder clients write to."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger("harness.history")
_T = TypeVar("_T")


# --------------------------------------------------------------------------- the model

OK, ERROR, UNKNOWN = "ok", "error", "unknown"


@dataclass(kw_only=True)
class Op:
    """One operation as a client saw it."""

    id: int = -1
    client: str = ""
    conn: str | None = None  # connection label; None: not known
    conn_seq: int = -1  # order sent on `conn`
    start: float = 0.0  # invoked (s since the run started)
    end: float | None = None  # answer seen; None: none
    outcome: str = UNKNOWN  # ok | error | unknown
    error: str | None = None


@dataclass(kw_only=True)
class ProduceOp(Op):
    topic: str
    partition: int = -1  # -1: not known (not acknowledged)
    key: str | None = None
    value: str = ""
    producer: str = ""  # one producer (idempotence session)
    idempotent: bool = False
    offset: int = -1  # acknowledged offset
    ack_seq: int = -1  # order of the acknowledgement among the producer's


@dataclass(kw_only=True)
class CommitOp(Op):
    group: str
    topic: str
    partition: int
    offset: int


@dataclass(kw_only=True)
class CommittedRead(Op):
    group: str
    topic: str
    partition: int
    offset: int = -1  # -1: no committed offset


@dataclass(kw_only=True)
class DeleteRecordsOp(Op):
    topic: str
    partition: int
    requested: int
    low_watermark: int = -1  # the new log start, as answered


@dataclass(kw_only=True)
class LogStartRead(Op):
    topic: str
    partition: int
    offset: int = -1
    final: bool = False


@dataclass(kw_only=True)
class HighWatermarkRead(Op):
    topic: str
    partition: int
    offset: int = -1
    final: bool = False


@dataclass(kw_only=True)
class RecordRead(Op):
    topic: str
    partition: int
    offset: int
    key: str | None = None
    value: str | None = None
    final: bool = False


@dataclass(kw_only=True)
class CreateTopicOp(Op):
    topic: str
    partitions: int


@dataclass(kw_only=True)
class TopicRead(Op):
    topic: str
    exists: bool = False


@dataclass(kw_only=True)
class Note:
    """Something the workload did to the system (kill, restart, split, merge)."""

    at: float
    what: str
    detail: str = ""


_OpT = TypeVar("_OpT", bound=Op)


@dataclass
class History:
    ops: list[Op] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def of(self, kind: type[_OpT]) -> list[_OpT]:
        return [op for op in self.ops if type(op) is kind]

    def dump(self, path: Path) -> None:
        """JSON lines: a `Meta` line, then one line per note and per operation."""
        with Path(path).open("w") as out:
            out.write(json.dumps({"type": "Meta", **self.meta}) + "\n")
            for note in self.notes:
                out.write(json.dumps({"type": "Note", **dataclasses.asdict(note)}) + "\n")
            for op in self.ops:
                out.write(json.dumps({"type": type(op).__name__, **dataclasses.asdict(op)}) + "\n")

    @classmethod
    def load(cls, path: Path) -> History:
        history = cls()
        with Path(path).open() as lines:
            for line in lines:
                if not line.strip():
                    continue
                row = json.loads(line)
                kind = row.pop("type")
                if kind == "Meta":
                    history.meta = row
                elif kind == "Note":
                    history.notes.append(Note(**row))
                else:
                    history.ops.append(OP_TYPES[kind](**row))
        return history


OP_TYPES: dict[str, type[Op]] = {
    t.__name__: t
    for t in (
        ProduceOp,
        CommitOp,
        CommittedRead,
        DeleteRecordsOp,
        LogStartRead,
        HighWatermarkRead,
        RecordRead,
        CreateTopicOp,
        TopicRead,
    )
}


@dataclass
class Violation:
    kind: str
    message: str
    ops: list[int] = field(default_factory=list)
    register: str = "records"  # records | committed_offset | log_start | high_watermark | topic

    def __str__(self) -> str:
        return f"{self.kind} ({self.register}): {self.message}"


LOST = "lost_record"
DUPLICATE = "duplicate_record"
KEY_ORDER = "key_order_broken"
UNSTABLE_READ = "unstable_read"
COMMITTED_BACKWARDS = "committed_offset_backwards"
LOG_START_BACKWARDS = "log_start_backwards"
HW_BACKWARDS = "high_watermark_backwards"
TOPIC_MISSING = "topic_missing"
MISSED_OWN_WRITE = "read_missed_own_write"
KINDS = (
    LOST,
    DUPLICATE,
    KEY_ORDER,
    UNSTABLE_READ,
    COMMITTED_BACKWARDS,
    LOG_START_BACKWARDS,
    HW_BACKWARDS,
    TOPIC_MISSING,
    MISSED_OWN_WRITE,
)


# --------------------------------------------------------------------------- recording


class Recorder:
    """Thread-safe: numbers operations, keeps per-connection send order and the clock."""

    def __init__(self) -> None:
        self.history = History()
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._conn_seq: dict[str, int] = defaultdict(int)
        self.epoch = 0  # gateway incarnation: bumped just before each kill

    def now(self) -> float:
        return time.monotonic() - self._t0

    def begin(self, op: _OpT, conn: str | None = None) -> _OpT:
        with self._lock:
            op.id = len(self.history.ops)
            op.conn = conn
            if conn is not None:
                op.conn_seq = self._conn_seq[conn]
                self._conn_seq[conn] += 1
            op.start = self.now()
            self.history.ops.append(op)
        return op

    def finish(self, op: Op, outcome: str, error: str | None = None) -> None:
        op.end = self.now() if outcome != UNKNOWN else None
        op.outcome = outcome
        op.error = error

    def note(self, what: str, detail: str = "") -> None:
        with self._lock:
            self.history.notes.append(Note(at=self.now(), what=what, detail=detail))
        log.info("%s %s", what, detail)

    def bump_epoch(self) -> None:
        with self._lock:
            self.epoch += 1
