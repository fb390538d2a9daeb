"""A history checker: what clients sent and saw during a workload, and what Kafka promises
about it.

A *history* (`History`) is a list of operations (plain dataclasses, `Op` and its kinds),
each with the client and connection that made it, its place in that connection's order
(`conn_seq`: the order the requests were sent), when it was invoked and when its answer was
seen (`time.monotonic()` seconds from the start of the run; `end` None: no answer), and its
outcome ("ok", "error": the broker said no, "unknown": no answer). `check(history)` returns
the `Violation`s:

- `lost_record`: an acknowledged record is not at its offset at the end (unless it is below
  a log start that a DeleteRecords of the history itself moved past it);
- `duplicate_record`: a unique value of an idempotent producer read at two offsets;
- `key_order_broken`: within a partition, one producer's records of a key read back in an
  order other than the order they were acknowledged in;
- `unstable_read`: a record read during the run is not what the partition holds at that
  offset at the end (consumers may only see durable data);
- `committed_offset_backwards`: a fetch of a committed offset returns less than a commit
  acknowledged before it (or less than an earlier fetch returned), with no lower commit that
  could have landed in between;
- `log_start_backwards`: ListOffsets(earliest) (or a Fetch's log start) lower than a
  DeleteRecords acknowledged before it or an earlier observation;
- `high_watermark_backwards`: a high watermark lower than one seen before, or not past a
  record acknowledged before;
- `topic_missing`: Metadata without a topic whose CreateTopics was acknowledged before;
- `read_missed_own_write`: any of the last four where the write that was missed was sent
  before the read *on the same connection* (Kafka handles one connection's requests one
  after the other): OffsetFetch after OffsetCommit, ListOffsets after DeleteRecords, Fetch
  after Produce, Metadata after CreateTopics.

"Before" is real time (the earlier operation's answer was seen before the later one was
invoked) or connection order (both on one connection, the earlier one sent first). For the
confluent-kafka clients the connection is known only up to a reconnect: their operations
carry a connection label that changes at every gateway kill and every transport error the
client reports, and an operation whose label changed while it was outstanding gets none.

The workload (`run_workload`, CLI `python -m harness.history run --seconds N [--kills K]
[--seed S] [--out FILE] [--repo DIR]`) starts its own gateway (admin HTTP on) and runs, all
against 127.0.0.1 and bounded in time: idempotent confluent-kafka producers of keyed unique
values; a confluent-kafka consumer group that consumes, commits asynchronously record by
record, then synchronously, then reads `committed()`; a raw prober (`kafkaclient`) that
pipelines OffsetCommit+OffsetFetch, DeleteRecords+ListOffsets(earliest),
Produce+Fetch+ListOffsets(latest) and CreateTopics+Metadata on one connection without
waiting; a split and a merge of the topic's stream (a pair every ~2 minutes); and SIGKILL
restarts of the gateway, spread over the run.
At the end a fresh connection reads every partition back, log starts, high watermarks and
committed offsets. `python -m harness.history check FILE` checks a saved history again.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import dataclasses
import json
import logging
import random
import shutil
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
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


# --------------------------------------------------------------------------- the checker


def same_conn_before(a: Op, b: Op) -> bool:
    """`a` was sent before `b` on the same connection."""
    return a.conn is not None and a.conn == b.conn and a.conn_seq < b.conn_seq


def precedes(a: Op, b: Op) -> bool:
    """`a` is ordered before `b`: answered before `b` was invoked, or sent before it on the
    same connection."""
    return (a.end is not None and a.end < b.start) or same_conn_before(a, b)


def check(history: History) -> list[Violation]:
    """Every violation of the promises listed in the module docstring."""
    violations: list[Violation] = []
    violations += _check_records(history)
    violations += _check_committed(history)
    violations += _check_log_starts(history)
    violations += _check_high_watermarks(history)
    violations += _check_topics(history)
    return violations


def summarize(violations: Iterable[Violation], by_register: bool = False) -> dict[str, int]:
    """Counts per kind (or per "kind/register")."""
    return dict(Counter(f"{v.kind}/{v.register}" if by_register else v.kind for v in violations))


def _op_desc(op: Op) -> str:
    when = f"{op.start:.3f}-{'?' if op.end is None else f'{op.end:.3f}'}"
    return f"#{op.id} {type(op).__name__} by {op.client} on {op.conn} [{when}]"


TP = tuple[str, int]


def _final_views(
    history: History,
) -> tuple[dict[TP, int], dict[TP, int], dict[tuple[str, int, int], tuple[str | None, str | None]]]:
    log_starts: dict[TP, int] = {}
    high_watermarks: dict[TP, int] = {}
    records: dict[tuple[str, int, int], tuple[str | None, str | None]] = {}
    for op in history.ops:
        if op.outcome != OK:
            continue
        if isinstance(op, LogStartRead) and op.final:
            log_starts[(op.topic, op.partition)] = op.offset
        elif isinstance(op, HighWatermarkRead) and op.final:
            high_watermarks[(op.topic, op.partition)] = op.offset
        elif isinstance(op, RecordRead) and op.final:
            records[(op.topic, op.partition, op.offset)] = (op.key, op.value)
    return log_starts, high_watermarks, records


def _check_records(history: History) -> list[Violation]:
    out: list[Violation] = []
    log_starts, high_watermarks, final = _final_views(history)
    deleted_below: dict[TP, int] = defaultdict(lambda: -1)
    for d in history.of(DeleteRecordsOp):
        # what the history itself may have deleted: the answered new start, or what was
        # asked for when the answer is missing or an error
        reach = d.low_watermark if d.outcome == OK else d.requested
        if d.outcome != OK and d.requested < 0:
            reach = 1 << 62  # "up to the high watermark" with no answer: anything
        tp = (d.topic, d.partition)
        deleted_below[tp] = max(deleted_below[tp], reach)
    final_at: dict[str, list[tuple[str, int, int]]] = defaultdict(list)
    for (topic, partition, offset), (_key, value) in final.items():
        if value is not None:
            final_at[value].append((topic, partition, offset))

    produced = history.of(ProduceOp)
    for op in produced:
        if op.outcome != OK or op.offset < 0:
            continue
        tp = (op.topic, op.partition)
        if tp not in log_starts or tp not in high_watermarks:
            continue  # never read back at the end (the runner reads every partition)
        start, hw = log_starts[tp], high_watermarks[tp]
        if op.offset < start:
            if deleted_below[tp] > op.offset:
                continue
            out.append(
                Violation(
                    LOST,
                    f"{op.topic}/{op.partition}@{op.offset} ({op.value!r}, {_op_desc(op)}) is "
                    f"below the final log start {start}, but no DeleteRecords of the history "
                    f"reached past it (max {deleted_below[tp]})",
                    [op.id],
                )
            )
            continue
        got = final.get((op.topic, op.partition, op.offset))
        if got is not None and got[1] == op.value:
            continue
        elsewhere = final_at.get(op.value, [])
        what = "nothing" if got is None else f"{got[1]!r}"
        if got is None and op.offset >= hw:
            what += f" (final high watermark {hw})"
        out.append(
            Violation(
                LOST,
                f"{op.topic}/{op.partition}@{op.offset} acknowledged {op.value!r} "
                f"({_op_desc(op)}) but holds {what} at the end"
                + (f"; the value is at {elsewhere}" if elsewhere else ""),
                [op.id],
            )
        )

    # duplicates: an idempotent producer's unique value at two offsets, in any read
    idempotent_values = {op.value for op in produced if op.idempotent}
    seen_at: dict[str, set[tuple[str, int, int]]] = defaultdict(set)
    reads = history.of(RecordRead)
    for r in reads:
        if r.outcome == OK and r.value in idempotent_values:
            seen_at[r.value].add((r.topic, r.partition, r.offset))
    for value, spots in seen_at.items():
        if len(spots) > 1:
            out.append(Violation(DUPLICATE, f"{value!r} read at {sorted(spots)}", []))

    # per-key order: one producer's acknowledged records of a key, read back at the end
    acked: dict[tuple[str, str, int, str | None], list[ProduceOp]] = defaultdict(list)
    for op in produced:
        if op.outcome == OK and op.offset >= 0 and op.ack_seq >= 0:
            acked[(op.producer, op.topic, op.partition, op.key)].append(op)
    for (producer, topic, partition, key), ops in acked.items():
        ops.sort(key=lambda o: o.ack_seq)
        last: tuple[int, ProduceOp] | None = None
        for op in ops:
            places = [p for p in final_at.get(op.value, []) if p[:2] == (topic, partition)]
            if not places:
                continue  # deleted or lost (reported above)
            offset = min(p[2] for p in places)
            if last is not None and offset <= last[0]:
                out.append(
                    Violation(
                        KEY_ORDER,
                        f"{producer} key {key!r} in {topic}/{partition}: {op.value!r} "
                        f"(acknowledged after {last[1].value!r}) read back at {offset}, "
                        f"before it at {last[0]}",
                        [last[1].id, op.id],
                    )
                )
                break
            last = (offset, op)

    # records read during the run must be what the partition holds at the end
    for r in reads:
        if r.final or r.outcome != OK:
            continue
        tp = (r.topic, r.partition)
        if tp not in log_starts or r.offset < log_starts[tp]:
            continue
        got = final.get((r.topic, r.partition, r.offset))
        if got is None or got[1] != r.value:
            out.append(
                Violation(
                    UNSTABLE_READ,
                    f"{r.topic}/{r.partition}@{r.offset} read as {r.value!r} "
                    f"({_op_desc(r)}) but holds {None if got is None else got[1]!r} at the end",
                    [r.id],
                )
            )
    return out


@dataclass
class _Seen:
    op: Op
    value: int
    is_write: bool


class _Prefix:
    """Constraints (values known to hold once their op is done) sorted by answer time and
    per connection by send order, with running maxima: the largest value ordered before a
    read, in O(log n)."""

    def __init__(self, seen: Iterable[_Seen]) -> None:
        seen = list(seen)
        timed = sorted((s for s in seen if s.op.end is not None), key=lambda s: s.op.end or 0.0)
        self.ends = [s.op.end or 0.0 for s in timed]
        self.best = self._running_max(timed)
        per_conn: dict[str, list[_Seen]] = defaultdict(list)
        for s in seen:
            if s.op.conn is not None:
                per_conn[s.op.conn].append(s)
        self.by_conn: dict[str, tuple[list[int], list[_Seen]]] = {}
        for conn, items in per_conn.items():
            items.sort(key=lambda s: s.op.conn_seq)
            self.by_conn[conn] = ([s.op.conn_seq for s in items], self._running_max(items))

    @staticmethod
    def _running_max(items: list[_Seen]) -> list[_Seen]:
        best: list[_Seen] = []
        for s in items:
            best.append(s if not best or s.value > best[-1].value else best[-1])
        return best

    def by_time(self, read: Op) -> _Seen | None:
        """The largest answered before `read` was invoked."""
        i = bisect.bisect_left(self.ends, read.start)
        return self.best[i - 1] if i else None

    def on_conn(self, read: Op) -> _Seen | None:
        """The largest sent before `read` on its connection."""
        if read.conn is None or read.conn not in self.by_conn:
            return None
        seqs, best = self.by_conn[read.conn]
        j = bisect.bisect_left(seqs, read.conn_seq)
        return best[j - 1] if j else None


_SHORT_S = 1.0  # writes answered within this are searched by start time


def _register_violations(
    name: str,
    register: str,
    backwards_kind: str,
    writes: list[_Seen],
    reads: list[_Seen],
    lowering: bool,
) -> list[Violation]:
    """Reads of one register (a committed offset, a log start, a high watermark) against
    what was written and read before them. Without `lowering` the register only grows;
    with it, a write of a lower value that may have landed between the witness and the read
    explains a lower read.

    Witnesses (what a read must not be below) are the largest value answered before the
    read was invoked, the largest sent before it on its connection, and the largest write
    sent before it on its connection: a subset of every possible witness, so a finding is
    always real, though with lowering writes one could be missed."""
    out: list[Violation] = []
    acked = [w for w in writes if w.op.outcome == OK]
    everything = _Prefix(acked + reads)
    own_writes = _Prefix(acked)
    short = sorted(
        (w for w in writes if w.op.end is not None and w.op.end - w.op.start <= _SHORT_S),
        key=lambda w: w.op.start,
    )
    starts = [w.op.start for w in short]
    others = [w for w in writes if w.op.end is None or w.op.end - w.op.start > _SHORT_S]

    def intervening(witness: _Seen, read: _Seen) -> bool:
        """A lower write (not refused) that may have landed after the witness and before the
        read."""
        lo = bisect.bisect_left(starts, witness.op.start - _SHORT_S - 1e-6)
        hi = bisect.bisect_right(starts, read.op.end if read.op.end is not None else 1e18)
        for w in [*short[lo:hi], *others]:
            if w.op is witness.op or w.value >= witness.value:
                continue
            if w.op.outcome == ERROR and w.op.end is not None:
                continue  # refused: it changed nothing
            if precedes(w.op, witness.op) or precedes(read.op, w.op):
                continue
            return True
        return False

    for read in reads:
        own = own_writes.on_conn(read.op)
        candidates = [
            c
            for c in (own, everything.on_conn(read.op), everything.by_time(read.op))
            if c is not None and c.value > read.value
        ]
        if not candidates:
            continue
        if lowering:
            chosen = next((c for c in candidates if not intervening(c, read)), None)
            if chosen is None:
                continue
        else:
            chosen = candidates[0]
        own_write = chosen.is_write and same_conn_before(chosen.op, read.op)
        kind = MISSED_OWN_WRITE if own_write else backwards_kind
        what = "acknowledged write" if chosen.is_write else "earlier read"
        out.append(
            Violation(
                kind,
                f"{name}: {_op_desc(read.op)} saw {read.value}, after {what} of "
                f"{chosen.value} ({_op_desc(chosen.op)})",
                [chosen.op.id, read.op.id],
                register,
            )
        )
    return out


def _check_committed(history: History) -> list[Violation]:
    writes: dict[tuple[str, str, int], list[_Seen]] = defaultdict(list)
    reads: dict[tuple[str, str, int], list[_Seen]] = defaultdict(list)
    for c in history.of(CommitOp):
        writes[(c.group, c.topic, c.partition)].append(_Seen(c, c.offset, True))
    for r in history.of(CommittedRead):
        if r.outcome == OK:
            reads[(r.group, r.topic, r.partition)].append(_Seen(r, max(r.offset, -1), False))
    out: list[Violation] = []
    for key in sorted(set(writes) | set(reads)):
        name = f"committed offset of {key[0]} on {key[1]}/{key[2]}"
        out += _register_violations(
            name, "committed_offset", COMMITTED_BACKWARDS, writes[key], reads[key], lowering=True
        )
    return out


def _check_log_starts(history: History) -> list[Violation]:
    writes: dict[TP, list[_Seen]] = defaultdict(list)
    reads: dict[TP, list[_Seen]] = defaultdict(list)
    for d in history.of(DeleteRecordsOp):
        if d.outcome == OK:
            writes[(d.topic, d.partition)].append(_Seen(d, d.low_watermark, True))
    for r in history.of(LogStartRead):
        if r.outcome == OK:
            reads[(r.topic, r.partition)].append(_Seen(r, r.offset, False))
    out: list[Violation] = []
    for tp in sorted(set(writes) | set(reads)):
        name = f"log start of {tp[0]}/{tp[1]}"
        out += _register_violations(
            name, "log_start", LOG_START_BACKWARDS, writes[tp], reads[tp], False
        )
    return out


def _check_high_watermarks(history: History) -> list[Violation]:
    writes: dict[TP, list[_Seen]] = defaultdict(list)
    reads: dict[TP, list[_Seen]] = defaultdict(list)
    for p in history.of(ProduceOp):
        if p.outcome == OK and p.offset >= 0:
            writes[(p.topic, p.partition)].append(_Seen(p, p.offset + 1, True))
    for r in history.of(HighWatermarkRead):
        if r.outcome == OK:
            reads[(r.topic, r.partition)].append(_Seen(r, r.offset, False))
    out: list[Violation] = []
    for tp in sorted(set(writes) | set(reads)):
        name = f"high watermark of {tp[0]}/{tp[1]}"
        out += _register_violations(
            name, "high_watermark", HW_BACKWARDS, writes[tp], reads[tp], False
        )
    return out


def _check_topics(history: History) -> list[Violation]:
    created: dict[str, list[CreateTopicOp]] = defaultdict(list)
    for c in history.of(CreateTopicOp):
        if c.outcome == OK:
            created[c.topic].append(c)
    out: list[Violation] = []
    for r in history.of(TopicRead):
        if r.outcome != OK or r.exists:
            continue
        before = [c for c in created.get(r.topic, []) if precedes(c, r)]
        if not before:
            continue
        own = [c for c in before if same_conn_before(c, r)]
        chosen = own[0] if own else before[0]
        out.append(
            Violation(
                MISSED_OWN_WRITE if own else TOPIC_MISSING,
                f"topic {r.topic}: {_op_desc(r)} does not list it, after CreateTopics "
                f"({_op_desc(chosen)})",
                [chosen.id, r.id],
                "topic",
            )
        )
    return out


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


# --------------------------------------------------------------------------- the workload

API_PRODUCE, API_FETCH, API_LIST_OFFSETS, API_METADATA = 0, 1, 2, 3
API_OFFSET_COMMIT, API_OFFSET_FETCH, API_CREATE_TOPICS, API_DELETE_RECORDS = 8, 9, 19, 21
V_PRODUCE, V_FETCH, V_LIST_OFFSETS, V_METADATA = 9, 12, 7, 12
V_OFFSET_COMMIT, V_OFFSET_FETCH, V_CREATE_TOPICS, V_DELETE_RECORDS = 8, 7, 7, 2
EARLIEST, LATEST = -2, -1


@dataclass
class RunConfig:
    seconds: float = 60.0
    kills: int = 1
    seed: int = 1
    partitions: int = 4
    producers: int = 2
    keys_per_producer: int = 8
    produce_pause_s: float = 0.05  # between rounds of one record per key
    async_commits_per_cycle: int = 200
    create_topics: int = 20  # CreateTopics+Metadata probes at most
    repo: Path | None = None  # the gateway's code (cwd and PYTHONPATH); default: this one
    workdir: Path | None = None  # data dir and log; default: a temporary one, removed


def _code(error: Any) -> int:
    return int(getattr(error, "value", error))


class _Raw:
    """One raw connection (`kafkaclient.KafkaClient`) that pipelines requests of mixed kinds:
    every request of a batch is sent before the first answer is read."""

    counter = 0
    counter_lock = threading.Lock()

    def __init__(self, recorder: Recorder, bootstrap: str, client: str) -> None:
        from kafkaclient.client import KafkaClient

        with _Raw.counter_lock:
            _Raw.counter += 1
            number = _Raw.counter
        self.recorder = recorder
        self.client = client
        self.conn = f"{client}/raw{number}"
        self.kc = KafkaClient(bootstrap, timeout=15.0, client_id=client)

    def close(self) -> None:
        self.kc.close()

    def pipeline(self, requests: Sequence[Request]) -> list[Any]:
        """Send every request, then read every answer in order. Each request's Op (if any) is
        begun as it is sent; the caller finishes it from the answer. On a connection error
        the ops without an answer stay unknown and the error is raised."""
        from kafkaclient.client import KafkaClientError, encode_request

        kc = self.kc
        sent: list[int] = []
        frames = []
        for api_key, version, body, _op in requests:
            kc._correlation_id += 1
            frames.append(encode_request(api_key, version, kc._correlation_id, kc._client_id, body))
            sent.append(kc._correlation_id)
        for _api_key, _version, _body, op in requests:
            if op is not None:
                op.client = self.client
                self.recorder.begin(op, self.conn)
        try:  # back to back, in one write: the gateway gets them all at once
            kc._sock.sendall(b"".join(frames))
        except OSError as exc:
            raise KafkaClientError(f"request failed: {exc}") from exc
        answers = []
        for (api_key, version, _body, _op), correlation_id in zip(requests, sent, strict=True):
            answers.append(kc._read_response(api_key, version, correlation_id))
        return answers


Request = tuple[int, int, dict[str, Any], Op | None]  # api key, version, body, its Op


def list_offsets_request(topic: str, partition: int, timestamp: int, op: Op | None) -> Request:
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "timestamp": timestamp}]}
        ],
    }
    return API_LIST_OFFSETS, V_LIST_OFFSETS, body, op


def fetch_request(topic: str, partition: int, offset: int, op: Op | None) -> Request:
    """A Fetch that answers at once with what there is (max wait 0, min bytes 0)."""
    wanted = {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
    body = {
        "max_wait": 0,
        "min_bytes": 0,
        "topics": [{"topic": topic, "partitions": [wanted]}],
        "forgotten_topics_data": [],
    }
    return API_FETCH, V_FETCH, body, op


def produce_request(topic: str, partition: int, batch: bytes, op: Op | None) -> Request:
    data = [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]
    body = {"transactional_id": None, "acks": -1, "timeout": 30000, "topic_data": data}
    return API_PRODUCE, V_PRODUCE, body, op


def commit_request(group: str, topic: str, partition: int, offset: int, op: Op | None) -> Request:
    """OffsetCommit without group management (generation -1)."""
    wanted = {"partition_index": partition, "committed_offset": offset, "committed_metadata": None}
    body = {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [{"name": topic, "partitions": [wanted]}],
    }
    return API_OFFSET_COMMIT, V_OFFSET_COMMIT, body, op


def offset_fetch_request(group: str, topic: str, partitions: Sequence[int]) -> Request:
    body = {"group_id": group, "topics": [{"name": topic, "partition_indexes": list(partitions)}]}
    return API_OFFSET_FETCH, V_OFFSET_FETCH, body, None


def delete_records_request(topic: str, partition: int, offset: int, op: Op | None) -> Request:
    wanted = [{"name": topic, "partitions": [{"partition_index": partition, "offset": offset}]}]
    return API_DELETE_RECORDS, V_DELETE_RECORDS, {"topics": wanted, "timeout": 30000}, op


def create_topics_request(topics: dict[str, int], op: Op | None) -> Request:
    wanted = [
        {"name": name, "num_partitions": count, "replication_factor": 1}
        for name, count in topics.items()
    ]
    body = {"topics": wanted, "timeout": 30000, "validate_only": False}
    return API_CREATE_TOPICS, V_CREATE_TOPICS, body, op


def metadata_request(topic: str, op: Op | None) -> Request:
    body = {
        "topics": [{"name": topic, "topic_id": None}],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    return API_METADATA, V_METADATA, body, op


def _records_of(blob: Any, from_offset: int) -> list[tuple[int, str | None, str | None]]:
    from core.recordbatch import decode_records, iter_stored_batches

    if not blob:
        return []
    buf = bytes(blob)
    out = []
    for pos, header in iter_stored_batches(buf):
        if header.is_control:
            continue
        for rec in decode_records(memoryview(buf)[pos : pos + header.total_size]):
            if rec.offset >= from_offset:
                key = None if rec.key is None else bytes(rec.key).decode()
                value = None if rec.value is None else bytes(rec.value).decode()
                out.append((rec.offset, key, value))
    return out


class _Worker(threading.Thread):
    def __init__(self, name: str, recorder: Recorder, stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.recorder = recorder
        self.stop = stop
        self.failure: BaseException | None = None
        self.counts: Counter[str] = Counter()

    def run(self) -> None:
        try:
            self.work()
        except BaseException as exc:  # reported by the runner
            log.exception("%s failed", self.name)
            self.failure = exc

    def work(self) -> None:
        raise NotImplementedError


def _confluent_quiet(config: dict[str, Any]) -> dict[str, Any]:
    return {
        "log_level": 2,
        "reconnect.backoff.ms": 100,
        "reconnect.backoff.max.ms": 1000,
        "socket.connection.setup.timeout.ms": 5000,
        **config,
    }


class _ConfluentLabel:
    """The connection label of a confluent-kafka client: changes with each gateway kill and
    each transport-level error the client reports."""

    def __init__(self, recorder: Recorder, client: str) -> None:
        self.recorder = recorder
        self.client = client
        self.errors = 0

    def on_error(self, err: Any) -> None:
        from confluent_kafka import KafkaError

        if err.code() in (
            KafkaError._TRANSPORT,
            KafkaError._ALL_BROKERS_DOWN,
            KafkaError._TIMED_OUT,
            KafkaError._RESOLVE,
        ):
            self.errors += 1

    def label(self) -> str:
        return f"{self.client}#{self.recorder.epoch}.{self.errors}"

    def settle(self, op: Op) -> None:
        """An op whose label changed while outstanding has no known connection."""
        if op.conn != self.label():
            op.conn = None


class ProducerWorker(_Worker):
    """Idempotent confluent-kafka producer of unique values for its keys, round-robin."""

    def __init__(
        self,
        recorder: Recorder,
        stop: threading.Event,
        bootstrap: str,
        topic: str,
        name: str,
        keys: list[str],
        pause: float,
    ) -> None:
        super().__init__(name, recorder, stop)
        self.bootstrap, self.topic, self.keys, self.pause = bootstrap, topic, keys, pause
        self.generation = 0
        self.fatal: str | None = None
        self.ack_seq = 0

    def _producer(self) -> Any:
        from confluent_kafka import Producer

        def on_error(err: Any) -> None:
            if err.fatal():
                self.fatal = str(err)

        return Producer(
            _confluent_quiet(
                {
                    "bootstrap.servers": self.bootstrap,
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 5,
                    "message.timeout.ms": 30000,
                    "retry.backoff.ms": 100,
                    "error_cb": on_error,
                }
            )
        )

    def _delivered(self, op: ProduceOp) -> Callable[[Any, Any], None]:
        def callback(err: Any, msg: Any) -> None:
            if err is None:
                op.partition, op.offset = msg.partition(), msg.offset()
                op.ack_seq = self.ack_seq
                self.ack_seq += 1
                self.recorder.finish(op, OK)
                self.counts["acked"] += 1
            else:
                self.recorder.finish(op, ERROR, str(err))
                op.end = None  # it may still have been written
                self.counts["failed"] += 1

        return callback

    def work(self) -> None:
        seq = 0
        while not self.stop.is_set():
            producer = self._producer()
            name = f"{self.name}.{self.generation}"
            while not self.stop.is_set() and self.fatal is None:
                for key in self.keys:
                    value = f"{name}:{key}:{seq}"
                    op = self.recorder.begin(
                        ProduceOp(
                            client=name,
                            topic=self.topic,
                            key=key,
                            value=value,
                            producer=name,
                            idempotent=True,
                        )
                    )
                    while True:
                        try:
                            producer.produce(
                                self.topic, key=key, value=value, on_delivery=self._delivered(op)
                            )
                            break
                        except BufferError:
                            producer.poll(0.1)
                    self.counts["sent"] += 1
                seq += 1
                producer.poll(0)
                time.sleep(self.pause)
            left = producer.flush(40)
            self.counts["undelivered"] += left
            if self.fatal is not None:
                log.warning("%s: fatal error %s; a new producer", name, self.fatal)
                self.fatal = None
                self.generation += 1


class ConsumerWorker(_Worker):
    """A confluent-kafka group member: consume, commit each record asynchronously, then the
    positions synchronously, then read them back with committed()."""

    def __init__(
        self,
        recorder: Recorder,
        stop: threading.Event,
        bootstrap: str,
        topic: str,
        group: str,
        name: str,
        async_commits: int,
    ) -> None:
        super().__init__(name, recorder, stop)
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.async_commits = async_commits
        self.label = _ConfluentLabel(recorder, name)
        self.pending: dict[tuple[str, int, int], list[CommitOp]] = defaultdict(list)

    def _on_commit(self, err: Any, partitions: Any) -> None:
        for tp in partitions:
            waiting = self.pending.get((tp.topic, tp.partition, tp.offset))
            if not waiting:
                continue  # the synchronous commit's own report
            op = waiting.pop(0)
            failure = err if err is not None else tp.error
            self.label.settle(op)
            if failure is None:
                self.recorder.finish(op, OK)
                self.counts["async_ok"] += 1
            else:
                self.recorder.finish(op, ERROR if _broker_error(failure) else UNKNOWN, str(failure))

    def work(self) -> None:
        from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

        consumer = Consumer(
            _confluent_quiet(
                {
                    "bootstrap.servers": self.bootstrap,
                    "group.id": self.group,
                    "client.id": self.name,
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                    "session.timeout.ms": 10000,
                    "heartbeat.interval.ms": 1000,
                    "max.poll.interval.ms": 120000,
                    "on_commit": self._on_commit,
                    "error_cb": self.label.on_error,
                }
            )
        )
        consumer.subscribe([self.topic])
        try:
            while not self.stop.is_set():
                batch: list[Any] = []
                until = time.monotonic() + 0.5
                while time.monotonic() < until and len(batch) < self.async_commits:
                    msg = consumer.poll(0.1)
                    if msg is None:
                        continue
                    failure = msg.error()
                    if failure is not None:
                        if failure.code() != KafkaError._PARTITION_EOF:
                            self.counts["consume_errors"] += 1
                        continue
                    batch.append(msg)
                    seen = self.recorder.begin(
                        RecordRead(
                            client=self.name,
                            topic=self.topic,
                            partition=int(msg.partition() or 0),
                            offset=int(msg.offset() or 0),
                            key=_text(msg.key()),
                            value=_text(msg.value()),
                        )
                    )
                    self.recorder.finish(seen, OK)
                if not batch:
                    continue
                positions: dict[int, int] = {}
                for msg in batch:
                    partition, offset = int(msg.partition() or 0), int(msg.offset() or 0) + 1
                    positions[partition] = offset
                    commit = self.recorder.begin(
                        CommitOp(
                            client=self.name,
                            group=self.group,
                            topic=self.topic,
                            partition=partition,
                            offset=offset,
                        ),
                        self.label.label(),
                    )
                    self.pending[(self.topic, partition, offset)].append(commit)
                    try:
                        consumer.commit(
                            offsets=[TopicPartition(self.topic, partition, offset)],
                            asynchronous=True,
                        )
                    except KafkaException as exc:
                        self.pending[(self.topic, partition, offset)].remove(commit)
                        self.recorder.finish(commit, UNKNOWN, str(exc))
                    self.counts["async_commits"] += 1
                self._commit_sync(consumer, positions)
                self._read_committed(consumer, sorted(positions))
        finally:
            with contextlib.suppress(Exception):
                consumer.close()

    def _commit_sync(self, consumer: Any, positions: dict[int, int]) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        label = self.label.label()
        ops = {
            p: self.recorder.begin(
                CommitOp(
                    client=self.name, group=self.group, topic=self.topic, partition=p, offset=o
                ),
                label,
            )
            for p, o in positions.items()
        }
        try:
            answered = consumer.commit(
                offsets=[TopicPartition(self.topic, p, o) for p, o in positions.items()],
                asynchronous=False,
            )
        except KafkaException as exc:
            for op in ops.values():
                self.label.settle(op)
                error = exc.args[0] if exc.args else exc
                self.recorder.finish(op, ERROR if _broker_error(error) else UNKNOWN, str(exc))
            self.counts["sync_failed"] += 1
            return
        for tp in answered or []:
            op = ops[tp.partition]
            self.label.settle(op)
            if tp.error is None:
                self.recorder.finish(op, OK)
            else:
                self.recorder.finish(
                    op, ERROR if _broker_error(tp.error) else UNKNOWN, str(tp.error)
                )
        self.counts["sync_commits"] += 1

    def _read_committed(self, consumer: Any, partitions: list[int]) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        label = self.label.label()
        ops = {
            p: self.recorder.begin(
                CommittedRead(client=self.name, group=self.group, topic=self.topic, partition=p),
                label,
            )
            for p in partitions
        }
        try:
            got = consumer.committed([TopicPartition(self.topic, p) for p in partitions], 10)
        except KafkaException as exc:
            for op in ops.values():
                self.recorder.finish(op, UNKNOWN, str(exc))
            return
        for tp in got:
            op = ops[tp.partition]
            self.label.settle(op)
            if tp.error is not None:
                self.recorder.finish(op, ERROR, str(tp.error))
                continue
            op.offset = tp.offset if tp.offset >= 0 else -1
            self.recorder.finish(op, OK)
            self.counts["committed_reads"] += 1


def _broker_error(error: Any) -> bool:
    """A broker's error code (the request was refused), not a client-side one."""
    code = getattr(error, "code", None)
    value = code() if callable(code) else code
    return isinstance(value, int) and value > 0


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode()


class ProberWorker(_Worker):
    """Raw pipelined pairs on one connection, each second request sent without waiting
    for the first's answer."""

    def __init__(
        self,
        recorder: Recorder,
        stop: threading.Event,
        bootstrap: str,
        topic: str,
        probe_topic: str,
        group: str,
        watched_group: str,
        partitions: int,
        rng: random.Random,
        create_topics: int,
    ) -> None:
        super().__init__("prober", recorder, stop)
        self.bootstrap, self.topic, self.probe_topic = bootstrap, topic, probe_topic
        self.group, self.watched_group, self.partitions = group, watched_group, partitions
        self.rng = rng
        self.create_topics = create_topics
        self.commit_offset = 0
        self.probe_seq = 0
        self.probe_hw = 0
        self.created: list[str] = []

    def work(self) -> None:
        from kafkaclient.client import KafkaClientError

        raw: _Raw | None = None
        steps = [self._commit_fetch, self._delete_list, self._produce_fetch, self._watch_group]
        round_ = 0
        while not self.stop.is_set():
            try:
                if raw is None:
                    raw = _Raw(self.recorder, self.bootstrap, "prober")
                for step in steps:
                    step(raw)
                if len(self.created) < self.create_topics and round_ % 5 == 0:
                    self._create_metadata(raw)
                round_ += 1
                self.stop.wait(0.02)
            except (KafkaClientError, OSError) as exc:
                self.counts["reconnects"] += 1
                log.debug("prober: %s; reconnecting", exc)
                if raw is not None:
                    raw.close()
                raw = None
                self.stop.wait(0.2)
        if raw is not None:
            raw.close()

    def _commit_fetch(self, raw: _Raw) -> None:
        """Several OffsetCommits of growing offsets, then an OffsetFetch, all in flight."""
        count = self.rng.randint(1, 4)
        requests: list[Request] = []
        commits = []
        for _ in range(count):
            self.commit_offset += 1
            op = CommitOp(
                group=self.group, topic=self.probe_topic, partition=0, offset=self.commit_offset
            )
            commits.append(op)
            requests.append(commit_request(self.group, self.probe_topic, 0, op.offset, op))
        read = CommittedRead(group=self.group, topic=self.probe_topic, partition=0)
        _fetch, _version, body, _ = offset_fetch_request(self.group, self.probe_topic, [0])
        requests.append((_fetch, _version, body, read))
        answers = raw.pipeline(requests)
        for op, answer in zip(commits, answers, strict=False):
            code = _code(answer.topics[0].partitions[0].error_code)
            self.recorder.finish(op, OK if code == 0 else ERROR, None if code == 0 else str(code))
        _finish_committed(self.recorder, read, answers[-1])
        self.counts["commit_fetch"] += 1

    def _watch_group(self, raw: _Raw) -> None:
        """The consumer group's committed offsets, from another connection."""
        reads = [
            CommittedRead(group=self.watched_group, topic=self.topic, partition=p)
            for p in range(self.partitions)
        ]
        requests = [offset_fetch_request(self.watched_group, self.topic, range(self.partitions))]
        begun = [self.recorder.begin(r, raw.conn) for r in reads]
        for r in begun:
            r.client = raw.client
        (answer,) = raw.pipeline(requests)
        for r in begun:
            _finish_committed(self.recorder, r, answer)

    def _delete_list(self, raw: _Raw) -> None:
        """ListOffsets(latest), then DeleteRecords up to it and ListOffsets(earliest) right
        behind it on the same connection."""
        partition = 0
        hw = HighWatermarkRead(topic=self.topic, partition=partition)
        (answer,) = raw.pipeline([list_offsets_request(self.topic, partition, LATEST, hw)])
        self._finish_list(hw, answer)
        if hw.outcome != OK:
            return
        upto = hw.offset
        delete = DeleteRecordsOp(topic=self.topic, partition=partition, requested=upto)
        earliest = LogStartRead(topic=self.topic, partition=partition)
        requests = [
            delete_records_request(self.topic, partition, upto, delete),
            list_offsets_request(self.topic, partition, EARLIEST, earliest),
        ]
        answers = raw.pipeline(requests)
        part = answers[0].topics[0].partitions[0]
        code = _code(part.error_code)
        if code == 0:
            delete.low_watermark = part.low_watermark
        self.recorder.finish(delete, OK if code == 0 else ERROR, None if code == 0 else str(code))
        self._finish_list(earliest, answers[1])
        self.counts["delete_list"] += 1

    def _finish_list(self, read: LogStartRead | HighWatermarkRead, answer: Any) -> None:
        part = answer.topics[0].partitions[0]
        code = _code(part.error_code)
        if code != 0:
            self.recorder.finish(read, ERROR, str(code))
            return
        read.offset = part.offset
        self.recorder.finish(read, OK)

    def _produce_fetch(self, raw: _Raw) -> None:
        """Produce one record, then Fetch from the last high watermark seen and ListOffsets
        (latest) behind it: both must see the record once it is acknowledged."""
        from core.recordbatch import build_batch

        self.probe_seq += 1
        value = f"probe:{self.probe_seq}"
        produce = ProduceOp(
            topic=self.probe_topic, partition=0, key="probe", value=value, producer="prober"
        )
        hw_fetch = HighWatermarkRead(topic=self.probe_topic, partition=0)
        start_fetch = LogStartRead(topic=self.probe_topic, partition=0)
        hw_list = HighWatermarkRead(topic=self.probe_topic, partition=0)
        batch = build_batch([(b"probe", value.encode(), [])])
        from_offset = self.probe_hw
        requests = [
            produce_request(self.probe_topic, 0, batch, produce),
            fetch_request(self.probe_topic, 0, from_offset, hw_fetch),
            list_offsets_request(self.probe_topic, 0, LATEST, hw_list),
        ]
        self.recorder.begin(start_fetch, None)  # the Fetch's log start: time order only
        start_fetch.client = raw.client
        answers = raw.pipeline(requests)
        part = answers[0].responses[0].partition_responses[0]
        code = _code(part.error_code)
        if code == 0:
            produce.offset = part.base_offset
            produce.ack_seq = self.probe_seq
        self.recorder.finish(produce, OK if code == 0 else ERROR, None if code == 0 else str(code))
        fetched = answers[1].responses[0].partitions[0]
        code = _code(fetched.error_code)
        if code == 0:
            hw_fetch.offset = fetched.high_watermark
            self.recorder.finish(hw_fetch, OK)
            if fetched.log_start_offset >= 0:
                start_fetch.offset = fetched.log_start_offset
                self.recorder.finish(start_fetch, OK)
            for offset, key, val in _records_of(fetched.records, from_offset):
                rec = self.recorder.begin(
                    RecordRead(
                        client=raw.client,
                        topic=self.probe_topic,
                        partition=0,
                        offset=offset,
                        key=key,
                        value=val,
                    ),
                    raw.conn,
                )
                self.recorder.finish(rec, OK)
        else:
            self.recorder.finish(hw_fetch, ERROR, str(code))
        self._finish_list(hw_list, answers[2])
        if hw_list.outcome == OK:
            self.probe_hw = max(self.probe_hw, hw_list.offset)
        self.counts["produce_fetch"] += 1

    def _create_metadata(self, raw: _Raw) -> None:
        name = f"{self.probe_topic}-ct{len(self.created)}"
        self.created.append(name)
        create = CreateTopicOp(topic=name, partitions=1)
        read = TopicRead(topic=name)
        requests = [create_topics_request({name: 1}, create), metadata_request(name, read)]
        answers = raw.pipeline(requests)
        code = _code(answers[0].topics[0].error_code)
        self.recorder.finish(create, OK if code == 0 else ERROR, None if code == 0 else str(code))
        _finish_topic_read(self.recorder, read, answers[1])
        self.counts["create_metadata"] += 1


def _finish_committed(recorder: Recorder, read: CommittedRead, answer: Any) -> None:
    code = _code(answer.error_code)
    parts = [p for t in answer.topics for p in t.partitions if t.name == read.topic]
    part = next((p for p in parts if p.partition_index == read.partition), None)
    if code != 0 or (part is not None and _code(part.error_code) != 0):
        recorder.finish(read, ERROR, str(code))
        return
    read.offset = part.committed_offset if part is not None else -1
    read.offset = max(read.offset, -1)
    recorder.finish(read, OK)


def _finish_topic_read(recorder: Recorder, read: TopicRead, answer: Any) -> None:
    topic = next((t for t in answer.topics if t.name == read.topic), None)
    code = -1 if topic is None else _code(topic.error_code)
    if code == 0:
        read.exists = True
        recorder.finish(read, OK)
    elif code == 3:  # UNKNOWN_TOPIC_OR_PARTITION
        recorder.finish(read, OK)
    else:
        recorder.finish(read, ERROR, str(code))


def _http(admin_url: str, path: str, payload: Any = None) -> tuple[int, Any]:
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(
        admin_url + path, data=data, method="GET" if data is None else "POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _retry(what: str, action: Callable[[], _T], deadline: float) -> _T:
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            return action()
        except Exception as exc:  # the gateway restarting, a connection refused
            last = exc
            time.sleep(0.3)
    raise RuntimeError(f"{what} kept failing: {last}")


class Chaos:
    """Split, merge and SIGKILL restarts at planned times."""

    def __init__(
        self, recorder: Recorder, gateway: Any, topic: str, config: RunConfig, rng: random.Random
    ) -> None:
        self.recorder, self.gateway, self.topic = recorder, gateway, topic
        self.config = config
        cycles = max(1, int(config.seconds // 120))  # a split and a merge every ~2 minutes
        plan: list[tuple[float, str]] = []
        for k in range(cycles):
            plan.append(((k + 0.2) / cycles * config.seconds, "split"))
            plan.append(((k + 0.5) / cycles * config.seconds, "merge"))
        for i in range(config.kills):
            at = (i + 0.7) / config.kills * 0.9 * config.seconds + rng.uniform(-1.0, 1.0)
            plan.append((max(1.0, at), "kill"))
        self.plan = sorted(plan)
        self.done: Counter[str] = Counter()

    def open_segments(self) -> list[int]:
        status, body = _http(self.gateway.admin_url, f"/streams/{self.topic}")
        if status != 200:
            raise RuntimeError(f"describe {self.topic}: {status} {body}")
        return sorted(s["segment_id"] for s in body["segments"] if s["state"] == "open")

    def scale(self, request: dict[str, Any]) -> None:
        status, body = _http(self.gateway.admin_url, f"/streams/{self.topic}/scale", request)
        if status != 200:
            raise RuntimeError(f"scale {request}: {status} {body}")
        self.recorder.note(
            "split" if "split" in request else "merge", f"{request} -> epoch {body.get('epoch')}"
        )

    def do(self, action: str) -> None:
        deadline = time.monotonic() + 30
        if action == "split":
            segments = _retry("describe", self.open_segments, deadline)
            _retry("split", lambda: self.scale({"split": segments[0], "parts": 2}), deadline)
        elif action == "merge":
            segments = _retry("describe", self.open_segments, deadline)
            if len(segments) < 2:
                raise RuntimeError(f"nothing to merge: open segments {segments}")
            _retry("merge", lambda: self.scale({"merge": segments[:2]}), deadline)
        else:
            self.recorder.bump_epoch()
            self.recorder.note("kill", f"pid {self.gateway.pid}")
            self.gateway.kill()
            self.gateway.start()
            self.recorder.note("restarted", f"pid {self.gateway.pid}")
        self.done[action] += 1

    def run(self, started: float, stop: threading.Event) -> None:
        for at, action in self.plan:
            if stop.wait(max(0.0, started + at - time.monotonic())):
                return
            self.do(action)


def _make_gateway(config: RunConfig, workdir: Path) -> Any:
    from harness.gateway import Gateway

    repo = (config.repo or Path(__file__).resolve().parent.parent).resolve()
    env = {"PYTHONPATH": str(repo)}
    gateway = Gateway(
        workdir / "data",
        workdir / "server.log",
        ("--log-level", "WARNING"),
        default_partitions=1,
        metrics=True,
        env=env,
    )
    gateway.cwd = repo
    return gateway


def _wait_admin(gateway: Any, deadline: float) -> None:
    def ok() -> None:
        status, _ = _http(gateway.admin_url, "/streams")
        if status != 200:
            raise RuntimeError(f"admin HTTP {status}")

    _retry("admin HTTP", ok, deadline)


def _create_topics(recorder: Recorder, bootstrap: str, topics: dict[str, int]) -> None:
    def create() -> None:
        raw = _Raw(recorder, bootstrap, "setup")
        try:
            (answer,) = raw.pipeline([create_topics_request(topics, None)])
        finally:
            raw.close()
        for t in answer.topics:
            if _code(t.error_code) not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS
                raise RuntimeError(f"create {t.name}: error {_code(t.error_code)}")

    _retry("create topics", create, time.monotonic() + 30)


def final_reads(
    recorder: Recorder,
    bootstrap: str,
    partitions: dict[str, int],
    groups: dict[str, tuple[str, int]],
    created: Sequence[str],
) -> None:
    """From a fresh connection: log starts, high watermarks and every record of every
    partition, the groups' committed offsets, and the created topics."""
    deadline = time.monotonic() + 120

    def read_all() -> None:
        raw = _Raw(recorder, bootstrap, "final")
        try:
            for topic, count in partitions.items():
                for p in range(count):
                    _final_partition(recorder, raw, topic, p)
            for group, (topic, count) in groups.items():
                reads = [CommittedRead(group=group, topic=topic, partition=p) for p in range(count)]
                for r in reads:
                    r.client = raw.client
                    recorder.begin(r, raw.conn)
                (answer,) = raw.pipeline([offset_fetch_request(group, topic, range(count))])
                for r in reads:
                    _finish_committed(recorder, r, answer)
            for name in created:
                read = TopicRead(topic=name)
                (answer,) = raw.pipeline([metadata_request(name, read)])
                _finish_topic_read(recorder, read, answer)
        finally:
            raw.close()

    # a failed attempt leaves unknown (or partial final) reads behind: drop them and retry
    mark = len(recorder.history.ops)

    def attempt() -> None:
        del recorder.history.ops[mark:]
        read_all()

    _retry("final reads", attempt, deadline)


def _final_partition(recorder: Recorder, raw: _Raw, topic: str, partition: int) -> None:
    start = LogStartRead(topic=topic, partition=partition, final=True)
    end = HighWatermarkRead(topic=topic, partition=partition, final=True)
    answers = raw.pipeline(
        [
            list_offsets_request(topic, partition, EARLIEST, start),
            list_offsets_request(topic, partition, LATEST, end),
        ]
    )
    reads: tuple[LogStartRead | HighWatermarkRead, ...] = (start, end)
    for read, answer in zip(reads, answers, strict=True):
        part = answer.topics[0].partitions[0]
        if _code(part.error_code) != 0:
            raise RuntimeError(f"ListOffsets {topic}/{partition}: {_code(part.error_code)}")
        read.offset = part.offset
        recorder.finish(read, OK)
    offset = start.offset
    while offset < end.offset:
        (answer,) = raw.pipeline([fetch_request(topic, partition, offset, None)])
        fetched = answer.responses[0].partitions[0]
        if _code(fetched.error_code) != 0:
            raise RuntimeError(f"Fetch {topic}/{partition}@{offset}: {_code(fetched.error_code)}")
        records = [r for r in _records_of(fetched.records, offset) if r[0] < end.offset]
        if not records:
            raise RuntimeError(f"Fetch {topic}/{partition}@{offset}: nothing below {end.offset}")
        for rec_offset, key, value in records:
            rec = recorder.begin(
                RecordRead(
                    client=raw.client,
                    topic=topic,
                    partition=partition,
                    offset=rec_offset,
                    key=key,
                    value=value,
                    final=True,
                ),
                raw.conn,
            )
            recorder.finish(rec, OK)
        offset = records[-1][0] + 1


@dataclass
class RunResult:
    history: History
    violations: list[Violation]
    counts: dict[str, int]
    seconds: float


def run_workload(config: RunConfig) -> RunResult:
    """Start a gateway, run the workload for `config.seconds`, read everything back, check."""
    began = time.monotonic()
    rng = random.Random(config.seed)
    own_dir = config.workdir is None
    workdir = Path(config.workdir or tempfile.mkdtemp(prefix="sg-history-"))
    workdir.mkdir(parents=True, exist_ok=True)
    recorder = Recorder()
    tag = f"h{config.seed}-{rng.randrange(1 << 30):x}"
    topic, probe_topic = f"{tag}-main", f"{tag}-probe"
    group, probe_group = f"{tag}-group", f"{tag}-probe-group"
    recorder.history.meta = {
        "seed": config.seed,
        "seconds": config.seconds,
        "kills": config.kills,
        "topic": topic,
        "probe_topic": probe_topic,
        "group": group,
        "repo": str((config.repo or Path(__file__).resolve().parent.parent).resolve()),
    }
    gateway = _make_gateway(config, workdir)
    stop = threading.Event()
    workers: list[_Worker] = []
    try:
        gateway.start_fresh()
        recorder.history.meta["gateway"] = {"cwd": str(gateway.cwd), "command": gateway.command()}
        _wait_admin(gateway, time.monotonic() + 30)
        bootstrap = gateway.bootstrap
        _create_topics(recorder, bootstrap, {topic: config.partitions, probe_topic: 1})
        for i in range(config.producers):
            keys = [f"p{i}-k{j}" for j in range(config.keys_per_producer)]
            workers.append(
                ProducerWorker(
                    recorder, stop, bootstrap, topic, f"producer{i}", keys, config.produce_pause_s
                )
            )
        workers.append(
            ConsumerWorker(
                recorder, stop, bootstrap, topic, group, "consumer0", config.async_commits_per_cycle
            )
        )
        prober = ProberWorker(
            recorder,
            stop,
            bootstrap,
            topic,
            probe_topic,
            probe_group,
            group,
            config.partitions,
            random.Random(rng.random()),
            config.create_topics,
        )
        workers.append(prober)
        for w in workers:
            w.start()
        chaos = Chaos(recorder, gateway, topic, config, rng)
        started = time.monotonic()
        chaos.run(started, stop)
        stop.wait(max(0.0, started + config.seconds - time.monotonic()))
        stop.set()
        for w in workers:
            w.join(90)
            if w.is_alive():
                raise RuntimeError(f"{w.name} did not finish")
            if w.failure is not None:
                raise RuntimeError(f"{w.name} failed: {w.failure!r}") from w.failure
        final_reads(
            recorder,
            gateway.bootstrap,
            {topic: config.partitions, probe_topic: 1},
            {group: (topic, config.partitions), probe_group: (probe_topic, 1)},
            prober.created,
        )
        counts: dict[str, int] = Counter()
        for w in workers:
            for k, v in w.counts.items():
                counts[f"{w.name.rstrip('0123456789')}.{k}"] += v
        counts.update({f"chaos.{k}": v for k, v in chaos.done.items()})
    except BaseException:
        stop.set()
        sys.stderr.write(gateway.log_tail(4000) + "\n")
        raise
    finally:
        stop.set()
        gateway.close()
        if own_dir:
            shutil.rmtree(workdir, ignore_errors=True)
    history = recorder.history
    history.meta["counts"] = dict(counts)
    violations = check(history)
    return RunResult(history, violations, dict(counts), time.monotonic() - began)


# --------------------------------------------------------------------------- the CLI


def report(violations: Sequence[Violation], out: Any = None, per_kind: int = 5) -> None:
    """Counts per kind/register, then up to `per_kind` examples of each."""
    out = out or sys.stdout
    counts = summarize(violations, by_register=True)
    if not counts:
        print("no violations", file=out)
        return
    print(f"{len(violations)} violations:", file=out)
    for key in sorted(counts):
        print(f"  {key}: {counts[key]}", file=out)
    for key in sorted(counts):
        shown = [v for v in violations if f"{v.kind}/{v.register}" == key][:per_kind]
        for v in shown:
            print(f"- {v}", file=out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.history",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the workload against a fresh gateway and check")
    run.add_argument("--seconds", type=float, default=60.0, help="workload duration")
    run.add_argument("--kills", type=int, default=1, help="SIGKILL restarts during the run")
    run.add_argument(
        "--seed", type=int, default=1, help="names, kill times, probe sizes (not the timing)"
    )
    run.add_argument("--out", type=Path, help="write the history here (JSON lines)")
    run.add_argument("--repo", type=Path, help="the gateway's code (default: this checkout)")
    run.add_argument("--workdir", type=Path, help="data dir and server.log (default: temporary)")
    run.add_argument("--show", type=int, default=5, help="violations shown per kind")
    again = commands.add_parser("check", help="check a saved history (JSON lines)")
    again.add_argument("history", type=Path)
    again.add_argument("--show", type=int, default=5)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.command == "check":
        violations = check(History.load(args.history))
        report(violations, per_kind=args.show)
        return 1 if violations else 0
    config = RunConfig(
        seconds=args.seconds, kills=args.kills, seed=args.seed, repo=args.repo, workdir=args.workdir
    )
    result = run_workload(config)
    if args.out:
        result.history.dump(args.out)
    print(
        f"ran {result.seconds:.1f} s; {len(result.history.ops)} operations; "
        f"{json.dumps(result.counts, sort_keys=True)}"
    )
    report(result.violations, per_kind=args.show)
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "CommitOp",
    "CommittedRead",
    "CreateTopicOp",
    "DeleteRecordsOp",
    "HighWatermarkRead",
    "History",
    "LogStartRead",
    "Note",
    "Op",
    "ProduceOp",
    "RecordRead",
    "RunConfig",
    "TopicRead",
    "Violation",
    "check",
    "main",
    "run_workload",
]
