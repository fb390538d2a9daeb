"""What the source asks of the gateway over the Kafka protocol: the tail of a partition
not yet in tier 2 (Fetch) and offsets by timestamp (ListOffsets).

It uses the project's own blocking client (kafkaclient/): it needs nothing beyond the
runtime dependencies on the executors, and a Fetch hands back the stored record batches
as they are, so the tail is decoded by the very code that decodes tier-2 slices. One
gateway is asked: with several nodes, `gateway` must be the node serving the topic.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from kafkaclient.client import KafkaClientError
from kafkawire.apis import ApiKey

from .access import Access
from .errors import StreamgateSourceError

_FETCH_V = 12
_LIST_OFFSETS_V = 7
_FETCH_BYTES = 8 << 20
_OFFSET_OUT_OF_RANGE = 1


_SECURED_HINT = (
    " (a gateway listener with SASL or TLS needs the options 'user', 'password' and 'gatewayTls')"
)


def offsets_for_timestamp(
    gateway: str,
    topic: str,
    partitions: list[int],
    timestamp_ms: int,
    timeout_s: float,
    access: Access,
) -> dict[int, int]:
    """partition -> first offset whose timestamp is >= timestamp_ms (-1 where none is)."""
    body = {
        "replica_id": -1,
        "isolation_level": 0,
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
                    f"ListOffsets of {topic} partition {p.partition_index} by timestamp: "
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
    try:
        with access.kafka_client(gateway, timeout_s) as client:
            deadline = time.monotonic() + timeout_s
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
                        yield batch
                limit = data.last_stable_offset if read_committed else data.high_watermark
                if not moved and offset >= limit >= 0:
                    return  # nothing more exists (a compacted or aborted end)
                if moved:
                    deadline = time.monotonic() + timeout_s
                elif time.monotonic() > deadline:
                    raise StreamgateSourceError(
                        f"Fetch of {topic} partition {partition} made no progress at offset "
                        f"{offset} for {timeout_s:g} s (option 'timeoutMs')"
                    )
    except KafkaClientError as exc:
        raise StreamgateSourceError(
            f"reading {topic} partition {partition} from the gateway {gateway} (option "
            f"'gateway'): {exc}{_SECURED_HINT}"
        ) from None


def _batches(records: bytes) -> Iterator[tuple[int, bytes]]:
    """(last offset + 1, batch bytes) of each whole batch in a Fetch's records."""
    from core.recordbatch import iter_stored_batches

    for pos, header in iter_stored_batches(records):
        yield header.last_offset + 1, records[pos : pos + header.total_size]
