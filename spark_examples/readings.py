"""The IoT example's data: sensor readings as JSON, and the per-device window aggregation
shared by the live job and the replay job (so their results can be compared row by row)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# one reading: {"device": "dev-0007", "ts": 1700000000123, "temperature": 21.4, "humidity": 40.2}
READING_SCHEMA = "device STRING, ts LONG, temperature DOUBLE, humidity DOUBLE"
WINDOW = "10 seconds"
WATERMARK = "5 seconds"
# the aggregate rows, as written to Parquet and (as JSON values keyed by device) to Kafka
AGGREGATE_COLUMNS = (
    "device",
    "window_start",
    "window_end",
    "readings",
    "avg_temperature",
    "min_temperature",
    "max_temperature",
    "avg_humidity",
)


@dataclass(frozen=True)
class Reading:
    device: str
    ts: int
    temperature: float
    humidity: float

    def key(self) -> bytes:
        return self.device.encode()

    def value(self) -> bytes:
        return json.dumps(
            {
                "device": self.device,
                "ts": self.ts,
                "temperature": self.temperature,
                "humidity": self.humidity,
            },
            separators=(",", ":"),
        ).encode()


def device_name(i: int) -> str:
    return f"dev-{i:04d}"


def readings(devices: int, start_ms: int, interval_ms: int, seed: int = 12) -> Iterator[Reading]:
    """Round after round, one reading per device; event time advances `interval_ms` a round,
    the devices of a round spread evenly inside it. Deterministic for a given seed."""
    rng = random.Random(seed)
    base = [15.0 + rng.random() * 10 for _ in range(devices)]
    round_no = 0
    while True:
        for d in range(devices):
            ts = start_ms + round_no * interval_ms + (d * interval_ms) // devices
            temp = round(base[d] + rng.gauss(0, 0.5), 2)
            yield Reading(device_name(d), ts, temp, round(40 + rng.random() * 20, 2))
        round_no += 1


def parse(kafka_df: Any) -> Any:
    """Kafka rows (value = JSON reading) -> device, event_time, temperature, humidity.
    Unparseable values become NULL rows in from_json and are dropped."""
    from pyspark.sql import functions as F

    parsed = kafka_df.select(F.from_json(F.col("value").cast("string"), READING_SCHEMA).alias("r"))
    return (
        parsed.select("r.*")
        .where(F.col("device").isNotNull() & F.col("ts").isNotNull())
        .withColumn("event_time", F.timestamp_millis("ts"))
    )


def aggregate(readings_df: Any, watermark: str | None = WATERMARK) -> Any:
    """Per device and tumbling event-time window: count, temperature stats, mean humidity.
    With `watermark` (streaming) a window is emitted once, after the watermark passed it."""
    from pyspark.sql import functions as F

    df = readings_df.withWatermark("event_time", watermark) if watermark else readings_df
    return (
        df.groupBy(F.window("event_time", WINDOW), "device")
        .agg(
            F.count("*").alias("readings"),
            F.round(F.avg("temperature"), 4).alias("avg_temperature"),
            F.min("temperature").alias("min_temperature"),
            F.max("temperature").alias("max_temperature"),
            F.round(F.avg("humidity"), 4).alias("avg_humidity"),
        )
        .select(
            "device",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "readings",
            "avg_temperature",
            "min_temperature",
            "max_temperature",
            "avg_humidity",
        )
    )


def to_kafka_rows(agg_df: Any) -> Any:
    """key = device, value = the aggregate as JSON, a header naming the window."""
    from pyspark.sql import functions as F

    return agg_df.select(
        F.col("device").alias("key"),
        F.to_json(F.struct(*AGGREGATE_COLUMNS)).alias("value"),
        F.array(
            F.struct(
                F.lit("window_start").alias("key"),
                F.col("window_start").cast("string").cast("binary").alias("value"),
            )
        ).alias("headers"),
    )
