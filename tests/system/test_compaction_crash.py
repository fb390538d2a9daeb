"""SIGKILL during compaction: after a restart every key's latest acknowledged value is
there, offsets are kept, compaction finishes, and objects written but not committed (or
replaced but not yet deleted) are collected as garbage."""

from __future__ import annotations

import json
import random
import sqlite3
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from support.client import unique_topic, wait_until
from support.compaction import (
    FAST_TIER_ARGS,
    check_compacted,
    compaction_state,
    produce,
    read_confluent,
    wait_compacted,
)
from support.confluent import create_topic

from harness.gateway import Gateway

PARTITIONS = 2


def _items(keys: int, rounds: int) -> list[tuple[int, bytes, bytes | None]]:
    return [
        (i % PARTITIONS, b"key-%d" % i, b"%d:%d" % (i, r))
        for r in range(rounds)
        for i in range(keys)
    ]


def _uploaded(gw: Gateway) -> bool:
    with urllib.request.urlopen(gw.admin_url + "/tier", timeout=10) as response:
        tier = json.loads(response.read())
    return tier["tier1_pending_bytes"] == 0 and tier["chunks_uploaded"] > 0


def _make_compacted(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry(
                "min.cleanable.dirty.ratio", "0.01", incremental_operation=AlterConfigOpType.SET
            ),
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def _setup(tmp_path: Path, env: dict[str, str]) -> tuple[Gateway, str, dict]:
    """Data in tier 2 under cleanup.policy=delete, then switched to compact."""
    gw = Gateway(tmp_path / "data", tmp_path / "server.log", FAST_TIER_ARGS, metrics=True, env=env)
    gw.start_fresh()
    topic = unique_topic("crash")
    create_topic(gw.bootstrap, topic, PARTITIONS, {"cleanup.policy": "delete"})
    acked = produce(gw.bootstrap, topic, _items(150, 6))
    wait_until(lambda: _uploaded(gw), timeout=60, interval=0.3)
    _make_compacted(gw.bootstrap, topic)
    return gw, topic, acked


def _check_after_restart(gw: Gateway, topic: str, acked: dict) -> dict:
    state = wait_compacted(gw.admin_url, topic, {p: max(o) + 1 for p, o in acked.items()})
    for p, produced in acked.items():
        rows = read_confluent(gw.bootstrap, topic, p)
        check_compacted(produced, rows, max(produced) + 1, tombstones_gone=False)
        assert len(rows) == 75, f"partition {p}: {len(rows)} records, 75 keys"
    return state


@pytest.mark.parametrize("crash_at", ["compaction-after-put", "compaction-after-commit"])
def test_crash_point_in_compaction(tmp_path: Path, crash_at: str) -> None:
    gw, topic, acked = _setup(tmp_path, {"STREAMGATE_TEST_CRASH_AT": crash_at})
    try:
        wait_until(lambda: not gw.is_alive(), timeout=60, interval=0.2)
        assert f"test crash injected at {crash_at}" in gw.log_tail()
        gw.extra_env = {}
        gw.start()
        state = _check_after_restart(gw, topic, acked)
        assert state["garbage_objects_deleted"] >= 1, "the crash's orphan was not collected"
        gw.stop()
        _no_hole(tmp_path / "data")
    finally:
        gw.close()


def _no_hole(data: Path) -> None:
    """Every chunk the metadata references exists in tier 2."""
    db = sqlite3.connect(data / "metadata.db")
    keys = [k for (k,) in db.execute("SELECT object_key FROM chunks")]
    db.close()
    assert keys
    missing = [k for k in keys if not (data / "tier2" / k).exists()]
    assert not missing, missing


def test_kill_loop_during_compaction(tmp_path: Path) -> None:
    gw, topic, acked = _setup(tmp_path, {})
    rng = random.Random(18)
    try:
        for _round in range(4):
            time.sleep(rng.uniform(0.1, 1.2))
            gw.kill()
            gw.start()
            for p, produced in acked.items():
                rows = read_confluent(gw.bootstrap, topic, p)
                # whatever the state, the latest value of every key is visible
                check_compacted(produced, rows, 0, tombstones_gone=False)
        state = _check_after_restart(gw, topic, acked)
        assert state["records_removed"] >= 0
        assert compaction_state(gw.admin_url)["topics"][topic]
        gw.stop()
        _no_hole(tmp_path / "data")
    finally:
        gw.close()
