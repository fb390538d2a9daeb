"""Spark smoke job for the compose stack: batch-read a topic with format("kafka") and count.

`python3 kafka_count.py --bootstrap HOST:PORT --topic T [--expect N]`; exit 1 when the count
differs from --expect. The connector is fetched with spark.jars.packages (Spark 4.0, Scala 2.13).
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import SparkSession

CONNECTOR = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", default="localhost:9092")
    parser.add_argument("--topic", default="spark-smoke")
    parser.add_argument("--expect", type=int, default=None)
    args = parser.parse_args()
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("streamgate-kafka-count")
        .config("spark.jars.packages", CONNECTOR)
        .getOrCreate()
    )
    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    count = frame.count()
    print(f"{args.topic}: {count} records")
    spark.stop()
    return 0 if args.expect is None or count == args.expect else 1


if __name__ == "__main__":
    sys.exit(main())
