"""Spark benchmark (not a test): the IoT pipeline's micro-batch throughput, and replaying a
topic's history through Spark's Kafka source from tier 2 vs tier 1, with Apache Kafka side by
side where `../shared/kafka` (or KAFKA_HOME) is there.

1. **pipeline**: `--readings` JSON readings (`--devices` devices) are produced first, then
   `spark_examples.iot_pipeline` (both queries: Kafka sink and Parquet) runs over them with
   `maxOffsetsPerTrigger`, so the records/s are those of full micro-batches (input rows /
   trigger execution time, summed over batches with input), on streamgate and on Kafka.
2. **replay**: `--mib` MiB of 1 KiB records are produced, then read once from earliest to
   latest with `spark.read.format("kafka")` (sum of value lengths, so every record is
   fetched): on a gateway started with `--chunk-bytes 1 MiB --chunk-age-ms 200
   --local-retain-bytes 0` after every byte is in tier 2 (tier 1 trimmed, so the read
   comes from tier 2) and on a gateway that keeps everything in tier 1; then on Kafka.

Kafka with one replica answers acks=all before any fsync; streamgate fsyncs first. Only the
produce side differs in durability; the figures here are read / processing figures.

    .venv/bin/python compat/bench_spark.py [--mib 1024] [--readings 200000] [--out DIR] [--quick]

Run it with `streamgate bench run scenario:spark` (`--quick`: 2,000 readings, 16 MiB, no
warm-up, no Kafka: a smoke test of about a minute, most of it the JVM's start).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from compat.benchlib.scenario import RunOptions, scenario_args, standalone  # noqa: E402
from harness import kafka as harness_kafka  # noqa: E402
from harness.gateway import Gateway  # noqa: E402

QUICK = ("--mib", "16", "--readings", "2000", "--devices", "100", "--warmup-readings", "0")
QUICK += ("--max-offsets-per-trigger", "1000", "--skip-kafka")
from spark_examples import generator, iot_pipeline  # noqa: E402
from spark_examples.session import build_session, unavailable_reason  # noqa: E402

MIB = 1024 * 1024
PARTITIONS = 6
TIER2_ARGS = ("--chunk-bytes", str(MIB), "--chunk-age-ms", "200", "--local-retain-bytes", "0")


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)


def produce_bytes(bootstrap: str, topic: str, mib: int, value_size: int = 1024) -> dict[str, Any]:
    create_topic(bootstrap, topic)
    count = mib * MIB // value_size
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000, "acks": "all"}
    )
    value = os.urandom(value_size)
    t0 = time.monotonic()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=value, key=str(i % 1000).encode())
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(600):
        raise RuntimeError("produce did not finish")
    took = time.monotonic() - t0
    return {
        "records": count,
        "mib": mib,
        "produce_seconds": round(took, 2),
        "produce_mib_per_s": round(mib / took, 1),
    }


def spark_read(spark: Any, bootstrap: str, topic: str) -> dict[str, Any]:
    t0 = time.monotonic()
    row = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .selectExpr("count(*) AS n", "sum(length(value)) AS b")
        .first()
    )
    took = time.monotonic() - t0
    return {
        "records_read": row.n,
        "mib_read": round(row.b / MIB, 1),
        "read_seconds": round(took, 2),
        "read_mib_per_s": round(row.b / MIB / took, 1),
    }


def tier_state(gw: Gateway) -> dict[str, Any]:
    with urllib.request.urlopen(gw.admin_url + "/tier", timeout=30) as resp:
        return json.loads(resp.read())


def wait_trimmed(gw: Gateway, timeout: float = 600) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = tier_state(gw)
        if state["tier1_pending_bytes"] == 0 and state["tier1_retained_bytes"] == 0:
            return state
        time.sleep(0.5)
    raise TimeoutError("tier 1 not trimmed")


def local_log_mib(gw: Gateway) -> float:
    logs = (gw.data_dir / "streams").rglob("segment-*.log")
    return round(sum(p.stat().st_size for p in logs) / MIB, 1)


def bench_pipeline(
    spark: Any, bootstrap: str, work: Path, readings: int, devices: int, per_trigger: int
) -> dict[str, Any]:
    source, sink = f"bench-readings-{time.time_ns()}", f"bench-agg-{time.time_ns()}"
    create_topic(bootstrap, sink, 2)
    # event time from now on: Kafka's default retention (7 days, on CreateTime) would
    # delete older readings while they are read
    start_ms = int(time.time()) // 10 * 10_000
    t0 = time.monotonic()
    generator.run(
        bootstrap,
        source,
        devices,
        0,
        readings,
        start_ms,
        partitions=PARTITIONS,
        with_end_marker=True,
        progress=False,
        interval_ms=1000,
    )
    produced = time.monotonic() - t0
    t0 = time.monotonic()
    pipeline = iot_pipeline.start(
        spark,
        bootstrap,
        source,
        sink,
        work / f"iot-{source}",
        trigger={"availableNow": True},
        max_offsets_per_trigger=per_trigger,
    )
    pipeline.await_termination()
    wall = time.monotonic() - t0
    if pipeline.exception():
        raise RuntimeError(pipeline.exception())
    return {
        "readings": readings + 1,
        "devices": devices,
        "max_offsets_per_trigger": per_trigger,
        "produce_seconds": round(produced, 2),
        "wall_seconds_both_queries": round(wall, 2),
        "parquet_query": iot_pipeline.throughput(pipeline.parquet_query),
        "kafka_sink_query": iot_pipeline.throughput(pipeline.kafka_query),
        "windows_written": spark.read.parquet(str(pipeline.parquet_dir)).count(),
    }


def start_kafka(work: Path, overrides: dict[str, str]) -> harness_kafka.KafkaBroker:
    """A started broker; a new cluster id when the random one begins with "-" (which
    kafka-storage.sh takes for an option: about 1 start in 64)."""
    for attempt in range(5):
        broker = harness_kafka.KafkaBroker(work / f"try{attempt}", overrides)
        try:
            broker.start()
            return broker
        except harness_kafka.KafkaError as exc:
            broker.close()
            if "--cluster-id" not in str(exc):
                raise
    raise RuntimeError("could not format a Kafka log dir")


def timed(label: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    print(f"... {label}", flush=True)
    result = fn()
    print(f"    {json.dumps(result)}", flush=True)
    return result


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=1024, help="history replayed (default 1 GiB)")
    ap.add_argument("--readings", type=int, default=200_000)
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=50_000)
    ap.add_argument(
        "--warmup-readings",
        type=int,
        default=20_000,
        help="a first, unmeasured pipeline run (JIT, code generation)",
    )
    ap.add_argument("--skip-kafka", action="store_true")
    return ap


def run(options: RunOptions) -> dict[str, Any]:
    args = scenario_args(build_parser(), options, quick=QUICK, skip_kafka="--skip-kafka")
    why = unavailable_reason()
    if why:
        print(f"cannot run: {why}")
        return {"ok": False, "skipped": why}
    kafka_why = "--skip-kafka" if args.skip_kafka else harness_kafka.unavailable_reason()
    work = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    spark = build_session("bench-spark", conf={"spark.driver.memory": "2g"})
    results: dict[str, Any] = {"mib": args.mib, "runs": {}}
    runs = results["runs"]
    try:
        gw = Gateway(
            work / "gw-tier2/data",
            work / "gw-tier2/server.log",
            TIER2_ARGS,
            default_partitions=PARTITIONS,
            metrics=True,
        )
        gw.start_fresh()
        try:
            if args.warmup_readings:
                # the first Spark job of a JVM is slow: keep it out of both measurements
                results["warmup"] = timed(
                    "warm-up (not measured)",
                    lambda: bench_pipeline(
                        spark,
                        gw.bootstrap,
                        work,
                        args.warmup_readings,
                        args.devices,
                        args.max_offsets_per_trigger,
                    ),
                )
            runs["streamgate_pipeline"] = timed(
                "pipeline on streamgate",
                lambda: bench_pipeline(
                    spark,
                    gw.bootstrap,
                    work,
                    args.readings,
                    args.devices,
                    args.max_offsets_per_trigger,
                ),
            )
            produced = timed(
                "produce history (streamgate)",
                lambda: produce_bytes(gw.bootstrap, "history", args.mib),
            )
            state = wait_trimmed(gw)
            produced["tier1_log_mib_after_trim"] = local_log_mib(gw)
            read = timed("replay from tier 2", lambda: spark_read(spark, gw.bootstrap, "history"))
            after = tier_state(gw)
            read["tier2_mib_fetched"] = round(
                (after["bytes_fetched"] - state["bytes_fetched"]) / MIB, 1
            )
            runs["streamgate_tier2_replay"] = {**produced, **read}
        finally:
            gw.close()
        gw = Gateway(
            work / "gw-tier1/data",
            work / "gw-tier1/server.log",
            (
                "--local-retain-bytes",
                str(4 * args.mib * MIB),
                "--tier1-budget-bytes",
                str(4 * args.mib * MIB),
            ),
            default_partitions=PARTITIONS,
            metrics=True,
        )
        gw.start_fresh()
        try:
            produced = timed(
                "produce history (tier 1 gateway)",
                lambda: produce_bytes(gw.bootstrap, "history", args.mib),
            )
            produced["tier1_log_mib"] = local_log_mib(gw)
            read = timed("replay from tier 1", lambda: spark_read(spark, gw.bootstrap, "history"))
            runs["streamgate_tier1_replay"] = {**produced, **read}
        finally:
            gw.close()
        if kafka_why:
            results["kafka_skipped"] = kafka_why
            print(f"Kafka side by side skipped: {kafka_why}")
        else:
            # default settings (acks=all answered from the page cache), then
            # flush.messages=1 (an fsync per append, like streamgate) for the pipeline,
            # whose Kafka sink writes; the replay is a pure read
            for label, overrides, with_replay in (
                ("kafka", {}, True),
                ("kafka_flush_messages_1", harness_kafka.FSYNC_EVERY_MESSAGE, False),
            ):
                broker = start_kafka(work / label, overrides)
                try:
                    runs[f"{label}_pipeline"] = timed(
                        f"pipeline on Kafka {overrides or ''}",
                        functools.partial(
                            bench_pipeline,
                            spark,
                            broker.bootstrap,
                            work,
                            args.readings,
                            args.devices,
                            args.max_offsets_per_trigger,
                        ),
                    )
                    if with_replay:
                        produced = timed(
                            "produce history (Kafka)",
                            functools.partial(produce_bytes, broker.bootstrap, "history", args.mib),
                        )
                        read = timed(
                            "replay from Kafka",
                            functools.partial(spark_read, spark, broker.bootstrap, "history"),
                        )
                        runs["kafka_replay"] = {**produced, **read}
                finally:
                    broker.close()
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return results


def main(argv: list[str] | None = None) -> int:
    return standalone("spark", argv)


if __name__ == "__main__":
    sys.exit(main())
