"""`spark.readStream.format("streamgate")`: micro-batches of offset ranges.

An offset (what Spark checkpoints) is `{topic: {partition: next offset}}` for every
partition seen so far. Each micro-batch is planned like a batch read, from a fresh chunk
map: its history straight from tier 2, the tail through the Kafka protocol. Partitions
added by CreatePartitions (or topics matching `subscribePattern` later) start at their
log start; segment splits and merges change nothing here, since a partition's offsets go
on across them. Offsets are deterministic, so a restarted query reads each record once;
a gateway that stops answering is waited for up to `timeoutMs` (a restart) when planning.

`maxRecordsPerTrigger` bounds a micro-batch, shared among partitions in proportion to what
each has waiting. Spark 4.0 asks a Python source for its latest offset without saying
where the batch starts, so the first micro-batch of a run (started or restarted) is not
bounded: guessing its start could move offsets backwards after a restart.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from .chunkmap import TopicMap
from .errors import UnreachableError
from .options import LATEST, ReadOptions
from .plan import latest, load_map, plan_ranges, resolve_topics, start_offsets
from .rows import read_task

Offsets = dict[str, dict[str, int]]


class _Task(InputPartition):
    def __init__(self, task: Any) -> None:
        super().__init__(task)
        self.task = task


def cap(start: Offsets, end: Offsets, limit: int) -> Offsets:
    """`end` moved back so that at most `limit` records lie between `start` and it, each
    partition getting a share in proportion to what it has waiting (at least one record
    while any waits)."""
    waiting = {
        (t, p): e - start.get(t, {}).get(p, 0)
        for t, parts in end.items()
        for p, e in parts.items()
        if e > start.get(t, {}).get(p, 0)
    }
    total = sum(waiting.values())
    if total <= limit:
        return end
    out = {t: dict(parts) for t, parts in end.items()}
    budget = limit
    for (t, p), n in sorted(waiting.items()):
        share = max(1, n * limit // total) if budget > 0 else 0
        share = min(share, budget, n)
        budget -= share
        out[t][p] = start.get(t, {}).get(p, 0) + share
    return out


class StreamgateStreamReader(DataSourceStreamReader):
    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._start: Offsets | None = None  # where the next micro-batch begins, once known

    def _maps(self, topics: Sequence[str] | None = None) -> dict[str, TopicMap]:
        """Fresh chunk maps; a gateway that does not answer (restarting) is asked again
        for up to `timeoutMs`, so a query outlives a gateway restart."""
        deadline = time.monotonic() + self.opts.timeout_s
        while True:
            try:
                names = resolve_topics(self.opts) if topics is None else topics
                return {t: load_map(self.opts, t) for t in names}
            except UnreachableError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def initialOffset(self) -> dict:
        initial: Offsets = {
            t: {str(p): o for p, o in start_offsets(m, self.opts, default=LATEST).items()}
            for t, m in self._maps().items()
        }
        return initial

    def latestOffset(self) -> dict:
        end: Offsets = {
            t: {str(p.partition): latest(p, self.opts) for p in m.partitions}
            for t, m in self._maps().items()
        }
        limit = self.opts.max_records_per_trigger
        if limit is not None and self._start is not None:
            end = cap(self._start, end, limit)
        return end

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        self._start = end
        maps = self._maps(sorted(end))
        tasks = []
        for topic, m in maps.items():
            # a partition new since `start` (CreatePartitions, a topic newly matching
            # subscribePattern) begins at its log start
            first = {str(p.partition): p.log_start for p in m.partitions}
            known = start.get(topic, {})
            ranges = {
                int(p): (known.get(p, first.get(p, 0)), e)
                for p, e in end[topic].items()
                if e > known.get(p, first.get(p, 0))
            }
            tasks.extend(plan_ranges(m, ranges, self.opts))
        return [_Task(t) for t in tasks]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from pyspark.sql.pandas.types import to_arrow_schema

        return read_task(partition.task, self.opts, to_arrow_schema(self.schema))  # type: ignore[attr-defined]

    def commit(self, end: dict) -> None:
        self._start = end
