"""`--wal object`: a crash at each point of the write-ahead path and of folding objects into
tier-2 chunks (core/scaling/crash.py names them) leaves every acknowledged record readable
exactly once at its offset after the restart, and the objects it left behind are folded or
collected:

* wal-after-put: an object in the store, not recorded (never acknowledged: deleted at start);
* wal-after-record: recorded, not yet acknowledged (restored; the producer's retry is
  recognised by its sequence numbers);
* chunk-after-commit: a chunk committed whose records are still in objects too (read once);
* fold-after-forget: an object's rows deleted, the object not yet (garbage, deleted at start).
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from pathlib import Path

import pytest
from support.client import wait_until
from support.crash import check_exactly_once, read_from_start
from test_wal_object import PARTITIONS, _create, _Load

from harness.gateway import Gateway

ARGS = (
    "--wal",
    "object",
    "--wal-flush-ms",
    "20",
    "--chunk-bytes",
    "4096",
    "--chunk-age-ms",
    "200",
    "--local-retain-bytes",
    "0",
)


def _recorded(data: Path) -> set[str]:
    db = sqlite3.connect(f"file:{data / 'metadata.db'}?mode=ro", uri=True)
    try:
        return {k for (k,) in db.execute("SELECT object_key FROM wal_objects")}
    finally:
        db.close()


def _stored(tier2: Path) -> set[str]:
    return {str(p.relative_to(tier2)) for p in (tier2 / "wal").rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "crash_at", ["wal-after-put", "wal-after-record", "chunk-after-commit", "fold-after-forget"]
)
def test_a_crash_in_the_write_ahead_path_loses_and_doubles_nothing(
    tmp_path: Path, crash_at: str
) -> None:
    tier2 = tmp_path / "tier2"
    gw = Gateway(
        tmp_path / "data",
        tmp_path / "server.log",
        (*ARGS, "--tier2", str(tier2)),
        env={"STREAMGATE_TEST_CRASH_AT": crash_at},
    )
    gw.start_fresh()
    try:
        topic = f"fold-{uuid.uuid4().hex[:8]}"
        _create(gw.bootstrap, topic)
        load = _Load(gw.bootstrap, topic)
        wait_until(lambda: not gw.is_alive(), timeout=60, interval=0.1)
        assert f"test crash injected at {crash_at}" in gw.log_tail()
        gw.extra_env = {}
        gw.start()
        wait_until(lambda: len(load.acked) > 2000, 60)
        time.sleep(0.5)
        load.finish()
        check_exactly_once(read_from_start(gw.bootstrap, topic, PARTITIONS), load.acked, load.sent)
        # every object left is recorded (the crash's leftovers were deleted), and the fold
        # goes on: objects whose records are all in chunks are deleted
        wait_until(lambda: _stored(tier2) <= _recorded(gw.data_dir), 30, interval=0.3)
        wait_until(lambda: len(_recorded(gw.data_dir)) <= 2, 60, interval=0.5)
    finally:
        gw.close()
