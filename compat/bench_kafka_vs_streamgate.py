"""Apache Kafka 3.5.1 beside streamgate on this machine: the workloads of issue 15.

Starts Kafka (`harness.kafka.KafkaBroker`, KRaft, one node), a second Kafka that fsyncs
every message (`log.flush.interval.messages=1`, the broker-wide `flush.messages=1`:
streamgate's durability) and a fresh streamgate
(`harness.gateway.Gateway`), then runs every workload on every target, alternating the
targets run by run (the order rotates) so the machine's noise hits all of them, with every
dirty page written back before each run (`os.sync`): Kafka acknowledges from the page cache,
and its writeback would otherwise land on the fsyncs of whichever target runs next. Each
figure is the median of `--runs` runs. Writes JSON (with provenance), a Markdown table and a
PNG.

    python compat/bench_kafka_vs_streamgate.py [--runs 3] [--quick] [--workloads a,b]

Workloads (1 KiB records, acks=all, 8 partitions unless said):
  perf-producer   kafka-producer-perf-test.sh defaults (batch.size 16 KiB, linger 0)
  perf-consumer   kafka-consumer-perf-test.sh over the topic perf-producer wrote
  confluent       confluent-kafka, 1 MB batches, linger 5 ms: produce, then read it all back
  small-16        16 producers, 100-byte records, linger 0: records/s and requests/s
  rate-2k         2,000 records/s, linger 1 ms: produce and end-to-end latency
  rate-20k        20,000 records/s, linger 5 ms: produce and end-to-end latency
  partitions      confluent-kafka produce throughput into 10 and into 5,000 partitions
  many            one record into each of 100,000 partitions (10 topics): time and RSS
  many-raw        the same with the repository's blocking protocol client (kafkaclient)
The fsync-per-message Kafka runs the latency workloads only (it is that row of the issue);
`many` runs on streamgate only unless --many-on-kafka.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from compat.benchlib.display import PROGRESS_MODES, Display, print_table, rate_poll  # noqa: E402
from compat.benchlib.options import choices, positive_int  # noqa: E402
from compat.benchlib.records import latency_ms, make_payloads  # noqa: E402
from compat.benchlib.report import code_state, environment, log_problems, write_report  # noqa: E402
from compat.benchlib.runs import ProduceRun, TailConsumer, producer_config, read_all  # noqa: E402
from compat.benchlib.summary import get_path, median_range  # noqa: E402
from compat.benchlib.topics import create_topic  # noqa: E402
from core.recordbatch import build_batch  # noqa: E402
from harness.gateway import Gateway  # noqa: E402
from harness.kafka import (  # noqa: E402
    FSYNC_EVERY_MESSAGE,
    KafkaBroker,
    run_tool,
    unavailable_reason,
)
from harness.nodes_cluster import NodesCluster  # noqa: E402
from harness.process import ManagedProcess  # noqa: E402
from harness.procstats import CpuMeter, proc_cpu_seconds, proc_status_kib  # noqa: E402
from harness.provenance import provenance  # noqa: E402
from kafkaclient.client import KafkaClient, produce_body  # noqa: E402

Report = dict[str, Any]
WORKLOADS = (
    "perf-producer",
    "perf-consumer",
    "confluent",
    "small-16",
    "rate-2k",
    "rate-20k",
    "partitions",
    "many",
    "many-raw",
)
# `many` (librdkafka) is left out by default: it does not get through 100,000 partitions
# in minutes (docs/performance.md); many-raw measures the server instead.
DEFAULT_WORKLOADS = [w for w in WORKLOADS if w != "many"]
LATENCY_WORKLOADS = ("rate-2k", "rate-20k")
TARGETS = ("kafka", "kafka-flush1", "streamgate", "streamgate-2n")
# `streamgate-2n` is `serve --nodes 2` (two node processes, docs/several-nodes.md): the
# design step past one Python process. Not in the default targets (it needs PostgreSQL).
DEFAULT_TARGETS = ["kafka", "kafka-flush1", "streamgate"]
TARGET_LABELS = {
    "kafka": "kafka",
    "kafka-flush1": "kafka\nflush=1",
    "streamgate": "streamgate",
    "streamgate-2n": "streamgate\n2 nodes",
}
DEFAULT_OUT = REPO_ROOT / "compat" / "results" / "kafka_vs_streamgate"
STALL_S = 60.0
# Kafka's harness starts groups at once (group.initial.rebalance.delay.ms=0): so does this one
GATEWAY_ARGS = ["--group-initial-rebalance-delay-ms", "0"]


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much each workload does: full (issue 15's figures) or --quick (a smoke test)."""

    perf_records: int = 300_000
    confluent_records: int = 300_000
    small_records: int = 320_000
    rate_seconds: float = 10.0
    part_records: int = 100_000
    many_topics: int = 10
    many_per_topic: int = 10_000
    wide_partitions: int = 5_000

    @classmethod
    def quick(cls) -> Sizes:
        return cls(
            perf_records=2_000,
            confluent_records=2_000,
            small_records=1_600,
            rate_seconds=1.0,
            part_records=1_000,
            many_topics=2,
            many_per_topic=50,
            wide_partitions=50,
        )


@dataclass(slots=True)
class Target:
    name: str
    server: ManagedProcess
    bootstrap: str


# --------------------------------------------------------------------------- workloads


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


_PRODUCER_LINE = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th"
)


def perf_producer(t: Target, s: Sizes, shared: Report, display: Display) -> Report:
    topic = _topic("perf")
    create_topic(t.bootstrap, topic, 8)
    with display.phase(f"{t.name} perf-producer", None, lambda: (0, "")):
        out = run_tool(
            "kafka-producer-perf-test.sh",
            [
                "--topic",
                topic,
                "--num-records",
                str(s.perf_records),
                "--record-size",
                "1024",
                "--throughput",
                "-1",
                "--producer-props",
                f"bootstrap.servers={t.bootstrap}",
            ],
            timeout=600,
        )
    shared[f"perf-topic:{t.name}"] = topic
    matches = _PRODUCER_LINE.findall(out.stdout)
    if out.returncode != 0 or not matches:
        return {"ok": False, "error": (out.stdout + out.stderr)[-2000:]}
    sent, rps, mbps, avg, mx, p50, p95, p99 = matches[-1]
    return {
        "ok": int(sent) == s.perf_records,
        "records": int(sent),
        "records_per_s": float(rps),
        "mb_per_s": float(mbps),
        "latency_ms": {
            "avg": float(avg),
            "max": float(mx),
            "p50": int(p50),
            "p95": int(p95),
            "p99": int(p99),
        },
    }


def perf_consumer(t: Target, s: Sizes, shared: Report, display: Display) -> Report:
    topic = shared.get(f"perf-topic:{t.name}")
    if topic is None:  # run alone: write the topic first
        perf_producer(t, s, shared, display)
        topic = shared[f"perf-topic:{t.name}"]
    with display.phase(f"{t.name} perf-consumer", None, lambda: (0, "")):
        out = run_tool(
            "kafka-consumer-perf-test.sh",
            [
                "--bootstrap-server",
                t.bootstrap,
                "--topic",
                topic,
                "--messages",
                str(s.perf_records),
                "--timeout",
                "60000",
            ],
            timeout=600,
        )
    rows = [line.split(", ") for line in out.stdout.splitlines() if line.count(", ") >= 9]
    data = [r for r in rows if not r[0].startswith("start.time")]
    if out.returncode != 0 or not data:
        return {"ok": False, "error": (out.stdout + out.stderr)[-2000:]}
    r = data[-1]
    return {
        "ok": int(r[4]) >= s.perf_records,
        "mb": float(r[2]),
        "mb_per_s": float(r[3]),
        "records": int(r[4]),
        "records_per_s": float(r[5]),
        "rebalance_ms": int(r[6]),
        "fetch_mb_per_s": float(r[8]),
    }


def _produce(
    t: Target,
    topic: str,
    partitions: int,
    count: int,
    record_size: int,
    conf: Report,
    display: Display,
    label: str,
    rate: float | None = None,
    duration: float | None = None,
) -> ProduceRun:
    payloads = make_payloads(record_size)
    run = ProduceRun(topic, partitions, payloads, count)
    producer = Producer(
        {**producer_config(t.bootstrap, conf.pop("linger.ms", 5), run.tracker), **conf}
    )
    producer.list_topics(topic, timeout=30)  # connected before the clock starts
    with display.phase(label, count, rate_poll(lambda: run.tracker.delivered)):
        run.run(producer, rate, count, duration, STALL_S)
    return run


def confluent(t: Target, s: Sizes, shared: Report, display: Display) -> Report:
    topic = _topic("cfl")
    create_topic(t.bootstrap, topic, 8)
    run = _produce(
        t,
        topic,
        8,
        s.confluent_records,
        1024,
        {"linger.ms": 5, "batch.size": 1_000_000},
        display,
        f"{t.name} confluent produce",
    )
    produced = run.summary(1024)
    read, _ = read_all(
        t.bootstrap,
        topic,
        run.per_partition(),
        run.payloads,
        {},
        STALL_S,
        display,
        f"{t.name} confluent consume",
    )
    ok = not run.stalled and produced["delivery_errors"] == 0 and read["ok"]
    return {"ok": ok, "produce": produced, "consume": read}


def small_16(t: Target, s: Sizes, shared: Report, display: Display) -> Report:
    """16 producers (threads, one librdkafka client each), 100-byte records, linger 0."""
    topic = _topic("small")
    create_topic(t.bootstrap, topic, 8)
    per = s.small_records // 16
    payloads = make_payloads(100)
    runs = [ProduceRun(topic, 8, payloads, per) for _ in range(16)]
    producers = [Producer({**producer_config(t.bootstrap, 0, r.tracker)}) for r in runs]
    for p in producers:
        p.list_topics(topic, timeout=30)
    threads = [
        threading.Thread(target=r.run, args=(p, None, per, None, STALL_S), daemon=True)
        for r, p in zip(runs, producers, strict=True)
    ]
    started = time.perf_counter()
    with display.phase(
        f"{t.name} 16 small producers",
        per * 16,
        rate_poll(lambda: sum(r.tracker.delivered for r in runs)),
    ):
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    seconds = max(r.tracker.last_delivery for r in runs) - started
    delivered = sum(r.tracker.delivered for r in runs)
    requests = sum(r.tracker.produce_requests or 0 for r in runs)
    return {
        "ok": delivered == per * 16,
        "records": delivered,
        "seconds": round(seconds, 3),
        "records_per_s": round(delivered / seconds, 1),
        "requests": requests,
        "requests_per_s": round(requests / seconds, 1),
        "errors": sum(r.tracker.failed for r in runs),
        # What a stall looked like (one two-node run once left 9,818 records unanswered):
        # which producers were short, and what librdkafka said meanwhile.
        "short_producers": {
            i: per - r.tracker.delivered for i, r in enumerate(runs) if r.tracker.delivered < per
        },
        "client_errors": [sample for r in runs for sample in r.tracker.to_json()["samples"]][:10],
    }


def _rated(t: Target, s: Sizes, display: Display, rate: float, linger: float) -> Report:
    topic = _topic(f"rate{int(rate)}")
    create_topic(t.bootstrap, topic, 8)
    count = int(rate * s.rate_seconds)
    payloads = make_payloads(1024)
    run = ProduceRun(topic, 8, payloads, count)
    tail = TailConsumer(t.bootstrap, topic, 8, run.sent_at, {})
    tail.start()
    producer = Producer(producer_config(t.bootstrap, linger, run.tracker))
    producer.list_topics(topic, timeout=30)
    with display.phase(
        f"{t.name} {int(rate):,} rec/s", count, rate_poll(lambda: run.tracker.delivered)
    ):
        run.run(producer, rate, count, None, STALL_S)
    tail.target = run.tracker.delivered
    tail.close(timeout=STALL_S)
    e2e = sorted(seconds for _, seconds in tail.latencies)
    produced = run.summary(1024)
    return {
        "ok": not run.stalled
        and produced["delivery_errors"] == 0
        and tail.consumed >= run.tracker.delivered,
        "produce": produced,
        "produce_latency_ms": produced["delivery_latency_ms"],
        "e2e_latency_ms": latency_ms(e2e),
        "consumed": tail.consumed,
        "consumer_errors": tail.errors.to_json(),
    }


def rate_2k(t: Target, s: Sizes, shared: Report, display: Display) -> Report:
    return _rated(t, s, display, 2_000, 1)


def rate_20k(t: Target, s: Sizes, shared: Report, display: Display) -> Report:
    return _rated(t, s, display, 20_000, 5)


def partitions(t: Target, s: Sizes, shared: Report, display: Display) -> Report:
    result: Report = {"ok": True}
    for count in (10, s.wide_partitions):
        topic = _topic(f"p{count}")
        create_topic(t.bootstrap, topic, count)
        cpu = cpu_meter(t.server)
        run = _produce(
            t,
            topic,
            count,
            s.part_records,
            1024,
            {"linger.ms": 5},
            display,
            f"{t.name} {count:,} partitions",
        )
        summary = run.summary(1024)
        summary["cpu"] = cpu.read().cores()  # with many partitions the client is the limit
        result[f"p{count}"] = summary
        result["ok"] = result["ok"] and not run.stalled and summary["delivery_errors"] == 0
    narrow, wide = result["p10"]["mib_per_s"], result[f"p{s.wide_partitions}"]["mib_per_s"]
    result["wide"] = result[f"p{s.wide_partitions}"]
    result["wide_over_narrow"] = round(wide / narrow, 3) if narrow else None
    return result


def many(t: Target, s: Sizes, shared: Report, display: Display) -> Report:
    """One record into each partition of `many_topics` topics of `many_per_topic` each."""
    topics = [_topic("many") for _ in range(s.many_topics)]
    for topic in topics:
        create_topic(t.bootstrap, topic, s.many_per_topic)
    total = s.many_topics * s.many_per_topic
    payloads = make_payloads(1024)
    run = ProduceRun(topics[0], s.many_per_topic, payloads, total)
    producer = Producer(producer_config(t.bootstrap, 5, run.tracker))
    for topic in topics:
        producer.list_topics(topic, timeout=60)
    started = time.perf_counter()
    with display.phase(
        f"{t.name} {total:,} partitions x1", total, rate_poll(lambda: run.tracker.delivered)
    ):
        deadline = time.monotonic() + 2 * STALL_S  # librdkafka may never drain
        for i in range(total):
            topic, partition = topics[i // s.many_per_topic], i % s.many_per_topic
            while time.monotonic() < deadline:
                try:
                    producer.produce(
                        topic,
                        payloads[0],
                        key=b"%012d" % i,
                        partition=partition,
                        on_delivery=run.tracker,
                    )
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
        left = producer.flush(max(1.0, deadline - time.monotonic()))
    seconds = run.tracker.last_delivery - started
    rss = server_rss_kib(t.server)
    return {
        "ok": left == 0 and run.tracker.delivered == total,
        "records": total,
        "delivered": run.tracker.delivered,
        "seconds": round(seconds, 3),
        "rss_mib": round(rss / 1024, 1) if rss else None,
    }


def many_raw(t: Target, s: Sizes, shared: Report, display: Display) -> Report:
    """`many` with the repository's blocking protocol client (kafkaclient): one connection,
    Produce v9 requests of up to 1,000 partitions with a one-record batch each, acks=all,
    five requests in flight (as Kafka's clients allow by default).
    librdkafka spends minutes on 100,000 partitions itself (docs/performance.md), so this shows
    the server's cost. streamgate runs it on a gateway of its own: its RSS is then the
    cost of the partitions, not of the data the other workloads wrote."""
    if t.name != "streamgate":
        return _many_raw(t, s, display)
    work = Path(tempfile.mkdtemp(prefix="streamgate-many-"))
    gateway = Gateway(work / "data", work / "gateway.log", GATEWAY_ARGS, default_partitions=8)
    try:
        gateway.start_fresh()
        return _many_raw(Target(t.name, gateway, gateway.bootstrap), s, display)
    finally:
        gateway.close()
        shutil.rmtree(work, ignore_errors=True)


def _many_raw(t: Target, s: Sizes, display: Display) -> Report:
    topics = [_topic("raw") for _ in range(s.many_topics)]
    for topic in topics:
        create_topic(t.bootstrap, topic, s.many_per_topic)
    batch = build_batch([(b"k", make_payloads(1024)[0], [])])
    total = s.many_topics * s.many_per_topic
    done = errors = 0
    started = time.perf_counter()
    with (
        KafkaClient(t.bootstrap, timeout=120) as client,
        display.phase(f"{t.name} {total:,} partitions x1 (raw)", total, rate_poll(lambda: done)),
    ):
        # a partition refused with a retriable error (a new topic's leader not known yet on
        # Kafka) is sent again, as a client would, for up to STALL_S
        pending = [(topic, list(range(s.many_per_topic))) for topic in topics]
        deadline = time.monotonic() + STALL_S
        while pending and time.monotonic() < deadline:
            retry: list[tuple[str, list[int]]] = []
            bodies = (
                produce_body(topic, {p: batch for p in parts[first : first + 1000]})
                for topic, parts in pending
                for first in range(0, len(parts), 1000)
            )
            # five requests in flight, the default of Kafka's own clients
            for response in client.pipeline(0, 9, bodies):
                for topic_response in response.responses:
                    failed = []
                    for part in topic_response.partition_responses:
                        if part.error_code == 0:
                            done += 1
                        else:
                            errors += 1
                            failed.append(part.index)
                    if failed:
                        retry.append((topic_response.name, failed))
            if retry:
                time.sleep(0.1)
            pending = retry
    seconds = time.perf_counter() - started
    rss = server_rss_kib(t.server)
    return {
        "ok": done == total,
        "records": total,
        "delivered": done,
        "retried": errors,
        "seconds": round(seconds, 3),
        "rss_mib": round(rss / 1024, 1) if rss else None,
    }


RUNNERS: dict[str, Callable[[Target, Sizes, Report, Display], Report]] = {
    "perf-producer": perf_producer,
    "perf-consumer": perf_consumer,
    "confluent": confluent,
    "small-16": small_16,
    "rate-2k": rate_2k,
    "rate-20k": rate_20k,
    "partitions": partitions,
    "many": many,
    "many-raw": many_raw,
}


# --------------------------------------------------------------------------- table

# (label, workload, figure path, format, higher is better; None: a figure that explains the
# others, with no "better" and no ratio)
ROWS: list[tuple[str, str, str, str, bool | None]] = [
    ("perf-producer-test MB/s", "perf-producer", "mb_per_s", ".1f", True),
    ("perf-consumer-test MB/s", "perf-consumer", "mb_per_s", ".1f", True),
    ("confluent produce MiB/s", "confluent", "produce.mib_per_s", ".1f", True),
    ("confluent consume MiB/s", "confluent", "consume.mib_per_s", ".1f", True),
    ("16 producers 100 B rec/s", "small-16", "records_per_s", ",.0f", True),
    ("16 producers requests/s", "small-16", "requests_per_s", ",.0f", True),
    ("2k/s produce p50 ms", "rate-2k", "produce_latency_ms.p50", ".2f", False),
    ("2k/s produce p99 ms", "rate-2k", "produce_latency_ms.p99", ".2f", False),
    ("2k/s end-to-end p50 ms", "rate-2k", "e2e_latency_ms.p50", ".2f", False),
    ("2k/s end-to-end p99 ms", "rate-2k", "e2e_latency_ms.p99", ".2f", False),
    ("20k/s produce p50 ms", "rate-20k", "produce_latency_ms.p50", ".2f", False),
    ("20k/s produce p99 ms", "rate-20k", "produce_latency_ms.p99", ".2f", False),
    ("20k/s end-to-end p50 ms", "rate-20k", "e2e_latency_ms.p50", ".2f", False),
    ("20k/s end-to-end p99 ms", "rate-20k", "e2e_latency_ms.p99", ".2f", False),
    ("produce 10 partitions MiB/s", "partitions", "p10.mib_per_s", ".1f", True),
    ("produce wide partitions MiB/s", "partitions", "wide.mib_per_s", ".1f", True),
    ("wide / 10 partitions", "partitions", "wide_over_narrow", ".2f", True),
    # who was the limit: CPU cores used while the wide partitions were produced
    ("wide partitions: server CPU cores", "partitions", "wide.cpu.server_cores", ".2f", None),
    ("wide partitions: client CPU cores", "partitions", "wide.cpu.client_cores", ".2f", None),
    (
        "wide partitions: client's busiest thread",
        "partitions",
        "wide.cpu.client_busiest_thread.cores",
        ".2f",
        None,
    ),
    ("1 rec x many partitions s", "many", "seconds", ".2f", False),
    ("many partitions RSS MiB", "many", "rss_mib", ".0f", False),
    ("1 rec x many partitions s, raw client", "many-raw", "seconds", ".2f", False),
    ("many partitions RSS MiB, raw client", "many-raw", "rss_mib", ".0f", False),
]


def median_of(
    results: dict[str, dict[str, list[Report]]], target: str, workload: str, path: str
) -> float | None:
    runs = results.get(workload, {}).get(target, [])
    agg = median_range([get_path(r, path) for r in runs if r.get("ok")])
    return None if agg is None else agg[0]


def table(results: dict[str, dict[str, list[Report]]]) -> tuple[list[str], list[list[str]]]:
    shown = [t for t in TARGETS if any(t in by for by in results.values())]
    headers = ["workload", *shown, "streamgate / kafka"]
    if "streamgate-2n" in shown:
        headers.append("2 nodes / kafka")
    rows = []
    for label, workload, path, fmt, higher in ROWS:
        if workload not in results:
            continue
        cells = [label]
        for target in shown:
            value = median_of(results, target, workload, path)
            cells.append("-" if value is None else format(value, fmt))
        kf = median_of(results, "kafka", workload, path)
        for ours in ("streamgate", "streamgate-2n")[: len(headers) - len(shown) - 1]:
            sg = median_of(results, ours, workload, path)
            ratio = "-"
            if sg and kf and higher is not None:
                # ratio as "how many times better" so >= 1.00 always meets the goal
                ratio = f"{(sg / kf if higher else kf / sg):.2f}"
            cells.append(ratio)
        rows.append(cells)
    return headers, rows


def markdown(headers: list[str], rows: list[list[str]], report: Report) -> str:
    prov = report["provenance"]
    lines = [
        "# Apache Kafka 3.5.1 beside streamgate",
        "",
        f"Commit `{prov.get('commit')}` (dirty: {prov.get('dirty')}), "
        f"{report['runs']} run(s) per target, medians of the runs that succeeded; "
        "the last column is streamgate's advantage (>= 1.00: as good as Kafka or better).",
        f"Command: `{prov.get('command')}`",
        "",
        "| " + " | ".join(headers) + " |",
        "| " + " | ".join(["---"] + ["---:"] * (len(headers) - 1)) + " |",
        *("| " + " | ".join(r) + " |" for r in rows),
        "",
    ]
    failed = [
        f"{w} on {t}: run {i}"
        for w, by in report["results"].items()
        for t, runs in by.items()
        for i, r in enumerate(runs)
        if not r.get("ok")
    ]
    if failed:
        lines += ["Failed runs (not in the medians): " + "; ".join(failed), ""]
    return "\n".join(lines)


def plot(results: dict[str, dict[str, list[Report]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [row for row in ROWS if row[1] in results]
    cols = 4
    nrows = max(1, -(-len(shown) // cols))
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 2.8 * nrows), squeeze=False)
    colours = {
        "kafka": "#4c72b0",
        "kafka-flush1": "#8172b2",
        "streamgate": "#dd8452",
        "streamgate-2n": "#c44e52",
    }
    targets = [t for t in TARGETS if any(t in by for by in results.values())]
    for ax, (label, workload, fig_path, _fmt, higher) in zip(axes.flat, shown, strict=False):
        values = [median_of(results, t, workload, fig_path) or 0.0 for t in targets]
        ax.bar(range(len(targets)), values, color=[colours[t] for t in targets])
        ax.set_xticks(range(len(targets)), [TARGET_LABELS[t] for t in targets], fontsize=8)
        better = {True: " (higher is better)", False: " (lower is better)", None: ""}[higher]
        ax.set_title(f"{label}{better}", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
    for ax in list(axes.flat)[len(shown) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# --------------------------------------------------------------------------- driver


def server_rss_kib(server: ManagedProcess) -> int | None:
    """The server's RSS now: for `serve --nodes`, the sum over its node processes."""
    pids = server_pids(server)
    return sum(proc_status_kib(p, "VmRSS") or 0 for p in pids) if pids else None


def server_pids(server: ManagedProcess) -> list[int]:
    """The processes that serve: for `serve --nodes`, its nodes (not their supervisor)."""
    if isinstance(server, NodesCluster):
        return [server.node_pid(i) for i in range(1, server.nodes + 1)]
    return [server.pid] if server.pid else []


def cpu_meter(server: ManagedProcess) -> CpuMeter:
    """CPU of the server and of this benchmark with the Java tools it ran: which side was
    the limit of a workload (`.read().cores()`)."""
    pids = server_pids(server)
    return CpuMeter(lambda: sum(proc_cpu_seconds(p) or 0.0 for p in pids), with_children=True)


def targets_for(workload: str, args: argparse.Namespace) -> list[str]:
    wanted = [t for t in args.targets]
    if workload not in LATENCY_WORKLOADS:
        wanted = [t for t in wanted if t != "kafka-flush1"]
    if workload in ("many", "many-raw") and not args.many_on_kafka:
        # one connection, one node: the repository's client does not follow leaders
        wanted = [t for t in wanted if t == "streamgate"]
    return wanted


def start_targets(args: argparse.Namespace, work: Path) -> dict[str, Target]:
    needed = {t for w in args.workloads for t in targets_for(w, args)}
    started: dict[str, Target] = {}
    if needed & {"kafka", "kafka-flush1"}:
        reason = unavailable_reason()
        if reason:
            raise SystemExit(f"Kafka is needed for the side-by-side: {reason}")
    for name in TARGETS:
        if name not in needed:
            continue
        server: ManagedProcess
        if name == "streamgate":
            server = Gateway(
                work / "sg-data",
                work / "gateway.log",
                [*GATEWAY_ARGS, *args.gateway_arg],
                default_partitions=8,
            )
            server.start_fresh()
        elif name == "streamgate-2n":
            server = NodesCluster(
                work / "sg-nodes",
                2,
                [*GATEWAY_ARGS, *args.gateway_arg],
                default_partitions=8,
            )
            server.start()
        else:
            server = KafkaBroker(work / name, FSYNC_EVERY_MESSAGE if name == "kafka-flush1" else {})
            server.start()
        target = Target(name, server, server.bootstrap)  # type: ignore[attr-defined]
        started[name] = target
        print(f"{name}: pid {server.pid} on {target.bootstrap}", file=sys.stderr)
    return started


def run_all(
    args: argparse.Namespace,
    started: dict[str, Target],
    sizes: Sizes,
    display: Display,
    checkpoint: Callable[[dict[str, dict[str, list[Report]]], int], None],
) -> dict[str, dict[str, list[Report]]]:
    results: dict[str, dict[str, list[Report]]] = {}
    for run in range(args.runs):
        shared: Report = {}
        for workload in args.workloads:
            order = targets_for(workload, args)
            order = order[run % len(order) :] + order[: run % len(order)]  # rotate per run
            for name in order:
                display.log(f"run {run + 1}/{args.runs}: {workload} on {name}")
                # Write back every dirty page first: a target that acknowledges from the page
                # cache leaves gigabytes behind, and the next target's fsyncs would pay for
                # their writeback (ext4 commits them with its journal).
                synced_at = time.perf_counter()
                os.sync()
                sync_s = time.perf_counter() - synced_at
                started_at = time.perf_counter()
                cpu = cpu_meter(started[name].server)
                try:
                    result = RUNNERS[workload](started[name], sizes, shared, display)
                except Exception as exc:  # one failed run must not lose the others
                    result = {"ok": False, "error": repr(exc)}
                result["cpu"] = cpu.read().cores()
                result["wall_s"] = round(time.perf_counter() - started_at, 2)
                result["writeback_before_s"] = round(sync_s, 2)
                if not result.get("ok"):
                    display.log(f"  FAILED: {str(result.get('error', ''))[:300]}")
                results.setdefault(workload, {}).setdefault(name, []).append(result)
        checkpoint(results, run + 1)  # a long run that is stopped keeps what it measured
    return results


def server_figures(started: dict[str, Target]) -> Report:
    servers: Report = {}
    for name, t in started.items():
        servers[name] = {
            "bootstrap": t.bootstrap,
            "peak_rss_kib": t.server.peak_rss_kib(),
            "cpu_seconds": t.server.cpu_seconds(),
        }
        if isinstance(t.server, NodesCluster):  # the nodes, not their supervisor
            pids = server_pids(t.server)
            servers[name]["peak_rss_kib"] = sum(proc_status_kib(p, "VmHWM") or 0 for p in pids)
            servers[name]["cpu_seconds"] = sum(proc_cpu_seconds(p) or 0.0 for p in pids)
        if name.startswith("streamgate"):
            servers[name]["log_problems"] = log_problems(t.server.log_text())
    return servers


def write_outputs(
    args: argparse.Namespace,
    sizes: Sizes,
    code: Report,
    servers: Report,
    results: dict[str, dict[str, list[Report]]],
    runs_done: int,
) -> None:
    report: Report = {
        "runs": runs_done,
        "runs_asked": args.runs,
        "quick": args.quick,
        "sizes": vars_of(sizes),
        "code": code,
        "environment": environment(),
        "servers": servers,
        "results": results,
    }
    report["provenance"] = args.provenance  # the run's start: its own writes dirty the tree
    write_report(args.out.with_suffix(".json"), report)
    headers, rows = table(results)
    args.out.with_suffix(".md").write_text(markdown(headers, rows, report))
    plot(results, args.out.with_suffix(".png"))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=positive_int, default=3, help="runs per target (median)")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    p.add_argument("--workloads", type=choices(WORKLOADS), default=DEFAULT_WORKLOADS)
    p.add_argument(
        "--targets",
        type=choices(TARGETS),
        default=DEFAULT_TARGETS,
        help="streamgate-2n (serve --nodes 2, needs PostgreSQL) only when named",
    )
    p.add_argument(
        "--many-on-kafka",
        action="store_true",
        help="also run the 100,000-partition workload on Kafka",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="output path without suffix: writes .json, .md and .png",
    )
    p.add_argument(
        "--gateway-arg",
        action="append",
        default=[],
        help="an extra `streamgate serve` argument (repeatable)",
    )
    p.add_argument("--progress", choices=PROGRESS_MODES, default="auto")
    p.add_argument("--keep-data", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    sizes = Sizes.quick() if args.quick else Sizes()
    work = Path(tempfile.mkdtemp(prefix="streamgate-vs-kafka-"))
    display = Display(args.progress)
    started: dict[str, Target] = {}
    try:
        started = start_targets(args, work)
        code = code_state()
        # taken once, before this run's own result files make the tree dirty
        args.provenance = provenance()

        def checkpoint(results: dict[str, dict[str, list[Report]]], runs_done: int) -> None:
            write_outputs(args, sizes, code, server_figures(started), results, runs_done)

        results = run_all(args, started, sizes, display, checkpoint)
    finally:
        display.close()
        for t in started.values():
            t.server.close()
        if not args.keep_data:
            shutil.rmtree(work, ignore_errors=True)
    headers, rows = table(results)
    print_table("Kafka 3.5.1 vs streamgate (medians)", headers, rows)
    print(f"written: {args.out.with_suffix('.json')}, .md, .png")
    all_ok = all(r.get("ok") for by in results.values() for runs in by.values() for r in runs)
    return 0 if all_ok else 1


def vars_of(sizes: Sizes) -> Report:
    return {name: getattr(sizes, name) for name in sizes.__slots__}  # type: ignore[attr-defined]


if __name__ == "__main__":
    sys.exit(main())
