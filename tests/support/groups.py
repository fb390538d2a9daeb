"""Consumer group members for the group tests: one real client per member, in a thread.

Every member subscribes, records each record it consumes as a `Consumed` in a shared
list, then commits synchronously (commit after processing), and publishes the assignment it
last saw. `stop()` closes the consumer (which leaves the group). The same loop exists for
kafka-python, confluent-kafka and aiokafka; `ProcessMember` runs a confluent consumer in a
subprocess so that it can be killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.client import unique_topic, wait_until

SESSION_TIMEOUT_MS = 6000
ROUND_PER_PARTITION = 10  # records a partition gets in each GroupRun.produce_round()
HEARTBEAT_MS = 500
Partition = tuple[str, int]


@dataclass(frozen=True)
class Consumed:
    member: str
    topic: str
    partition: int
    offset: int
    value: bytes


@dataclass
class MemberStats:
    assignment: frozenset[Partition] = frozenset()
    assigned_calls: int = 0  # on_assign / on_partitions_assigned callbacks
    revoked_calls: int = 0
    commit_failures: int = 0
    errors: list[str] = field(default_factory=list)


class Member:
    """Base: runs `_run` in a thread until `stop`."""

    kind = "?"

    def __init__(
        self,
        name: str,
        bootstrap: str,
        group: str,
        topics: list[str],
        sink: list[Consumed],
        strategy: str = "range",
        instance_id: str | None = None,
    ) -> None:
        self.name = name
        self.bootstrap = bootstrap
        self.group = group
        self.topics = topics
        self.sink = sink
        self.strategy = strategy
        self.instance_id = instance_id
        self.stats = MemberStats()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._guarded, name=name, daemon=True)

    def start(self) -> Member:
        self._thread.start()
        return self

    def stop(self, timeout: float = 20.0) -> None:
        self._stop.set()
        if self._thread.ident is None:
            return  # never started
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"{self.name} did not stop"

    @property
    def assignment(self) -> frozenset[Partition]:
        return self.stats.assignment

    def _guarded(self) -> None:
        try:
            self._run()
        except Exception as exc:  # surfaced by the tests through stats.errors
            self.stats.errors.append(f"{type(exc).__name__}: {exc}")

    def _record(self, topic: str, partition: int, offset: int, value: bytes) -> None:
        self.sink.append(Consumed(self.name, topic, partition, offset, value))

    def _run(self) -> None:
        raise NotImplementedError


class KafkaPythonMember(Member):
    kind = "kafka-python"

    def _run(self) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
        from kafka.errors import CommitFailedError, KafkaError

        assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
        stats = self.stats

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                stats.revoked_calls += 1

            def on_partitions_assigned(self, assigned: Any) -> None:
                stats.assigned_calls += 1

        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            group_instance_id=self.instance_id,
            client_id=self.name,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            partition_assignment_strategy=[assignors[self.strategy]],
        )
        consumer.subscribe(self.topics, listener=Listener())
        try:
            while not self._stop.is_set():
                batch = consumer.poll(timeout_ms=100)
                for records in batch.values():
                    for r in records:
                        self._record(r.topic, r.partition, r.offset, r.value)
                if batch:
                    try:
                        consumer.commit()
                    except (CommitFailedError, KafkaError):
                        stats.commit_failures += 1
                stats.assignment = frozenset(
                    (tp.topic, tp.partition) for tp in consumer.assignment()
                )
        finally:
            consumer.close()


class ConfluentMember(Member):
    kind = "confluent"

    def _run(self) -> None:
        from confluent_kafka import Consumer, KafkaError, KafkaException

        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "client.id": self.name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_MS,
            "partition.assignment.strategy": self.strategy,
            "topic.metadata.refresh.interval.ms": 1000,
        }
        if self.instance_id:
            conf["group.instance.id"] = self.instance_id
        consumer = Consumer(conf)
        stats = self.stats

        def on_assign(c: Any, partitions: Any) -> None:
            stats.assigned_calls += 1

        def on_revoke(c: Any, partitions: Any) -> None:
            stats.revoked_calls += 1

        consumer.subscribe(self.topics, on_assign=on_assign, on_revoke=on_revoke)
        try:
            while not self._stop.is_set():
                msgs = consumer.consume(num_messages=100, timeout=0.1)
                for m in msgs:
                    if m.error():
                        if m.error().code() != KafkaError._PARTITION_EOF:
                            stats.errors.append(str(m.error()))
                        continue
                    self._record(m.topic(), m.partition(), m.offset(), m.value())
                if msgs:
                    try:
                        consumer.commit(asynchronous=False)
                    except KafkaException:
                        stats.commit_failures += 1
                stats.assignment = frozenset((p.topic, p.partition) for p in consumer.assignment())
        finally:
            consumer.close()


class ConfluentConsumerProtocolMember(Member):
    """confluent-kafka with `group.protocol=consumer`: the broker assigns, with the server
    assignor `strategy` (uniform or range). A topic starting with ^ is a regex."""

    kind = "confluent-consumer-protocol"

    def _run(self) -> None:
        from confluent_kafka import Consumer, KafkaError, KafkaException

        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "group.protocol": "consumer",
            "group.remote.assignor": self.strategy,
            "client.id": self.name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 1000,
        }
        if self.instance_id:
            conf["group.instance.id"] = self.instance_id
        consumer = Consumer(conf)
        stats = self.stats

        def on_assign(c: Any, partitions: Any) -> None:
            stats.assigned_calls += 1

        def on_revoke(c: Any, partitions: Any) -> None:
            stats.revoked_calls += 1

        consumer.subscribe(self.topics, on_assign=on_assign, on_revoke=on_revoke)
        try:
            while not self._stop.is_set():
                msgs = consumer.consume(num_messages=100, timeout=0.1)
                for m in msgs:
                    if m.error():
                        if m.error().code() != KafkaError._PARTITION_EOF:
                            stats.errors.append(str(m.error()))
                        continue
                    self._record(m.topic(), m.partition(), m.offset(), m.value())
                if msgs:
                    try:
                        consumer.commit(asynchronous=False)
                    except KafkaException:
                        stats.commit_failures += 1
                stats.assignment = frozenset((p.topic, p.partition) for p in consumer.assignment())
        finally:
            consumer.close()


class AiokafkaMember(Member):
    kind = "aiokafka"

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor
        from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
        from aiokafka.errors import CommitFailedError, KafkaError

        assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
        stats = self.stats

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                stats.revoked_calls += 1

            def on_partitions_assigned(self, assigned: Any) -> None:
                stats.assigned_calls += 1

        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            group_instance_id=self.instance_id,
            client_id=self.name,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            partition_assignment_strategy=(assignors[self.strategy],),
            metadata_max_age_ms=1000,
        )
        consumer.subscribe(self.topics, listener=Listener())
        await consumer.start()
        try:
            while not self._stop.is_set():
                batch = await consumer.getmany(timeout_ms=100)
                for records in batch.values():
                    for r in records:
                        self._record(r.topic, r.partition, r.offset, r.value)
                if batch:
                    try:
                        await consumer.commit()
                    except (CommitFailedError, KafkaError):
                        stats.commit_failures += 1
                stats.assignment = frozenset(
                    (tp.topic, tp.partition) for tp in consumer.assignment()
                )
        finally:
            await consumer.stop()


MEMBER_KINDS: dict[str, type[Member]] = {
    "kafka-python": KafkaPythonMember,
    "confluent": ConfluentMember,
    "aiokafka": AiokafkaMember,
    "confluent-consumer-protocol": ConfluentConsumerProtocolMember,
}

_PROCESS_SCRIPT = Path(__file__).with_name("group_member_proc.py")


class ProcessMember:
    """A confluent consumer in a subprocess (to be SIGKILLed); it reports assignments and
    records as JSON lines, which a reader thread turns into stats and `Consumed` entries."""

    def __init__(
        self, name: str, bootstrap: str, group: str, topics: list[str], sink: list[Consumed]
    ) -> None:
        self.name = name
        self.sink = sink
        self.stats = MemberStats()
        config = {"bootstrap": bootstrap, "group": group, "topics": topics, "name": name}
        config.update(session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_ms=HEARTBEAT_MS)
        self.proc = subprocess.Popen(
            [sys.executable, str(_PROCESS_SCRIPT), json.dumps(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def assignment(self) -> frozenset[Partition]:
        return self.stats.assignment

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            if event["type"] == "assignment":
                self.stats.assignment = frozenset((t, p) for t, p in event["partitions"])
            elif event["type"] == "record":
                self.sink.append(
                    Consumed(
                        self.name,
                        event["topic"],
                        event["partition"],
                        event["offset"],
                        event["value"].encode(),
                    )
                )

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self._reader.join(10)
        self.stats.assignment = frozenset()

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc.poll() is None:
            self.kill()


# --- checks ---------------------------------------------------------------------------------


def covers(members: Iterable[Any], partitions: set[Partition]) -> bool:
    """Every partition is assigned to exactly one of `members` (and nothing else is)."""
    assignments = [m.assignment for m in members]
    owned = [p for a in assignments for p in a]
    return len(owned) == len(set(owned)) and set(owned) == partitions and all(assignments)


def wait_for_cover(members: list[Any], partitions: set[Partition], timeout: float = 30.0) -> None:
    try:
        wait_until(lambda: covers(members, partitions), timeout=timeout, interval=0.05)
    except TimeoutError:
        seen = {m.name: sorted(m.assignment) for m in members}
        errors = {m.name: m.stats.errors for m in members if m.stats.errors}
        raise AssertionError(f"no disjoint cover of {len(partitions)}: {seen} {errors}") from None


def wait_consumed(sink: list[Consumed], values: set[bytes], timeout: float = 30.0) -> None:
    def done() -> bool:
        return values <= {c.value for c in list(sink)}

    try:
        wait_until(done, timeout=timeout, interval=0.05)
    except TimeoutError:
        missing = values - {c.value for c in list(sink)}
        raise AssertionError(f"{len(missing)} of {len(values)} records never consumed") from None


def duplicates(sink: list[Consumed], values: set[bytes] | None = None) -> dict[bytes, int]:
    counts = Counter(c.value for c in list(sink) if values is None or c.value in values)
    return {v: n for v, n in counts.items() if n > 1}


def produce(bootstrap: str, topic: str, partitions: int, prefix: str, count: int) -> set[bytes]:
    """Produce `count` unique values round-robin over the partitions; returns the values."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    errors: list[Any] = []
    values = set()
    for i in range(count):
        value = f"{prefix}-{i}".encode()
        values.add(value)
        producer.produce(
            topic,
            value,
            partition=i % partitions,
            on_delivery=lambda err, msg: err and errors.append(err),
        )
    assert producer.flush(20) == 0
    assert not errors, errors
    return values


def create_topic(bootstrap: str, topic: str, partitions: int) -> set[Partition]:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(20)
    return {(topic, p) for p in range(partitions)}


def stop_all(members: Iterable[Any]) -> None:
    for member in members:
        member.stop()


def make_members(
    kinds: list[str],
    bootstrap: str,
    group: str,
    topics: list[str],
    sink: list[Consumed],
    strategy: str,
    prefix: str = "m",
) -> list[Member]:
    return [
        MEMBER_KINDS[kind](f"{prefix}{i}-{kind}", bootstrap, group, topics, sink, strategy)
        for i, kind in enumerate(kinds)
    ]


def until(predicate: Callable[[], Any], timeout: float) -> bool:
    """True as soon as `predicate` holds, False once `timeout` passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def committed_offsets(bootstrap: str, group: str) -> dict[Partition, int]:
    """The group's committed offsets, read with OffsetFetch v7 (all partitions)."""
    from kio.schema.offset_fetch.v7.request import OffsetFetchRequest

    from support.client import RawClient

    with RawClient(bootstrap) as client:
        response = client.request(
            OffsetFetchRequest(group_id=group, topics=None, require_stable=False)
        )
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in response.topics
        for p in t.partitions
        if p.committed_offset >= 0
    }


def wait_committed(
    bootstrap: str, group: str, expected: dict[Partition, int], timeout: float = 20.0
) -> None:
    """Wait until the group's committed offsets are exactly `expected`."""
    try:
        wait_until(lambda: committed_offsets(bootstrap, group) == expected, timeout=timeout)
    except TimeoutError:
        got = committed_offsets(bootstrap, group)
        raise AssertionError(f"committed {got}, expected {expected}") from None


def end_offsets(partitions: set[Partition], per_partition: int) -> dict[Partition, int]:
    return {p: per_partition for p in partitions}


@dataclass
class GroupRun:
    """One topic and one group on a gateway: the block every group test starts with.

    `members()` makes members that consume into the shared `sink`; `start()` starts them
    and waits until the group covers every partition; `produce_round()` produces a round of
    records and waits until they are consumed and committed. Every member made here is
    stopped by `stop()` (the `group_run` fixture calls it at teardown).
    """

    bootstrap: str
    topic: str
    group: str
    partition_count: int
    partitions: set[Partition]
    sink: list[Consumed] = field(default_factory=list)
    made: list[Any] = field(default_factory=list)

    @classmethod
    def create(cls, bootstrap: str, name: str, partition_count: int) -> GroupRun:
        topic = unique_topic(name)
        partitions = create_topic(bootstrap, topic, partition_count)
        return cls(bootstrap, topic, f"group-{topic}", partition_count, partitions)

    def members(
        self, kinds: list[str], strategy: str = "range", prefix: str = "m", group: str | None = None
    ) -> list[Member]:
        made = make_members(
            kinds, self.bootstrap, group or self.group, [self.topic], self.sink, strategy, prefix
        )
        self.made.extend(made)
        return made

    def adopt(self, member: Any) -> Any:
        """Stop `member` (made elsewhere) with the others."""
        self.made.append(member)
        return member

    def start(self, members: list[Any], cover: list[Any] | None = None) -> None:
        """Start `members`; wait until `cover` (default: those) own every partition."""
        for member in members:
            member.start()
        wait_for_cover(members if cover is None else cover, self.partitions)

    def produce_round(
        self, prefix: str, committed: int | None = None, per_partition: int = ROUND_PER_PARTITION
    ) -> set[bytes]:
        """`per_partition` records a partition; wait until they are consumed and, when given,
        until the group has committed `committed` records a partition."""
        values = produce(
            self.bootstrap,
            self.topic,
            self.partition_count,
            prefix,
            self.partition_count * per_partition,
        )
        wait_consumed(self.sink, values)
        if committed is not None:
            wait_committed(self.bootstrap, self.group, end_offsets(self.partitions, committed))
        return values

    def stop(self) -> None:
        stop_all(self.made)
