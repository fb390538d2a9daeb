"""Nothing blocks the event loop: Fetch and Produce latency stay flat while other clients
storm the gateway with OffsetCommits (each an fsync'd SQLite transaction) and topics full of
files are deleted.

One probe connection alternates a small Produce (acks=1) and a Fetch (max_wait 0) and times
each round trip, in phases that alternate between quiet (the baseline) and storm; the
medians are compared with a generous ratio, never with an absolute time (the machine is
shared, and alternating phases spreads its noise over both).
Set STREAMGATE_LATENCY_REPORT=path to write the figures as JSON.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.client import (
    RawClient,
    Rec,
    build_record_batch,
    fetch_request,
    produce_request,
    unique_topic,
)

PHASES = 6  # quiet and storm phases alternate, so the machine's own noise hits both alike
ROUNDS = 60  # probe rounds per phase
COMMITTERS = 8
DELETED_TOPICS = 3
MEDIAN_RATIO = 6.0  # storm median / quiet median (main's code before the fix: 12-74)
# Small tier-1 files, so the deleted topics hold many of them.
pytestmark = pytest.mark.gateway_args("--chunk-bytes", "16384", "--chunk-age-ms", "100")


def _probe(bootstrap: str, topic: str, rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"produce": [], "fetch": []}
    batch = build_record_batch([Rec(b"x" * 100)])
    with RawClient(bootstrap) as client:
        offset = 0
        for _ in range(rounds):
            started = time.perf_counter()
            response = client.request(produce_request(topic, 0, batch, acks=1))
            times["produce"].append(time.perf_counter() - started)
            part = response.responses[0].partition_responses[0]
            assert part.error_code == 0, part
            started = time.perf_counter()
            fetched = client.request(fetch_request(topic, 0, offset, max_wait_ms=0))
            times["fetch"].append(time.perf_counter() - started)
            assert fetched.responses[0].partitions[0].error_code == 0
            offset = part.base_offset + 1
    return times


def _commit_storm(
    bootstrap: str, topic: str, active: threading.Event, stop: threading.Event, counts: list[int]
) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_topic("storm"),
            "enable.auto.commit": False,
        }
    )
    try:
        offset = 0
        while not stop.is_set():
            if not active.wait(0.05):
                continue
            offset += 1
            consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
            counts.append(1)
    finally:
        consumer.close()


def _fill_topics(bootstrap: str, names: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, 4) for n in names]).values():
        future.result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(4000):
        for name in names:
            producer.produce(name, b"y" * 1000, partition=i % 4)
        producer.poll(0)
    assert producer.flush(60) == 0


def _summary(times: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {
        kind: {
            "p50_ms": round(statistics.median(values) * 1000, 3),
            "p99_ms": round(sorted(values)[int(len(values) * 0.99) - 1] * 1000, 3),
            "max_ms": round(max(values) * 1000, 3),
        }
        for kind, values in times.items()
    }


def test_fetch_and_produce_stay_flat_during_commit_storm_and_delete(gateway) -> None:
    topic = unique_topic("probe")
    doomed = [unique_topic(f"doomed{i}") for i in range(DELETED_TOPICS)]
    _fill_topics(gateway.bootstrap, doomed)
    _probe(gateway.bootstrap, topic, 20)  # warm up: topic creation, first connection

    active, stop = threading.Event(), threading.Event()
    counts: list[int] = []
    storm = [
        threading.Thread(
            target=_commit_storm, args=(gateway.bootstrap, topic, active, stop, counts)
        )
        for _ in range(COMMITTERS)
    ]
    for thread in storm:
        thread.start()
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    quiet: dict[str, list[float]] = {"produce": [], "fetch": []}
    during: dict[str, list[float]] = {"produce": [], "fetch": []}
    deletes = {}
    try:
        for phase in range(PHASES):
            storming = phase % 2 == 1
            if storming:
                active.set()
                time.sleep(0.5)  # the storm is under way
                if not deletes:
                    deletes = admin.delete_topics(doomed, operation_timeout=30)
            times = _probe(gateway.bootstrap, topic, ROUNDS)
            active.clear()
            for kind, values in times.items():
                (during if storming else quiet)[kind].extend(values)
        for future in deletes.values():
            future.result(timeout=60)
    finally:
        stop.set()
        active.set()
        for thread in storm:
            thread.join(timeout=60)
    figures = {
        "quiet": _summary(quiet),
        "during_storm": _summary(during),
        "offset_commits": len(counts),
    }
    print(json.dumps(figures))
    if report := os.environ.get("STREAMGATE_LATENCY_REPORT"):
        with open(report, "w") as f:
            json.dump(figures, f, indent=2)
    assert len(counts) > ROUNDS, "the storm did not run"
    for kind in ("produce", "fetch"):
        ratio = statistics.median(during[kind]) / statistics.median(quiet[kind])
        assert ratio <= MEDIAN_RATIO, (kind, figures)
