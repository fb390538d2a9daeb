"""A gateway node on PostgreSQL metadata, with real clients: produce/consume
(confluent-kafka, kafka-python), a consumer group whose offsets land in the database,
SIGKILL under load with nothing acknowledged lost, a second node refused while the first
holds its lease, and fencing of a node frozen (SIGSTOP) past its lease."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError
from support.client import wait_until
from support.crash import check_exactly_once, read_from_start
from support.nodes import (  # noqa: F401
    gateway_args,
    log_of,
    pg_url,
    postgres,
    requires_postgres,
)
from test_crash_recovery import PARTITIONS, _produce_while_killing

from harness.gateway import Gateway, GatewayError

pytestmark = requires_postgres
LEASE_LOST_EXIT = 75


def _node(
    tmp_path: Path,
    url: str,
    name: str = "n1",
    node_id: int = 1,
    lease_s: float = 3.0,
    data: str | None = None,
) -> Gateway:
    return Gateway(
        tmp_path / (data or name), tmp_path / f"{name}.log", gateway_args(url, node_id, lease_s)
    )


def test_clients_produce_consume_and_group_offsets_live_in_postgres(
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    gw = _node(tmp_path, pg_url)
    gw.start_fresh()
    try:
        admin = AdminClient({"bootstrap.servers": gw.bootstrap})
        admin.create_topics([NewTopic("pg-t", num_partitions=3)])["pg-t"].result(10)
        producer = Producer(
            {"bootstrap.servers": gw.bootstrap, "acks": "all", "enable.idempotence": True}
        )
        for i in range(300):
            producer.produce("pg-t", key=f"k{i % 7}", value=f"c{i}")
        assert producer.flush(30) == 0
        kp = KafkaProducer(bootstrap_servers=gw.bootstrap, acks="all")
        for i in range(100):
            kp.send("pg-t", f"k{i}".encode(), partition=i % 3)
        kp.flush()
        kp.close()

        consumer = Consumer(
            {
                "bootstrap.servers": gw.bootstrap,
                "group.id": "pg-group",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe(["pg-t"])
        got: list[str] = []
        deadline = time.monotonic() + 60
        while len(got) < 400 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value().decode())
        consumer.commit(asynchronous=False)
        consumer.close()
        assert sorted(got) == sorted([f"c{i}" for i in range(300)] + [f"k{i}" for i in range(100)])

        with psycopg.connect(pg_url) as conn:
            rows = conn.execute(
                "SELECT partition, committed_offset FROM committed_offsets "
                "WHERE group_id = 'pg-group' ORDER BY partition"
            ).fetchall()
        assert sum(offset for _p, offset in rows) == 400 and len(rows) == 3

        gw.kill()
        gw.start()  # waits for the killed incarnation's lease to expire
        kc = KafkaConsumer(
            bootstrap_servers=gw.bootstrap,
            group_id="pg-group",
            auto_offset_reset="earliest",
            consumer_timeout_ms=3000,
            enable_auto_commit=False,
        )
        kc.subscribe(["pg-t"])
        assert list(kc) == []  # the committed offsets survived: nothing left to read
        kc.close()
        assert "incarnation 2" in gw.log_text()
    finally:
        gw.close()


def test_sigkill_under_load_loses_nothing_on_postgres(
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    # the crash test of test_crash_recovery.py, with metadata in PostgreSQL and a 1 s lease
    gw = _node(tmp_path, pg_url, lease_s=1.0)
    gw.start_fresh()
    try:
        topic = "pg-crash"
        admin = AdminClient({"bootstrap.servers": gw.bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(10)
        acked = _produce_while_killing(gw, topic)
        assert len(acked) > 1000
        check_exactly_once(read_from_start(gw.bootstrap, topic, PARTITIONS), acked)
    finally:
        gw.close()


def test_a_second_node_is_refused_while_the_first_holds_its_segments(
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    first = _node(tmp_path, pg_url)
    first.start_fresh()
    second = _node(tmp_path, pg_url, "n2", node_id=2)
    try:
        with pytest.raises(GatewayError):
            second.start(timeout=30)
        assert "hold a live lease" in log_of(tmp_path / "n2.log")
        producer = Producer({"bootstrap.servers": first.bootstrap})
        producer.produce("held", value=b"x")
        assert producer.flush(20) == 0
        first.stop()
        # node 1 stopped cleanly (its lease released), but the open segments of "held" are
        # its own, with their tier-1 log on its disk: node 2 still refuses, naming node 1
        with pytest.raises(GatewayError):
            second.start(timeout=30)
        assert "open segments belong to node(s) [1]" in log_of(tmp_path / "n2.log")
        first.start()  # node 1 comes back and serves its data
        kc = KafkaConsumer(
            "held",
            bootstrap_servers=first.bootstrap,
            auto_offset_reset="earliest",
            consumer_timeout_ms=3000,
        )
        assert [m.value for m in kc] == [b"x"]
        kc.close()
    finally:
        first.close()
        second.close()


def _topic_exists(url: str, name: str) -> bool:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT 1 FROM topics WHERE name = %s", (name,)).fetchone() is not None


def test_a_node_frozen_past_its_lease_is_fenced_out(
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    """SIGSTOP node 1 past its lease; a new incarnation of node 1 (same data dir, other
    port) takes over; SIGCONT: the stale one acknowledges nothing and exits."""
    stale = _node(tmp_path, pg_url, "stale", lease_s=1.0, data="shared")
    stale.start_fresh()
    fresh = _node(tmp_path, pg_url, "fresh", lease_s=1.0, data="shared")
    try:
        kp = KafkaProducer(
            bootstrap_servers=stale.bootstrap,
            acks="all",
            retries=0,
            request_timeout_ms=20000,
            max_block_ms=20000,
        )
        kp.send("fence", b"before", partition=0).get(timeout=20)  # creates the topic
        assert stale.pid is not None
        os.kill(stale.pid, signal.SIGSTOP)
        try:
            time.sleep(1.5)  # past the 1 s lease
            fresh.start_fresh()
            # queued in the frozen node's socket: it must not be acknowledged after SIGCONT
            stale_future = kp.send("fence", b"stale", partition=0)
            kp._sender.wakeup()
            time.sleep(0.3)
            fp = KafkaProducer(bootstrap_servers=fresh.bootstrap, acks="all")
            fp.send("fence", b"fresh", partition=0).get(timeout=20)
            fp.close()
        finally:
            os.kill(stale.pid, signal.SIGCONT)
        wait_until(lambda: stale.exit_code is not None, timeout=15)
        assert stale.exit_code == LEASE_LOST_EXIT, stale.log_tail()
        assert "lost its lease" in stale.log_text()
        with pytest.raises(KafkaError):
            stale_future.get(timeout=30)
        kp.close(timeout=1)
        kc = KafkaConsumer(
            bootstrap_servers=fresh.bootstrap,
            auto_offset_reset="earliest",
            consumer_timeout_ms=3000,
        )
        from kafka import TopicPartition

        kc.assign([TopicPartition("fence", 0)])
        values = [m.value for m in kc]
        kc.close()
        assert values == [b"before", b"fresh"], values
    finally:
        stale.close()
        fresh.close()


def test_a_node_answers_with_its_own_id(tmp_path: Path, pg_url: str) -> None:  # noqa: F811
    gw = _node(tmp_path, pg_url, node_id=7)
    gw.start_fresh()
    try:
        producer = Producer({"bootstrap.servers": gw.bootstrap})
        producer.produce("ids", value=b"x")
        assert producer.flush(20) == 0
        meta = producer.list_topics("ids", timeout=10)
        assert list(meta.brokers) == [7]
        assert {p.leader for p in meta.topics["ids"].partitions.values()} == {7}
        consumer = Consumer(
            {
                "bootstrap.servers": gw.bootstrap,
                "group.id": "ids-g",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe(["ids"])
        deadline = time.monotonic() + 30
        msg = None
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
        assert msg is not None and msg.value() == b"x"  # the coordinator (node 7) was found
        consumer.close()
    finally:
        gw.close()
