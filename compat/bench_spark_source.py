"""Spark benchmark (not a test): replaying a topic's history that lives only in tier 2,
through Spark's Kafka connector and through the native source (spark_source/).

`--mib` MiB of 1 KiB records go into a 1-partition and an 8-partition topic on a gateway
started with `--chunk-bytes 8 MiB --chunk-age-ms 200 --local-retain-bytes 0`; once every
byte is in tier 2 (a folder) and tier 1 is trimmed, each topic is read from earliest to
latest (count and sum of value lengths, so every record is decoded) with Spark local[N]
for each `--cores` N, connector then native source, after a warm-up read of 20,000
records through each. Reported per read: wall seconds,
records/s, records/s per Spark core, the Spark tasks of the read and the gateway's CPU
seconds during the read; the results file also records the commit, the machine (cores,
load average before and after) and the command.

    PYTHONPATH=. .venv/bin/python compat/bench_spark_source.py [--mib 256] [--cores 1 2]

The replay of 1 GiB of history (about 15-25 minutes on a quiet 2-core machine; needs
~2.5 GiB free under --dir):

    PYTHONPATH=. .venv/bin/python compat/bench_spark_source.py --mib 1024 --cores 1 2 \
        --partitions 1 8 --out compat/results/spark-source.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness.gateway import Gateway
from harness.provenance import provenance
from spark_examples.session import build_session

RECORD = 1024
TIER_ARGS = ("--chunk-bytes", str(8 << 20), "--chunk-age-ms", "200", "--local-retain-bytes", "0")


def _produce(bootstrap: str, topic: str, partitions: int, mib: int) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 256 << 10,
        }
    )
    n = (mib << 20) // RECORD
    value = bytes(range(256)) * (RECORD // 256)
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value=value, key=b"%d" % i, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(max(300, mib)) == 0
    return n


def _tier2_only(gw: Gateway, topic: str) -> bool:
    with urllib.request.urlopen(f"{gw.admin_url}/streams/{topic}/chunks", timeout=10) as r:
        doc = json.loads(r.read())
    return all(p["tier2_end"] == p["high_watermark"] for p in doc["partitions"])


def _read(
    spark: Any, gw: Gateway, topic: str, source: str, until: int = -1
) -> tuple[int, int, int]:
    """(records, value bytes, Spark tasks) of a read from earliest to latest (or to offset
    `until` of partition 0 only: the warm-up)."""
    if source == "kafka":
        options = {"kafka.bootstrap.servers": gw.bootstrap, "subscribe": topic}
    else:
        admin = gw.admin_url.removeprefix("http://")
        options = {"gateway": gw.bootstrap, "admin": admin, "topic": topic}
    if until >= 0:
        options["endingOffsets"] = json.dumps({topic: {"0": until}})
        if source == "kafka":  # the connector wants every partition of a subscribed topic
            options.pop("subscribe")
            options["assign"] = json.dumps({topic: [0]})
    df = spark.read.format(source).options(**options).load()
    tasks = df.rdd.getNumPartitions()
    row = df.selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]
    return int(row.n), int(row.b or 0), tasks


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--cores", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--partitions", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--out", type=Path, default=Path("bench-results/spark-source.json"))
    ap.add_argument("--dir", type=Path, default=None, help="where the data goes (default: TMPDIR)")
    args = ap.parse_args(argv)
    started = time.monotonic()
    prov = provenance()
    load_before = _load()
    base = Path(tempfile.mkdtemp(prefix="bench-spark-source-", dir=args.dir))
    gw = Gateway(base / "data", base / "server.log", TIER_ARGS, metrics=True)
    gw.start_fresh()
    results: list[dict[str, Any]] = []
    try:
        topics = {}
        for parts in args.partitions:
            topic = f"replay-{parts}p"
            t0 = time.monotonic()
            n = _produce(gw.bootstrap, topic, parts, args.mib)
            print(f"{topic}: {n} records in {time.monotonic() - t0:.1f} s", flush=True)
            topics[parts] = (topic, n)
        deadline = time.monotonic() + max(600, 2 * args.mib)
        while not all(_tier2_only(gw, t) for t, _ in topics.values()):
            if time.monotonic() > deadline:
                raise RuntimeError("tier 2 did not catch up")
            time.sleep(1)
        time.sleep(2)  # the last trims
        for cores in args.cores:
            spark = build_session("bench-spark-source", master=f"local[{cores}]")
            from spark_source import register

            register(spark)
            for source in ("kafka", "streamgate"):  # the JVM's and the workers' warm-up
                _read(spark, gw, topics[args.partitions[0]][0], source, until=20_000)
            for parts, (topic, n) in topics.items():
                for source in ("kafka", "streamgate"):
                    cpu0, t0 = gw.cpu_seconds() or 0.0, time.monotonic()
                    count, size, tasks = _read(spark, gw, topic, source)
                    wall = time.monotonic() - t0
                    cpu = (gw.cpu_seconds() or 0.0) - cpu0
                    assert count == n, (source, topic, count, n)
                    result = {
                        "source": source,
                        "spark_cores": cores,
                        "partitions": parts,
                        "spark_tasks": tasks,
                        "records": count,
                        "mib": round(size / (1 << 20), 1),
                        "wall_s": round(wall, 2),
                        "records_per_s": round(count / wall),
                        "records_per_s_per_core": round(count / wall / cores),
                        "gateway_cpu_s": round(cpu, 2),
                    }
                    print(json.dumps(result), flush=True)
                    results.append(result)
            spark.stop()
    finally:
        gw.close()
        shutil.rmtree(base, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # the machine's other work skews every figure: its load average goes with them
    prov["machine"]["load_average"] = {"before": load_before, "after": _load()}
    doc = {
        "provenance": prov,
        "mib": args.mib,
        "total_s": round(time.monotonic() - started),
        "results": results,
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
