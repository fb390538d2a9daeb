"""The matrix rows: one feature each, with what the runner prepares for it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    id: str
    title: str
    partitions: int = 3  # the topic the runner creates for the cell; 0 = none
    phased: bool = False  # runs "before", then the target restarts, then "after"


ROWS: tuple[Row, ...] = (
    Row("produce-gzip", "produce gzip, acks=all, read back"),
    Row("produce-snappy", "produce snappy, acks=all, read back"),
    Row("produce-lz4", "produce lz4, acks=all, read back"),
    Row("produce-zstd", "produce zstd, acks=all, read back"),
    Row("produce-acks0", "produce acks=0 (fire and forget), read back"),
    Row("produce-acks1", "produce acks=1, read back"),
    Row("idempotence", "idempotent producer, read back in order"),
    Row("keys-headers", "keys and headers round trip"),
    Row("large-message", "a 900 KB record round trip"),
    Row("auto-create", "produce to an unknown topic (auto-create)", partitions=0),
    Row("consume-assign", "assign one partition and seek to an offset"),
    Row("consume-subscribe", "subscribe in a group, read everything"),
    Row("list-offsets-time", "ListOffsets by timestamp (offsets_for_times)"),
    Row("group-range", "two members, range assignor: disjoint, complete"),
    Row("group-roundrobin", "two members, roundrobin assignor: disjoint, complete"),
    Row("group-coop-sticky", "two members, cooperative-sticky: disjoint, complete"),
    Row("static-members", "static member leaves and rejoins, keeps its partitions"),
    Row(
        "group-consumer-protocol",
        "two members, group.protocol=consumer (the broker assigns): disjoint, complete",
    ),
    Row("committed-offsets", "commit, a new consumer resumes there"),
    Row("admin-topics", "create, list, describe, delete topics", partitions=0),
    Row("admin-partitions", "grow a topic's partitions"),
    Row("admin-configs", "describe and alter topic configs"),
    Row("admin-groups", "list, describe, delete groups"),
    Row("admin-records", "delete records (raise the log start)"),
    Row("many-partitions", "200 partitions: one record each, read back", partitions=200),
    Row(
        "compacted-topic",
        "create a cleanup.policy=compact topic, produce keyed, read back",
        partitions=0,
    ),
    Row("topic-ids", "describe a topic: it has a (non-zero) topic id"),
    Row("oversize-refused", "a record over the topic's max.message.bytes is refused", partitions=0),
    Row("restart", "records and committed offsets survive a restart", phased=True),
    Row("transactions", "transactional producer commits a transaction"),
    Row(
        "share-group",
        "share group (KIP-932): two share consumers, each record once, a release redelivered",
        partitions=1,
    ),
)

ROW_IDS = tuple(r.id for r in ROWS)


def row(row_id: str) -> Row:
    for r in ROWS:
        if r.id == row_id:
            return r
    raise KeyError(f"unknown row {row_id!r}; rows: {', '.join(ROW_IDS)}")
