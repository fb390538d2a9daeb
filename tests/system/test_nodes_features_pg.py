"""The newer features on a gateway node whose metadata is PostgreSQL, with real clients:
SCRAM users (`streamgate users add --metadata`) live in the shared database, and Kafka
transactions commit and survive a restart (the coordinator's state is in PostgreSQL)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
from confluent_kafka import Consumer, Producer
from support.nodes import gateway_args, pg_url, postgres, requires_postgres  # noqa: F401
from support.security import produce_with_each_mechanism

from core.credentials import MECHANISMS
from harness.gateway import Gateway
from harness.ports import free_port

pytestmark = requires_postgres


def test_users_added_to_postgres_log_in_on_a_node(tmp_path: Path, pg_url: str) -> None:  # noqa: F811
    secret = "node-admin-Secret-7"
    added = subprocess.run(
        [sys.executable, "-m", "gateway", "users", "add", "admin", "--metadata", pg_url],
        input=secret + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert added.returncode == 0, added.stderr
    port = free_port()
    data = tmp_path / "n1"
    gw = Gateway(
        data,
        tmp_path / "n1.log",
        [*gateway_args(pg_url), "--listeners", f"SASL_PLAINTEXT://127.0.0.1:{port}"],
    )
    gw.start_fresh()
    try:
        produce_with_each_mechanism(port, "admin", secret, "pg-users", MECHANISMS)
    finally:
        gw.close()
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT username, mechanism FROM scram_credentials").fetchall()
    assert sorted(rows) == [("admin", m) for m in sorted(MECHANISMS)]
    local = data / "metadata.db"
    if local.exists():  # nothing went to the node's own SQLite file
        with sqlite3.connect(local) as db:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
            if "scram_credentials" in tables:
                assert db.execute("SELECT count(*) FROM scram_credentials").fetchone() == (0,)


def test_transactions_commit_and_their_state_survives_a_restart(
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    gw = Gateway(tmp_path / "n1", tmp_path / "n1.log", gateway_args(pg_url))
    gw.start_fresh()
    try:
        config = {"bootstrap.servers": gw.bootstrap, "transactional.id": "pg-tx"}
        producer = Producer(config)
        producer.init_transactions(30)
        producer.begin_transaction()
        for i in range(10):
            producer.produce("pg-txn", str(i).encode(), partition=0)
        producer.commit_transaction(30)
        producer.begin_transaction()
        producer.produce("pg-txn", b"aborted", partition=0)
        assert producer.flush(30) == 0  # written, so the abort has a range to index
        producer.abort_transaction(30)
        del producer
        gw.restart()
        again = Producer(config)
        again.init_transactions(30)  # the coordinator reloads "pg-tx" from PostgreSQL
        consumer = Consumer(
            {
                "bootstrap.servers": gw.bootstrap,
                "group.id": "pg-txn-reader",
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            }
        )
        consumer.subscribe(["pg-txn"])
        values: list[bytes] = []
        for _ in range(60):
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                values.append(message.value())
            if len(values) >= 10:
                break
        extra = consumer.poll(3)
        consumer.close()
        assert values == [str(i).encode() for i in range(10)]
        assert extra is None or extra.error() is not None
    finally:
        gw.close()
    with psycopg.connect(pg_url) as conn:
        (epoch,) = conn.execute(
            "SELECT epoch FROM transactions WHERE transactional_id = 'pg-tx'"
        ).fetchone()
        aborted = conn.execute("SELECT count(*) FROM aborted_txns").fetchone()
    assert epoch >= 1 and aborted == (1,)
