"""The live IoT pipeline: JSON sensor readings from a topic -> parsed -> 10 s event-time
windows with a 5 s watermark -> per-device aggregates, written by Spark's Kafka sink to a
topic AND to Parquet (two streaming queries over the same plan, each with its checkpoint).

    python -m spark_examples.iot_pipeline --bootstrap 127.0.0.1:9092 \\
        --source readings --sink device-aggregates --out ./iot-out

Runs until Ctrl-C (or `--available-now`: process what is there and stop), printing each
micro-batch's input rows and rate.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spark_examples import readings
from spark_examples.session import build_session


@dataclass
class Pipeline:
    """The two running queries of one pipeline."""

    kafka_query: Any
    parquet_query: Any
    parquet_dir: Path
    queries: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.queries = [self.kafka_query, self.parquet_query]

    def stop(self) -> None:
        for q in self.queries:
            q.stop()

    def await_termination(self, timeout: float | None = None) -> None:
        for q in self.queries:
            q.awaitTermination(timeout) if timeout else q.awaitTermination()

    def exception(self) -> Any:
        return next((q.exception() for q in self.queries if q.exception()), None)


def start(
    spark: Any,
    bootstrap: str,
    source: str,
    sink: str,
    out: Path,
    *,
    starting_offsets: str = "earliest",
    trigger: dict[str, Any] | None = None,
    max_offsets_per_trigger: int | None = None,
    watermark: str = readings.WATERMARK,
) -> Pipeline:
    """Start the pipeline; `out` holds `parquet/` and the two checkpoints."""
    source_opts = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": source,
        "startingOffsets": starting_offsets,
    }
    if max_offsets_per_trigger:
        source_opts["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    raw = spark.readStream.format("kafka").options(**source_opts).load()
    agg = readings.aggregate(readings.parse(raw), watermark)
    trigger = trigger or {"processingTime": "2 seconds"}
    parquet_dir = out / "parquet"
    kafka_query = (
        readings.to_kafka_rows(agg)
        .writeStream.format("kafka")
        .queryName(f"iot-kafka-{sink}")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(out / "checkpoint-kafka"))
        .outputMode("append")
        .trigger(**trigger)
        .start()
    )
    parquet_query = (
        agg.writeStream.format("parquet")
        .queryName(f"iot-parquet-{sink}")
        .option("path", str(parquet_dir))
        .option("checkpointLocation", str(out / "checkpoint-parquet"))
        .outputMode("append")
        .trigger(**trigger)
        .start()
    )
    return Pipeline(kafka_query, parquet_query, parquet_dir)


def throughput(query: Any) -> dict[str, float]:
    """Records/s over the query's micro-batches that had input (rows / trigger time)."""
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in progress)
    ms = sum(p["durationMs"].get("triggerExecution", 0) for p in progress)
    return {
        "batches": len(progress),
        "rows": rows,
        "busy_seconds": ms / 1000,
        "records_per_s": rows / (ms / 1000) if ms else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--source", default="readings", help="topic of JSON readings")
    ap.add_argument("--sink", default="device-aggregates", help="topic for the aggregates")
    ap.add_argument(
        "--out",
        type=Path,
        default=Path("iot-out"),
        help="Parquet output and checkpoints (default: %(default)s)",
    )
    ap.add_argument("--starting-offsets", default="earliest")
    ap.add_argument("--trigger-seconds", type=float, default=2.0)
    ap.add_argument("--max-offsets-per-trigger", type=int)
    ap.add_argument(
        "--available-now", action="store_true", help="process what the topic holds now, then stop"
    )
    args = ap.parse_args(argv)
    spark = build_session("iot-pipeline")
    trigger = (
        {"availableNow": True}
        if args.available_now
        else {"processingTime": f"{args.trigger_seconds} seconds"}
    )
    pipeline = start(
        spark,
        args.bootstrap,
        args.source,
        args.sink,
        args.out,
        starting_offsets=args.starting_offsets,
        trigger=trigger,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
    )
    last = -1
    try:
        while any(q.isActive for q in pipeline.queries):
            p = pipeline.parquet_query.lastProgress
            if p and p["batchId"] != last:
                last = p["batchId"]
                print(
                    f"batch {last}: {p['numInputRows']} readings, "
                    f"{p.get('processedRowsPerSecond', 0):,.0f} rows/s, "
                    f"watermark {p.get('eventTime', {}).get('watermark', '-')}",
                    flush=True,
                )
            time.sleep(0.5)
    except KeyboardInterrupt:
        pipeline.stop()
    error = pipeline.exception()
    print(json.dumps(throughput(pipeline.parquet_query)))
    if error:
        print(f"query failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
