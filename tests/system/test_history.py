"""The history checker (harness/history/): check() on hand-made histories (each kind of
violation is found, a clean history passes), and a bounded run of the mixed workload against
a real gateway (producers, a consumer group, raw pipelined probes, a split, a merge and two
SIGKILL restarts) that must show no violation."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from harness.history import (
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
    UNKNOWN,
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
    RunConfig,
    TopicRead,
    Violation,
    check,
    report,
    run_workload,
    summarize,
)

T = "topic"


class Builder:
    """Hand-made histories: ops get ids and per-connection send order as they are added."""

    def __init__(self) -> None:
        self.history = History()
        self.seq: dict[str, int] = {}

    def add(
        self,
        op: Op,
        start: float,
        end: float | None,
        conn: str | None = None,
        outcome: str = OK,
    ) -> Any:
        op.id = len(self.history.ops)
        op.start, op.end, op.outcome = start, end, outcome
        if conn is not None:
            op.conn = conn
            op.conn_seq = self.seq.get(conn, 0)
            self.seq[conn] = op.conn_seq + 1
        op.client = op.client or (conn or "client").split("/")[0]
        self.history.ops.append(op)
        return op

    def produce(
        self, value: str, offset: int, t: float, partition: int = 0, ack_seq: int = -1, **kw: Any
    ) -> ProduceOp:
        op = ProduceOp(
            topic=T,
            partition=partition,
            key=kw.pop("key", "k"),
            value=value,
            producer=kw.pop("producer", "p"),
            idempotent=kw.pop("idempotent", True),
            offset=offset,
            ack_seq=ack_seq if ack_seq >= 0 else offset,
        )
        return self.add(op, t, t + 0.01, **kw)

    def final(
        self, records: dict[int, str], start: int = 0, partition: int = 0, hw: int | None = None
    ) -> None:
        """The end-of-run read back of one partition (high watermark: past the last record
        unless given)."""
        t = 100.0
        end = max(records, default=start - 1) + 1 if hw is None else hw
        self.add(LogStartRead(topic=T, partition=partition, offset=start, final=True), t, t)
        self.add(HighWatermarkRead(topic=T, partition=partition, offset=end, final=True), t, t)
        for offset, value in sorted(records.items()):
            read = RecordRead(
                topic=T, partition=partition, offset=offset, key="k", value=value, final=True
            )
            self.add(read, t, t)


def kinds(history: History) -> dict[str, int]:
    return summarize(check(history), by_register=True)


def clean() -> Builder:
    """A history where every promise is kept."""
    b = Builder()
    for i in range(5):
        b.produce(f"v{i}", i, t=1.0 + i)
    b.add(RecordRead(topic=T, partition=0, offset=2, key="k", value="v2"), 7.0, 7.1)
    # pipelined on one connection: commit 1, commit 2, fetch -> 2
    for offset in (1, 2):
        b.add(CommitOp(group="g", topic=T, partition=0, offset=offset), 8.0, 8.2, "c/1")
    b.add(CommittedRead(group="g", topic=T, partition=0, offset=2), 8.0, 8.2, "c/1")
    # another connection, later: still 2; then a lower commit may lower it
    b.add(CommittedRead(group="g", topic=T, partition=0, offset=2), 9.0, 9.1, "o/1")
    b.add(CommitOp(group="g", topic=T, partition=0, offset=1), 9.5, 9.6, "c/2")
    b.add(CommittedRead(group="g", topic=T, partition=0, offset=1), 10.0, 10.1, "o/1")
    # DeleteRecords then ListOffsets(earliest) on one connection
    b.add(DeleteRecordsOp(topic=T, partition=0, requested=1, low_watermark=1), 11.0, 11.1, "a/1")
    b.add(LogStartRead(topic=T, partition=0, offset=1), 11.0, 11.1, "a/1")
    b.add(HighWatermarkRead(topic=T, partition=0, offset=5), 12.0, 12.1, "a/1")
    b.add(CreateTopicOp(topic="new", partitions=1), 13.0, 13.1, "a/1")
    b.add(TopicRead(topic="new", exists=True), 13.0, 13.1, "a/1")
    b.final({i: f"v{i}" for i in range(1, 5)}, start=1)
    return b


def test_a_clean_history_passes() -> None:
    assert check(clean().history) == []


def test_json_lines_round_trip(tmp_path: Path) -> None:
    b = clean()
    # one violation to carry along
    b.add(RecordRead(topic=T, partition=0, offset=3, key="k", value="ghost"), 6.0, 6.1)
    path = tmp_path / "h.jsonl"
    b.history.meta = {"seed": 7}
    b.history.dump(path)
    loaded = History.load(path)
    assert loaded.meta == {"seed": 7}
    assert loaded.ops == b.history.ops
    assert check(loaded) == check(b.history)
    assert [v.kind for v in check(loaded)] == [UNSTABLE_READ]


def test_lost_record() -> None:
    b = Builder()
    b.produce("v0", 0, t=1.0)
    b.produce("v1", 1, t=2.0)
    b.final({0: "v0", 2: "v2"})  # v1 acknowledged at 1, nothing there at the end
    (v,) = check(b.history)
    assert v.kind == LOST and "'v1'" in v.message


def test_record_replaced_at_its_offset_is_lost() -> None:
    b = Builder()
    b.produce("v0", 0, t=1.0)
    b.final({0: "other"})
    assert kinds(b.history) == {f"{LOST}/records": 1}


def test_below_log_start_needs_a_delete_of_the_history() -> None:
    b = Builder()
    b.produce("v0", 0, t=1.0)
    b.produce("v1", 1, t=2.0)
    b.final({1: "v1"}, start=1)  # the log start moved, nobody deleted
    assert kinds(b.history) == {f"{LOST}/records": 1}

    b = Builder()
    b.produce("v0", 0, t=1.0)
    b.produce("v1", 1, t=2.0)
    b.add(DeleteRecordsOp(topic=T, partition=0, requested=1, low_watermark=1), 3.0, 3.1, "a/1")
    b.final({1: "v1"}, start=1)
    assert check(b.history) == []

    # a DeleteRecords without an answer may have happened
    b = Builder()
    b.produce("v0", 0, t=1.0)
    b.add(DeleteRecordsOp(topic=T, partition=0, requested=1), 3.0, None, "a/1", UNKNOWN)
    b.final({}, start=1)
    assert check(b.history) == []


def test_duplicate_of_an_idempotent_producer() -> None:
    b = Builder()
    b.produce("v0", 0, t=1.0)
    b.final({0: "v0", 1: "v0"})
    assert kinds(b.history) == {f"{DUPLICATE}/records": 1}
    # the same for a producer without idempotence is not flagged
    b = Builder()
    b.produce("v0", 0, t=1.0, idempotent=False)
    b.final({0: "v0", 1: "v0"})
    assert check(b.history) == []


def test_key_order_broken() -> None:
    b = Builder()
    b.produce("first", 1, t=1.0, ack_seq=0)
    b.produce("second", 0, t=2.0, ack_seq=1)  # acknowledged later, at a lower offset
    b.produce("other-key", 2, t=3.0, ack_seq=2, key="k2")
    b.final({0: "second", 1: "first", 2: "other-key"})
    (v,) = check(b.history)
    assert v.kind == KEY_ORDER and "'second'" in v.message


def test_unstable_read() -> None:
    b = Builder()
    b.produce("v0", 0, t=1.0)
    b.add(RecordRead(topic=T, partition=0, offset=1, key="k", value="ghost"), 2.0, 2.1)
    b.final({0: "v0"})
    assert kinds(b.history) == {f"{UNSTABLE_READ}/records": 1}


def test_committed_offset_backwards() -> None:
    b = Builder()
    b.add(CommitOp(group="g", topic=T, partition=0, offset=10), 1.0, 1.1, "c/1")
    b.add(CommittedRead(group="g", topic=T, partition=0, offset=5), 2.0, 2.1, "o/1")
    assert kinds(b.history) == {f"{COMMITTED_BACKWARDS}/committed_offset": 1}


def test_committed_offset_backwards_after_an_earlier_read() -> None:
    b = Builder()
    b.add(CommittedRead(group="g", topic=T, partition=0, offset=10), 1.0, 1.1, "o/1")
    b.add(CommittedRead(group="g", topic=T, partition=0, offset=-1), 2.0, 2.1, "o/2")
    assert kinds(b.history) == {f"{COMMITTED_BACKWARDS}/committed_offset": 1}


def test_a_lower_commit_in_between_explains_a_lower_read() -> None:
    b = Builder()
    b.add(CommitOp(group="g", topic=T, partition=0, offset=10), 1.0, 1.1, "c/1")
    b.add(CommitOp(group="g", topic=T, partition=0, offset=5), 1.05, 2.5, "d/1")  # concurrent
    b.add(CommittedRead(group="g", topic=T, partition=0, offset=5), 2.0, 2.1, "o/1")
    assert check(b.history) == []
    # ...but not one acknowledged before the higher commit was sent
    b = Builder()
    b.add(CommitOp(group="g", topic=T, partition=0, offset=5), 0.5, 0.9, "d/1")
    b.add(CommitOp(group="g", topic=T, partition=0, offset=10), 1.0, 1.1, "c/1")
    b.add(CommittedRead(group="g", topic=T, partition=0, offset=5), 2.0, 2.1, "o/1")
    assert kinds(b.history) == {f"{COMMITTED_BACKWARDS}/committed_offset": 1}
    # ...nor one the broker refused
    b = Builder()
    b.add(CommitOp(group="g", topic=T, partition=0, offset=10), 1.0, 1.1, "c/1")
    b.add(CommitOp(group="g", topic=T, partition=0, offset=5), 1.05, 1.5, "d/1", ERROR)
    b.add(CommittedRead(group="g", topic=T, partition=0, offset=5), 2.0, 2.1, "o/1")
    assert kinds(b.history) == {f"{COMMITTED_BACKWARDS}/committed_offset": 1}


def test_unanswered_commits_are_not_promises() -> None:
    b = Builder()
    b.add(CommitOp(group="g", topic=T, partition=0, offset=10), 1.0, None, "c/1", UNKNOWN)
    b.add(CommittedRead(group="g", topic=T, partition=0, offset=5), 2.0, 2.1, "o/1")
    assert check(b.history) == []


def test_offset_fetch_misses_a_commit_on_its_own_connection() -> None:
    """Async commits 1..3 then a fetch, all in flight at once on one connection: the commits
    are sent first, so the fetch must see 3 (an earlier, lower commit landing last is the
    reordering this catches; it cannot count as a lower commit in between)."""
    b = Builder()
    for offset in (1, 2, 3):
        b.add(CommitOp(group="g", topic=T, partition=0, offset=offset), 1.0, 1.5, "c/1")
    b.add(CommittedRead(group="g", topic=T, partition=0, offset=2), 1.0, 1.2, "c/1")
    (v,) = check(b.history)
    assert (v.kind, v.register) == (MISSED_OWN_WRITE, "committed_offset")
    assert "saw 2" in v.message and "of 3" in v.message


def test_log_start_backwards() -> None:
    b = Builder()
    b.add(DeleteRecordsOp(topic=T, partition=0, requested=10, low_watermark=10), 1.0, 1.1, "a/1")
    b.add(LogStartRead(topic=T, partition=0, offset=8), 2.0, 2.1, "o/1")
    b.add(LogStartRead(topic=T, partition=0, offset=12), 3.0, 3.1, "o/1")
    b.add(LogStartRead(topic=T, partition=0, offset=11), 4.0, 4.1, "o/2")
    assert kinds(b.history) == {f"{LOG_START_BACKWARDS}/log_start": 2}


def test_list_offsets_misses_delete_records_on_its_own_connection() -> None:
    b = Builder()
    b.add(DeleteRecordsOp(topic=T, partition=0, requested=10, low_watermark=10), 1.0, 1.2, "a/1")
    b.add(LogStartRead(topic=T, partition=0, offset=4), 1.0, 1.1, "a/1")  # answered first
    (v,) = check(b.history)
    assert (v.kind, v.register) == (MISSED_OWN_WRITE, "log_start")


def test_high_watermark_backwards() -> None:
    b = Builder()
    b.produce("v0", 0, t=1.0)
    b.add(HighWatermarkRead(topic=T, partition=0, offset=0), 2.0, 2.1, "o/1")  # misses v0
    b.add(HighWatermarkRead(topic=T, partition=0, offset=7), 3.0, 3.1, "o/1")
    b.add(HighWatermarkRead(topic=T, partition=0, offset=6), 4.0, 4.1, "o/2")
    assert kinds(b.history) == {f"{HW_BACKWARDS}/high_watermark": 2}


def test_fetch_misses_a_produce_on_its_own_connection() -> None:
    b = Builder()
    b.produce("v0", 0, t=1.0, conn="r/1", idempotent=False)
    b.add(HighWatermarkRead(topic=T, partition=0, offset=0), 1.001, 1.005, "r/1")
    (v,) = check(b.history)
    assert (v.kind, v.register) == (MISSED_OWN_WRITE, "high_watermark")


def test_topic_missing_after_create() -> None:
    b = Builder()
    b.add(CreateTopicOp(topic="n", partitions=1), 1.0, 1.1, "a/1")
    b.add(TopicRead(topic="n", exists=False), 2.0, 2.1, "o/1")
    b.add(CreateTopicOp(topic="m", partitions=1), 3.0, 3.2, "a/1")
    b.add(TopicRead(topic="m", exists=False), 3.0, 3.1, "a/1")  # pipelined behind it
    b.add(CreateTopicOp(topic="x", partitions=1), 4.0, 4.2, "a/1", ERROR)
    b.add(TopicRead(topic="x", exists=False), 5.0, 5.1, "a/1")
    assert kinds(b.history) == {f"{TOPIC_MISSING}/topic": 1, f"{MISSED_OWN_WRITE}/topic": 1}


def test_report_lists_counts_and_examples(capsys: pytest.CaptureFixture[str]) -> None:
    report([Violation(LOST, "gone", [1]), Violation(LOST, "gone too", [2])], per_kind=1)
    out = capsys.readouterr().out
    assert "2 violations" in out and f"{LOST}/records: 2" in out
    assert "gone" in out and "gone too" not in out


# ------------------------------------------------------------------------ the system run


@pytest.mark.timeout(240)
def test_mixed_workload_with_kills_split_and_merge_keeps_every_promise(tmp_path: Path) -> None:
    """About a minute: 50 s of workload with a split, a merge and two SIGKILL restarts, then
    the read back. The history is kept in tmp_path for a failure's post-mortem."""
    result = run_workload(RunConfig(seconds=50, kills=2, seed=11, workdir=tmp_path / "run"))
    result.history.dump(tmp_path / "history.jsonl")
    counts = result.counts
    # the workload did what it is for (a vacuous pass proves nothing)
    assert counts.get("chaos.kill") == 2 and counts.get("chaos.split") == 1
    assert counts.get("chaos.merge") == 1
    assert counts.get("producer.acked", 0) > 1000, counts
    assert counts.get("consumer.sync_commits", 0) > 10, counts
    assert counts.get("consumer.committed_reads", 0) > 10, counts
    for probe in ("commit_fetch", "delete_list", "produce_fetch"):
        assert counts.get(f"prober.{probe}", 0) > 100, counts
    assert counts.get("prober.create_metadata", 0) > 5, counts
    if result.violations:
        out = io.StringIO()
        report(result.violations, out, per_kind=3)
        pytest.fail(f"history: {tmp_path / 'history.jsonl'}\n{out.getvalue()}")
