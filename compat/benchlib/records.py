"""Records a benchmark produces and reads back, and the checks on both.

Record *i* has key `KEY_FORMAT % i` and a value from a fixed-seed pool of random bytes, so
a delivery report finds its record's produce time and a reader checks every record.
`DeliveryTracker` is a producer's delivery callback (latency, offsets, errors);
`ConsumeVerifier` checks what comes back (dense offsets, every key once, the same value).
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import time
from array import array
from collections import Counter
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer

KEY_FORMAT = b"%012d"  # keys are the record index, zero padded
MIB = 1024 * 1024
PAYLOAD_POOL_BYTES = 8 * MIB  # > batch.size, so no two records in one batch share a value
MAX_SAMPLES = 10  # error / anomaly messages kept verbatim in a report

Report = dict[str, Any]


def round_or_none(value: float | None, digits: int) -> float | None:
    """round(), keeping None (and NaN, an empty percentile) as None for the JSON."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return round(value, digits)


class ErrorLog:
    """Counts errors by name and keeps the first few messages verbatim."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.samples: list[str] = []

    def add(self, name: str, text: str) -> None:
        self.counts[name] += 1
        if len(self.samples) < MAX_SAMPLES:
            self.samples.append(text)

    def on_client_error(self, err: KafkaError) -> None:
        """librdkafka's error_cb: client-level trouble (connections, brokers down...)."""
        self.add(f"client:{err.name()}", f"client error: {err.str()}")

    def total(self) -> int:
        return sum(self.counts.values())

    def to_json(self) -> Report:
        return {"total": self.total(), "by_name": dict(self.counts), "samples": self.samples}


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def make_payloads(record_size: int) -> list[bytes]:
    """Random (incompressible) values; a pool larger than a batch so none repeats in one."""
    count = max(1, PAYLOAD_POOL_BYTES // record_size)
    rng = random.Random(20240601)
    return [rng.randbytes(record_size) for _ in range(count)]


class DeliveryTracker(ErrorLog):
    """One Producer's delivery callback: latency, per-partition offsets, errors."""

    def __init__(self, sent_at: array[float], partitions: int) -> None:
        super().__init__()
        self.sent_at = sent_at  # produce() time per record index, shared by all producers
        self.sent = 0
        self.delivered = 0
        self.failed = 0
        self.unflushed = 0
        self.first_send = math.inf
        self.last_delivery = 0.0
        self.latencies: list[float] = []
        self.offsets: list[list[int]] = [[] for _ in range(partitions)]

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        now = time.perf_counter()
        self.last_delivery = now
        if err is not None:
            self.failed += 1
            self.add(err.name(), f"partition {msg.partition()}: {err.str()}")
            return
        key, partition, offset = msg.key(), msg.partition(), msg.offset()
        if key is None or partition is None or offset is None:
            self.failed += 1
            self.add(
                "incomplete_report",
                f"delivery report without key/partition/offset: {key!r} {partition} {offset}",
            )
            return
        self.delivered += 1
        self.latencies.append(now - self.sent_at[int(key)])
        self.offsets[partition].append(offset)


class PhaseStalled(RuntimeError):
    pass


def drain(producer: Producer, tracker: DeliveryTracker, stall_timeout: float) -> int:
    """flush() until all is delivered or nothing moves for stall_timeout; returns what's left."""
    last_done, last_move = -1, time.monotonic()
    while (left := producer.flush(1.0)) > 0:
        done = tracker.delivered + tracker.failed
        if done != last_done:
            last_done, last_move = done, time.monotonic()
        elif time.monotonic() - last_move > stall_timeout:
            return left
    return 0


def split_range(total: int, parts: int) -> list[range]:
    bounds = [total * k // parts for k in range(parts + 1)]
    return [range(lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False)]


def dense_offset_problems(offsets: list[list[int]]) -> list[str]:
    """Delivered offsets of each partition should be exactly 0..n-1."""
    problems = []
    for partition, got in enumerate(offsets):
        if sorted(got) != list(range(len(got))):
            problems.append(
                f"partition {partition}: {len(got)} deliveries, offsets "
                f"{min(got, default=None)}..{max(got, default=None)} not dense"
            )
    return problems


class ConsumeVerifier(ErrorLog):
    """Checks what comes back: dense offsets per partition, every key once, the same value."""

    def __init__(self, records: int, partitions: int, payloads: list[bytes]) -> None:
        super().__init__()
        self.payloads = payloads
        self.next_offset = [0] * partitions
        self.seen = bytearray(records)
        self.consumed = 0
        self.last_receive = 0.0

    def add_message(self, msg: Message) -> None:
        err = msg.error()
        if err is not None:
            self.add(err.name(), f"partition {msg.partition()}: {err.str()}")
            return
        self.consumed += 1
        partition, offset = msg.partition(), msg.offset()
        if partition is None or offset is None:
            self.add("no_position", f"record without partition/offset: {partition} {offset}")
            return
        if offset != self.next_offset[partition]:
            self.add(
                "offset_gap",
                f"partition {partition}: expected offset "
                f"{self.next_offset[partition]}, got {offset}",
            )
        self.next_offset[partition] = offset + 1
        self._check_record(msg.key(), msg.value())

    def _check_record(self, key: bytes | None, value: bytes | None) -> None:
        try:
            index = int(key or b"")
        except ValueError:
            index = -1
        if not 0 <= index < len(self.seen):
            self.add("unknown_key", f"unexpected key {key!r}")
        elif self.seen[index]:
            self.add("duplicate", f"record {index} read twice")
        else:
            self.seen[index] = 1
        if index >= 0 and value != self.payloads[index % len(self.payloads)]:
            self.add(
                "wrong_value",
                f"record {index}: value differs from what was produced ({len(value or b'')} bytes)",
            )

    def complete(self, expected: list[int]) -> bool:
        return all(got >= want for got, want in zip(self.next_offset, expected, strict=True))

    def missing(self, delivered: int) -> int:
        """Acknowledged records that never came back (read ones are all distinct keys)."""
        return max(0, delivered - self.seen.count(1))


def consume_all(
    consumer: Consumer, verifier: ConsumeVerifier, expected: list[int], stall_timeout: float
) -> bool:
    """Reads until every partition reached its expected end; False if it stalled."""
    total = sum(expected)
    last_move = time.monotonic()
    while not verifier.complete(expected):
        # Never ask for more than is left: consume() waits out its timeout for a full batch.
        want = max(1, min(1000, total - verifier.consumed))
        messages = consumer.consume(num_messages=want, timeout=0.2)
        if messages:
            for msg in messages:
                verifier.add_message(msg)
            verifier.last_receive = time.perf_counter()
            last_move = time.monotonic()
        elif time.monotonic() - last_move > stall_timeout:
            return False
    return True


def latency_ms(sorted_seconds: list[float], digits: int = 2) -> Report:
    """p50, p90, p99 and max in milliseconds of sorted latencies in seconds."""
    return {
        name: round_or_none(percentile(sorted_seconds, q) * 1000, digits)
        for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))
    }


class IndexedTracker(DeliveryTracker):
    """DeliveryTracker that also remembers which record each latency belongs to."""

    def __init__(self, sent_at: array, partitions: int) -> None:
        super().__init__(sent_at, partitions)
        self.indices: list[int] = []
        self.produce_requests: int | None = None  # from librdkafka's statistics

    def on_stats(self, stats_json: str) -> None:
        """librdkafka's stats_cb: ProduceRequests sent so far, over all brokers."""
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            brokers = json.loads(stats_json).get("brokers", {}).values()
            self.produce_requests = sum(b.get("req", {}).get("Produce", 0) for b in brokers)

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        super().__call__(err, msg)
        if err is None:
            self.indices.append(int(msg.key()))
