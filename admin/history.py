"""A stream's scale events over time, for the console's picture (`GET /streams/TOPIC/history`).

The metadata keeps each segment's epoch and range but no times or causes, so this process
records them as they happen (the store's `on_scaled` hook): when each epoch began, which
segments it sealed and opened, and why (a manual request, or the policy with its measured
rate). Segments older than this process have no known times: they are drawn from the
moment the history began (`since_ms`). Bounded: the last MAX_EVENTS per topic.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from core.api import ScaleResult, TopicError
from core.store import StreamStore

MAX_EVENTS = 500


@dataclass(slots=True)
class ScaleEvent:
    time_ms: int
    epoch: int
    kind: str
    sealed: list[int]
    opened: list[int]
    cause: str


class ScaleHistory:
    def __init__(self, store: StreamStore) -> None:
        self.store = store
        self.since_ms = _now_ms()
        self.events: dict[str, deque[ScaleEvent]] = {}
        store.on_scaled.append(self.record)
        store.on_topic_deleted.append(self.forget)

    def record(self, topic: str, result: ScaleResult, cause: str) -> None:
        event = ScaleEvent(
            _now_ms(),
            result.epoch,
            result.kind,
            list(result.sealed),
            [s.segment_id for s in result.successors],
            cause,
        )
        self.events.setdefault(topic, deque(maxlen=MAX_EVENTS)).append(event)

    def forget(self, topic: str) -> None:
        self.events.pop(topic, None)

    def describe(self, topic: str) -> dict[str, Any]:
        """Segments with the times they opened and were sealed (None: unknown or still
        open) and the cause of the event that opened them; TopicError if unknown."""
        stream = self.store.streams.get(topic)
        if stream is None:
            raise TopicError(3, f"no topic {topic!r}")
        events = list(self.events.get(topic, ()))
        opened_by = {sid: e for e in events for sid in e.opened}
        sealed_by = {sid: e for e in events for sid in e.sealed}
        segments = []
        for record in sorted(stream.record.segments, key=lambda s: s.segment_id):
            opener = opened_by.get(record.segment_id)
            sealer = sealed_by.get(record.segment_id)
            if record.sealed and sealer is None:
                continue  # sealed before this process began: no times to draw it with
            segments.append(
                {
                    "segment_id": record.segment_id,
                    "epoch": record.epoch,
                    "first_partition": record.first_partition,
                    "last_partition": record.last_partition,
                    "state": "sealed" if record.sealed else "open",
                    "opened_ms": opener.time_ms if opener else self.since_ms,
                    "sealed_ms": sealer.time_ms if sealer else None,
                    "cause": opener.cause if opener else "before this process started",
                }
            )
        return {
            "topic": topic,
            "partitions": stream.partition_count,
            "epoch": stream.epoch,
            "since_ms": self.since_ms,
            "now_ms": _now_ms(),
            "segments": segments,
            "events": [
                {
                    "time_ms": e.time_ms,
                    "epoch": e.epoch,
                    "kind": e.kind,
                    "sealed": e.sealed,
                    "opened": e.opened,
                    "cause": e.cause,
                }
                for e in events
            ],
        }


def _now_ms() -> int:
    return int(time.time() * 1000)
