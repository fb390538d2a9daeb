"""The scaler: one trio task per stream that measures rates and applies the scaling policy.

Every `interval` seconds it samples the stream's cumulative counters (per open segment and
per partition, bytes and records in) into a sliding window of `window` seconds, computes each
open segment's rate over the window (or over its lifetime if younger), and hands them to
`policy.decide`. The policy is re-read from the topic's configs each time, so AlterConfigs
takes effect at the next evaluation. Every decision is logged with the numbers behind it.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

import trio

from ..cluster.view import CLUSTER
from .gather import gather_move
from .plan import ScaleError
from .policy import Decision, ScalingPolicy, SegmentLoad, decide

if TYPE_CHECKING:
    from ..metadata import TopicRecord

log = logging.getLogger(__name__)

COOLDOWN_WINDOWS = 2.0


class _Counters(Protocol):
    @property
    def bytes_in(self) -> int: ...
    @property
    def records_in(self) -> int: ...


class _SegmentCounters(_Counters, Protocol):
    @property
    def created(self) -> float: ...


class ScaledStream(Protocol):
    """What the scaler reads of a stream (`core.stream.Stream`): its topic record, open
    segments and counters. Scaling sits below the stream and never imports it."""

    @property
    def name(self) -> str: ...
    @property
    def deleted(self) -> bool: ...
    @property
    def record(self) -> TopicRecord: ...
    @property
    def stats(self) -> Mapping[int, _SegmentCounters]: ...
    def owners(self) -> Iterable[tuple[int, int, int]]: ...
    def iter_partitions(self) -> Iterable[tuple[int, _Counters]]: ...


S = TypeVar("S", bound=ScaledStream)


@dataclass(slots=True)
class _Sample:
    at: float
    segments: dict[int, tuple[int, int]]  # segment id -> (bytes in, records in)
    partitions: dict[int, tuple[int, int]]  # partition -> (bytes in, records in)


class RateMeter:
    """Sliding-window rates of a stream's open segments and their partitions."""

    def __init__(self, stream: ScaledStream, window: float) -> None:
        self.stream = stream
        self.window = window
        self._samples: deque[_Sample] = deque()

    def sample(self, now: float | None = None, partitions: bool = True) -> None:
        """Record the counters now; forget samples older than the window. Without
        `partitions` only the segments' (a fixed policy never weighs partitions, and a
        sample of every partition costs ~150 bytes each: 10,000s of partitions per topic)."""
        now = time.monotonic() if now is None else now
        stream = self.stream
        self._samples.append(
            _Sample(
                now,
                {sid: (st.bytes_in, st.records_in) for sid, st in stream.stats.items()},
                {i: (p.bytes_in, p.records_in) for i, p in stream.iter_partitions()}
                if partitions
                else {},
            )
        )
        while len(self._samples) > 2 and self._samples[1].at <= now - self.window:
            self._samples.popleft()

    def loads(self, event_rate: bool) -> list[SegmentLoad]:
        """The open segments' loads: KiB/s (or records/s with `event_rate`) over the window."""
        if not self._samples:
            return []
        old, new = self._samples[0], self._samples[-1]
        which = 1 if event_rate else 0
        scale = 1.0 if event_rate else 1 / 1024
        loads = []
        for first, last, segment_id in self.stream.owners():
            stats = self.stream.stats[segment_id]
            since = max(old.at, stats.created)
            elapsed = max(new.at - since, 1e-6)
            start = old.segments.get(segment_id, (0, 0))[which] if old.at >= stats.created else 0
            count = new.segments.get(segment_id, (0, 0))[which] - start
            partition_rates = {}
            for index, counts in new.partitions.items():
                if first <= index <= last:
                    before = old.partitions.get(index, (0, 0))[which]
                    partition_rates[index] = (counts[which] - before) * scale / elapsed
            loads.append(
                SegmentLoad(
                    segment_id,
                    first,
                    last,
                    count * scale / elapsed,
                    new.at - stats.created,
                    partition_rates,
                )
            )
        return loads

    def rate(self, segment_id: int, event_rate: bool = False) -> float:
        """The current rate of one open segment (0 if sealed or unknown)."""
        for load in self.loads(event_rate):
            if load.segment_id == segment_id:
                return load.rate
        return 0.0


async def run_scaler(
    stream: S,
    apply: Callable[[S, Decision], None],
    window: float,
    interval: float,
    stopping: trio.Event,
    meter: RateMeter | None = None,
) -> None:
    """Evaluate the stream's policy every `interval` s until the stream is deleted or
    `stopping` is set. `apply` performs a decision (the store's scale); a refused decision
    is logged and skipped."""
    meter = meter or RateMeter(stream, window)
    cooldown = COOLDOWN_WINDOWS * window
    while not stream.deleted and not stopping.is_set():
        with trio.move_on_after(interval):
            await stopping.wait()
        if stream.deleted or stopping.is_set():
            return
        policy = ScalingPolicy.from_configs(stream.record.configs)
        meter.sample(partitions=policy.kind != "fixed")
        if policy.kind == "fixed" or not CLUSTER.leads_any(stream.name):
            continue
        # several nodes: each node scales the open segments it owns
        loads = [
            load
            for load in meter.loads(policy.kind == "event-rate")
            if CLUSTER.segment_is_local(stream.name, load.segment_id)
        ]
        decisions = decide(loads, policy, cooldown)
        gather = _gather(stream, loads, policy, cooldown, decisions)
        for decision in decisions + ([gather] if gather is not None else []):
            log.info(
                "scaler %s: %s %s -> %s: %s",
                stream.name,
                decision.kind,
                decision.seal,
                decision.new_ranges,
                decision.reason,
            )
            try:
                apply(stream, decision)
            except (ScaleError, ValueError) as exc:
                log.warning("scaler %s: %s refused: %s", stream.name, decision.kind, exc)


def _gather(
    stream: ScaledStream,
    loads: list[SegmentLoad],
    policy: ScalingPolicy,
    cooldown: float,
    decisions: list[Decision],
) -> Decision | None:
    """Several nodes: a cold segment handed to its neighbour's node (merges then join
    them there), unless this evaluation already scales it."""
    if not CLUSTER.enabled:
        return None
    busy = {segment_id for d in decisions for segment_id in d.seal}
    return gather_move(
        loads,
        policy,
        cooldown,
        CLUSTER.node_id,
        lambda partition: CLUSTER.leader(stream.name, partition),
        {node_id for node_id, _h, _p in CLUSTER.brokers},
        busy,
    )
