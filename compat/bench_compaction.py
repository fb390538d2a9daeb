"""Compaction benchmark: streamgate against Apache Kafka on the same key sequence (not a test).

For each system, one partition, `--updates` records (default 1,000,000) round-robin over
`--keys` keys (default 10,000), `--value-bytes` values (default 100), produced with
confluent-kafka (acks=all) into two topics: `full` (cleanup.policy=delete, never
compacted) and `compacted` (written under `delete`, then switched to `compact` with
min.cleanable.dirty.ratio=0.01 so one cleaning pass covers everything sealed). Then:

1. **compaction**: streamgate (small chunks, no tier-1 read cache, 0.5 s compaction
   interval) reports the run's duration and bytes read in `GET /compaction`; Kafka's cleaner
   (log.cleaner.backoff.ms=500, 1 MiB segments) prints its own figures in log-cleaner.log.
   Throughput is MB of input (the topic's stored bytes before) per second of cleaning, and
   the space reclaimed is stored bytes before vs after (streamgate: tier-2 objects; Kafka:
   the partition folder's .log files).
2. **read**: a confluent-kafka consumer reads each topic from offset 0 to its end; records
   and MB per second.

Run it with `streamgate bench run scenario:compaction`. Kafka is skipped (and says why) when
../shared/kafka or Java is missing, or not among `--targets`; `--quick` (20,000 updates)
leaves it out too, as Kafka deletes replaced segments only after a minute.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from compat.benchlib.scenario import RunOptions, scenario_args, standalone  # noqa: E402
from harness.gateway import Gateway  # noqa: E402
from harness.kafka import KafkaBroker, unavailable_reason  # noqa: E402

QUICK = ("--updates", "20000", "--keys", "1000", "--skip-kafka")

MB = 1_000_000


def _create(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, 1, 1, config=configs)])
    futures[topic].result(timeout=60)


def _set_compact(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in (("cleanup.policy", "compact"), ("min.cleanable.dirty.ratio", "0.01"))
    ]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=60)


def _produce(bootstrap: str, topic: str, updates: int, keys: int, value_bytes: int) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 256 * 1024,
            "queue.buffering.max.messages": 500_000,
        }
    )
    filler = b"v" * max(0, value_bytes - 12)
    started = time.monotonic()
    for i in range(updates):
        value = b"%011d|" % i + filler
        while True:
            try:
                producer.produce(topic, value, b"key-%06d" % (i % keys), partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(300) == 0
    return time.monotonic() - started


def _read(bootstrap: str, topic: str) -> dict[str, Any]:
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-probe"})
    _low, high = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    probe.close()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-read",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 * 1024 * 1024,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    records = size = 0
    started = time.monotonic()
    last = -1
    while last < high - 1:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error():
                continue
            records += 1
            size += len(msg.value() or b"") + len(msg.key() or b"")
            last = msg.offset()
    elapsed = time.monotonic() - started
    consumer.close()
    return {
        "records": records,
        "seconds": round(elapsed, 3),
        "records_per_s": round(records / elapsed),
        "mb_per_s": round(size / MB / elapsed, 2),
    }


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def _folder_bytes(folder: Path, suffix: str) -> int:
    return sum(p.stat().st_size for p in folder.rglob(f"*{suffix}") if p.is_file())


def _chunk_bytes(data_dir: Path, topic: str) -> int:
    """Bytes of the topic's chunks in tier 2 (the objects the metadata references)."""
    db = sqlite3.connect(f"file:{data_dir / 'metadata.db'}?mode=ro", uri=True)
    try:
        (total,) = db.execute("SELECT sum(size) FROM chunks WHERE topic = ?", (topic,)).fetchone()
    finally:
        db.close()
    return int(total or 0)


def bench_streamgate(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    gw = Gateway(
        work / "data",
        work / "server.log",
        (
            "--chunk-bytes",
            str(4 << 20),
            "--chunk-age-ms",
            "500",
            "--local-retain-bytes",
            "0",
            "--compaction-interval-ms",
            "500",
        ),
        metrics=True,
    )
    gw.start_fresh()
    try:
        out: dict[str, Any] = {}
        for topic in ("full", "compacted"):
            _create(gw.bootstrap, topic, {"cleanup.policy": "delete"})
            seconds = _produce(gw.bootstrap, topic, args.updates, args.keys, args.value_bytes)
            out[f"produce_{topic}_s"] = round(seconds, 2)
        deadline = time.monotonic() + 300
        while _get(gw.admin_url + "/tier")["tier1_pending_bytes"] and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(1.0)
        before = _chunk_bytes(work / "data", "compacted")
        switched = time.monotonic()
        _set_compact(gw.bootstrap, "compacted")
        while True:
            state = _get(gw.admin_url + "/compaction")
            part = state["topics"].get("compacted", {}).get("0")
            if state["runs"] and part and part["dirty_bytes"] == 0:
                break
            time.sleep(0.2)
        wall = time.monotonic() - switched
        after = _chunk_bytes(work / "data", "compacted")
        out["compaction"] = {
            "run_seconds": round(state["last_run_seconds"], 3),
            "wall_seconds_from_switch": round(wall, 3),
            "bytes_read": state["bytes_read"],
            "input_bytes": before,
            "input_mb_per_s": round(before / MB / state["last_run_seconds"], 2),
            "records_removed": state["records_removed"],
            "bytes_reclaimed_reported": state["bytes_reclaimed"],
            "stored_bytes_before": before,
            "stored_bytes_after": after,
            "space_reclaimed_pct": round(100 * (1 - after / before), 2),
        }
        out["read_full"] = _read(gw.bootstrap, "full")
        out["read_compacted"] = _read(gw.bootstrap, "compacted")
        return out
    finally:
        gw.close()


_CLEANED = re.compile(r"cleaned log (\S+)")


def bench_kafka(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    broker = KafkaBroker(
        work / "kafka",
        {
            "log.cleaner.backoff.ms": "500",
            "log.segment.bytes": str(4 << 20),
            "log.cleaner.min.compaction.lag.ms": "0",
        },
    )
    broker.start()
    try:
        out: dict[str, Any] = {}
        for topic in ("full", "compacted"):
            _create(broker.bootstrap, topic, {"cleanup.policy": "delete"})
            seconds = _produce(broker.bootstrap, topic, args.updates, args.keys, args.value_bytes)
            out[f"produce_{topic}_s"] = round(seconds, 2)
        folder = work / "kafka" / "data" / "compacted-0"
        before = _folder_bytes(folder, ".log")
        switched = time.monotonic()
        _set_compact(broker.bootstrap, "compacted")
        cleaner_log = work / "kafka" / "logs" / "log-cleaner.log"
        text = ""
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            text = cleaner_log.read_text() if cleaner_log.exists() else ""
            if "cleaned log compacted-0" in text and "size reduction" in text:
                break
            time.sleep(0.5)
        wall = time.monotonic() - switched
        time.sleep(65)  # Kafka deletes replaced segments after file.delete.delay.ms (60 s)
        after = _folder_bytes(folder, ".log")
        report = text[text.index("cleaned log compacted-0") :] if text else ""
        processed = re.search(r"([\d.,]+) MB of log processed in ([\d.,]+) seconds", report)
        out["compaction"] = {
            "wall_seconds_from_switch": round(wall, 3),
            "cleaner_report": report.strip().splitlines()[:10],
            "run_seconds": float(processed.group(2).replace(",", "")) if processed else None,
            "input_mb_per_s": round(
                float(processed.group(1).replace(",", ""))
                * 1.048576
                / float(processed.group(2).replace(",", "")),
                2,
            )
            if processed
            else None,
            "stored_bytes_before": before,
            "stored_bytes_after": after,
            "space_reclaimed_pct": round(100 * (1 - after / before), 2) if before else None,
            "note": "the active segment (last <= 4 MiB) is never cleaned by Kafka",
        }
        out["read_full"] = _read(broker.bootstrap, "full")
        out["read_compacted"] = _read(broker.bootstrap, "compacted")
        return out
    finally:
        broker.stop()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--updates", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--skip-kafka", action="store_true")
    return parser


def run(options: RunOptions) -> dict[str, Any]:
    args = scenario_args(build_parser(), options, quick=QUICK, skip_kafka="--skip-kafka")
    result: dict[str, Any] = {
        "workload": {"updates": args.updates, "keys": args.keys, "value_bytes": args.value_bytes},
    }
    with tempfile.TemporaryDirectory(prefix="bench-compaction-") as tmp:
        result["streamgate"] = bench_streamgate(Path(tmp) / "sg", args)
        print(json.dumps(result["streamgate"], indent=1), flush=True)
        why = "--skip-kafka" if args.skip_kafka else unavailable_reason()
        if why is None:
            result["kafka"] = bench_kafka(Path(tmp) / "kafka", args)
            print(json.dumps(result["kafka"], indent=1), flush=True)
        else:
            result["kafka"] = {"skipped": why}
    return result


def main(argv: list[str] | None = None) -> int:
    return standalone("compaction", argv)


if __name__ == "__main__":
    sys.exit(main())
