"""What the source asks of the gateway over the Kafka protocol: the tail of a partition
not yet in tier 2 (Fetch) and offsets by timestamp (ListOffsets).

It uses the project's own blocking client (kafkaclient/): it needs nothing beyond the
runtime dependencies on the executors, and a Fetch hands back the stored record batches
as they are, so the tail is decoded by the very code that decodes tier-2 slices. With
several nodes, `gateway` may be any node: Metadata there names each partition's leader,
which is asked, and a NOT_LEADER_OR_FOLLOWER (a partition moved) makes it ask again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from kafkaclient.client import KafkaClient, KafkaClientError
from kafkawire.apis import ApiKey

from .access import Access
from .errors import StreamgateSourceError

_FETCH_V = 12
_LIST_OFFSETS_V = 7
_FETCH_BYTES = 8 << 20
_METADATA_V = 9
_OFFSET_OUT_OF_RANGE = 1
# the partition is led elsewhere now, or its leader is not known yet: ask Metadata again
_LEADER_ERRORS = frozenset(
    {3, 5, 6}
)  # UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER
_RETRY_S = 0.2


_SECURED_HINT = (
    " (a gateway listener with SASL or TLS needs the options 'user', 'password' and 'gatewayTls')"
)


def leaders(gateway: str, topic: str, timeout_s: float, access: Access) -> dict[int, str]:
    """partition -> "host:port" of its leader, from Metadata on `gateway`; partitions
    without a known leader are left out, and so is everything on a single node (`gateway`
    itself leads it all, and its advertised name may not be the one the executors use)."""
    body = {
        "topics": [{"name": topic}],
        "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }
    try:
        with access.kafka_client(gateway, timeout_s) as client:
            response = client.request(ApiKey.METADATA, _METADATA_V, body)
    except KafkaClientError as exc:
        raise StreamgateSourceError(f"Metadata on the gateway {gateway}: {exc}") from None
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in response.brokers}
    if len(brokers) <= 1:  # one node: the one asked, under the name the options give it
        return {}
    out = {}
    for t in response.topics:
        for p in t.partitions:
            if p.leader_id in brokers:
                out[p.partition_index] = brokers[p.leader_id]
    return out


def offsets_for_timestamp(
    gateway: str,
    topic: str,
    partitions: list[int],
    timestamp_ms: int,
    timeout_s: float,
    access: Access,
    read_committed: bool = False,
) -> dict[int, int]:
    """partition -> first offset whose timestamp is >= timestamp_ms (-1 where none is);
    timestamp -1: the high watermark (with read_committed the last stable offset). Each
    partition is asked of its leader."""
    by_leader: dict[str, list[int]] = {}
    known = leaders(gateway, topic, timeout_s, access)
    for p in partitions:
        by_leader.setdefault(known.get(p, gateway), []).append(p)
    out = {}
    for address, group in by_leader.items():
        out.update(
            _list_offsets(address, topic, group, timestamp_ms, timeout_s, access, read_committed)
        )
    return out


def _list_offsets(
    gateway: str,
    topic: str,
    partitions: list[int],
    timestamp_ms: int,
    timeout_s: float,
    access: Access,
    read_committed: bool,
) -> dict[int, int]:
    body = {
        "replica_id": -1,
        "isolation_level": 1 if read_committed else 0,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp_ms}
                    for p in partitions
                ],
            }
        ],
    }
    try:
        with access.kafka_client(gateway, timeout_s) as client:
            response = client.request(ApiKey.LIST_OFFSETS, _LIST_OFFSETS_V, body)
    except KafkaClientError as exc:
        raise StreamgateSourceError(
            f"ListOffsets on the gateway {gateway}: {exc}{_SECURED_HINT}"
        ) from None
    out = {}
    for t in response.topics:
        for p in t.partitions:
            if p.error_code:
                raise StreamgateSourceError(
                    f"ListOffsets of {topic} partition {p.partition_index} at {gateway}: "
                    f"Kafka error {p.error_code}"
                )
            out[p.partition_index] = p.offset
    return out


def fetch_range(
    gateway: str,
    topic: str,
    partition: int,
    start: int,
    end: int,
    read_committed: bool,
    timeout_s: float,
    access: Access,
    fail_on_data_loss: bool = True,
) -> Iterator[bytes]:
    """The stored record batches of offsets [start, end) (whole batches: the first and the
    last may reach beyond). Raises StreamgateSourceError rather than wait past `timeout_s`
    without progress."""
    offset = start
    deadline = time.monotonic() + timeout_s
    try:
        while offset < end:
            leader = leaders(gateway, topic, timeout_s, access).get(partition, gateway)
            with access.kafka_client(leader, timeout_s) as client:
                for step in _fetch_from(
                    client, topic, partition, offset, end, read_committed, fail_on_data_loss
                ):
                    if isinstance(step, int):  # the offset reached where the leader moved
                        offset = step
                        break
                    if step is None:  # nothing new in this answer
                        if time.monotonic() > deadline:
                            raise StreamgateSourceError(
                                f"Fetch of {topic} partition {partition} made no progress at "
                                f"offset {offset} for {timeout_s:g} s (option 'timeoutMs')"
                            )
                        continue
                    batch_end, batch = step
                    offset, deadline = batch_end, time.monotonic() + timeout_s
                    yield batch
                else:
                    return
            if time.monotonic() > deadline:
                raise StreamgateSourceError(
                    f"{topic} partition {partition}: no node leads it (asked {gateway}) "
                    f"for {timeout_s:g} s (option 'timeoutMs')"
                )
            time.sleep(_RETRY_S)
    except KafkaClientError as exc:
        raise StreamgateSourceError(
            f"reading {topic} partition {partition} from the gateway {gateway} (option "
            f"'gateway'): {exc}{_SECURED_HINT}"
        ) from None


def _fetch_from(
    client: KafkaClient,
    topic: str,
    partition: int,
    offset: int,
    end: int,
    read_committed: bool,
    fail_on_data_loss: bool = True,
) -> Iterator[tuple[int, bytes] | int | None]:
    """Fetches from one node until `end`: (last offset + 1, batch) per new batch, None after
    an answer with nothing new, the offset reached when the node stops leading the
    partition (then it ends); it simply ends once everything up to `end` is read."""
    while offset < end:
        body = {
            "replica_id": -1,
            "max_wait": 500,
            "min_bytes": 1,
            "max_bytes": _FETCH_BYTES,
            "isolation_level": 1 if read_committed else 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": partition,
                            "current_leader_epoch": -1,
                            "fetch_offset": offset,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                            "partition_max_bytes": _FETCH_BYTES,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        response = client.request(ApiKey.FETCH, _FETCH_V, body)
        if response.error_code:
            raise StreamgateSourceError(
                f"Fetch of {topic} partition {partition}: Kafka error {response.error_code}"
            )
        data = response.responses[0].partitions[0]
        if data.error_code in _LEADER_ERRORS:
            yield offset
            return
        lost = data.error_code == _OFFSET_OUT_OF_RANGE and data.log_start_offset > offset
        if lost and not fail_on_data_loss:  # deleted since planned: skipped
            offset = data.log_start_offset
            continue
        if data.error_code == _OFFSET_OUT_OF_RANGE:
            raise StreamgateSourceError(
                f"{topic} partition {partition}: offset {offset} is no longer there "
                f"(log start {data.log_start_offset}): deleted by retention since the "
                "read was planned; option 'failOnDataLoss' false skips it"
            )
        if data.error_code:
            raise StreamgateSourceError(
                f"Fetch of {topic} partition {partition} at offset {offset}: Kafka "
                f"error {data.error_code}"
            )
        records = bytes(data.records or b"")
        moved = False
        for batch_end, batch in _batches(records):
            if batch_end > offset:
                offset, moved = batch_end, True
                yield batch_end, batch
        limit = data.last_stable_offset if read_committed else data.high_watermark
        if not moved and offset >= limit >= 0:
            return  # nothing more exists (a compacted or aborted end)
        if not moved:
            yield None


def _batches(records: bytes) -> Iterator[tuple[int, bytes]]:
    """(last offset + 1, batch bytes) of each whole batch in a Fetch's records."""
    from core.recordbatch import iter_stored_batches

    for pos, header in iter_stored_batches(records):
        yield header.last_offset + 1, records[pos : pos + header.total_size]
