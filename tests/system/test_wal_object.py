"""`streamgate serve --wal object`: acknowledged means written to a write-ahead object in the
tier-2 store and recorded in the metadata store, so the loss of the node's disk loses
nothing acknowledged.

- SIGKILL under load, and each time the tier-1 folder removed before the restart (a lost
  local disk; metadata and tier 2 kept): every acknowledged record comes back exactly once
  at its acknowledged offset, from the write-ahead objects; once tier 2 has caught up the
  objects are gone (folded into chunks).
- A node with PostgreSQL metadata and S3 (moto's server) tier 2 SIGKILLed and started again
  on an empty data folder (the machine replaced): the same.
- The metadata commit refuses an object from a node incarnation that lost its lease or from
  a node that does not own the segment (the fence a zombie meets).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import Gateway
from support.client import wait_until
from support.crash import check_exactly_once, read_from_start
from support.nodes import gateway_args, pg_url, postgres, requires_postgres  # noqa: F401

from harness.moto import MotoServer
from harness.producers import surviving_producer
from harness.proxy import OutageProxy

PARTITIONS = 4
WAL_ARGS = ("--wal", "object", "--wal-flush-ms", "20", "--chunk-age-ms", "500")


class _Load:
    """An idempotent acks=all producer sending unique values from a thread until stopped."""

    def __init__(self, bootstrap: str, topic: str, **config: object) -> None:
        self.topic = topic
        self.acked: dict[str, tuple[int, int]] = {}
        self.sent: set[str] = set()
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._per_partition: dict[int, int] = {}
        self._producer = Producer(surviving_producer(bootstrap, **config))
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, err, msg) -> None:  # type: ignore[no-untyped-def]
        with self._lock:
            if err is None:
                self.acked[msg.value().decode()] = (msg.partition(), msg.offset())
                self._per_partition[msg.partition()] = (
                    self._per_partition.get(msg.partition(), 0) + 1
                )
            else:
                self.failed.append(str(err))

    def acked_in(self, partition: int) -> int:
        with self._lock:
            return self._per_partition.get(partition, 0)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            if len(self._producer) > 20_000:
                self._producer.poll(0.05)
                continue
            for _ in range(20):
                value = f"{n}-{'.' * 60}"
                try:
                    self._producer.produce(
                        self.topic, key=f"k{n % 31}", value=value, on_delivery=self._delivered
                    )
                except BufferError:
                    break
                self.sent.add(value)
                n += 1
            self._producer.poll(0.005)

    def finish(self) -> None:
        self._stop.set()
        self._thread.join()
        self._producer.flush(120)
        assert len(self._producer) == 0
        assert not self.failed, self.failed[:5]


def _create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(10)


def _wal_rows(data_dir: Path) -> int:
    db = sqlite3.connect(f"file:{data_dir / 'metadata.db'}?mode=ro", uri=True)
    try:
        return int(db.execute("SELECT count(*) FROM wal_objects").fetchone()[0])
    finally:
        db.close()


def test_sigkill_and_a_lost_tier1_folder_lose_nothing_acknowledged(tmp_path: Path) -> None:
    tier2 = tmp_path / "tier2"
    gw = Gateway(tmp_path / "data", tmp_path / "server.log", (*WAL_ARGS, "--tier2", str(tier2)))
    gw.start_fresh()
    try:
        topic = f"wal-{uuid.uuid4().hex[:8]}"
        _create(gw.bootstrap, topic)
        load = _Load(gw.bootstrap, topic)
        for cycle in range(4):
            time.sleep(0.6 + 0.3 * cycle)
            gw.kill()
            shutil.rmtree(gw.data_dir / "streams")  # the local disk's segment logs are gone
            gw.start()
        time.sleep(0.5)
        load.finish()
        assert len(load.acked) > 1000
        assert "from write-ahead objects" in gw.log_text()
        check_exactly_once(read_from_start(gw.bootstrap, topic, PARTITIONS), load.acked, load.sent)
        assert "Traceback" not in gw.log_text()
        # folded: tier 2 has every byte in chunks, the write-ahead objects are deleted
        wait_until(lambda: _wal_rows(gw.data_dir) == 0, 60)
        wait_until(lambda: not [p for p in (tier2 / "wal").rglob("*") if p.is_file()], 30)
    finally:
        gw.close()


@requires_postgres
def test_a_node_started_again_on_an_empty_disk_recovers_from_s3(
    tmp_path: Path,
    moto_server: MotoServer,
    pg_url: str,  # noqa: F811
) -> None:
    bucket = f"wal-{uuid.uuid4().hex[:12]}"
    args = (
        *WAL_ARGS,
        "--tier2",
        f"s3://{bucket}/p",
        "--s3-endpoint",
        moto_server.endpoint,
        *gateway_args(pg_url, lease_s=1.0),
    )
    gw = Gateway(tmp_path / "data", tmp_path / "server.log", args)
    gw.start_fresh()
    try:
        topic = f"wal-{uuid.uuid4().hex[:8]}"
        _create(gw.bootstrap, topic)
        load = _Load(gw.bootstrap, topic)
        time.sleep(1.5)
        gw.kill()
        shutil.rmtree(gw.data_dir)  # the machine is replaced: nothing local survives
        gw.start()
        time.sleep(0.5)
        load.finish()
        assert len(load.acked) > 500
        assert "from write-ahead objects" in gw.log_text()
        check_exactly_once(read_from_start(gw.bootstrap, topic, PARTITIONS), load.acked, load.sent)
    finally:
        gw.close()


@requires_postgres
def test_a_fenced_node_cannot_record_a_write_ahead_object(pg_url: str) -> None:  # noqa: F811
    from core.metadata import SegmentRecord, TopicRecord, WalFenced, WalRange
    from core.metadata.postgres import PostgresMetadataStore

    one = PostgresMetadataStore(pg_url, 1)
    two = PostgresMetadataStore(pg_url, 2)
    try:
        first = one.register_node(1, "127.0.0.1", 1, 30.0, exclusive=False)
        second = two.register_node(2, "127.0.0.1", 2, 30.0, exclusive=False)
        topic = TopicRecord("t", uuid.uuid4(), 1, segments=[SegmentRecord(0, 0, 0, 0)])
        one.create_topic(topic)  # segment 0 owned by node 1
        ranges = [WalRange("t", topic.topic_id, 0, 0, 10, 0)]
        one.commit_wal_object("wal/a", 1, 10, ranges, first)  # the owner: recorded
        with pytest.raises(WalFenced):  # not the owner
            two.commit_wal_object("wal/b", 2, 10, ranges, second)
        with pytest.raises(WalFenced):  # an older incarnation of the owner (a zombie)
            one.commit_wal_object("wal/c", 1, 10, ranges, first - 1)
        assert [r.object_key for r in one.wal_ranges("t", 0, 0)] == ["wal/a"]
    finally:
        one.close()
        two.close()


@requires_postgres
def test_a_node_frozen_inside_a_pipelined_commit_is_taken_over(pg_url: str) -> None:  # noqa: F811
    """A node stopped in the middle of psycopg's pipeline (executemany, no Sync sent yet)
    holds its row locks with the server's idle-in-transaction timeout never starting; the
    taker ends that session once the lease has expired, and takes the segment over."""
    from core.metadata import SegmentRecord, TopicRecord
    from core.metadata.postgres import PostgresMetadataStore

    one = PostgresMetadataStore(pg_url, 1)
    two = PostgresMetadataStore(pg_url, 2)
    try:
        one.register_node(1, "127.0.0.1", 1, 1.0, exclusive=False)
        two.register_node(2, "127.0.0.1", 2, 30.0, exclusive=False)
        topic = TopicRecord("f", uuid.uuid4(), 1, segments=[SegmentRecord(0, 0, 0, 0)])
        one.create_topic(topic)  # segment 0 owned by node 1
        frozen = one.engine.conn  # what commit_wal_object does, stopped before its Sync
        frozen.execute("BEGIN")
        frozen.execute("SELECT 1 FROM nodes WHERE node_id = 1 FOR UPDATE")
        pipeline = frozen.pipeline()
        pipeline.__enter__()
        frozen.cursor().execute("UPDATE nodes SET port = port WHERE node_id = 1")
        frozen.pgconn.flush()
        assert not two.take_over_segment("f", 0, 1, 2)  # the lease is still live
        time.sleep(7.0)  # past the lease and past the server's 5 s idle timeout
        assert not two.take_over_segment("f", 0, 1, 2)  # still locked: not idle to the server
        assert two.end_expired_sessions(1) == 1
        assert two.take_over_segment("f", 0, 1, 2)
        assert [s.owner_node for s in two.open_segments()] == [2]
        assert two.end_expired_sessions(2) == 0  # a live node's sessions are never ended
    finally:
        one.close()
        two.close()


def test_an_s3_outage_holds_acknowledgements_back_until_it_ends(
    tmp_path: Path, outage_proxy: OutageProxy
) -> None:
    bucket = f"wal-{uuid.uuid4().hex[:12]}"
    args = (*WAL_ARGS, "--tier2", f"s3://{bucket}/p", "--s3-endpoint", outage_proxy.endpoint)
    gw = Gateway(tmp_path / "data", tmp_path / "server.log", args)
    gw.start_fresh()
    try:
        topic = f"wal-{uuid.uuid4().hex[:8]}"
        _create(gw.bootstrap, topic)
        producer = Producer({"bootstrap.servers": gw.bootstrap, "acks": "all", "linger.ms": 2})
        acked: list[int] = []
        producer.produce(topic, value=b"before", on_delivery=lambda e, m: acked.append(0))
        assert producer.flush(30) == 0 and acked == [0]
        outage_proxy.down()
        for _ in range(50):
            producer.produce(topic, value=b"during", on_delivery=lambda e, m: acked.append(1))
        producer.poll(3.0)
        assert acked == [0], "acknowledged while the object store was down"
        outage_proxy.up()
        assert producer.flush(60) == 0
        assert acked.count(1) == 50
        assert "write-ahead objects: write failed" in gw.log_text()
        assert gw.log_text().count("Traceback") == 0
        stored = read_from_start(gw.bootstrap, topic, PARTITIONS)
        assert sum(len(v) for v in stored.values()) == 51
    finally:
        gw.close()


def test_wal_object_refuses_to_start_without_its_object_store(tmp_path: Path) -> None:
    """An endpoint nobody answers on: one line, and no server that cannot acknowledge."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli",
            "serve",
            "--data-dir",
            str(tmp_path / "d"),
            "--listen",
            "127.0.0.1:0",
            "--wal",
            "object",
            "--tier2",
            "s3://nowhere/p",
            "--s3-endpoint",
            f"http://127.0.0.1:{port}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"},
    )
    assert done.returncode != 0
    assert "--wal object cannot acknowledge anything without it" in done.stderr
    assert "Traceback" not in done.stderr
