"""The checker: what Kafka promises about a history, and the violations of it."""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from .model import (
    COMMITTED_BACKWARDS,
    DUPLICATE,
    ERROR,
    HW_BACKWARDS,
    KEY_ORDER,
    LOG_START_BACKWARDS,
    LOST,
    MISSED_OWN_WRITE,
    OK,
    TOPIC_MISSING,
    UNSTABLE_READ,
    CommitOp,
    CommittedRead,
    CreateTopicOp,
    DeleteRecordsOp,
    HighWatermarkRead,
    History,
    LogStartRead,
    Op,
    ProduceOp,
    RecordRead,
    TopicRead,
    Violation,
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
