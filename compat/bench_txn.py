"""Transactional producer figures with confluent-kafka (librdkafka), streamgate and Kafka.

* throughput: records/s of a transactional producer that commits every 100 and every
  10,000 records, against the idempotent producer (acks=all), each over the same number
  of records of the same size into a 3-partition topic;
* commit latency: p50/p99 of commit_transaction() in the commit-every-100 run (the time
  from the call to its return: the last batches' acks, EndTxn, markers fsync'd).

Each target is measured on a fresh streamgate (a temporary data dir) and, when
`../shared/kafka` and Java are there, on a single-node Apache Kafka 3.5.1 with its default
durability (acks=all answered from the page cache) and with log.flush.interval.messages=1
(an fsync per message, like streamgate's acks). Short runs: the machine is shared.
Results are printed; run it with `streamgate bench run scenario:txn` (`--targets` leaves out
`kafka` or `kafka-flush1`, the fsync-per-message Kafka; `--quick`: 2,000 records).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from compat.benchlib.report import environment, log_problems  # noqa: E402
from compat.benchlib.scenario import RunOptions, scenario_args, standalone  # noqa: E402
from harness import kafka as kafka_harness  # noqa: E402
from harness.gateway import Gateway  # noqa: E402

QUICK = ("--records", "2000")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=50_000, help="records per run")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--no-kafka", action="store_true", help="streamgate only")
    return parser


def _topic(bootstrap: str, partitions: int) -> str:
    name = f"bench-txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=60)
    return name


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_idempotent(bootstrap: str, topic: str, records: int, value: bytes) -> dict[str, Any]:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value, key=b"%d" % i)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    elapsed = time.perf_counter() - started
    return {
        "records": records,
        "seconds": round(elapsed, 3),
        "records_per_s": round(records / elapsed),
    }


def run_transactional(
    bootstrap: str, topic: str, records: int, value: bytes, per_txn: int
) -> dict[str, Any]:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
            "linger.ms": 5,
        }
    )
    producer.init_transactions(60)
    commits: list[float] = []
    started = time.perf_counter()
    sent = 0
    while sent < records:
        producer.begin_transaction()
        for i in range(min(per_txn, records - sent)):
            while True:
                try:
                    producer.produce(topic, value=value, key=b"%d" % (sent + i))
                    break
                except BufferError:
                    producer.poll(0.01)
        sent += min(per_txn, records - sent)
        t0 = time.perf_counter()
        producer.commit_transaction(120)
        commits.append((time.perf_counter() - t0) * 1000)
    elapsed = time.perf_counter() - started
    return {
        "records": records,
        "records_per_transaction": per_txn,
        "transactions": len(commits),
        "seconds": round(elapsed, 3),
        "records_per_s": round(records / elapsed),
        "commit_ms_p50": round(statistics.median(commits), 2),
        "commit_ms_p99": round(_percentile(commits, 0.99), 2),
    }


def measure(bootstrap: str, args: argparse.Namespace) -> dict[str, Any]:
    value = b"v" * args.value_bytes
    rows: dict[str, Any] = {}
    # Warm-up (connections, topic creation, the JIT on Kafka): not reported.
    run_idempotent(bootstrap, _topic(bootstrap, args.partitions), args.records // 5, value)
    rows["idempotent"] = run_idempotent(
        bootstrap, _topic(bootstrap, args.partitions), args.records, value
    )
    for per_txn in (100, 10_000):
        rows[f"txn_every_{per_txn}"] = run_transactional(
            bootstrap, _topic(bootstrap, args.partitions), args.records, value, per_txn
        )
    for name, row in rows.items():
        extra = ""
        if "commit_ms_p50" in row:
            extra = f"  commit p50 {row['commit_ms_p50']} ms p99 {row['commit_ms_p99']} ms"
        print(f"  {name:<18} {row['records_per_s']:>9} records/s{extra}", flush=True)
    return rows


def run(options: RunOptions) -> dict[str, Any]:
    args = scenario_args(build_parser(), options, quick=QUICK, skip_kafka="--no-kafka")
    report: dict[str, Any] = {
        "settings": {k: str(v) for k, v in vars(args).items()},
        "environment": environment(),
    }
    with tempfile.TemporaryDirectory(prefix="bench-txn-") as tmp:
        base = Path(tmp)
        gateway = Gateway(base / "gw-data", base / "gw.log", (), default_partitions=3)
        gateway.start_fresh()
        try:
            print("streamgate:", flush=True)
            report["streamgate"] = measure(gateway.bootstrap, args)
            report["streamgate_log"] = log_problems(gateway.log_text())
        finally:
            gateway.close()
        reason = "--no-kafka" if args.no_kafka else kafka_harness.unavailable_reason()
        if reason:
            report["kafka"] = {"skipped": reason}
        else:
            # Kafka answers acks=all from the page cache; flush.messages=1 fsyncs every
            # message, the like-for-like durability row.
            for name, target, overrides in (
                ("kafka", "kafka", {}),
                ("kafka_fsync_every_message", "kafka-flush1", kafka_harness.FSYNC_EVERY_MESSAGE),
            ):
                if not options.wants(target):
                    report[name] = {"skipped": f"{target} not among --targets"}
                    continue
                broker = kafka_harness.KafkaBroker(base / name, overrides)
                broker.start()
                try:
                    print(f"{name} (3.5.1):", flush=True)
                    report[name] = measure(broker.bootstrap, args)
                finally:
                    broker.stop()
    return report


def main(argv: list[str] | None = None) -> int:
    return standalone("txn", argv)


if __name__ == "__main__":
    sys.exit(main())
