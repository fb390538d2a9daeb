"""DeleteRecords: raise partitions' log start offsets.

Kafka sends DeleteRecords to each partition's leader; this node leads every partition, so
every partition is answered here. The store persists the new log start offset before it
returns, so `timeout_ms` has nothing to wait for and is ignored.
"""

from __future__ import annotations

from typing import Any

from core.api import StoreError
from gateway.errors import log_store_error
from kafkawire.codec import RequestHeader

from .context import GatewayContext


async def delete_records(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    # A topic or partition listed twice is answered twice, in request order (Kafka answers
    # each entry; applying the same deletion again is harmless, the log start never moves
    # back).
    topics = []
    for topic in body.topics:
        partitions = []
        for part in topic.partitions:
            try:
                error, low_watermark = await ctx.store.delete_records(
                    topic.name, part.partition_index, part.offset
                )
            except StoreError as exc:
                what = f"DeleteRecords {topic.name}[{part.partition_index}] to {part.offset}"
                error, low_watermark = log_store_error(what, exc), -1
            partitions.append(
                {
                    "partition_index": part.partition_index,
                    "low_watermark": low_watermark,
                    "error_code": error,
                }
            )
        topics.append({"name": topic.name, "partitions": partitions})
    return {"topics": topics}
