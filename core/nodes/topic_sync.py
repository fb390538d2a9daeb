"""Several active nodes: apply topic changes made on other nodes (docs/several-nodes.md).

Each sync round (core/nodes/membership.py) reads every topic's head row (id, partition count,
configs) from the shared database and makes this node's open streams agree with it:
- a topic gone from the database, or there under another id (deleted, maybe created again),
  is closed and forgotten here, and its local files removed off the event loop; the
  caller's adoption step then opens the new topic of that name, if any;
- a larger partition count (CreatePartitions on another node) extends the tail segment in
  memory (the database already holds the change);
- other configs (AlterConfigs on another node) replace the ones in memory.
Only streams that were open before the database was read are compared, so a topic created
here while the query ran is never mistaken for a deleted one, and configs replaced here
meanwhile are not put back to the older ones read.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ..metadata import TopicHead

if TYPE_CHECKING:
    from ..store import StreamStore
    from ..stream import Stream

log = logging.getLogger(__name__)

TopicHeads = dict[str, TopicHead]  # name -> its head row


async def reconcile(store: StreamStore, read_heads: Callable[[], Awaitable[TopicHeads]]) -> None:
    """Read the heads (after noting which streams are open) and apply them."""
    before: dict[str, Stream] = dict(store.streams)
    # a change made here while the query ran is newer than what it read: keep it
    configs_before = {name: stream.record.configs for name, stream in before.items()}
    heads = await read_heads()
    for name, stream in before.items():
        if store.streams.get(name) is not stream:
            continue  # deleted or replaced here meanwhile
        head = heads.get(name)
        if head is None or head.topic_id != stream.topic_id:
            why = "deleted" if head is None else "deleted and created again"
            await store.forget_topic(name, f"{why} on another node")
            continue
        partitions, configs = head.partitions, head.configs
        if partitions > stream.partition_count:
            try:
                stream.grow_partitions(partitions)
            except (AssertionError, ValueError, KeyError) as exc:
                log.warning("topic %s: cannot grow to %d partitions: %s", name, partitions, exc)
            else:
                log.info("topic %s: %d partitions (grown on another node)", name, partitions)
        if configs != stream.record.configs and stream.record.configs is configs_before[name]:
            stream.record.configs = configs
            log.info("topic %s: configs changed on another node: %s", name, configs)
