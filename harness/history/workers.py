"""The workload's clients: idempotent producers, a consumer group, the raw prober."""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any, TypeVar

from .model import (
    ERROR,
    OK,
    UNKNOWN,
    CommitOp,
    CommittedRead,
    CreateTopicOp,
    DeleteRecordsOp,
    HighWatermarkRead,
    LogStartRead,
    Op,
    ProduceOp,
    Recorder,
    RecordRead,
    TopicRead,
)
from .requests import (
    EARLIEST,
    LATEST,
    Request,
    _code,
    _Raw,
    _records_of,
    commit_request,
    create_topics_request,
    delete_records_request,
    fetch_request,
    list_offsets_request,
    metadata_request,
    offset_fetch_request,
    produce_request,
)

log = logging.getLogger("harness.history")
_T = TypeVar("_T")


class _Worker(threading.Thread):
    def __init__(self, name: str, recorder: Recorder, stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.recorder = recorder
        self.stop = stop
        self.failure: BaseException | None = None
        self.counts: Counter[str] = Counter()

    def run(self) -> None:
        try:
            self.work()
        except BaseException as exc:  # reported by the runner
            log.exception("%s failed", self.name)
            self.failure = exc

    def work(self) -> None:
        raise NotImplementedError


def _confluent_quiet(config: dict[str, Any]) -> dict[str, Any]:
    return {
        "log_level": 2,
        "reconnect.backoff.ms": 100,
        "reconnect.backoff.max.ms": 1000,
        "socket.connection.setup.timeout.ms": 5000,
        **config,
    }


class _ConfluentLabel:
    """The connection label of a confluent-kafka client: changes with each gateway kill and
    each transport-level error the client reports."""

    def __init__(self, recorder: Recorder, client: str) -> None:
        self.recorder = recorder
        self.client = client
        self.errors = 0

    def on_error(self, err: Any) -> None:
        from confluent_kafka import KafkaError

        if err.code() in (
            KafkaError._TRANSPORT,
            KafkaError._ALL_BROKERS_DOWN,
            KafkaError._TIMED_OUT,
            KafkaError._RESOLVE,
        ):
            self.errors += 1

    def label(self) -> str:
        return f"{self.client}#{self.recorder.epoch}.{self.errors}"

    def settle(self, op: Op) -> None:
        """An op whose label changed while outstanding has no known connection."""
        if op.conn != self.label():
            op.conn = None


class ProducerWorker(_Worker):
    """Idempotent confluent-kafka producer of unique values for its keys, round-robin."""

    def __init__(
        self,
        recorder: Recorder,
        stop: threading.Event,
        bootstrap: str,
        topic: str,
        name: str,
        keys: list[str],
        pause: float,
    ) -> None:
        super().__init__(name, recorder, stop)
        self.bootstrap, self.topic, self.keys, self.pause = bootstrap, topic, keys, pause
        self.generation = 0
        self.fatal: str | None = None
        self.ack_seq = 0

    def _producer(self) -> Any:
        from confluent_kafka import Producer

        def on_error(err: Any) -> None:
            if err.fatal():
                self.fatal = str(err)

        return Producer(
            _confluent_quiet(
                {
                    "bootstrap.servers": self.bootstrap,
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 5,
                    "message.timeout.ms": 30000,
                    "retry.backoff.ms": 100,
                    "error_cb": on_error,
                }
            )
        )

    def _delivered(self, op: ProduceOp) -> Callable[[Any, Any], None]:
        def callback(err: Any, msg: Any) -> None:
            if err is None:
                op.partition, op.offset = msg.partition(), msg.offset()
                op.ack_seq = self.ack_seq
                self.ack_seq += 1
                self.recorder.finish(op, OK)
                self.counts["acked"] += 1
            else:
                self.recorder.finish(op, ERROR, str(err))
                op.end = None  # it may still have been written
                self.counts["failed"] += 1

        return callback

    def work(self) -> None:
        seq = 0
        while not self.stop.is_set():
            producer = self._producer()
            name = f"{self.name}.{self.generation}"
            while not self.stop.is_set() and self.fatal is None:
                for key in self.keys:
                    value = f"{name}:{key}:{seq}"
                    op = self.recorder.begin(
                        ProduceOp(
                            client=name,
                            topic=self.topic,
                            key=key,
                            value=value,
                            producer=name,
                            idempotent=True,
                        )
                    )
                    while True:
                        try:
                            producer.produce(
                                self.topic, key=key, value=value, on_delivery=self._delivered(op)
                            )
                            break
                        except BufferError:
                            producer.poll(0.1)
                    self.counts["sent"] += 1
                seq += 1
                producer.poll(0)
                time.sleep(self.pause)
            left = producer.flush(40)
            self.counts["undelivered"] += left
            if self.fatal is not None:
                log.warning("%s: fatal error %s; a new producer", name, self.fatal)
                self.fatal = None
                self.generation += 1


class ConsumerWorker(_Worker):
    """A confluent-kafka group member: consume, commit each record asynchronously, then the
    positions synchronously, then read them back with committed()."""

    def __init__(
        self,
        recorder: Recorder,
        stop: threading.Event,
        bootstrap: str,
        topic: str,
        group: str,
        name: str,
        async_commits: int,
    ) -> None:
        super().__init__(name, recorder, stop)
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.async_commits = async_commits
        self.label = _ConfluentLabel(recorder, name)
        self.pending: dict[tuple[str, int, int], list[CommitOp]] = defaultdict(list)

    def _on_commit(self, err: Any, partitions: Any) -> None:
        for tp in partitions:
            waiting = self.pending.get((tp.topic, tp.partition, tp.offset))
            if not waiting:
                continue  # the synchronous commit's own report
            op = waiting.pop(0)
            failure = err if err is not None else tp.error
            self.label.settle(op)
            if failure is None:
                self.recorder.finish(op, OK)
                self.counts["async_ok"] += 1
            else:
                self.recorder.finish(op, ERROR if _broker_error(failure) else UNKNOWN, str(failure))

    def work(self) -> None:
        from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

        consumer = Consumer(
            _confluent_quiet(
                {
                    "bootstrap.servers": self.bootstrap,
                    "group.id": self.group,
                    "client.id": self.name,
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                    "session.timeout.ms": 10000,
                    "heartbeat.interval.ms": 1000,
                    "max.poll.interval.ms": 120000,
                    "on_commit": self._on_commit,
                    "error_cb": self.label.on_error,
                }
            )
        )
        consumer.subscribe([self.topic])
        try:
            while not self.stop.is_set():
                batch: list[Any] = []
                until = time.monotonic() + 0.5
                while time.monotonic() < until and len(batch) < self.async_commits:
                    msg = consumer.poll(0.1)
                    if msg is None:
                        continue
                    failure = msg.error()
                    if failure is not None:
                        if failure.code() != KafkaError._PARTITION_EOF:
                            self.counts["consume_errors"] += 1
                        continue
                    batch.append(msg)
                    seen = self.recorder.begin(
                        RecordRead(
                            client=self.name,
                            topic=self.topic,
                            partition=int(msg.partition() or 0),
                            offset=int(msg.offset() or 0),
                            key=_text(msg.key()),
                            value=_text(msg.value()),
                        )
                    )
                    self.recorder.finish(seen, OK)
                if not batch:
                    continue
                positions: dict[int, int] = {}
                for msg in batch:
                    partition, offset = int(msg.partition() or 0), int(msg.offset() or 0) + 1
                    positions[partition] = offset
                    commit = self.recorder.begin(
                        CommitOp(
                            client=self.name,
                            group=self.group,
                            topic=self.topic,
                            partition=partition,
                            offset=offset,
                        ),
                        self.label.label(),
                    )
                    self.pending[(self.topic, partition, offset)].append(commit)
                    try:
                        consumer.commit(
                            offsets=[TopicPartition(self.topic, partition, offset)],
                            asynchronous=True,
                        )
                    except KafkaException as exc:
                        self.pending[(self.topic, partition, offset)].remove(commit)
                        self.recorder.finish(commit, UNKNOWN, str(exc))
                    self.counts["async_commits"] += 1
                self._commit_sync(consumer, positions)
                self._read_committed(consumer, sorted(positions))
        finally:
            with contextlib.suppress(Exception):
                consumer.close()

    def _commit_sync(self, consumer: Any, positions: dict[int, int]) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        label = self.label.label()
        ops = {
            p: self.recorder.begin(
                CommitOp(
                    client=self.name, group=self.group, topic=self.topic, partition=p, offset=o
                ),
                label,
            )
            for p, o in positions.items()
        }
        try:
            answered = consumer.commit(
                offsets=[TopicPartition(self.topic, p, o) for p, o in positions.items()],
                asynchronous=False,
            )
        except KafkaException as exc:
            for op in ops.values():
                self.label.settle(op)
                error = exc.args[0] if exc.args else exc
                self.recorder.finish(op, ERROR if _broker_error(error) else UNKNOWN, str(exc))
            self.counts["sync_failed"] += 1
            return
        for tp in answered or []:
            op = ops[tp.partition]
            self.label.settle(op)
            if tp.error is None:
                self.recorder.finish(op, OK)
            else:
                self.recorder.finish(
                    op, ERROR if _broker_error(tp.error) else UNKNOWN, str(tp.error)
                )
        self.counts["sync_commits"] += 1

    def _read_committed(self, consumer: Any, partitions: list[int]) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        label = self.label.label()
        ops = {
            p: self.recorder.begin(
                CommittedRead(client=self.name, group=self.group, topic=self.topic, partition=p),
                label,
            )
            for p in partitions
        }
        try:
            got = consumer.committed([TopicPartition(self.topic, p) for p in partitions], 10)
        except KafkaException as exc:
            for op in ops.values():
                self.recorder.finish(op, UNKNOWN, str(exc))
            return
        for tp in got:
            op = ops[tp.partition]
            self.label.settle(op)
            if tp.error is not None:
                self.recorder.finish(op, ERROR, str(tp.error))
                continue
            op.offset = tp.offset if tp.offset >= 0 else -1
            self.recorder.finish(op, OK)
            self.counts["committed_reads"] += 1


def _broker_error(error: Any) -> bool:
    """A broker's error code (the request was refused), not a client-side one."""
    code = getattr(error, "code", None)
    value = code() if callable(code) else code
    return isinstance(value, int) and value > 0


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode()


class ProberWorker(_Worker):
    """Raw pipelined pairs on one connection, each second request sent without waiting
    for the first's answer."""

    def __init__(
        self,
        recorder: Recorder,
        stop: threading.Event,
        bootstrap: str,
        topic: str,
        probe_topic: str,
        group: str,
        watched_group: str,
        partitions: int,
        rng: random.Random,
        create_topics: int,
    ) -> None:
        super().__init__("prober", recorder, stop)
        self.bootstrap, self.topic, self.probe_topic = bootstrap, topic, probe_topic
        self.group, self.watched_group, self.partitions = group, watched_group, partitions
        self.rng = rng
        self.create_topics = create_topics
        self.commit_offset = 0
        self.probe_seq = 0
        self.probe_hw = 0
        self.created: list[str] = []

    def work(self) -> None:
        from kafkaclient.client import KafkaClientError

        raw: _Raw | None = None
        steps = [self._commit_fetch, self._delete_list, self._produce_fetch, self._watch_group]
        round_ = 0
        while not self.stop.is_set():
            try:
                if raw is None:
                    raw = _Raw(self.recorder, self.bootstrap, "prober")
                for step in steps:
                    step(raw)
                if len(self.created) < self.create_topics and round_ % 5 == 0:
                    self._create_metadata(raw)
                round_ += 1
                self.stop.wait(0.02)
            except (KafkaClientError, OSError) as exc:
                self.counts["reconnects"] += 1
                log.debug("prober: %s; reconnecting", exc)
                if raw is not None:
                    raw.close()
                raw = None
                self.stop.wait(0.2)
        if raw is not None:
            raw.close()

    def _commit_fetch(self, raw: _Raw) -> None:
        """Several OffsetCommits of growing offsets, then an OffsetFetch, all in flight."""
        count = self.rng.randint(1, 4)
        requests: list[Request] = []
        commits = []
        for _ in range(count):
            self.commit_offset += 1
            op = CommitOp(
                group=self.group, topic=self.probe_topic, partition=0, offset=self.commit_offset
            )
            commits.append(op)
            requests.append(commit_request(self.group, self.probe_topic, 0, op.offset, op))
        read = CommittedRead(group=self.group, topic=self.probe_topic, partition=0)
        _fetch, _version, body, _ = offset_fetch_request(self.group, self.probe_topic, [0])
        requests.append((_fetch, _version, body, read))
        answers = raw.pipeline(requests)
        for op, answer in zip(commits, answers, strict=False):
            code = _code(answer.topics[0].partitions[0].error_code)
            self.recorder.finish(op, OK if code == 0 else ERROR, None if code == 0 else str(code))
        _finish_committed(self.recorder, read, answers[-1])
        self.counts["commit_fetch"] += 1

    def _watch_group(self, raw: _Raw) -> None:
        """The consumer group's committed offsets, from another connection."""
        reads = [
            CommittedRead(group=self.watched_group, topic=self.topic, partition=p)
            for p in range(self.partitions)
        ]
        requests = [offset_fetch_request(self.watched_group, self.topic, range(self.partitions))]
        begun = [self.recorder.begin(r, raw.conn) for r in reads]
        for r in begun:
            r.client = raw.client
        (answer,) = raw.pipeline(requests)
        for r in begun:
            _finish_committed(self.recorder, r, answer)

    def _delete_list(self, raw: _Raw) -> None:
        """ListOffsets(latest), then DeleteRecords up to it and ListOffsets(earliest) right
        behind it on the same connection."""
        partition = 0
        hw = HighWatermarkRead(topic=self.topic, partition=partition)
        (answer,) = raw.pipeline([list_offsets_request(self.topic, partition, LATEST, hw)])
        self._finish_list(hw, answer)
        if hw.outcome != OK:
            return
        upto = hw.offset
        delete = DeleteRecordsOp(topic=self.topic, partition=partition, requested=upto)
        earliest = LogStartRead(topic=self.topic, partition=partition)
        requests = [
            delete_records_request(self.topic, partition, upto, delete),
            list_offsets_request(self.topic, partition, EARLIEST, earliest),
        ]
        answers = raw.pipeline(requests)
        part = answers[0].topics[0].partitions[0]
        code = _code(part.error_code)
        if code == 0:
            delete.low_watermark = part.low_watermark
        self.recorder.finish(delete, OK if code == 0 else ERROR, None if code == 0 else str(code))
        self._finish_list(earliest, answers[1])
        self.counts["delete_list"] += 1

    def _finish_list(self, read: LogStartRead | HighWatermarkRead, answer: Any) -> None:
        part = answer.topics[0].partitions[0]
        code = _code(part.error_code)
        if code != 0:
            self.recorder.finish(read, ERROR, str(code))
            return
        read.offset = part.offset
        self.recorder.finish(read, OK)

    def _produce_fetch(self, raw: _Raw) -> None:
        """Produce one record, then Fetch from the last high watermark seen and ListOffsets
        (latest) behind it: both must see the record once it is acknowledged."""
        from core.recordbatch import build_batch

        self.probe_seq += 1
        value = f"probe:{self.probe_seq}"
        produce = ProduceOp(
            topic=self.probe_topic, partition=0, key="probe", value=value, producer="prober"
        )
        hw_fetch = HighWatermarkRead(topic=self.probe_topic, partition=0)
        start_fetch = LogStartRead(topic=self.probe_topic, partition=0)
        hw_list = HighWatermarkRead(topic=self.probe_topic, partition=0)
        batch = build_batch([(b"probe", value.encode(), [])])
        from_offset = self.probe_hw
        requests = [
            produce_request(self.probe_topic, 0, batch, produce),
            fetch_request(self.probe_topic, 0, from_offset, hw_fetch),
            list_offsets_request(self.probe_topic, 0, LATEST, hw_list),
        ]
        self.recorder.begin(start_fetch, None)  # the Fetch's log start: time order only
        start_fetch.client = raw.client
        answers = raw.pipeline(requests)
        part = answers[0].responses[0].partition_responses[0]
        code = _code(part.error_code)
        if code == 0:
            produce.offset = part.base_offset
            produce.ack_seq = self.probe_seq
        self.recorder.finish(produce, OK if code == 0 else ERROR, None if code == 0 else str(code))
        fetched = answers[1].responses[0].partitions[0]
        code = _code(fetched.error_code)
        if code == 0:
            hw_fetch.offset = fetched.high_watermark
            self.recorder.finish(hw_fetch, OK)
            if fetched.log_start_offset >= 0:
                start_fetch.offset = fetched.log_start_offset
                self.recorder.finish(start_fetch, OK)
            for offset, key, val in _records_of(fetched.records, from_offset):
                rec = self.recorder.begin(
                    RecordRead(
                        client=raw.client,
                        topic=self.probe_topic,
                        partition=0,
                        offset=offset,
                        key=key,
                        value=val,
                    ),
                    raw.conn,
                )
                self.recorder.finish(rec, OK)
        else:
            self.recorder.finish(hw_fetch, ERROR, str(code))
        self._finish_list(hw_list, answers[2])
        if hw_list.outcome == OK:
            self.probe_hw = max(self.probe_hw, hw_list.offset)
        self.counts["produce_fetch"] += 1

    def _create_metadata(self, raw: _Raw) -> None:
        name = f"{self.probe_topic}-ct{len(self.created)}"
        self.created.append(name)
        create = CreateTopicOp(topic=name, partitions=1)
        read = TopicRead(topic=name)
        requests = [create_topics_request({name: 1}, create), metadata_request(name, read)]
        answers = raw.pipeline(requests)
        code = _code(answers[0].topics[0].error_code)
        self.recorder.finish(create, OK if code == 0 else ERROR, None if code == 0 else str(code))
        _finish_topic_read(self.recorder, read, answers[1])
        self.counts["create_metadata"] += 1


def _finish_committed(recorder: Recorder, read: CommittedRead, answer: Any) -> None:
    code = _code(answer.error_code)
    parts = [p for t in answer.topics for p in t.partitions if t.name == read.topic]
    part = next((p for p in parts if p.partition_index == read.partition), None)
    if code != 0 or (part is not None and _code(part.error_code) != 0):
        recorder.finish(read, ERROR, str(code))
        return
    read.offset = part.committed_offset if part is not None else -1
    read.offset = max(read.offset, -1)
    recorder.finish(read, OK)


def _finish_topic_read(recorder: Recorder, read: TopicRead, answer: Any) -> None:
    topic = next((t for t in answer.topics if t.name == read.topic), None)
    code = -1 if topic is None else _code(topic.error_code)
    if code == 0:
        read.exists = True
        recorder.finish(read, OK)
    elif code == 3:  # UNKNOWN_TOPIC_OR_PARTITION
        recorder.finish(read, OK)
    else:
        recorder.finish(read, ERROR, str(code))
