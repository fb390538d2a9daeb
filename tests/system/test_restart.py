"""Durability across graceful (SIGTERM) and hard (SIGKILL) restarts, plus process lifecycle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import defaultdict

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.client import (
    DEFAULT_PARTITIONS,
    ERR_NONE,
    RawClient,
    Rec,
    api_versions_ok,
    build_record_batch,
    confluent_consume,
    confluent_drain,
    decode_records,
    fetch_request,
    free_port,
    init_producer_id_request,
    metadata_request,
    produce_request,
    unique_topic,
    wait_until,
)

TIMEOUT = 20.0


def producer_for(bootstrap: str, **extra) -> Producer:
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}
    conf.update(extra)
    return Producer(conf)


def produce(producer: Producer, topic: str, messages: list[dict]) -> list[tuple]:
    """Produce and flush; returns (partition, offset, key, value) per delivery report."""
    reports: list[tuple] = []
    errors: list = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            reports.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    for m in messages:
        producer.produce(topic, on_delivery=on_delivery, **m)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0
    assert errors == []
    assert len(reports) == len(messages)
    return reports


def read_everything(bootstrap: str, topic: str, partitions: int, expected: int) -> list[tuple]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "restart-check", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        msgs = confluent_consume(consumer, expected, TIMEOUT) + confluent_drain(consumer, 1.0)
    finally:
        consumer.close()
    return [(m.partition(), m.offset(), m.key(), m.value()) for m in msgs]


def assert_exact(records: list[tuple], reports: list[tuple]) -> None:
    """Same set of (partition, offset, key, value), no duplicates, dense offsets per partition."""
    assert len(records) == len(set(records)), "duplicate records"
    assert sorted(records) == sorted(reports)
    per_partition: dict[int, list[int]] = defaultdict(list)
    for p, o, _k, _v in records:
        per_partition[p].append(o)
    for p, offsets in per_partition.items():
        assert sorted(offsets) == list(range(len(offsets))), f"gap in partition {p}"


def stop_how(gateway, how: str) -> None:
    if how == "sigterm":
        assert gateway.stop() == 0
    else:
        gateway.kill()


def batch(prefix: str, n: int) -> list[dict]:
    return [{"key": f"key-{i % 11}".encode(), "value": f"{prefix}-{i}".encode()} for i in range(n)]


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_acked_records_survive_restart(gateway, how):
    topic = unique_topic(f"restart-{how}")
    producer = producer_for(gateway.bootstrap)
    first = produce(producer, topic, batch("before", 300))
    del producer

    stop_how(gateway, how)
    gateway.start()

    assert_exact(read_everything(gateway.bootstrap, topic, DEFAULT_PARTITIONS, 300), first)

    # offsets continue where they left off
    before_end = defaultdict(int)
    for p, o, _k, _v in first:
        before_end[p] = max(before_end[p], o + 1)
    second = produce(producer_for(gateway.bootstrap), topic, batch("after", 150))
    first_new = {}
    for p, o, _k, _v in sorted(second):
        first_new.setdefault(p, o)
    for p, o in first_new.items():
        assert o == before_end[p], f"partition {p}: first offset after restart {o}"

    assert_exact(read_everything(gateway.bootstrap, topic, DEFAULT_PARTITIONS, 450), first + second)


def test_several_restarts_mixed(gateway):
    topic = unique_topic("multi-restart")
    reports = []
    for round_no, how in enumerate(["sigkill", "sigterm", "sigkill", "sigterm"]):
        reports += produce(
            producer_for(gateway.bootstrap),
            topic,
            [{"value": f"r{round_no}-{i}".encode(), "partition": i % 3} for i in range(40)],
        )
        stop_how(gateway, how)
        gateway.start()
    records = read_everything(gateway.bootstrap, topic, DEFAULT_PARTITIONS, len(reports))
    assert_exact(records, reports)
    # production order within each partition is preserved
    for p in range(3):
        values = [v for pp, _o, _k, v in sorted(records) if pp == p]
        assert values == [f"r{r}-{i}".encode() for r in range(4) for i in range(40) if i % 3 == p]


def test_acks_1_survives_graceful_stop(gateway):
    topic = unique_topic("acks1-term")
    reports = produce(
        producer_for(gateway.bootstrap, acks="1"),
        topic,
        [{"value": f"v{i}".encode(), "partition": 0} for i in range(100)],
    )
    assert gateway.stop() == 0
    gateway.start()
    assert_exact(read_everything(gateway.bootstrap, topic, DEFAULT_PARTITIONS, 100), reports)


def test_headers_and_timestamps_survive_restart(gateway):
    topic = unique_topic("restart-meta")
    ts = int(time.time() * 1000) - 5000
    produce(
        producer_for(gateway.bootstrap),
        topic,
        [
            {
                "key": b"k",
                "value": b"v",
                "partition": 1,
                "timestamp": ts,
                "headers": [("a", b"1"), ("b", b"")],
            },
            {"value": None, "partition": 1, "timestamp": ts + 7},
        ],
    )
    gateway.kill()
    gateway.start()
    consumer = Consumer(
        {"bootstrap.servers": gateway.bootstrap, "group.id": "meta", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 1, OFFSET_BEGINNING)])
        msgs = confluent_consume(consumer, 2)
        assert consumer.get_watermark_offsets(TopicPartition(topic, 1), timeout=10) == (0, 2)
        found = consumer.offsets_for_times([TopicPartition(topic, 1, ts + 1)], timeout=10)
        assert found[0].offset == 1
    finally:
        consumer.close()
    assert [(m.offset(), m.key(), m.value(), m.headers(), m.timestamp()[1]) for m in msgs] == [
        (0, b"k", b"v", [("a", b"1"), ("b", b"")], ts),
        (1, None, None, None, ts + 7),
    ]


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_topics_survive_restart(gateway, how):
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    created = unique_topic("created")
    doomed = unique_topic("doomed")
    futures = admin.create_topics(
        [NewTopic(created, num_partitions=5, replication_factor=1), NewTopic(doomed, 2, 1)]
    )
    for f in futures.values():
        f.result(timeout=TIMEOUT)
    auto = unique_topic("auto")
    produce(producer_for(gateway.bootstrap), auto, [{"value": b"x"}])
    admin.delete_topics([doomed], operation_timeout=10)[doomed].result(timeout=TIMEOUT)
    wait_until(lambda: doomed not in admin.list_topics(timeout=10).topics)

    stop_how(gateway, how)
    gateway.start()

    md = AdminClient({"bootstrap.servers": gateway.bootstrap}).list_topics(timeout=10)
    assert sorted(md.topics[created].partitions) == list(range(5))
    assert sorted(md.topics[auto].partitions) == list(range(DEFAULT_PARTITIONS))
    assert doomed not in md.topics


@pytest.mark.parametrize("idempotence", [False, True])
def test_producer_keeps_working_across_restart(gateway, idempotence):
    """A long-lived producer reconnects after a graceful restart; nothing is duplicated."""
    topic = unique_topic(f"reconnect-{idempotence}")
    producer = producer_for(
        gateway.bootstrap,
        **{"enable.idempotence": idempotence, "reconnect.backoff.max.ms": 200},
    )
    first = produce(
        producer, topic, [{"value": f"a{i}".encode(), "partition": 0} for i in range(20)]
    )
    gateway.restart()
    second = produce(
        producer, topic, [{"value": f"b{i}".encode(), "partition": 0} for i in range(20)]
    )
    assert [o for _p, o, _k, _v in second] == list(range(20, 40))
    assert_exact(read_everything(gateway.bootstrap, topic, DEFAULT_PARTITIONS, 40), first + second)


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_idempotent_dedup_state_survives_restart(gateway, how):
    """A producer retrying its last batch after a restart must not create a duplicate."""
    topic = unique_topic(f"dedup-{how}")
    with RawClient(gateway.bootstrap) as client:
        assert client.request(metadata_request([topic])).topics[0].error_code == ERR_NONE
        ids = client.request(init_producer_id_request())
    batch = build_record_batch(
        [Rec(b"once"), Rec(b"twice?")],
        producer_id=ids.producer_id,
        producer_epoch=ids.producer_epoch,
        base_sequence=0,
    )
    with RawClient(gateway.bootstrap) as client:
        p = client.request(produce_request(topic, 0, batch)).responses[0].partition_responses[0]
    assert (p.error_code, p.base_offset) == (ERR_NONE, 0)

    stop_how(gateway, how)
    gateway.start()

    with RawClient(gateway.bootstrap) as client:
        p = client.request(produce_request(topic, 0, batch)).responses[0].partition_responses[0]
        assert (p.error_code, p.base_offset) == (ERR_NONE, 0)
        part = client.request(fetch_request(topic, 0, 0, max_wait_ms=0)).responses[0].partitions[0]
    assert part.high_watermark == 2
    assert [(o, v) for o, _k, v in decode_records(part.records)] == [(0, b"once"), (1, b"twice?")]


def test_graceful_restart_under_load(gateway):
    """Keep producing (idempotent, acks=all) through a SIGTERM restart: nothing lost or doubled."""
    import threading

    topic = unique_topic("term-load")
    producer = producer_for(
        gateway.bootstrap,
        **{
            "enable.idempotence": True,
            "message.timeout.ms": 60000,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 200,
        },
    )
    acked: dict[bytes, tuple[int, int, bytes]] = {}
    errors: list = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked[msg.value()] = (msg.partition(), msg.offset(), msg.key())

    stop = threading.Event()
    sent = 0

    def pump():
        nonlocal sent
        while not stop.is_set():
            for _ in range(50):
                producer.produce(
                    topic,
                    key=f"k{sent % 23}".encode(),
                    value=str(sent).encode(),
                    on_delivery=on_delivery,
                )
                sent += 1
            producer.poll(0.01)

    thread = threading.Thread(target=pump)
    thread.start()
    try:
        time.sleep(0.7)
        assert gateway.stop() == 0
        time.sleep(0.3)
        gateway.start()
        time.sleep(0.7)
    finally:
        stop.set()
        thread.join(30)
    assert producer.flush(60) == 0
    assert errors == []
    assert len(acked) == sent

    records = read_everything(gateway.bootstrap, topic, DEFAULT_PARTITIONS, sent)
    assert_exact(records, [(p, o, k, v) for v, (p, o, k) in acked.items()])


# ----------------------------------------------------------------- process lifecycle


def _spawn(args: list[str], env_extra: dict[str, str], log_path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGATE_")}
    env.update(env_extra)
    env["PYTHONUNBUFFERED"] = "1"
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "gateway", *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )


def _wait_listening(proc: subprocess.Popen, bootstrap: str, log_path) -> None:
    def ready():
        assert proc.poll() is None, f"server died: {log_path.read_text(errors='replace')}"
        try:
            return api_versions_ok(bootstrap, timeout=1)
        except OSError:
            return False

    wait_until(ready, timeout=30, interval=0.1)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly_with_exit_code_zero(tmp_path, sig):
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    log_path = tmp_path / "server.log"
    proc = _spawn(
        ["serve", "--listen", bootstrap, "--data-dir", str(tmp_path / "data")], {}, log_path
    )
    try:
        _wait_listening(proc, bootstrap, log_path)
        # an open idle client connection must not block shutdown
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "idle", "enable.auto.commit": False}
        )
        consumer.list_topics(timeout=10)
        proc.send_signal(sig)
        code = proc.wait(timeout=15)
        consumer.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = log_path.read_text(errors="replace")
    assert code == 0, log
    assert "listening on" in log


def test_configuration_from_environment(tmp_path):
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    data_dir = tmp_path / "env-data"
    log_path = tmp_path / "server.log"
    env = {
        "STREAMGATE_LISTEN": bootstrap,
        "STREAMGATE_DATA_DIR": str(data_dir),
        "STREAMGATE_DEFAULT_PARTITIONS": "4",
    }
    proc = _spawn(["serve"], env, log_path)
    try:
        _wait_listening(proc, bootstrap, log_path)
        topic = unique_topic("env")
        produce(producer_for(bootstrap), topic, [{"value": b"hello"}])
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
        assert sorted(md.topics[topic].partitions) == [0, 1, 2, 3]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert data_dir.is_dir() and any(data_dir.iterdir()), "nothing written to the data dir"
