"""Replay a topic's whole history through Spark's Kafka source (`startingOffsets=earliest`),
in batch and in streaming, with the live pipeline's aggregation, and compare the result with
what the live job wrote. On streamgate the early data may live only in tier 2: the source
reads it like any other offsets.

    python -m spark_examples.replay --bootstrap 127.0.0.1:9092 --topic readings \\
        --live iot-out/parquet --out replay-out [--mode both]

`--source streamgate --admin 127.0.0.1:9100` replays in batch through the native source
(spark_source/: history straight from tier 2) instead; `--source both` runs both batch
replays and also compares them with each other, window by window.

Exit status 0 when every window the live job emitted is equal in the replay(s).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from spark_examples import readings
from spark_examples.readings import AGGREGATE_COLUMNS
from spark_examples.session import build_session


def _source_options(bootstrap: str, topic: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest"}


def replay_batch(
    spark: Any, bootstrap: str, topic: str, source: str = "kafka", admin: str | None = None
) -> Any:
    """Every record from earliest to latest, aggregated at once (no watermark needed),
    through Spark's Kafka connector or (`source="streamgate"`) the native source, which
    needs the gateway's admin listener `admin`."""
    if source == "streamgate":
        from spark_source import register

        register(spark)
        options = {"gateway": bootstrap, "admin": admin or "", "topic": topic}
        raw = spark.read.format("streamgate").options(**options).load()
    else:
        raw = (
            spark.read.format("kafka")
            .options(**_source_options(bootstrap, topic), endingOffsets="latest")
            .load()
        )
    return readings.aggregate(readings.parse(raw), watermark=None)


def replay_streaming(
    spark: Any, bootstrap: str, topic: str, out: Path, max_offsets_per_trigger: int | None = None
) -> Any:
    """The live job's streaming plan over the whole history (trigger availableNow) into
    Parquet at `out/parquet`; returns what it wrote."""
    options = _source_options(bootstrap, topic)
    if max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    raw = spark.readStream.format("kafka").options(**options).load()
    query = (
        readings.aggregate(readings.parse(raw))
        .writeStream.format("parquet")
        .outputMode("append")
        .option("path", str(out / "parquet"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception():
        raise RuntimeError(f"replay query failed: {query.exception()}")
    return spark.read.parquet(str(out / "parquet"))


def _rows(df_or_rows: Any) -> dict[tuple[str, Any], tuple[Any, ...]]:
    rows = df_or_rows.collect() if hasattr(df_or_rows, "collect") else df_or_rows
    return {(r["device"], r["window_start"]): tuple(r[c] for c in AGGREGATE_COLUMNS) for r in rows}


def compare(live: Any, replay: Any) -> dict[str, Any]:
    """Every window the live job emitted (all end at or before its watermark) must be in the
    replay with equal values; the replay may hold later windows the live job has not closed
    yet, and nothing else."""
    live_rows, replay_rows = _rows(live), _rows(replay)
    until = max((v[2] for v in live_rows.values()), default=None)
    closed = {k: v for k, v in replay_rows.items() if until is not None and v[2] <= until}
    missing = sorted(str(k) for k in live_rows.keys() - closed.keys())
    extra = sorted(str(k) for k in closed.keys() - live_rows.keys())
    different = sorted(
        str(k) for k in live_rows.keys() & closed.keys() if live_rows[k] != closed[k]
    )
    return {
        "equal": bool(live_rows) and not (missing or extra or different),
        "live_windows": len(live_rows),
        "replay_windows": len(replay_rows),
        "compared_until": str(until),
        "missing": missing[:10],
        "extra": extra[:10],
        "different": different[:10],
        "live_readings": sum(v[3] for v in live_rows.values()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="readings")
    ap.add_argument(
        "--live",
        type=Path,
        default=Path("iot-out/parquet"),
        help="the live pipeline's Parquet output (default: %(default)s)",
    )
    ap.add_argument("--out", type=Path, default=Path("replay-out"))
    ap.add_argument("--mode", choices=("batch", "streaming", "both"), default="both")
    ap.add_argument("--max-offsets-per-trigger", type=int)
    ap.add_argument(
        "--source",
        choices=("kafka", "streamgate", "both"),
        default="kafka",
        help="Spark's Kafka connector, the native streamgate source (batch), or both",
    )
    ap.add_argument("--admin", help="the gateway's admin listener HOST:PORT (--source streamgate)")
    args = ap.parse_args(argv)
    if args.source != "kafka" and not args.admin:
        ap.error("--source streamgate needs --admin HOST:PORT (the gateway's --metrics-listen)")
    spark = build_session("iot-replay")
    live = spark.read.parquet(str(args.live))
    ok = True
    if args.source in ("streamgate", "both"):
        native = replay_batch(spark, args.bootstrap, args.topic, "streamgate", args.admin)
        native_rows = native.collect()
        result = compare(live, native_rows)
        print("streamgate batch replay:", json.dumps(result))
        ok &= result["equal"]
        if args.source == "both":
            connector = replay_batch(spark, args.bootstrap, args.topic).collect()
            result = compare(connector, native_rows)
            print("connector vs streamgate, window by window:", json.dumps(result))
            ok &= result["equal"] and len(connector) == len(native_rows)
        if args.source == "streamgate":
            return 0 if ok else 1
    if args.mode in ("batch", "both"):
        result = compare(live, replay_batch(spark, args.bootstrap, args.topic))
        print("batch replay:", json.dumps(result))
        ok &= result["equal"]
    if args.mode in ("streaming", "both"):
        replayed = replay_streaming(
            spark, args.bootstrap, args.topic, args.out, args.max_offsets_per_trigger
        )
        result = compare(live, replayed)
        print("streaming replay:", json.dumps(result))
        ok &= result["equal"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
