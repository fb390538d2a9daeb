"""The forwarding pipeline: MQTT messages in, records to streamgate, MQTT acks out.

Two modes, one order. Every record goes through ONE idempotent producer in MQTT arrival
order (librdkafka keeps the produce order per partition), so per-device order holds:
- direct: the record is produced at once and the MQTT ack is sent when streamgate acked it;
- spooling: entered when the oldest unacknowledged record waited longer than
  `spool_after_ms` (streamgate unreachable or stalled). The records still waiting are
  written to the spool first (then acked to MQTT; if streamgate acks them later after all,
  they are skipped when the spool is read), then every new message is appended to the spool
  and acked to MQTT once fsync'd. The spool is read, in order, once no direct record is
  left waiting; the mode goes back to direct when the spool is empty and all it sent is
  acknowledged.
After a crash the spool goes out first, then what the broker redelivers (never acked, so
later than everything in the spool): order holds, and duplicates are only records that
streamgate got but whose MQTT ack or spool commit did not happen.

Threads: paho's network thread calls `offer()`; the pipeline thread (`run()`) owns the
spool and does all disk I/O; the poll thread runs the producer's delivery callbacks.
"""

from __future__ import annotations

import json
import logging
import queue
import random
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from bridge.mqtt.config import BridgeConfig
from bridge.mqtt.metrics import Stats
from bridge.mqtt.records import Record, Router, decode, encode
from bridge.mqtt.spool import FRAME_OVERHEAD, Position, Spool, SpoolFull

log = logging.getLogger("bridge.mqtt")

BATCH = 2000  # messages taken from the queue per round
MAX_DRAIN_OUTSTANDING = 20000  # spool records handed to the producer and not yet acked
COMMIT_INTERVAL_S = 0.2


@dataclass
class Inbound:
    """One MQTT message as received (paho's thread builds it)."""

    mid: int
    qos: int
    topic: str
    payload: bytes
    retain: bool
    received_ms: int
    user_properties: list[tuple[str, str]]
    seq: int = 0
    sent_at: float = 0.0
    moved: bool = False  # written to the spool while waiting for streamgate
    record: Record | None = field(default=None, repr=False)


def producer_config(cfg: BridgeConfig) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": cfg.gateway,
        "client.id": cfg.client_id,
        "acks": "all",
        "enable.idempotence": True,
        # Never give up on a record: a failure would leave a hole in a device's order.
        "message.timeout.ms": 0,
        "linger.ms": 5,
        "queue.buffering.max.messages": 1_000_000,
        "reconnect.backoff.max.ms": 2000,
        # librdkafka's own log lines (every failed reconnect) stay quiet: error_cb reports.
        "log_level": 2,
    }
    conf.update(cfg.producer_config)
    return conf


class Pipeline:
    def __init__(self, cfg: BridgeConfig, stats: Stats, ack: Callable[[int, int], None]) -> None:
        self.cfg = cfg
        self.stats = stats
        self._ack = ack
        self.router = Router(cfg.maps, cfg.key_level)
        self.queue: queue.SimpleQueue[Inbound] = queue.SimpleQueue()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.direct: OrderedDict[int, Inbound] = OrderedDict()  # seq -> waiting for streamgate
        self.delivered_moved: set[int] = set()
        self.outstanding: deque[list[Any]] = deque()  # [Position, delivered?] per spool read
        self.held: list[Inbound] = []  # a batch waiting for room in a full spool
        self.saturated = False
        self.failed = False
        self.spool = Spool(cfg.spool_dir, cfg.spool_max_bytes)
        self.spooling = not self.spool.is_empty()
        if self.spooling:
            log.info(
                "spool holds %d records from before: sending them first", self.spool.records_pending
            )
        self._seq = random.getrandbits(24) << 40
        self._last_commit = time.monotonic()
        self._commit_upto: Position | None = None
        self._commit_count = 0
        self.producer: Producer | None = None
        self._last_error = ""
        self._last_error_at = 0.0
        self._rejected = cfg.spool_dir / "rejected.jsonl"
        self._gauges()  # the spool's state is visible before the first message

    def open_producer(self) -> None:
        """After MQTT connected: a bad MQTT URL should not first start the producer."""
        self.producer = Producer(producer_config(self.cfg), error_cb=self._on_error)

    # -- paho's thread
    def offer(self, msg: Inbound) -> None:
        self.stats.received += 1
        if msg.qos == 0 and (self.saturated or self.queue.qsize() > self.cfg.qos0_queue_max):
            self.stats.dropped_qos0 += 1  # never blocks paho's thread, never stops QoS 1
            return
        self.queue.put(msg)

    # -- the poll thread
    def poll_loop(self) -> None:
        assert self.producer is not None
        while not self.stop.is_set():
            self.producer.poll(0.1)

    def _on_error(self, err: KafkaError) -> None:
        # While the gateway is down librdkafka reports every reconnect: say it once a minute.
        now = time.monotonic()
        text = err.str()
        if text != self._last_error or now - self._last_error_at > 60:
            log.warning("streamgate producer: %s", text)
            self._last_error, self._last_error_at = text, now

    def _reject(self, rec: Record, err: KafkaError) -> None:
        """A record streamgate refuses for good: kept next to the spool, counted, acked."""
        self.stats.errors += 1
        log.error("streamgate refused a record for %s: %s", rec.topic, err)
        line = {
            "topic": rec.topic,
            "key": rec.key.decode(errors="replace") if rec.key else None,
            "headers": {k: v.decode(errors="replace") for k, v in rec.headers},
            "value_hex": rec.value.hex(),
            "error": str(err),
        }
        with self._rejected.open("a") as f:
            f.write(json.dumps(line) + "\n")

    def _delivered_direct(self, msg: Inbound, err: KafkaError | None, _: Message) -> None:
        with self.lock:
            self.direct.pop(msg.seq, None)
            moved = msg.moved
            if moved:
                self.delivered_moved.add(msg.seq)
        if err is not None:
            assert msg.record is not None
            self._reject(msg.record, err)
        else:
            self.stats.forwarded += 1
        if not moved:
            self._ack(msg.mid, msg.qos)

    def _delivered_spooled(
        self, entry: list[Any], rec: Record, err: KafkaError | None, _: Message
    ) -> None:
        if err is not None:
            self._reject(rec, err)
        else:
            self.stats.forwarded += 1
        entry[1] = True

    # -- the pipeline thread
    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.step(0.05)
        except Exception:  # e.g. the spool's disk failed: stop the bridge, acks stay unsent
            log.exception(
                "forwarding failed; stopping (unacknowledged messages stay with the broker)"
            )
            self.failed = True
            return
        self.finish()

    def step(self, wait: float) -> None:
        batch = self.held or self._take(wait)
        self.held = []
        if not self.spooling and self._stalled():
            self._enter_spooling()
        if batch:
            self._handle(batch)
        self._drain()
        self._commit(force=False)
        self._gauges()

    def _take(self, wait: float) -> list[Inbound]:
        out: list[Inbound] = []
        try:
            out.append(self.queue.get(timeout=wait))
            while len(out) < BATCH:
                out.append(self.queue.get_nowait())
        except queue.Empty:
            pass
        return out

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _handle(self, batch: list[Inbound]) -> None:
        keep: list[Inbound] = []
        for msg in batch:
            if msg.record is None:
                msg.seq = self._next_seq()
                msg.record = self.router.record(
                    msg.seq,
                    msg.topic,
                    msg.payload,
                    msg.qos,
                    msg.retain,
                    msg.received_ms,
                    msg.user_properties,
                )
                if msg.record is None:
                    self.stats.unmapped += 1
                    self._ack(msg.mid, msg.qos)
                    continue
            keep.append(msg)
        if self.spooling:
            self._to_spool(keep)
        else:
            for msg in keep:
                self._produce_direct(msg)

    def _produce(self, rec: Record, callback: Callable[[KafkaError | None, Message], None]) -> None:
        assert self.producer is not None
        headers: list[tuple[str, str | bytes | None]] = list(rec.headers)
        while True:
            try:
                self.producer.produce(
                    rec.topic,
                    value=rec.value,
                    key=rec.key,
                    headers=headers,
                    timestamp=rec.timestamp_ms,
                    on_delivery=callback,
                )
                return
            except BufferError:  # librdkafka's queue is full: the poll thread drains it
                time.sleep(0.01)

    def _produce_direct(self, msg: Inbound) -> None:
        assert msg.record is not None
        msg.sent_at = time.monotonic()
        with self.lock:
            self.direct[msg.seq] = msg

        def done(err: KafkaError | None, kmsg: Message, msg: Inbound = msg) -> None:
            self._delivered_direct(msg, err, kmsg)

        self._produce(msg.record, done)

    def _stalled(self) -> bool:
        with self.lock:
            if not self.direct:
                return False
            oldest = next(iter(self.direct.values()))
        return time.monotonic() - oldest.sent_at > self.cfg.spool_after_ms / 1000

    def _enter_spooling(self) -> None:
        with self.lock:
            waiting = list(self.direct.values())
            for msg in waiting:
                msg.moved = True
        log.warning(
            "streamgate has not acknowledged a record for %.1f s: spooling to %s "
            "(%d waiting records moved first)",
            self.cfg.spool_after_ms / 1000,
            self.cfg.spool_dir,
            len(waiting),
        )
        self.spooling = True
        # Must fit, even past the limit: these are older than anything that comes next.
        limit = self.spool.max_bytes
        self.spool.max_bytes = 1 << 62
        try:
            self._to_spool(waiting)
        finally:
            self.spool.max_bytes = limit

    def _to_spool(self, msgs: list[Inbound]) -> None:
        msgs = [m for m in msgs if m.record is not None]
        if not msgs:
            return
        bodies = [encode(m.record) for m in msgs if m.record is not None]
        # The longest prefix that fits; the rest is held until the spool has room.
        room = self.spool.max_bytes - self.spool.size_bytes
        fit = 0
        for body in bodies:
            room -= len(body) + FRAME_OVERHEAD
            if room < 0:
                break
            fit += 1
        if fit:
            try:
                self.spool.append(bodies[:fit])
            except SpoolFull:  # a segment roll does not change the total; be safe anyway
                fit = 0
        self.stats.spooled += fit
        for m in msgs[:fit]:
            self._ack(m.mid, m.qos)
        if fit < len(msgs):
            # Hold the rest and take nothing new: no MQTT acks go out, so the broker stops
            # sending once its in-flight window is full (back-pressure, no loss).
            if not self.saturated:
                log.warning("spool full (%d bytes): holding MQTT acks", self.spool.size_bytes)
            self.saturated = True
            self.held = msgs[fit:]
            time.sleep(0.05)
        else:
            self.saturated = False

    def _drain(self) -> None:
        if not self.spooling:
            return
        with self.lock:
            if self.direct:
                return  # the moved records are still in the producer: they go first
        room = MAX_DRAIN_OUTSTANDING - len(self.outstanding)
        if room > 0:
            for body, pos in self.spool.read(min(room, BATCH)):
                rec = decode(body)
                entry: list[Any] = [pos, False]
                self.outstanding.append(entry)
                if rec.seq in self.delivered_moved:
                    self.delivered_moved.discard(rec.seq)
                    entry[1] = True
                    continue

                def done(
                    err: KafkaError | None,
                    kmsg: Message,
                    entry: list[Any] = entry,
                    rec: Record = rec,
                ) -> None:
                    self._delivered_spooled(entry, rec, err, kmsg)

                self._produce(rec, done)
        if self.spool.is_empty() and not self.held:
            self._commit(force=True)
            if not self.outstanding:
                self.spooling = False
                self.delivered_moved.clear()
                log.warning("spool drained: forwarding directly again")

    def _commit(self, force: bool) -> None:
        while self.outstanding and self.outstanding[0][1]:
            self._commit_upto = self.outstanding.popleft()[0]
            self._commit_count += 1
        now = time.monotonic()
        if self._commit_upto is None:
            return
        if force or now - self._last_commit >= COMMIT_INTERVAL_S or self.saturated:
            self.spool.commit(self._commit_upto, self._commit_count)
            self._commit_upto = None
            self._commit_count = 0
            self._last_commit = now

    def _gauges(self) -> None:
        s = self.stats
        s.spool_bytes = self.spool.size_bytes
        s.spool_records = self.spool.records_pending
        s.inflight = len(self.direct) + len(self.outstanding)
        # While spooling, every record still waiting direct is in the spool too.
        s.lag = self.spool.records_pending + (0 if self.spooling else len(self.direct))
        s.spooling = int(self.spooling)

    def finish(self, timeout: float = 10.0) -> None:
        """After MQTT stopped: hand over what was received, wait for acks, commit, close."""
        deadline = time.monotonic() + timeout
        while not self.queue.empty() and time.monotonic() < deadline:
            self.step(0)
        if self.producer is not None:
            self.producer.flush(max(0.0, deadline - time.monotonic()))
        self._commit(force=True)
        self._gauges()
        self.spool.close()
        left = len(self.direct) + len(self.outstanding)
        if left:
            log.warning(
                "stopping with %d records not acknowledged by streamgate: they were "
                "not acked to MQTT (or are in the spool) and will be sent again",
                left,
            )
