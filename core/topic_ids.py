"""Topic IDs (KIP-516): a topic's UUID, the one its stream folder is named after.

The id is created with the topic and stored in its metadata row, so it is stable across
restarts and changes when a topic is deleted and created again under the same name. Kafka
clients use it from Metadata v10+, Fetch v13+ and DeleteTopics v6+.

`StreamsById` is a lookup kept beside the store's name-keyed dict: it is rebuilt lazily
when an id is missed or points at a stream that is no longer the store's (deleted), so it
needs no hook into topic creation or deletion.
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from core.stream import Stream

ZERO_UUID = uuid.UUID(int=0)


class StreamsById:
    """id -> stream over the store's name -> stream mapping."""

    def __init__(self, streams: Mapping[str, Stream]) -> None:
        self._streams = streams
        self._by_id: dict[uuid.UUID, Stream] = {}

    def get(self, topic_id: uuid.UUID) -> Stream | None:
        if topic_id == ZERO_UUID:
            return None
        stream = self._by_id.get(topic_id)
        if stream is not None and self._streams.get(stream.name) is stream:
            return stream
        self._by_id = {s.record.topic_id: s for s in self._streams.values()}
        return self._by_id.get(topic_id)


class _HasStreams(Protocol):
    streams: dict[str, Stream]


_LOOKUPS: weakref.WeakKeyDictionary[object, StreamsById] = weakref.WeakKeyDictionary()


def stream_by_id(store: _HasStreams, topic_id: uuid.UUID) -> Stream | None:
    """The store's stream whose topic id is `topic_id`, or None (unknown or zero id)."""
    lookup = _LOOKUPS.get(store)
    if lookup is None:
        lookup = _LOOKUPS[store] = StreamsById(store.streams)
    return lookup.get(topic_id)
