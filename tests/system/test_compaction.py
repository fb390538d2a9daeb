"""Log compaction against a real gateway (tier 2 reached fast: small chunks, no tier-1
read cache) read back by confluent-kafka and kafka-python: the latest value of every key,
offsets kept with gaps, tombstones gone after delete.retention.ms and not before, across a
segment split, with compact,delete retention, and through SIGKILLs during compaction."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest
from support.client import unique_topic, wait_until
from support.compaction import (
    FAST_TIER_ARGS,
    check_compacted,
    compaction_state,
    produce,
    read_confluent,
    read_kafka_python,
    wait_compacted,
    watermarks,
)
from support.confluent import create_topic

from harness.gateway import Gateway

COMPACT = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}


@pytest.fixture
def gw(tmp_path: Path, request: pytest.FixtureRequest):
    extra = tuple(getattr(request, "param", ()))
    g = Gateway(tmp_path / "data", tmp_path / "server.log", FAST_TIER_ARGS + extra, metrics=True)
    g.start_fresh()
    yield g
    g.close()


def _updates(keys: int, rounds: int, partitions: int, tombstone_every: int = 0):
    """Round-robin updates `key-i = round`, every `tombstone_every`-th key deleted in the
    last round; the last record of each partition is a live value."""
    items = []
    for r in range(rounds):
        for i in range(keys):
            value: bytes | None = b"%d:%d" % (i, r)
            if tombstone_every and i % tombstone_every == 0 and r == rounds - 1:
                value = None
            items.append((i % partitions, b"key-%d" % i, value))
    for p in range(partitions):
        items.append((p, b"end-%d" % p, b"end"))
    return items


def _check_all(gw: Gateway, topic: str, acked, tombstones_gone: bool, readers=("confluent",)):
    state = compaction_state(gw.admin_url)["topics"][topic]
    marks = watermarks(gw.bootstrap, topic, len(acked))
    for p, produced in acked.items():
        end = state[str(p)]["compacted_end"]
        for reader in readers:
            read = read_confluent if reader == "confluent" else read_kafka_python
            rows = read(gw.bootstrap, topic, p)
            check_compacted(produced, rows, end, tombstones_gone, log_start=marks[p][0])
            assert len(rows) < len(produced), f"{reader}: nothing was removed"


def test_latest_value_per_key_offsets_kept(gw: Gateway) -> None:
    topic = unique_topic("compact")
    create_topic(gw.bootstrap, topic, 2, {**COMPACT, "delete.retention.ms": "600000"})
    acked = produce(gw.bootstrap, topic, _updates(200, 5, 2, tombstone_every=7))
    ends = {p: max(o) + 1 for p, o in acked.items()}
    state = wait_compacted(gw.admin_url, topic, ends)
    assert state["records_removed"] > 0 and state["bytes_reclaimed"] > 0
    assert state["chunks_rewritten"] > 0
    # tombstones stay until delete.retention.ms (10 minutes here)
    _check_all(gw, topic, acked, tombstones_gone=False, readers=("confluent", "kafka-python"))
    for p in acked:
        rows = read_confluent(gw.bootstrap, topic, p)
        assert any(v is None for _o, _k, v in rows), "tombstones vanished too early"
        # at least the latest of every key, and not much more: 200 keys / 2 + end marker
        assert len(rows) <= 101 + 5
    metrics = _get(gw.admin_url + "/metrics")
    assert "streamgate_compaction_records_removed_total" in metrics
    assert "streamgate_compaction_bytes_reclaimed_total" in metrics


def test_tombstones_vanish_after_delete_retention(gw: Gateway) -> None:
    topic = unique_topic("tomb")
    create_topic(gw.bootstrap, topic, 1, {**COMPACT, "delete.retention.ms": "12000"})
    produced_at = time.time()
    acked = produce(gw.bootstrap, topic, _updates(60, 3, 1, tombstone_every=3))
    wait_compacted(gw.admin_url, topic, {0: max(acked[0]) + 1})
    rows = read_confluent(gw.bootstrap, topic, 0)
    # every chunk was sealed after produce began: its horizon is at least 12 s later
    assert time.time() < produced_at + 11, "machine too slow to observe the horizon"
    tombstones = {k for _o, k, v in rows if v is None}
    assert len(tombstones) == 20, "tombstones must stay until delete.retention.ms"
    check_compacted(acked[0], rows, max(acked[0]) + 1, tombstones_gone=False)

    def gone() -> bool:
        return not any(v is None for _o, _k, v in read_confluent(gw.bootstrap, topic, 0))

    wait_until(gone, timeout=60, interval=1)
    rows = read_confluent(gw.bootstrap, topic, 0)
    check_compacted(acked[0], rows, max(acked[0]) + 1, tombstones_gone=True)
    assert len(rows) == 40 + 1  # live keys and the end marker
    assert compaction_state(gw.admin_url)["tombstones_removed"] >= 20


def test_compaction_across_a_split_and_a_merge(gw: Gateway) -> None:
    """Keys updated before a split, between the split and a merge, and after: their versions
    sit in three generations of segments' chunks, and only the latest survives."""
    topic = unique_topic("split")
    create_topic(gw.bootstrap, topic, 4, {**COMPACT, "delete.retention.ms": "600000"})
    acked: dict[int, dict] = {p: {} for p in range(4)}

    def produce_round(rounds: int, tombstone_every: int = 0) -> None:
        sent = produce(gw.bootstrap, topic, _updates(120, rounds, 4, tombstone_every))
        for p, rows in sent.items():
            acked[p].update(rows)
        wait_compacted(gw.admin_url, topic, {p: max(o) + 1 for p, o in acked.items()})

    produce_round(2)
    segment = next(s for s in _segments(gw, topic) if s["state"] == "open")
    _scale(gw, topic, {"split": segment["segment_id"], "parts": 2})
    produce_round(3, tombstone_every=5)
    _check_all(gw, topic, acked, tombstones_gone=False, readers=("confluent", "kafka-python"))
    _scale(
        gw,
        topic,
        {"merge": [s["segment_id"] for s in _segments(gw, topic) if s["state"] == "open"]},
    )
    produce_round(2)
    assert len(_segments(gw, topic)) >= 4
    _check_all(gw, topic, acked, tombstones_gone=False, readers=("confluent", "kafka-python"))


def _segments(gw: Gateway, topic: str) -> list[dict]:
    return json.loads(_get(f"{gw.admin_url}/streams/{topic}"))["segments"]


def _scale(gw: Gateway, topic: str, body: dict) -> None:
    request = urllib.request.Request(
        f"{gw.admin_url}/streams/{topic}/scale", data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


@pytest.mark.parametrize("gw", [("--retention-check-interval-ms", "300")], indirect=True)
def test_compact_delete_applies_retention_too(gw: Gateway) -> None:
    topic = unique_topic("compactdelete")
    create_topic(
        gw.bootstrap,
        topic,
        1,
        {
            **COMPACT,
            "cleanup.policy": "compact,delete",
            "retention.ms": "4000",
            "delete.retention.ms": "600000",
        },
    )
    old = produce(gw.bootstrap, topic, _updates(50, 3, 1))
    wait_compacted(gw.admin_url, topic, {0: max(old[0]) + 1})
    time.sleep(4.5)
    new = produce(gw.bootstrap, topic, [(0, b"late-%d" % i, b"x") for i in range(20)])
    acked = {0: {**old[0], **new[0]}}

    def expired() -> bool:
        return watermarks(gw.bootstrap, topic, 1)[0][0] > max(old[0])

    wait_until(expired, timeout=60, interval=0.5)
    wait_compacted(gw.admin_url, topic, {0: max(acked[0]) + 1})
    rows = read_confluent(gw.bootstrap, topic, 0)
    assert all(o > max(old[0]) for o, _k, _v in rows), "retention did not apply"
    assert [k for _o, k, _v in rows] == [b"late-%d" % i for i in range(20)]


def test_compact_only_ignores_retention(tmp_path: Path) -> None:
    g = Gateway(
        tmp_path / "data",
        tmp_path / "server.log",
        (*FAST_TIER_ARGS, "--retention-check-interval-ms", "300"),
        metrics=True,
    )
    g.start_fresh()
    try:
        topic = unique_topic("compactonly")
        create_topic(g.bootstrap, topic, 1, {**COMPACT, "retention.ms": "1000"})
        acked = produce(g.bootstrap, topic, _updates(30, 2, 1))
        wait_compacted(g.admin_url, topic, {0: max(acked[0]) + 1})
        time.sleep(2.5)
        assert watermarks(g.bootstrap, topic, 1)[0][0] == 0, "compact alone must not expire"
    finally:
        g.close()


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


@pytest.mark.parametrize("gw", [("--local-retain-bytes", "1000000000")], indirect=True)
def test_tier1_copies_do_not_resurrect_removed_records(gw: Gateway) -> None:
    """Uploaded files stay in tier 1 as a read cache here: reads of a compacted range must
    still come from the compacted chunks, before and after a restart replays those files."""
    topic = unique_topic("t1cache")
    create_topic(gw.bootstrap, topic, 1, {**COMPACT, "delete.retention.ms": "600000"})
    acked = produce(gw.bootstrap, topic, _updates(100, 4, 1))
    end = max(acked[0]) + 1
    wait_compacted(gw.admin_url, topic, {0: end})
    for restart in (False, True):
        if restart:
            gw.restart()
        rows = read_confluent(gw.bootstrap, topic, 0)
        check_compacted(acked[0], rows, end, tombstones_gone=False)
        assert len(rows) == 101, f"restart={restart}: {len(rows)} records"
        rows = read_kafka_python(gw.bootstrap, topic, 0)
        assert len(rows) == 101


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches(gw: Gateway, codec: str) -> None:
    """Filtered batches are compressed again with their own codec; both clients decode them."""
    topic = unique_topic(f"codec-{codec}")
    create_topic(gw.bootstrap, topic, 1, {**COMPACT, "delete.retention.ms": "600000"})
    acked = produce(
        gw.bootstrap, topic, _updates(50, 4, 1, tombstone_every=4), {"compression.codec": codec}
    )
    end = max(acked[0]) + 1
    wait_compacted(gw.admin_url, topic, {0: end})
    for read in (read_confluent, read_kafka_python):
        rows = read(gw.bootstrap, topic, 0)
        check_compacted(acked[0], rows, end, tombstones_gone=False)
        assert len(rows) == 51


def test_reads_and_appends_during_compaction(gw: Gateway) -> None:
    """A producer keeps updating keys while compaction runs every 300 ms and readers read
    from the start again and again: every read is a valid log (offsets increasing, each
    record as acknowledged at its offset), and at the end the usual guarantees hold."""
    import threading

    topic = unique_topic("live")
    create_topic(gw.bootstrap, topic, 1, {**COMPACT, "delete.retention.ms": "600000"})
    acked: dict[int, tuple[bytes, bytes | None]] = {}
    stop = threading.Event()

    def write() -> None:
        r = 0
        while not stop.is_set():
            sent = produce(gw.bootstrap, topic, [(0, b"key-%d" % i, b"%d" % r) for i in range(100)])
            acked.update(sent[0])
            r += 1

    writer = threading.Thread(target=write)
    writer.start()
    reads: list[list] = []
    try:
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            reads.append(read_confluent(gw.bootstrap, topic, 0))
    finally:
        stop.set()
        writer.join(60)
    assert compaction_state(gw.admin_url)["chunks_rewritten"] > 0, "no compaction meanwhile"
    for rows in reads:
        offsets = [o for o, _k, _v in rows]
        assert offsets == sorted(set(offsets))
        for offset, key, value in rows:
            assert acked[offset] == (key, value), offset
    final = {**acked, **produce(gw.bootstrap, topic, [(0, b"end", b"end")])[0]}
    wait_compacted(gw.admin_url, topic, {0: max(final) + 1})
    rows = read_confluent(gw.bootstrap, topic, 0)
    check_compacted(final, rows, max(final) + 1, tombstones_gone=False)
    assert len(rows) == 101
