"""`serve --nodes 3 --wal object`: a node frozen past its lease (SIGSTOP) has its open
segment taken over by a live node, which restores the tail from the write-ahead objects
and serves the partition; produce to it resumes without the frozen node. Resumed, the
zombie can make nothing visible (its commits are fenced and it exits on its lost lease);
back, it is handed a segment again by the node that led two, and every acknowledged record
is there exactly once, offsets dense; a session node 1 left stopped inside a transaction
(holding its row, no idle timeout running) is ended by the live nodes. Then a node is
SIGKILLed with its data folder removed: nothing acknowledged is lost either way the
race goes (the node back first, or a live node taking over first). And a takeover that
meets an object-store outage (the tail cannot be restored) opens the segment once the
store is back."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from support.client import wait_until
from support.crash import check_exactly_once, read_from_start
from support.nodes import requires_postgres
from test_wal_object import _Load

from cli.embedded_pg import url as pg_url
from core.metadata.postgres import session_name
from harness.nodes_cluster import NodesCluster, consecutive_free_ports
from harness.proxy import OutageProxy

pytestmark = requires_postgres
PARTITIONS = 3


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NodesCluster]:
    admin_base = consecutive_free_ports(3)  # node i's admin listener: admin_base + i - 1
    nodes = NodesCluster(
        tmp_path / "nodes",
        3,
        ["--node-lease-s", "1", "--wal", "object", "--wal-flush-ms", "20"]
        + ["--metrics-listen", f"127.0.0.1:{admin_base}"],
    )
    nodes.admin_base = admin_base  # type: ignore[attr-defined]
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.close()


def _pg_url(cluster: NodesCluster) -> str:
    """The cluster's embedded PostgreSQL, from the supervisor's log."""
    found = re.search(rb"PostgreSQL on 127\.0\.0\.1:(\d+)", cluster.log_since_start())
    assert found, cluster.log_tail()
    return pg_url(int(found.group(1)))


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return {p: m.leader for p, m in meta.topics[topic].partitions.items()}


def _spread(bootstrap: str, topic: str) -> dict[int, int] | None:
    """The partitions' leaders, once nodes 1, 2 and 3 each lead one."""
    leaders = _leaders(bootstrap, topic)
    return leaders if sorted(leaders.values()) == [1, 2, 3] else None


def _events(cluster: NodesCluster, node: int, kind: str, topic: str) -> list[dict[str, Any]]:
    """Node `node`'s recent moves and takeovers of `topic` (the console's route)."""
    port = cluster.admin_base + node - 1  # type: ignore[attr-defined]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/nodes/events", timeout=10) as r:
        events: list[dict[str, Any]] = json.load(r)["events"]
    return [e for e in events if e["kind"] == kind and e["topic"] == topic]


def _spread_topic_under_load(cluster: NodesCluster, prefix: str) -> tuple[str, int, _Load]:
    """A topic whose three partitions nodes 1, 2 and 3 lead one each, produced to through
    nodes 2 and 3 for a while: (topic, the partition node 1 leads, the load)."""
    b2, b3 = cluster.bootstraps[1:]
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": b2})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(10)
    # one answer that names the three leaders (an answer in between syncs may not yet)
    leaders = wait_until(lambda: _spread(b2, topic), 30)
    lost = next(p for p, node in leaders.items() if node == 1)
    # a frozen broker answers nothing: the client gives up on a request after 3 s (its
    # default is 30 s) and then asks the cluster where the partition went
    load = _Load(
        f"{b2},{b3}",
        topic,
        **{"request.timeout.ms": 3000, "topic.metadata.refresh.interval.ms": 1000},
    )
    time.sleep(1.5)
    return topic, lost, load


def test_a_frozen_node_is_taken_over_and_fenced(cluster: NodesCluster) -> None:
    b1, b2, b3 = cluster.bootstraps
    topic, lost, load = _spread_topic_under_load(cluster, "take")
    pid = cluster.node_pid(1)
    stuck = psycopg.connect(_pg_url(cluster), autocommit=True, application_name=session_name(1))
    os.kill(pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    # as if node 1 had stopped inside a pipelined commit: a session of its name inside a
    # transaction that holds its row (when its own commit does not already), a statement
    # sent without the Sync that would end it, so the server's idle timeout never starts
    stuck.execute("BEGIN")
    stuck.execute("SELECT 1 FROM nodes WHERE node_id = 1 FOR UPDATE SKIP LOCKED")
    stuck.pipeline().__enter__()
    stuck.cursor().execute("SELECT 1")
    stuck.pgconn.flush()
    stuck_pid = stuck.info.backend_pid
    acked_before = load.acked_in(lost)
    try:
        try:
            wait_until(lambda: re.search(rb"took over segment", cluster.log_since_start()), 30)
        except TimeoutError:
            pytest.fail(f"no node took node 1's segment over; log:\n{cluster.log_tail(40_000)}")
        taken = [e for n in (2, 3) for e in _events(cluster, n, "takeover", topic)]
        assert len(taken) == 1 and taken[0]["from_node"] == 1, taken
        assert "lease of node 1 expired" in taken[0]["cause"]
        wait_until(lambda: _leaders(b2, topic)[lost] in (2, 3), 10)
        # produce to the frozen node's partition is acknowledged again by another node
        wait_until(lambda: load.acked_in(lost) > acked_before + 50, 60)
        took = time.monotonic() - frozen_at
    finally:
        os.kill(pid, signal.SIGCONT)
    with psycopg.connect(_pg_url(cluster), autocommit=True) as db:
        gone = "SELECT 1 FROM pg_stat_activity WHERE pid = %s"
        assert db.execute(gone, (stuck_pid,)).fetchall() == []  # ended by a live node
    ended = rb"ended \d+ database session\(s\) that node 1 left"
    assert re.search(ended, cluster.log_since_start())
    # the zombie wakes up: fenced, it exits on its lost lease and comes back
    cluster.wait_restarted(1, pid)
    # the node that took two segments hands one back to node 1, under load
    wait_until(lambda: 1 in _leaders(b2, topic).values(), 40)
    wait_until(lambda: re.search(rb"moved segment \d+ to node 1", cluster.log_since_start()), 10)
    handed = [e for n in (2, 3) for e in _events(cluster, n, "move", topic)]
    assert len(handed) == 1 and handed[0]["to_nodes"] == [1], handed
    assert handed[0]["cause"].startswith("rebalancing: "), handed
    time.sleep(1.0)
    load.finish()
    check_exactly_once(read_from_start(b2, topic, PARTITIONS), load.acked, load.sent)
    print(f"partition {lost} acknowledged again {took:.2f} s after node 1 froze")


def test_a_killed_node_with_its_disk_gone_loses_nothing(cluster: NodesCluster) -> None:
    b1, b2, b3 = cluster.bootstraps
    topic = f"disk-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": b2})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(10)
    wait_until(lambda: sorted(_leaders(b2, topic).values()) == [1, 2, 3], 30)
    load = _Load(f"{b2},{b3}", topic)
    time.sleep(1.5)
    pid = cluster.node_pid(1)
    os.kill(pid, signal.SIGKILL)
    shutil.rmtree(cluster.data_dir / "node-1", ignore_errors=True)
    cluster.wait_restarted(1, pid)
    time.sleep(2.0)
    load.finish()
    assert len(load.acked) > 500
    check_exactly_once(read_from_start(b2, topic, PARTITIONS), load.acked, load.sent)


def test_a_takeover_that_meets_an_object_store_outage_opens_once_it_ends(
    tmp_path: Path, outage_proxy: OutageProxy
) -> None:
    bucket = f"take-{uuid.uuid4().hex[:12]}"
    args = ["--node-lease-s", "1", "--wal", "object", "--wal-flush-ms", "20"]
    args += ["--tier2", f"s3://{bucket}/p", "--s3-endpoint", outage_proxy.endpoint]
    cluster = NodesCluster(tmp_path / "nodes", 3, args)
    cluster.start()
    try:
        b2 = cluster.bootstraps[1]
        topic, lost, load = _spread_topic_under_load(cluster, "s3out")
        outage_proxy.down()
        pid = cluster.node_pid(1)
        os.kill(pid, signal.SIGSTOP)
        try:
            failed = rb"opening segment \d+, taken over, failed \(tried again next round\)"
            wait_until(lambda: re.search(failed, cluster.log_since_start()), 30)
            time.sleep(1.0)  # a few rounds more with the store down
            acked_before = load.acked_in(lost)
            outage_proxy.up()
            wait_until(lambda: b"took over segment" in cluster.log_since_start(), 30)
            wait_until(lambda: load.acked_in(lost) > acked_before + 50, 60)
        finally:
            os.kill(pid, signal.SIGCONT)
        cluster.wait_restarted(1, pid)
        time.sleep(1.0)
        load.finish()
        check_exactly_once(read_from_start(b2, topic, PARTITIONS), load.acked, load.sent)
        # refused while not open: nothing was appended to the segment before its restore
        # (such appends collide with the restored write-ahead ranges when recorded)
        assert b"wal_ranges_pkey" not in cluster.log_since_start()
        assert not load.failed, load.failed[:3]
    finally:
        cluster.close()
