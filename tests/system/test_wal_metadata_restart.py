"""`serve --nodes 2 --wal object --metadata URL`: the PostgreSQL server restarts under produce
load. While it is down nothing is acknowledged (a write-ahead object's offsets are committed
there first), producers get retriable errors and keep their records; once it is back, the
nodes serve again by themselves (a node whose lease ran out meanwhile restarts and restores
its partitions from the write-ahead objects), and every acknowledged record is there once."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.client import wait_until
from support.crash import check_exactly_once, read_from_start
from support.nodes import requires_postgres
from test_wal_object import PARTITIONS, _create, _Load

from harness.nodes_cluster import NodesCluster
from harness.postgres import PostgresServer

pytestmark = requires_postgres


@pytest.fixture
def postgres(tmp_path: Path) -> Iterator[PostgresServer]:
    with PostgresServer(tmp_path / "pg") as pg:
        yield pg


def test_a_metadata_restart_loses_nothing(postgres: PostgresServer, tmp_path: Path) -> None:
    cluster = NodesCluster(
        tmp_path / "nodes",
        2,
        ["--metadata", postgres.url, "--node-lease-s", "2", "--wal", "object"],
    )
    cluster.start()
    try:
        topic = f"pgr-{uuid.uuid4().hex[:8]}"
        _create(cluster.bootstrap, topic)
        load = _Load(cluster.bootstrap, topic)
        wait_until(lambda: len(load.acked) > 300, 30)
        assert postgres.proc is not None
        postgres.proc.send_signal(signal.SIGINT)  # a fast shutdown, as `pg_ctl restart` does
        postgres.proc.wait(30)
        down = time.monotonic()
        time.sleep(0.5)  # what was in flight settles one way or the other
        during = len(load.acked)
        time.sleep(3.0)
        # nothing can be acknowledged without the database
        assert len(load.acked) == during, "a record was acknowledged while PostgreSQL was down"
        postgres.start()
        print(f"PostgreSQL down {time.monotonic() - down:.1f} s")
        wait_until(lambda: len(load.acked) > during + 500, 90)
        load.finish()
        check_exactly_once(read_from_start(cluster.bootstrap, topic, PARTITIONS), load.acked)
    finally:
        cluster.close()
