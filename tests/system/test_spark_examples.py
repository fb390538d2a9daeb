"""The jobs in spark_examples/ end to end against a real gateway, their results checked
against the produced readings: the live IoT pipeline (Kafka sink and Parquet), the replay of
a history that lives only in tier 2 (batch and streaming, equal to the live result), and the
generator's documented command."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from support.client import unique_topic
from support.confluent import create_topic
from support.spark import consume_all, http, wait_for

from harness.gateway import REPO_ROOT, Gateway
from spark_examples import generator, iot_pipeline, replay
from spark_examples.readings import readings

pytestmark = pytest.mark.timeout(600)

DEVICES = 20
ROUNDS = 60  # 1 s of event time a round: 6 windows of 10 s per device
START_MS = 1_700_000_000_000  # a multiple of 10 s: windows start at round 0, 10, 20, ...
WINDOW_MS = 10_000


def expected_aggregates(devices: int, rounds: int) -> dict[tuple[str, int], dict[str, Any]]:
    groups: dict[tuple[str, int], list[Any]] = defaultdict(list)
    for r in itertools.islice(readings(devices, START_MS, 1000), devices * rounds):
        groups[(r.device, r.ts // WINDOW_MS * WINDOW_MS)].append(r)
    out = {}
    for key, rs in groups.items():
        temps = [r.temperature for r in rs]
        out[key] = {
            "readings": len(rs),
            "avg_temperature": sum(temps) / len(temps),
            "min_temperature": min(temps),
            "max_temperature": max(temps),
            "avg_humidity": sum(r.humidity for r in rs) / len(rs),
        }
    return out


def check_aggregates(rows: list[dict[str, Any]], expected: dict[tuple[str, int], Any]) -> None:
    got = {}
    for row in rows:
        start_ms = row["window_start_ms"]
        assert row["window_end_ms"] - start_ms == WINDOW_MS
        assert (row["device"], start_ms) not in got, "a window emitted twice"
        got[(row["device"], start_ms)] = row
    assert set(got) == set(expected)
    for key, want in expected.items():
        row = got[key]
        assert row["readings"] == want["readings"], key
        assert row["min_temperature"] == want["min_temperature"], key
        assert row["max_temperature"] == want["max_temperature"], key
        assert row["avg_temperature"] == pytest.approx(want["avg_temperature"], abs=1e-4)
        assert row["avg_humidity"] == pytest.approx(want["avg_humidity"], abs=1e-4)


def _ms(value: Any) -> int:
    if isinstance(value, str):  # JSON from the Kafka sink, session time zone UTC
        from datetime import UTC, datetime

        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if parsed.tzinfo is None:  # Spark's CAST(timestamp AS STRING), session zone UTC
            parsed = parsed.replace(tzinfo=UTC)
        return int(parsed.timestamp() * 1000)
    return int(value.timestamp() * 1000)


def parquet_aggregates(spark: Any, path: Path) -> list[dict[str, Any]]:
    rows = []
    for r in spark.read.parquet(str(path)).collect():
        d = r.asDict()
        d["window_start_ms"], d["window_end_ms"] = _ms(d["window_start"]), _ms(d["window_end"])
        rows.append(d)
    return rows


def produce_readings(bootstrap: str, topic: str, rounds: int, rate: float) -> int:
    return generator.run(
        bootstrap,
        topic,
        DEVICES,
        rate,
        DEVICES * rounds,
        START_MS,
        partitions=4,
        with_end_marker=True,
        progress=False,
        interval_ms=1000,
    )


def run_live(
    spark: Any, gw: Gateway, source: str, sink: str, out: Path, rate: float
) -> tuple[Any, dict[str, float]]:
    pipeline = iot_pipeline.start(
        spark, gw.bootstrap, source, sink, out, trigger={"processingTime": "1 second"}
    )
    try:
        # the first (empty) micro-batch is the slow one (planning, code generation): feed
        # after it, so the readings spread over several micro-batches
        wait_for(lambda: pipeline.parquet_query.lastProgress is not None, timeout=120)
        feeder = threading.Thread(
            target=produce_readings, args=(gw.bootstrap, source, ROUNDS, rate)
        )
        feeder.start()
        feeder.join(120)
        windows = DEVICES * (ROUNDS // 10)

        def done() -> bool:
            assert pipeline.exception() is None, pipeline.exception()
            return (
                pipeline.parquet_dir.exists()
                and len(_committed(spark, pipeline.parquet_dir)) >= windows
            )

        wait_for(done, timeout=240)
        time.sleep(2)  # a couple more triggers: nothing extra may appear
        assert pipeline.exception() is None
    finally:
        pipeline.stop()
    return pipeline, iot_pipeline.throughput(pipeline.parquet_query)


def _committed(spark: Any, path: Path) -> list[Any]:
    from pyspark.errors import AnalysisException

    try:
        return spark.read.parquet(str(path)).collect()
    except AnalysisException:
        return []


def test_iot_pipeline_to_kafka_and_parquet(spark, spark_gateway, tmp_path) -> None:
    gw = spark_gateway
    source, sink = unique_topic("readings"), unique_topic("aggregates")
    create_topic(gw.bootstrap, source, 4)
    create_topic(gw.bootstrap, sink, 2)
    pipeline, rate = run_live(spark, gw, source, sink, tmp_path / "iot", rate=600)
    print(f"IoT pipeline: {rate}")
    assert rate["batches"] >= 2, rate  # it really ran as a stream of micro-batches
    expected = expected_aggregates(DEVICES, ROUNDS)
    check_aggregates(parquet_aggregates(spark, pipeline.parquet_dir), expected)
    # the same aggregates through Spark's Kafka sink: key = device, JSON value, a header
    msgs = consume_all(gw.bootstrap, sink, len(expected))
    rows = []
    for m in msgs:
        d = json.loads(m.value())
        assert m.key().decode() == d["device"]
        d["window_start_ms"], d["window_end_ms"] = _ms(d["window_start"]), _ms(d["window_end"])
        [(name, value)] = m.headers()
        assert name == "window_start" and _ms(value.decode()) == d["window_start_ms"]
        rows.append(d)
    check_aggregates(rows, expected)


GATEWAY_TIER_ARGS = ("--chunk-bytes", "16384", "--chunk-age-ms", "200", "--local-retain-bytes", "0")


def tier(gw: Gateway) -> dict[str, Any]:
    return http(gw, "/tier")


def test_replay_history_from_tier2_equals_live(spark, tmp_path, capsys) -> None:
    gw = Gateway(tmp_path / "data", tmp_path / "server.log", GATEWAY_TIER_ARGS, metrics=True)
    gw.start_fresh()
    try:
        source, sink = unique_topic("replay-src"), unique_topic("replay-agg")
        create_topic(gw.bootstrap, source, 4)
        create_topic(gw.bootstrap, sink, 1)
        pipeline, _rate = run_live(spark, gw, source, sink, tmp_path / "live", rate=1500)
        live = spark.read.parquet(str(pipeline.parquet_dir))
        check_aggregates(
            parquet_aggregates(spark, pipeline.parquet_dir), expected_aggregates(DEVICES, ROUNDS)
        )
        # every byte uploaded and trimmed from tier 1: the history is in tier 2 only
        state = wait_for(lambda: (s := tier(gw))["tier1_pending_bytes"] == 0 and s, timeout=90)
        assert state["tier1_retained_bytes"] == 0, state
        logs = sum(p.stat().st_size for p in (gw.data_dir / "streams").rglob("segment-*.log"))
        assert logs < 16384 * 8, f"tier 1 still holds {logs} bytes"
        before = tier(gw)

        batch = replay.compare(live, replay.replay_batch(spark, gw.bootstrap, source))
        assert batch["equal"], batch
        streamed = replay.replay_streaming(
            spark, gw.bootstrap, source, tmp_path / "replay", max_offsets_per_trigger=300
        )
        result = replay.compare(live, streamed)
        assert result["equal"], result
        assert result["live_readings"] == DEVICES * ROUNDS
        after = tier(gw)
        reads = (
            after["cache_hits"]
            + after["cache_misses"]
            - before["cache_hits"]
            - before["cache_misses"]
        )
        assert reads > 0 and after["read_errors"] == 0, (before, after)

        # the native source (spark_source/) replays the same history straight from tier 2,
        # equal window by window to the live job and to the connector's replay
        capsys.readouterr()
        admin = gw.admin_url.removeprefix("http://")
        args = ["--bootstrap", gw.bootstrap, "--topic", source, "--admin", admin]
        live_dir = str(pipeline.parquet_dir)
        more = ["--source", "both", "--mode", "batch", "--out", str(tmp_path / "rp")]
        code = replay.main([*args, "--live", live_dir, *more])
        out = capsys.readouterr().out
        assert code == 0, out
        assert "streamgate batch replay:" in out and "connector vs streamgate" in out, out
    finally:
        gw.close()


def test_generator_command(spark_gateway) -> None:
    topic = unique_topic("gen")
    cmd = [
        sys.executable,
        "-m",
        "spark_examples.generator",
        "--bootstrap",
        spark_gateway.bootstrap,
        "--topic",
        topic,
        "--devices",
        "50",
        "--rate",
        "2000",
        "--count",
        "1000",
        "--partitions",
        "3",
        "--end-marker",
    ]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "delivered 1001 readings" in proc.stdout
    msgs = consume_all(spark_gateway.bootstrap, topic, 1001)
    assert len(msgs) == 1001
    per_device: dict[str, list[int]] = defaultdict(list)
    for m in sorted(msgs, key=lambda m: (m.partition(), m.offset())):
        d = json.loads(m.value())
        assert m.key().decode() == d["device"] and m.timestamp()[1] == d["ts"]
        per_device[d["device"]].append(d["ts"])
    assert len(per_device) == 51  # 50 devices and the end marker
    assert all(ts == sorted(ts) and len(ts) in (1, 20) for ts in per_device.values())
    bad = subprocess.run(
        [sys.executable, "-m", "spark_examples.generator", "--devices", "0"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "--devices must be" in bad.stderr


def test_documented_commands(spark, spark_gateway, tmp_path, capsys) -> None:
    """The three commands of spark_examples/README.md: the generator as a process, the two
    Spark jobs through their `main()` in this process (their `build_session()` gets the
    shared session instead of starting a JVM each)."""
    gw = spark_gateway
    source, sink = unique_topic("cmd-readings"), unique_topic("cmd-agg")
    create_topic(gw.bootstrap, sink, 1)
    gen = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_examples.generator",
            "--bootstrap",
            gw.bootstrap,
            "--topic",
            source,
            "--devices",
            "10",
            "--rate",
            "0",
            "--count",
            "300",
            "--event-interval-ms",
            "1000",
            "--start-ms",
            str(START_MS),
            "--end-marker",
            "--quiet",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert gen.returncode == 0, gen.stderr
    capsys.readouterr()
    code = iot_pipeline.main(
        [
            "--bootstrap",
            gw.bootstrap,
            "--source",
            source,
            "--sink",
            sink,
            "--out",
            str(tmp_path / "iot"),
            "--available-now",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert json.loads(out.strip().splitlines()[-1])["rows"] == 301, out
    assert len(consume_all(gw.bootstrap, sink, 30)) == 30  # 10 devices x 3 windows
    code = replay.main(
        [
            "--bootstrap",
            gw.bootstrap,
            "--topic",
            source,
            "--live",
            str(tmp_path / "iot" / "parquet"),
            "--out",
            str(tmp_path / "rp"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "batch replay:" in out and "streaming replay:" in out
