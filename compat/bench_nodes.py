"""Figures for a gateway node on PostgreSQL metadata (docs/several-nodes.md).

* throughput: confluent-kafka produces `--records` records (acks=all, idempotent) to a
  3-partition topic, then a consumer reads them back; once with the default SQLite metadata
  and once with `--metadata postgresql://...` (a real PostgreSQL from harness/postgres.py).
* commit latency: synchronous OffsetCommit round trips (a metadata commit each: SQLite
  fsync vs a PostgreSQL transaction).
* scale-out through `streamgate serve --nodes N` (the user's path: supervisor, embedded
  PostgreSQL, N nodes) for N = 1, 2, 4: one topic created on each node (so each node leads
  one: a topic is led by its creator until placement spreads segments), one producer per
  topic at once (aggregate produce records/s), then one consumer per topic at once
  (aggregate consume records/s); ratios to one node. Same clients for every N, each in a
  process of its own.
* failover through `serve --nodes 2`: a producer sends continuously to a topic led by
  node 1; node 1 is SIGKILLed and the supervisor restarts it (same id and data dir, after
  its backoff and the killed incarnation's lease); we time kill -> first acknowledged record
  after the restart, per lease length.

Run it with `streamgate bench run scenario:nodes` (`--runs N`: scale-out rounds; `--quick`:
small counts, 1 and 2 nodes, one failover with a 1 s lease); it also writes nodes-table.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from compat.benchlib.scenario import RunOptions, scenario_args, standalone  # noqa: E402
from harness.gateway import Gateway  # noqa: E402
from harness.nodes_cluster import NodesCluster  # noqa: E402
from harness.postgres import PostgresServer  # noqa: E402

QUICK = ("--records", "5000", "--scale-records", "5000", "--nodes", "1,2", "--rounds", "1")
QUICK += ("--leases", "1", "--failover-rounds", "1")
PARTITIONS = 3


def _throughput(bootstrap: str, records: int, size: int) -> dict[str, float]:
    topic = f"bench-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(20)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.size": 262144,
        }
    )
    payload = b"x" * size
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=payload, key=str(i % 64).encode())
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    produce_s = time.perf_counter() - started
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    started = time.perf_counter()
    while got < records:
        for msg in consumer.consume(1000, 1.0):
            if msg.error() is None:
                got += 1
    consume_s = time.perf_counter() - started
    latencies = []
    for i in range(200):
        t0 = time.perf_counter()
        consumer.commit(offsets=[TopicPartition(topic, 0, i + 1)], asynchronous=False)
        latencies.append((time.perf_counter() - t0) * 1000)
    consumer.close()
    latencies.sort()
    mib = records * size / (1 << 20)
    return {
        "produce_records_per_s": round(records / produce_s),
        "produce_mib_per_s": round(mib / produce_s, 2),
        "consume_records_per_s": round(records / consume_s),
        "commit_p50_ms": round(statistics.median(latencies), 2),
        "commit_p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 2),
    }


def _produce_one(bootstrap: str, topic: str, records: int, size: int) -> None:
    """One idempotent acks=all producer writing `records` to `topic`."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.size": 262144,
        }
    )
    payload = b"x" * size
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=payload, key=str(i % 64).encode())
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(300) == 0


def _consume_one(bootstrap: str, topic: str, records: int) -> None:
    """One consumer reading `records` from offset 0 of every partition of `topic`."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52428800,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    deadline = time.monotonic() + 300
    while got < records and time.monotonic() < deadline:
        got += sum(1 for m in consumer.consume(1000, 1.0) if m.error() is None)
    consumer.close()
    assert got >= records, f"{topic}: read {got} of {records}"


def _client_process(fn_name: str, args: tuple[Any, ...], barrier: Any, results: Any) -> None:
    try:
        barrier.wait()
        started = time.time()
        globals()[fn_name](*args)
        results.put((started, time.time(), ""))
    except BaseException as exc:  # reported by the parent
        results.put((0.0, 0.0, repr(exc)))


def _at_once(fn_name: str, calls: list[tuple[Any, ...]]) -> float:
    """Run `fn_name(*args)` for every args at once, each in its own process (threads would
    measure the GIL: two busy client threads in one interpreter slow each other down
    several times); wall seconds from the common start to the last end."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(calls))
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_client_process, args=(fn_name, args, barrier, results))
        for args in calls
    ]
    for proc in procs:
        proc.start()
    got = [results.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join(60)
    errors = [err for _, _, err in got if err]
    if errors:
        raise RuntimeError(f"{fn_name}: {errors[0]}")
    return max(end for _, end, _ in got) - min(start for start, _, _ in got)


def _produce_at_once(targets: list[tuple[str, str]], records: int, size: int) -> float:
    return _at_once("_produce_one", [(b, t, records, size) for b, t in targets])


def _consume_at_once(targets: list[tuple[str, str]], records: int) -> float:
    return _at_once("_consume_one", [(b, t, records) for b, t in targets])


def _leaders_known(bootstrap: str, topics: list[str], nodes: int) -> bool:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    if len(meta.brokers) != nodes:
        return False
    for i, topic in enumerate(topics, start=1):
        t = meta.topics.get(topic)
        if t is None or {p.leader for p in t.partitions.values()} != {i}:
            return False
    return True


CREATOR_PLACEMENT = {"STREAMGATE_PLACEMENT": "creator"}


def _scale_out(work: Path, nodes: int, records: int, size: int, rounds: int) -> dict[str, Any]:
    """`serve --nodes N`: per round, one new topic created on (so led by) each node, one
    producer per topic at once, then one consumer per topic at once; medians of rounds."""
    # each topic led by its creator (placement `creator`), so each client talks to one node
    cluster = NodesCluster(
        work / f"scale{nodes}", nodes, default_partitions=PARTITIONS, env=CREATOR_PLACEMENT
    )
    cluster.start()
    try:
        produce, consume = [], []
        for r in range(rounds):
            topics = []
            for i, bootstrap in enumerate(cluster.bootstraps, start=1):
                topic = f"scale-{r}-{i}"
                admin = AdminClient({"bootstrap.servers": bootstrap})
                admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(20)
                topics.append(topic)
            deadline = time.monotonic() + 30
            while not all(_leaders_known(b, topics, nodes) for b in cluster.bootstraps):
                assert time.monotonic() < deadline, "leaders not known on every node"
                time.sleep(0.2)
            # each client bootstraps on the node leading its topic (any node would do)
            targets = list(zip(cluster.bootstraps, topics, strict=True))
            produce.append(_produce_at_once(targets, records, size))
            time.sleep(1.0)  # the consumers start on a settled cluster
            consume.append(_consume_at_once(targets, records))
        total = records * nodes
        produce_s, consume_s = statistics.median(produce), statistics.median(consume)
        return {
            "nodes": nodes,
            "records": total,
            "rounds": rounds,
            "produce_seconds": [round(x, 2) for x in produce],
            "produce_records_per_s": round(total / produce_s),
            "consume_seconds": [round(x, 2) for x in consume],
            "consume_records_per_s": round(total / consume_s),
        }
    finally:
        cluster.close()


def _failover(work: Path, lease: str, rounds: int) -> list[float]:
    """`serve --nodes 2 --node-lease-s LEASE`: seconds from SIGKILL of node 1 to the first
    record acknowledged by its restarted process (the supervisor restarts it)."""
    cluster = NodesCluster(
        work / f"failover{lease}",
        2,
        ["--node-lease-s", lease],
        default_partitions=1,
        env=CREATOR_PLACEMENT,  # the topic is node 1's, the node this kills
    )
    cluster.start()
    topic = f"failover-{uuid.uuid4().hex[:6]}"
    b1 = cluster.bootstraps[0]
    admin = AdminClient({"bootstrap.servers": b1})
    admin.create_topics([NewTopic(topic, num_partitions=1)])[topic].result(20)
    acked_at: list[float] = []
    lock = threading.Lock()

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is None:
            with lock:
                acked_at.append(time.monotonic())

    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 1,
            "message.timeout.ms": 120000,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 100,
            "retry.backoff.ms": 20,
        }
    )
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            producer.produce(topic, value=str(i).encode(), on_delivery=on_delivery)
            i += 1
            producer.poll(0.002)
        producer.flush(120)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    times = []
    try:
        time.sleep(1.5)
        for _ in range(rounds):
            killed = time.monotonic()
            pid = cluster.kill_node(1)
            # acks the dead process sent may still be in librdkafka's queue: only count
            # those reported once it is gone (plus a margin for the 2 ms poll loop)
            dead = time.monotonic() + 0.05
            while True:
                with lock:
                    after = [t for t in acked_at if t > dead]
                if after:
                    times.append(round(min(after) - killed, 3))
                    break
                assert time.monotonic() - killed < 120, "no ack after the restart"
                time.sleep(0.005)
            cluster.wait_restarted(1, pid)
            time.sleep(1.0)
    finally:
        stop.set()
        thread.join(120)
        cluster.close()
    return times


def _new_database(pg: PostgresServer, name: str) -> str:
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return pg.url.rsplit("/", 1)[0] + "/" + name


def markdown(result: dict[str, Any]) -> str:
    """The figures as Markdown tables (nodes-table.md, beside nodes.json and its provenance)."""
    lines = [
        "# Several nodes: `serve --nodes N` figures",
        "",
        "Provenance in nodes.json beside this page; "
        f"{result['record_bytes']}-byte records, acks=all, idempotent confluent-kafka, "
        f"{result['partitions']} partitions per topic, one topic created on each node; "
        "medians of rounds.",
        "",
        "| nodes | records | produce rec/s | x | consume rec/s | x |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in result["scale_out"]:
        lines.append(
            f"| {row['nodes']} | {row['records']} | {row['produce_records_per_s']} "
            f"| {row['produce_ratio_to_first']} | {row['consume_records_per_s']} "
            f"| {row['consume_ratio_to_first']} |"
        )
    lines += ["", "| failover (SIGKILL -> first new ack) | seconds |", "| --- | --- |"]
    for lease, times in result["failover_s"].items():
        lines.append(f"| {lease.replace('_', ' ')} | {', '.join(str(t) for t in times)} |")
    for name in ("sqlite", "postgresql"):
        row = result.get(f"throughput_{name}")
        if row:
            lines.append("")
            lines.append(f"one node, {name} metadata: {row}")
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--failover-rounds", type=int, default=3)
    parser.add_argument("--leases", default="1,3", help="lease lengths (s) to time failover")
    parser.add_argument("--nodes", default="1,2,4", help="active node counts to compare")
    parser.add_argument("--scale-records", type=int, default=200_000, help="per node")
    parser.add_argument("--rounds", type=int, default=3, help="scale-out rounds (median)")
    parser.add_argument("--skip-metadata-compare", action="store_true")
    return parser


def run(options: RunOptions) -> dict[str, Any]:
    args = scenario_args(build_parser(), options, quick=QUICK, runs="--rounds")
    work = Path(tempfile.mkdtemp(prefix="bench-nodes-"))
    work.chmod(0o755)  # as root, PostgreSQL runs as the postgres user
    result: dict[str, Any] = {
        "records": args.records,
        "record_bytes": args.size,
        "partitions": PARTITIONS,
    }
    pg = PostgresServer(work / "pg")
    pg.start()
    try:
        compare = [] if args.skip_metadata_compare else ["sqlite", "postgresql"]
        for name in compare:
            extra = [] if name == "sqlite" else ["--metadata", _new_database(pg, "throughput")]
            gw = Gateway(work / name, work / f"{name}.log", extra)
            gw.start_fresh()
            try:
                result[f"throughput_{name}"] = _throughput(gw.bootstrap, args.records, args.size)
            finally:
                gw.close()
            print(name, result[f"throughput_{name}"], flush=True)
        result["scale_out"] = [
            _scale_out(work, n, args.scale_records, args.size, args.rounds)
            for n in (int(x) for x in args.nodes.split(","))
        ]
        first = result["scale_out"][0]
        for row in result["scale_out"]:
            for kind in ("produce", "consume"):
                ratio = row[f"{kind}_records_per_s"] / first[f"{kind}_records_per_s"]
                row[f"{kind}_ratio_to_first"] = round(ratio, 2)
            print("scale-out", row, flush=True)
        result["failover_s"] = {}
        for lease in args.leases.split(","):
            times = _failover(work, lease, args.failover_rounds)
            result["failover_s"][f"lease_{lease}s"] = times
            print("failover lease", lease, times, flush=True)
    finally:
        pg.close()
        shutil.rmtree(work, ignore_errors=True)
    (options.out / "nodes-table.md").write_text(markdown(result))
    print(json.dumps(result, indent=2))
    return result


def main(argv: list[str] | None = None) -> int:
    return standalone("nodes", argv)


if __name__ == "__main__":
    raise SystemExit(main())
