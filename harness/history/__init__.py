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

from .checker import TP, check, precedes, same_conn_before, summarize
from .cli import main, report
from .model import (
    COMMITTED_BACKWARDS,
    DUPLICATE,
    ERROR,
    HW_BACKWARDS,
    KEY_ORDER,
    KINDS,
    LOG_START_BACKWARDS,
    LOST,
    MISSED_OWN_WRITE,
    OK,
    OP_TYPES,
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
    Note,
    Op,
    ProduceOp,
    Recorder,
    RecordRead,
    TopicRead,
    Violation,
)
from .requests import (
    API_CREATE_TOPICS,
    API_DELETE_RECORDS,
    API_FETCH,
    API_LIST_OFFSETS,
    API_METADATA,
    API_OFFSET_COMMIT,
    API_OFFSET_FETCH,
    API_PRODUCE,
    EARLIEST,
    LATEST,
    V_CREATE_TOPICS,
    V_DELETE_RECORDS,
    V_FETCH,
    V_LIST_OFFSETS,
    V_METADATA,
    V_OFFSET_COMMIT,
    V_OFFSET_FETCH,
    V_PRODUCE,
    Request,
    RunConfig,
    commit_request,
    create_topics_request,
    delete_records_request,
    fetch_request,
    list_offsets_request,
    metadata_request,
    offset_fetch_request,
    produce_request,
)
from .run import Chaos, RunResult, final_reads, run_workload
from .workers import ConsumerWorker, ProberWorker, ProducerWorker

__all__ = [
    "API_CREATE_TOPICS",
    "API_DELETE_RECORDS",
    "API_FETCH",
    "API_LIST_OFFSETS",
    "API_METADATA",
    "API_OFFSET_COMMIT",
    "API_OFFSET_FETCH",
    "API_PRODUCE",
    "COMMITTED_BACKWARDS",
    "Chaos",
    "CommitOp",
    "CommittedRead",
    "ConsumerWorker",
    "CreateTopicOp",
    "DUPLICATE",
    "DeleteRecordsOp",
    "EARLIEST",
    "ERROR",
    "HW_BACKWARDS",
    "HighWatermarkRead",
    "History",
    "KEY_ORDER",
    "KINDS",
    "LATEST",
    "LOG_START_BACKWARDS",
    "LOST",
    "LogStartRead",
    "MISSED_OWN_WRITE",
    "Note",
    "OK",
    "OP_TYPES",
    "Op",
    "ProberWorker",
    "ProduceOp",
    "ProducerWorker",
    "RecordRead",
    "Recorder",
    "Request",
    "RunConfig",
    "RunResult",
    "TOPIC_MISSING",
    "TP",
    "TopicRead",
    "UNKNOWN",
    "UNSTABLE_READ",
    "V_CREATE_TOPICS",
    "V_DELETE_RECORDS",
    "V_FETCH",
    "V_LIST_OFFSETS",
    "V_METADATA",
    "V_OFFSET_COMMIT",
    "V_OFFSET_FETCH",
    "V_PRODUCE",
    "Violation",
    "check",
    "commit_request",
    "create_topics_request",
    "delete_records_request",
    "fetch_request",
    "final_reads",
    "list_offsets_request",
    "main",
    "metadata_request",
    "offset_fetch_request",
    "precedes",
    "produce_request",
    "report",
    "run_workload",
    "same_conn_before",
    "summarize",
]
