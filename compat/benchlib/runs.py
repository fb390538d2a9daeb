"""Produce and consume runs with confluent-kafka that benchmarks measure.

`ProduceRun`: one Producer writing records 0..n-1 round robin over the partitions, at a
rate or flat out, with a delivery report per record. `read_all`: one Consumer reading every
partition from offset 0 and checking each record. `TailConsumer`: a consumer thread at the
end of a topic measuring produce-to-consume latency.
"""

from __future__ import annotations

import threading
import time
import uuid
from array import array
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from compat.benchlib.display import Display
from compat.benchlib.records import (
    KEY_FORMAT,
    MIB,
    ConsumeVerifier,
    ErrorLog,
    IndexedTracker,
    consume_all,
    drain,
    latency_ms,
)

Report = dict[str, Any]


@dataclass(slots=True)
class ProduceRun:
    """One Producer writing records 0..n-1 round robin, at a rate or flat out."""

    topic: str
    partitions: int
    payloads: list[bytes]
    capacity: int  # most records this run may produce
    tracker: IndexedTracker = field(init=False)
    sent_at: array = field(init=False)
    sent: int = 0
    started: float = 0.0
    finished_sending: float = 0.0
    unflushed: int = 0
    stalled: bool = False

    def __post_init__(self) -> None:
        self.sent_at = array("d", bytes(8 * self.capacity))
        self.tracker = IndexedTracker(self.sent_at, self.partitions)

    def run(
        self,
        producer: Producer,
        rate: float | None,
        count: int | None,
        duration: float | None,
        stall_timeout: float,
    ) -> None:
        """Produce until count records or duration seconds (whichever is given first)."""
        limit = min(count or self.capacity, self.capacity)
        tracker = self.tracker
        # At a rate, a thread serves the delivery reports as they arrive, so each latency is
        # read when its acknowledgement comes, not at the next send (every 0.5 ms at 2,000
        # records/s: the latencies fell on that grid). Flat out, the sends serve them.
        reports = _ReportServer(producer) if rate is not None else None
        self.started = time.perf_counter()
        try:
            self._send(producer, rate, limit, duration, stall_timeout, reports is None)
        finally:
            if reports is not None:
                reports.stop()
        self.finished_sending = time.perf_counter()
        if self.stalled:
            return
        self.unflushed = drain(producer, tracker, stall_timeout)
        if self.unflushed:
            self.stalled = True
            return
        time.sleep(0.6)  # one more statistics report, for the final ProduceRequest count
        producer.poll(0)

    def _send(
        self,
        producer: Producer,
        rate: float | None,
        limit: int,
        duration: float | None,
        stall_timeout: float,
        serve_reports: bool,
    ) -> None:
        topic, partitions, pool = self.topic, self.partitions, len(self.payloads)
        sent_at, tracker, start = self.sent_at, self.tracker, self.started
        i = 0
        while i < limit:
            elapsed = time.perf_counter() - start
            if duration is not None and elapsed >= duration:
                break
            due = limit if rate is None else min(limit, int(elapsed * rate) + 1)
            while i < due:
                now = sent_at[i] = time.perf_counter()
                try:
                    producer.produce(
                        topic,
                        value=self.payloads[i % pool],
                        key=KEY_FORMAT % i,
                        partition=i % partitions,
                        on_delivery=tracker,
                    )
                except BufferError:  # local queue full: serve delivery reports, then retry
                    blocked = now
                    while True:
                        producer.poll(0.005)
                        try:
                            sent_at[i] = time.perf_counter()
                            producer.produce(
                                topic,
                                value=self.payloads[i % pool],
                                key=KEY_FORMAT % i,
                                partition=i % partitions,
                                on_delivery=tracker,
                            )
                            break
                        except BufferError:
                            if time.perf_counter() - blocked > stall_timeout:
                                self.stalled = True
                                self.sent = i
                                return
                i += 1
                self.sent = i
                if serve_reports:
                    producer.poll(0)
            if rate is not None:
                wait = min(i / rate - (time.perf_counter() - start), 0.01)
                if wait > 0:
                    time.sleep(wait)

    def per_partition(self) -> list[int]:
        return [len(o) for o in self.tracker.offsets]

    def offsets_dense(self) -> bool:
        return all(sorted(o) == list(range(len(o))) for o in self.tracker.offsets)

    def summary(self, record_size: int) -> Report:
        t = self.tracker
        seconds = max(t.last_delivery - self.started, 1e-9) if t.delivered else 0.0
        lat = sorted(t.latencies)
        return {
            "records_sent": self.sent,
            "records_delivered": t.delivered,
            "delivery_errors": t.failed,
            "client_errors": t.total() - t.failed,
            "error_samples": t.samples,
            "unflushed": self.unflushed,
            "stalled": self.stalled,
            "offsets_dense": self.offsets_dense(),
            "seconds": round(seconds, 3),
            "mib": round(t.delivered * record_size / MIB, 2),
            "mib_per_s": round(t.delivered * record_size / MIB / seconds, 2) if seconds else 0.0,
            "records_per_s": round(t.delivered / seconds, 1) if seconds else 0.0,
            # produce() calls per second, first to last (the delivered rate above runs to
            # the last delivery, so a backlog lowers it)
            "sent_records_per_s": (
                round(self.sent / (self.finished_sending - self.started), 1)
                if self.finished_sending > self.started
                else None
            ),
            "delivery_latency_ms": latency_ms(lat),
            "produce_requests": t.produce_requests,
            "records_per_request": (
                round(t.delivered / t.produce_requests, 1) if t.produce_requests else None
            ),
        }


class _ReportServer:
    """A thread serving a Producer's delivery reports (and statistics) as they arrive:
    `poll` returns as soon as one is queued and waits in librdkafka without the GIL."""

    def __init__(self, producer: Producer) -> None:
        self._producer = producer
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="delivery-reports", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._producer.poll(0.05)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()


def producer_config(bootstrap: str, linger_ms: float, tracker: IndexedTracker) -> Report:
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": linger_ms,
        "error_cb": tracker.on_client_error,
        "statistics.interval.ms": 500,
        "stats_cb": tracker.on_stats,
    }


def consumer_config(bootstrap: str, extra: dict[str, str], errors: ErrorLog) -> Report:
    conf: Report = {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex[:10]}",  # required by the binding; never joined
        "enable.auto.commit": False,
        "auto.offset.reset": "error",
        # librdkafka pauses fetching for fetch.queue.backoff.ms (1 s by default) whenever
        # its local queue is full; see compat/README.md.
        "fetch.queue.backoff.ms": 10,
        "error_cb": errors.on_client_error,
    }
    conf.update(extra)
    return conf


def read_all(
    bootstrap: str,
    topic: str,
    expected: list[int],
    payloads: list[bytes],
    extra: dict[str, str],
    stall_timeout: float,
    display: Display,
    label: str,
) -> tuple[Report, ConsumeVerifier]:
    """Read every partition from offset 0 to its expected end; figures and the check."""
    total = sum(expected)
    check = ConsumeVerifier(total, len(expected), payloads)
    consumer = Consumer(consumer_config(bootstrap, extra, check))
    completed = True
    try:
        consumer.list_topics(topic, timeout=10)  # connect before the clock starts
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, 0) for p in range(len(expected))])

        def poll() -> tuple[float, str]:
            elapsed = time.perf_counter() - start
            mib = check.consumed * len(payloads[0]) / MIB
            return check.consumed, f"{mib / elapsed:,.1f} MiB/s" if elapsed > 0 else ""

        with display.phase(label, total, poll):
            completed = consume_all(consumer, check, expected, stall_timeout)
            if not completed:
                check.add("stalled", f"no record for {stall_timeout:.0f} s")
        seconds = max(check.last_receive - start, 1e-9)
    finally:
        consumer.close()
    mib = check.consumed * len(payloads[0]) / MIB
    missing = total - check.seen.count(1)
    result = {
        "records": check.consumed,
        "mib": round(mib, 2),
        "seconds": round(seconds, 3),
        "mib_per_s": round(mib / seconds, 2),
        "records_per_s": round(check.consumed / seconds, 1),
        "completed": completed,
        "missing": missing,
        "anomalies": check.to_json(),
        "ok": completed and missing == 0 and check.total() == 0,
    }
    return result, check


class TailConsumer:
    """A consumer thread reading a fresh topic from 0; end-to-end latency per record."""

    def __init__(
        self, bootstrap: str, topic: str, partitions: int, sent_at: array, extra: dict[str, str]
    ) -> None:
        self.errors = ErrorLog()
        self.consumer = Consumer(consumer_config(bootstrap, extra, self.errors))
        self.topic = topic
        self.partitions = partitions
        self.sent_at = sent_at
        self.latencies: list[tuple[float, float]] = []  # (produced at, seconds)
        self.consumed = 0
        self.target: int | None = None  # set once the producer knows how many it sent
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="tail-consumer", daemon=True)

    def start(self) -> None:
        self.consumer.list_topics(self.topic, timeout=10)
        self.consumer.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
        deadline = time.monotonic() + 1.0  # let the first (empty) fetches go out
        while time.monotonic() < deadline:
            self.consumer.consume(num_messages=1, timeout=0.1)
        self.thread.start()

    def _run(self) -> None:
        sent_at = self.sent_at
        while not self.stop.is_set():
            if self.target is not None and self.consumed >= self.target:
                return
            try:
                # poll() returns as soon as a record is there; consume(n) would wait for n.
                msg = self.consumer.poll(0.1)
            except KafkaException as exc:
                self.errors.add("consume", repr(exc))
                continue
            if msg is None:
                continue
            now = time.perf_counter()
            err = msg.error()
            if err is not None:
                self.errors.add(err.name(), err.str())
                continue
            key = msg.key()
            if key is None:
                self.errors.add("no_key", "a record without a key")
                continue
            index = int(key)
            self.latencies.append((sent_at[index], now - sent_at[index]))
            self.consumed += 1

    def close(self, timeout: float) -> None:
        self.thread.join(timeout)
        self.stop.set()
        self.thread.join()
        self.consumer.close()
