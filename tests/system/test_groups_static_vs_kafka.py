"""Two static members (group.instance.id) started together, group.initial.rebalance.delay.ms
0, a 2-partition topic: on Apache Kafka 3.5.1 they form one generation of two (each member
is assigned one partition, once, and nobody is revoked); streamgate must do the same.

The same rounds run with confluent-kafka against a streamgate gateway process and then
against Kafka, which runs only for its own rounds. Whether the two JoinGroups reach the
coordinator in the same join phase is partly a race inside librdkafka (2.x): it drops its
bootstrap connection once the first Metadata answer is in, and a member whose coordinator
connection comes up before it has hinted its topic finds no connected broker for the topic
metadata it needs, so it waits out the sparse-connect suppression (reconnect.backoff.ms / 2
= 50 ms) before joining. Kafka itself loses a round now and then (a JoinGroup that lands
after the first generation of one is Stable, which takes Kafka 3-5 ms), so the rounds are
compared by count: streamgate may miss at most `slack` more rounds than Kafka (one in six),
with a second batch of rounds before giving up. Deterministic on top: two JoinGroups that
streamgate logged at most 3 ms apart must share generation 1 (its initial wait lasts 5 ms
at least, see core/groups/rebalance.py). The timelines are printed (-rP or -s).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from support.client import unique_topic, wait_until

from harness.gateway import Gateway
from harness.kafka import KafkaBroker, unavailable_reason

ROUNDS = 6  # per batch, on each side
BATCHES = 2  # a second batch only when the first one is not conclusive
OBSERVE_S = 1.0  # after both members are assigned: time for a late rebalance to show
HEARTBEAT_MS = 300  # a member learns of a rebalance at its next heartbeat
INSTANCES = ("static-a", "static-b")
SAME_PHASE_MS = 3  # JoinGroups logged this close share generation 1 on streamgate


@dataclass
class Round:
    system: str
    group: str
    # (seconds since the start, member, "assign" or "revoke", partitions)
    events: list[tuple[float, str, str, tuple[int, ...]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    join_gap_ms: int | None = None  # between the two JoinGroups, from the server's log

    def assigned(self) -> dict[str, tuple[int, ...]]:
        """Each member's latest assignment."""
        latest: dict[str, tuple[int, ...]] = {}
        for _, member, kind, partitions in self.events:
            latest[member] = partitions if kind == "assign" else ()
        return latest

    def settled(self) -> bool:
        latest = self.assigned()
        return len(latest) == 2 and sorted(p for ps in latest.values() for p in ps) == [0, 1]

    @property
    def one_generation(self) -> bool:
        """Each member assigned once, one partition each, nobody revoked."""
        kinds = [(member, kind, len(partitions)) for _, member, kind, partitions in self.events]
        return (
            not self.errors
            and self.settled()
            and sorted(kinds) == sorted((m, "assign", 1) for m in INSTANCES)
        )

    def describe(self) -> str:
        timeline = ", ".join(
            f"+{t * 1000:.0f}ms {member} {kind} {list(partitions)}"
            for t, member, kind, partitions in self.events
        )
        gap = "?" if self.join_gap_ms is None else f"{self.join_gap_ms} ms"
        verdict = "one generation" if self.one_generation else "EXTRA REBALANCE"
        return f"{self.system} {self.group}: {verdict}; joins {gap} apart; {timeline} {self.errors}"


def _create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(timeout=30)

    def ready() -> bool:
        meta = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
        return (
            meta is not None
            and meta.error is None
            and len(meta.partitions) == 2
            and all(p.leader >= 0 for p in meta.partitions.values())
        )

    wait_until(ready, timeout=30, interval=0.1)


def _run_round(system: str, bootstrap: str) -> Round:
    """Two static members subscribe at the same moment; record their callbacks until both
    hold a partition, then a while longer."""
    from confluent_kafka import Consumer

    topic = unique_topic("static-pair")
    result = Round(system, f"g-{topic}")
    _create_topic(bootstrap, topic)
    lock = threading.Lock()
    barrier = threading.Barrier(len(INSTANCES))
    stop = threading.Event()
    start = time.monotonic()

    def record(member: str, kind: str, partitions: Any) -> None:
        if not stop.is_set():  # not the revocation of close()
            with lock:
                result.events.append(
                    (time.monotonic() - start, member, kind, tuple(p.partition for p in partitions))
                )

    def member(name: str) -> None:
        consumer = None
        try:
            consumer = Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": result.group,
                    "group.instance.id": name,
                    "client.id": name,
                    "session.timeout.ms": 6000,
                    "heartbeat.interval.ms": HEARTBEAT_MS,
                    "partition.assignment.strategy": "range",
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                }
            )
            barrier.wait(timeout=30)
            consumer.subscribe(
                [topic],
                on_assign=lambda _c, parts: record(name, "assign", parts),
                on_revoke=lambda _c, parts: record(name, "revoke", parts),
            )
            while not stop.is_set():
                consumer.poll(0.05)
        except Exception as exc:  # surfaced through the round's verdict
            result.errors.append(f"{name}: {type(exc).__name__}: {exc}")
        finally:
            if consumer is not None:
                consumer.close()

    threads = [threading.Thread(target=member, args=(n,), daemon=True) for n in INSTANCES]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: result.settled() or bool(result.errors), timeout=30, interval=0.02)
        time.sleep(OBSERVE_S)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    return result


# Kafka: "[2026-11-26 17:38:38,571] INFO [GroupCoordinator 1]: Static member with
# groupInstanceId=m0 and unknown member id joins group G in Empty state. ..."
# streamgate: "2026-11-26 17:39:05,830 INFO core.groups.coordinator: group G: member M joins"
_STAMP = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})"


def _join_gap_ms(log: str, group: str) -> int | None:
    g = re.escape(group)
    pattern = re.compile(rf"{_STAMP}[^\n]*?(?:group {g}: member \S+ joins$|joins group {g} )", re.M)
    stamps = [datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f") for m in pattern.finditer(log)]
    if len(stamps) < 2:
        return None
    return round((stamps[1] - stamps[0]).total_seconds() * 1000)


def _play(system: str, bootstrap: str, log_path: Path) -> Round:
    played = _run_round(system, bootstrap)
    played.join_gap_ms = _join_gap_ms(log_path.read_text(errors="replace"), played.group)
    return played


def _kafka_rounds(work_dir: Path, count: int) -> list[Round]:
    """`count` rounds on a fresh broker, which runs only meanwhile."""
    broker = KafkaBroker(work_dir)
    broker.start()
    try:
        # Not counted: Kafka creates __consumer_offsets (its FindCoordinator answers
        # COORDINATOR_NOT_AVAILABLE meanwhile) and its JIT compiles the paths.
        _run_round("warm-up", broker.bootstrap)
        log_path = work_dir / "logs" / "server.log"
        return [_play("kafka", broker.bootstrap, log_path) for _ in range(count)]
    finally:
        broker.stop()


def test_static_members_started_together_form_one_generation_like_kafka(tmp_path: Path) -> None:
    why = unavailable_reason()
    if why is not None:
        pytest.skip(f"the Kafka side needs ../shared/kafka: {why}")
    gateway = Gateway(
        tmp_path / "sg",
        tmp_path / "server.log",
        ["--group-initial-rebalance-delay-ms", "0"],
        default_partitions=2,
    )
    # One side at a time (the gateway idles during Kafka's rounds): a JVM running beside
    # the clients slows their threads enough to hide the race this test is about.
    rounds: dict[str, list[Round]] = {"kafka": [], "streamgate": []}
    gateway.start_fresh()
    try:
        _run_round("warm-up", gateway.bootstrap)
        for batch in range(1, BATCHES + 1):
            rounds["streamgate"] += [
                _play("streamgate", gateway.bootstrap, tmp_path / "server.log")
                for _ in range(ROUNDS)
            ]
            rounds["kafka"] += _kafka_rounds(tmp_path / f"kafka-{batch}", ROUNDS)
            kafka_ok = sum(r.one_generation for r in rounds["kafka"])
            sg_ok = sum(r.one_generation for r in rounds["streamgate"])
            slack = batch * ROUNDS // 6
            if sg_ok >= kafka_ok - slack:
                break
    finally:
        gateway.close()

    report = "\n".join(r.describe() for name in rounds for r in rounds[name])
    played_each = len(rounds["kafka"])
    print(report)  # shown with -s or -rP: the timelines behind the counts
    # The scenario is Kafka's: it forms one generation of two (in 50-100 % of the rounds
    # here; the rest lose librdkafka's race, as on streamgate).
    assert kafka_ok > 0, f"Kafka never formed one generation of two:\n{report}"
    assert sg_ok >= kafka_ok - slack, (
        f"streamgate formed one generation in {sg_ok} of {played_each} rounds, "
        f"Kafka in {kafka_ok}:\n{report}"
    )
    # Deterministic on streamgate: JoinGroups this close are in the same initial wait.
    for played in rounds["streamgate"]:
        if played.join_gap_ms is not None and played.join_gap_ms <= SAME_PHASE_MS:
            assert played.one_generation, f"{played.describe()}\n{report}"
