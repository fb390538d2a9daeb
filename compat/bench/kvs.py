"""Apache Kafka 3.5.1 beside streamgate: the library that runs workload files
(workloads/*.toml, `compat.bench.workloads`) for `streamgate bench run`.

Starts Kafka (`harness.kafka.KafkaBroker`, KRaft, one node), a second Kafka that fsyncs
every message (`log.flush.interval.messages=1`, the broker-wide `flush.messages=1`:
streamgate's durability) and a fresh streamgate (`harness.gateway.Gateway`), as the
workloads need them, then runs every workload on its targets, alternating the targets run by
run (the order rotates) so the machine's noise hits all of them. Each run starts with every
server quiet and every dirty page written back (`wait_quiet`, then `os.sync`): what a target
leaves behind (Kafka's page cache to write back, streamgate's tier-2 uploads of what it just
took in) would otherwise land on whichever target runs next. Each figure is the median of
the runs. Writes JSON (with provenance), a Markdown table and a PNG.

A workload's `driver` picks the function below that executes it (`RUNNERS`); its other
values (records, record size, rate, partitions, linger, batch size, acks...) parameterise it.
The fsync-per-message Kafka runs only the workloads that name it (the latency ones);
`many` and `many-raw` run on streamgate only unless `--any-target`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from compat.bench.output import result_document, write_all
from compat.bench.workloads import STREAMGATE_VARIANTS, TARGETS, Workload, records_of
from compat.benchlib.display import Display, print_table, rate_poll
from compat.benchlib.records import latency_ms, make_payloads
from compat.benchlib.report import code_state, environment, log_problems
from compat.benchlib.runs import ProduceRun, TailConsumer, producer_config, read_all
from compat.benchlib.summary import get_path, median_range
from compat.benchlib.topics import create_topic, create_topics
from core.recordbatch import build_batch
from harness.gateway import Gateway
from harness.kafka import (
    FSYNC_EVERY_MESSAGE,
    KafkaBroker,
    run_tool,
    unavailable_reason,
)
from harness.moto import MotoServer
from harness.nodes_cluster import NodesCluster
from harness.process import ManagedProcess
from harness.procstats import CpuMeter, proc_cpu_seconds, proc_status_kib
from harness.provenance import provenance
from kafkaclient.client import KafkaClient, produce_body

Report = dict[str, Any]
TARGET_LABELS = {
    "kafka": "kafka",
    "kafka-flush1": "kafka\nflush=1",
    "streamgate": "streamgate",
    "streamgate-2n": "streamgate\n2 nodes",
    "streamgate-wal-object": "streamgate\nwal object",
    "streamgate-wal-s3": "streamgate\nwal S3",
}
# the ratio columns: each streamgate target shown, against Kafka
RATIO_LABELS = {
    "streamgate": "streamgate",
    "streamgate-2n": "2 nodes",
    "streamgate-wal-object": "wal object",
    "streamgate-wal-s3": "wal S3",
}
STALL_S = 60.0
# Kafka's harness starts groups at once (group.initial.rebalance.delay.ms=0): so does this one
GATEWAY_ARGS = ["--group-initial-rebalance-delay-ms", "0"]


@dataclass(slots=True)
class Target:
    name: str
    server: ManagedProcess
    bootstrap: str


# --------------------------------------------------------------------------- workloads


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _count(partitions: int | tuple[int, ...]) -> int:
    """A workload's partitions for one topic (the first when it lists several)."""
    return partitions[0] if isinstance(partitions, tuple) else partitions


def _conf(w: Workload) -> Report:
    """librdkafka settings from a workload: linger, acks, batch size."""
    conf: Report = {"linger.ms": w.linger_ms, "acks": w.acks}
    if w.batch_size is not None:
        conf["batch.size"] = w.batch_size
    return conf


_PRODUCER_LINE = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th"
)


def perf_producer(t: Target, w: Workload, shared: Report, display: Display) -> Report:
    topic = _topic("perf")
    create_topic(t.bootstrap, topic, _count(w.partitions))
    props = [f"bootstrap.servers={t.bootstrap}", f"acks={w.acks}", f"linger.ms={w.linger_ms:g}"]
    if w.batch_size is not None:
        props.append(f"batch.size={w.batch_size}")
    with display.phase(f"{t.name} {w.name}", None, lambda: (0, "")):
        out = run_tool(
            "kafka-producer-perf-test.sh",
            [
                "--topic",
                topic,
                "--num-records",
                str(w.records),
                "--record-size",
                str(w.record_size),
                "--throughput",
                str(int(w.rate)) if w.rate else "-1",
                "--producer-props",
                *props,
            ],
            timeout=600,
        )
    shared[f"perf-topic:{t.name}"] = topic
    matches = _PRODUCER_LINE.findall(out.stdout)
    if out.returncode != 0 or not matches:
        return {"ok": False, "error": (out.stdout + out.stderr)[-2000:]}
    sent, rps, mbps, avg, mx, p50, p95, p99 = matches[-1]
    return {
        "ok": int(sent) == w.records,
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


def perf_consumer(t: Target, w: Workload, shared: Report, display: Display) -> Report:
    topic = shared.get(f"perf-topic:{t.name}")
    if topic is None:  # run alone: write the topic first, with this workload's values
        perf_producer(t, w, shared, display)
        topic = shared[f"perf-topic:{t.name}"]
    with display.phase(f"{t.name} {w.name}", None, lambda: (0, "")):
        out = run_tool(
            "kafka-consumer-perf-test.sh",
            [
                "--bootstrap-server",
                t.bootstrap,
                "--topic",
                topic,
                "--messages",
                str(w.records),
                "--timeout",
                "60000",
            ],
            timeout=600,
        )
    return consumer_perf_figures(out, w.records)


def consumer_perf_figures(out: subprocess.CompletedProcess[str], records: int) -> Report:
    """The last line of kafka-consumer-perf-test.sh's output as figures ("ok": all of
    `records` read); {"ok": False, "error": ...} when it failed or printed none."""
    rows = [line.split(", ") for line in out.stdout.splitlines() if line.count(", ") >= 9]
    data = [r for r in rows if not r[0].startswith("start.time")]
    if out.returncode != 0 or not data:
        return {"ok": False, "error": (out.stdout + out.stderr)[-2000:]}
    r = data[-1]
    return {
        "ok": int(r[4]) >= records,
        "mb": float(r[2]),
        "mb_per_s": float(r[3]),
        "records": int(r[4]),
        "records_per_s": float(r[5]),
        "rebalance_ms": int(r[6]),  # the group join, inside the MB/s figure's time
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


def confluent(t: Target, w: Workload, shared: Report, display: Display) -> Report:
    topic = _topic("cfl")
    count = _count(w.partitions)
    create_topic(t.bootstrap, topic, count)
    run = _produce(
        t,
        topic,
        count,
        records_of(w),
        w.record_size,
        _conf(w),
        display,
        f"{t.name} {w.name} produce",
        rate=w.rate or None,
    )
    produced = run.summary(w.record_size)
    if not w.consume:
        ok = not run.stalled and produced["delivery_errors"] == 0
        return {"ok": ok, "produce": produced}
    read, _ = read_all(
        t.bootstrap,
        topic,
        run.per_partition(),
        run.payloads,
        {},
        STALL_S,
        display,
        f"{t.name} {w.name} consume",
    )
    ok = not run.stalled and produced["delivery_errors"] == 0 and read["ok"]
    return {"ok": ok, "produce": produced, "consume": read}


def small_producers(t: Target, w: Workload, shared: Report, display: Display) -> Report:
    """`clients` producers (threads, one librdkafka client each) sharing `records`."""
    topic = _topic("small")
    count = _count(w.partitions)
    create_topic(t.bootstrap, topic, count)
    clients = w.clients
    per = records_of(w) // clients
    payloads = make_payloads(w.record_size)
    runs = [ProduceRun(topic, count, payloads, per) for _ in range(clients)]
    conf = _conf(w)
    linger = conf.pop("linger.ms")
    producers = [
        Producer({**producer_config(t.bootstrap, linger, r.tracker), **conf}) for r in runs
    ]
    for p in producers:
        p.list_topics(topic, timeout=30)
    threads = [
        threading.Thread(
            target=r.run, args=(p, (w.rate / clients) or None, per, None, STALL_S), daemon=True
        )
        for r, p in zip(runs, producers, strict=True)
    ]
    started = time.perf_counter()
    with display.phase(
        f"{t.name} {clients} producers",
        per * clients,
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
        "ok": delivered == per * clients,
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


def rated(t: Target, w: Workload, shared: Report, display: Display) -> Report:
    """Produce at `rate` records/s for `duration_s`, with a tail consumer timing each record
    end to end when `tail_consumer` is on."""
    topic = _topic(f"rate{int(w.rate)}")
    parts = _count(w.partitions)
    create_topic(t.bootstrap, topic, parts)
    count = records_of(w)
    payloads = make_payloads(w.record_size)
    run = ProduceRun(topic, parts, payloads, count)
    tail = TailConsumer(t.bootstrap, topic, parts, run.sent_at, {}) if w.tail_consumer else None
    if tail is not None:
        tail.start()
    conf = _conf(w)
    producer = Producer(
        {**producer_config(t.bootstrap, conf.pop("linger.ms"), run.tracker), **conf}
    )
    producer.list_topics(topic, timeout=30)
    with display.phase(
        f"{t.name} {int(w.rate):,} rec/s", count, rate_poll(lambda: run.tracker.delivered)
    ):
        run.run(producer, w.rate or None, count, None, STALL_S)
    produced = run.summary(w.record_size)
    result: Report = {
        "ok": not run.stalled and produced["delivery_errors"] == 0,
        "produce": produced,
        "produce_latency_ms": produced["delivery_latency_ms"],
    }
    if tail is not None:
        tail.target = run.tracker.delivered
        tail.close(timeout=STALL_S)
        e2e = sorted(seconds for _, seconds in tail.latencies)
        result["ok"] = result["ok"] and tail.consumed >= run.tracker.delivered
        result["e2e_latency_ms"] = latency_ms(e2e)
        result["consumed"] = tail.consumed
        result["consumer_errors"] = tail.errors.to_json()
    return result


def partitions(t: Target, w: Workload, shared: Report, display: Display) -> Report:
    result: Report = {"ok": True}
    counts = w.partitions if isinstance(w.partitions, tuple) else (w.partitions,)
    for count in counts:
        topic = _topic(f"p{count}")
        create_topic(t.bootstrap, topic, count)
        cpu = cpu_meter(t.server)
        run = _produce(
            t,
            topic,
            count,
            records_of(w),
            w.record_size,
            _conf(w),
            display,
            f"{t.name} {count:,} partitions",
            rate=w.rate or None,
        )
        summary = run.summary(w.record_size)
        summary["cpu"] = cpu.read().cores()  # with many partitions the client is the limit
        result[f"p{count}"] = summary
        result["ok"] = result["ok"] and not run.stalled and summary["delivery_errors"] == 0
    narrow, wide = result[f"p{counts[0]}"]["mib_per_s"], result[f"p{counts[-1]}"]["mib_per_s"]
    result["narrow"], result["wide"] = result[f"p{counts[0]}"], result[f"p{counts[-1]}"]
    result["wide_over_narrow"] = round(wide / narrow, 3) if narrow else None
    return result


def many(t: Target, w: Workload, shared: Report, display: Display) -> Report:
    """One record into each partition of `topics` topics of `partitions` each."""
    per_topic = _count(w.partitions)
    topics = [_topic("many") for _ in range(w.topics)]
    for topic in topics:
        create_topic(t.bootstrap, topic, per_topic)
    total = w.topics * per_topic
    payloads = make_payloads(w.record_size)
    run = ProduceRun(topics[0], per_topic, payloads, total)
    conf = _conf(w)
    producer = Producer(
        {**producer_config(t.bootstrap, conf.pop("linger.ms"), run.tracker), **conf}
    )
    for topic in topics:
        producer.list_topics(topic, timeout=60)
    started = time.perf_counter()
    with display.phase(
        f"{t.name} {total:,} partitions x1", total, rate_poll(lambda: run.tracker.delivered)
    ):
        deadline = time.monotonic() + 2 * STALL_S  # librdkafka may never drain
        for i in range(total):
            topic, partition = topics[i // per_topic], i % per_topic
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


def many_raw(t: Target, w: Workload, shared: Report, display: Display) -> Report:
    """`many` with the repository's blocking protocol client (kafkaclient): one connection,
    Produce v9 requests of up to 1,000 partitions with a one-record batch each, acks=all,
    five requests in flight (as Kafka's clients allow by default).
    librdkafka spends minutes on 100,000 partitions itself (docs/performance.md), so this shows
    the server's cost. streamgate runs it on a gateway of its own: its RSS is then the
    cost of the partitions, not of the data the other workloads wrote."""
    if t.name != "streamgate":
        return _many_raw(t, w, display)
    work = Path(tempfile.mkdtemp(prefix="streamgate-many-"))
    gateway = Gateway(work / "data", work / "gateway.log", GATEWAY_ARGS, default_partitions=8)
    try:
        gateway.start_fresh()
        return _many_raw(Target(t.name, gateway, gateway.bootstrap), w, display)
    finally:
        gateway.close()
        shutil.rmtree(work, ignore_errors=True)


def _many_raw(t: Target, w: Workload, display: Display) -> Report:
    per_topic = _count(w.partitions)
    topics = [_topic("raw") for _ in range(w.topics)]
    created = time.perf_counter()
    create_topics(t.bootstrap, topics, per_topic)
    create_s = time.perf_counter() - created
    rss_created = server_rss_kib(t.server)
    batch = build_batch([(b"k", make_payloads(w.record_size)[0], [])])
    total = w.topics * per_topic
    done = errors = 0
    started = time.perf_counter()
    with (
        KafkaClient(t.bootstrap, timeout=120) as client,
        display.phase(f"{t.name} {total:,} partitions x1 (raw)", total, rate_poll(lambda: done)),
    ):
        # a partition refused with a retriable error (a new topic's leader not known yet on
        # Kafka) is sent again, as a client would, for up to STALL_S
        pending = [(topic, list(range(per_topic))) for topic in topics]
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
    peak = server_peak_rss_kib(t.server)
    return {
        "ok": done == total,
        "records": total,
        "delivered": done,
        "retried": errors,
        "seconds": round(seconds, 3),  # the writes (topic creation is create_s)
        "create_s": round(create_s, 3),
        "rss_mib": round(rss / 1024, 1) if rss else None,
        "rss_created_mib": round(rss_created / 1024, 1) if rss_created else None,
        "peak_rss_mib": round(peak / 1024, 1) if peak else None,  # VmHWM: the high-water mark
    }


def scale_out(t: Target, w: Workload, shared: Report, display: Display) -> Report:
    """Aggregate produce throughput of 1, 2, 4... nodes with clients in processes of their
    own (compat/bench/scaleout.py); on Kafka the same clients: their own limit."""
    from compat.bench.scaleout import scale_out as run

    display.log(f"{t.name} scale-out: {list(w.nodes)} nodes, {w.clients} client process(es) each")
    return run(t.name, t.bootstrap, w, _conf(w), GATEWAY_ARGS)


RUNNERS: dict[str, Callable[[Target, Workload, Report, Display], Report]] = {
    "perf-producer": perf_producer,
    "perf-consumer": perf_consumer,
    "confluent": confluent,
    "small-producers": small_producers,
    "rated": rated,
    "partitions": partitions,
    "many": many,
    "many-raw": many_raw,
    "scale-out": scale_out,
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
    ("produce 10 partitions MiB/s", "partitions", "narrow.mib_per_s", ".1f", True),
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
    ("many partitions create s, raw client", "many-raw", "create_s", ".1f", False),
    ("many partitions peak RSS MiB, raw client", "many-raw", "peak_rss_mib", ".0f", False),
    ("scale-out 1 node MiB/s", "scale-out", "n1.mib_per_s", ".1f", True),
    ("scale-out 2 nodes MiB/s", "scale-out", "n2.mib_per_s", ".1f", True),
    ("scale-out 4 nodes MiB/s", "scale-out", "n4.mib_per_s", ".1f", True),
    ("scale-out 8 nodes MiB/s", "scale-out", "n8.mib_per_s", ".1f", True),
]


def median_of(
    results: dict[str, dict[str, list[Report]]], target: str, workload: str, path: str
) -> float | None:
    runs = results.get(workload, {}).get(target, [])
    agg = median_range([get_path(r, path) for r in runs if r.get("ok")])
    return None if agg is None else agg[0]


# The workload whose rows stand for a driver's: a workload file of another name gets them,
# labelled with its name.
CANONICAL = {
    "perf-producer": "perf-producer",
    "perf-consumer": "perf-consumer",
    "confluent": "confluent",
    "small-producers": "small-16",
    "rated": "rate-2k",
    "partitions": "partitions",
    "many": "many",
    "many-raw": "many-raw",
    "scale-out": "scale-out",
}
Row = tuple[str, str, str, str, bool | None]


def rows_for(drivers: dict[str, str]) -> list[Row]:
    """The table's rows for workloads {name: driver}, in ROWS' order then the others'."""
    rows = [row for row in ROWS if row[1] in drivers]
    for name, driver in drivers.items():
        if not any(row[1] == name for row in ROWS):
            rows += [
                (f"{name}: {label}", name, path, fmt, higher)
                for label, canonical, path, fmt, higher in ROWS
                if canonical == CANONICAL[driver]
            ]
    return rows


def table(
    results: dict[str, dict[str, list[Report]]], rows_shown: list[Row]
) -> tuple[list[str], list[list[str]]]:
    shown = [t for t in TARGETS if any(t in by for by in results.values())]
    ours = [t for t in RATIO_LABELS if t in shown or t == "streamgate"]
    headers = ["workload", *shown, *(f"{RATIO_LABELS[t]} / kafka" for t in ours)]
    rows = []
    for label, workload, path, fmt, higher in rows_shown:
        if workload not in results:
            continue
        cells = [label]
        for target in shown:
            value = median_of(results, target, workload, path)
            cells.append("-" if value is None else format(value, fmt))
        kf = median_of(results, "kafka", workload, path)
        for target in ours:
            sg = median_of(results, target, workload, path)
            ratio = "-"
            if sg and kf and higher is not None:
                # ratio as "how many times better" so >= 1.00 always meets the goal
                ratio = f"{(sg / kf if higher else kf / sg):.2f}"
            cells.append(ratio)
        rows.append(cells)
    return headers, rows


def markdown(headers: list[str], rows: list[list[str]], doc: Report) -> str:
    prov, report = doc["provenance"], doc["figures"]
    lines = [
        "# Apache Kafka 3.5.1 beside streamgate",
        "",
        f"Commit `{prov.get('commit')}` (dirty: {prov.get('dirty')}), {prov.get('utc')}, "
        f"{(prov.get('machine') or {}).get('cpus')} CPUs{', quick sizes' if doc['quick'] else ''}, "
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


def plot(results: dict[str, dict[str, list[Report]]], rows_shown: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [row for row in rows_shown if row[1] in results]
    cols = 4
    nrows = max(1, -(-len(shown) // cols))
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 2.8 * nrows), squeeze=False)
    colours = {
        "kafka": "#4c72b0",
        "kafka-flush1": "#8172b2",
        "streamgate": "#dd8452",
        "streamgate-2n": "#c44e52",
        "streamgate-wal-object": "#55a868",
        "streamgate-wal-s3": "#937860",
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


def server_peak_rss_kib(server: ManagedProcess) -> int | None:
    """The server's peak RSS so far (VmHWM): for `serve --nodes`, the sum over its nodes."""
    pids = server_pids(server)
    return sum(proc_status_kib(p, "VmHWM") or 0 for p in pids) if pids else None


def server_pids(server: ManagedProcess) -> list[int]:
    """The processes that serve: for `serve --nodes`, its nodes (not their supervisor)."""
    if isinstance(server, NodesCluster):
        return [server.node_pid(i) for i in range(1, server.nodes + 1)]
    return [server.pid] if server.pid else []


# A server is quiet when it used at most this share of a core over a window; idle, Kafka
# uses about 0.02 (its timers) and streamgate less.
QUIET_CORES = 0.05
QUIET_WINDOW_S = 1.0
QUIET_MAX_S = 60.0


def wait_quiet(started: dict[str, Target], quick: bool = False) -> Report:
    """Wait until every server is quiet over one window (at most `QUIET_MAX_S`): the
    seconds waited, whether they all got quiet, and the CPU seconds each used meanwhile
    (work a run left behind, counted in no run's figures)."""
    window, limit = (
        (QUIET_WINDOW_S / 4, QUIET_MAX_S / 10) if quick else (QUIET_WINDOW_S, QUIET_MAX_S)
    )
    pids = {name: server_pids(t.server) for name, t in started.items()}

    def used(name: str) -> float:
        return sum(proc_cpu_seconds(p) or 0.0 for p in pids[name])

    began = time.perf_counter()
    spent = dict.fromkeys(pids, 0.0)
    while True:
        before = {name: used(name) for name in pids}
        time.sleep(window)
        busy = False
        for name in pids:
            cpu = used(name) - before[name]
            spent[name] += cpu
            busy = busy or cpu > QUIET_CORES * window
        waited = time.perf_counter() - began
        if not busy or waited >= limit:
            return {
                "waited_s": round(waited, 2),
                "quiet": not busy,
                "cpu_s": {name: round(cpu, 2) for name, cpu in spent.items()},
            }


def cpu_meter(server: ManagedProcess) -> CpuMeter:
    """CPU of the server and of this benchmark with the Java tools it ran: which side was
    the limit of a workload (`.read().cores()`)."""
    pids = server_pids(server)
    return CpuMeter(lambda: sum(proc_cpu_seconds(p) or 0.0 for p in pids), with_children=True)


@dataclass(slots=True)
class Options:
    """How `streamgate bench run` runs workloads: on which targets, how often, where to."""

    out: Path  # the output path without suffix: .json, .md and .png are written
    targets: list[str] | None = None  # None: each workload's own
    runs: int = 3
    quick: bool = False
    any_target: bool = False  # run on every named target, even one a workload leaves out
    gateway_args: list[str] = field(default_factory=list)
    progress: str = "auto"
    keep_data: bool = False
    provenance: Report = field(default_factory=dict)


def targets_for(w: Workload, o: Options) -> list[str]:
    """The targets `w` runs on: its own, or those asked that it names (streamgate-2n where
    it names streamgate); with `any_target`, all those asked."""
    if o.targets is None:
        return [t for t in TARGETS if t in w.targets]
    if o.any_target:
        return list(o.targets)
    allowed = set(w.targets) | (set(STREAMGATE_VARIANTS) if "streamgate" in w.targets else set())
    return [t for t in o.targets if t in allowed]


def start_targets(
    workloads: list[Workload], o: Options, work: Path, extra: list[ManagedProcess]
) -> dict[str, Target]:
    """Start every target the workloads need; what they need besides (a moto S3 server)
    goes into `extra`, for the caller to stop."""
    needed = {t for w in workloads for t in targets_for(w, o)}
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
                [*GATEWAY_ARGS, *o.gateway_args],
                default_partitions=8,
            )
            server.start_fresh()
        elif name in ("streamgate-wal-object", "streamgate-wal-s3"):
            wal_args = ["--wal", "object"]
            env: dict[str, str] = {}
            if name == "streamgate-wal-s3":
                moto = MotoServer(work / "moto")
                moto.start()
                extra.append(moto)
                wal_args += ["--tier2", "s3://bench/wal", "--s3-endpoint", moto.endpoint]
                env = moto.env()
            server = Gateway(
                work / name,
                work / f"{name}.log",
                [*GATEWAY_ARGS, *wal_args, *o.gateway_args],
                default_partitions=8,
                env=env,
            )
            server.start_fresh()
        elif name == "streamgate-2n":
            server = NodesCluster(
                work / "sg-nodes",
                2,
                [*GATEWAY_ARGS, *o.gateway_args],
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


Results = dict[str, dict[str, list[Report]]]


def run_all(
    workloads: list[Workload],
    o: Options,
    started: dict[str, Target],
    display: Display,
    checkpoint: Callable[[Results, int], None],
) -> Results:
    results: Results = {}
    for run in range(o.runs):
        shared: Report = {}
        for w in workloads:
            order = targets_for(w, o)
            if not order:
                continue
            order = order[run % len(order) :] + order[: run % len(order)]  # rotate per run
            for name in order:
                display.log(f"run {run + 1}/{o.runs}: {w.name} on {name}")
                quiet = wait_quiet(started, o.quick)
                # Write back every dirty page first: a target that acknowledges from the page
                # cache leaves gigabytes behind, and the next target's fsyncs would pay for
                # their writeback (ext4 commits them with its journal).
                synced_at = time.perf_counter()
                os.sync()
                sync_s = time.perf_counter() - synced_at
                started_at = time.perf_counter()
                cpu = cpu_meter(started[name].server)
                try:
                    result = RUNNERS[w.driver](started[name], w, shared, display)
                except Exception as exc:  # one failed run must not lose the others
                    result = {"ok": False, "error": repr(exc)}
                result["cpu"] = cpu.read().cores()
                result["wall_s"] = round(time.perf_counter() - started_at, 2)
                result["writeback_before_s"] = round(sync_s, 2)
                result["quiet_before"] = quiet
                if not result.get("ok"):
                    display.log(f"  FAILED: {str(result.get('error', ''))[:300]}")
                results.setdefault(w.name, {}).setdefault(name, []).append(result)
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


def all_ok(results: Results) -> bool:
    return all(r.get("ok") for by in results.values() for runs in by.values() for r in runs)


def write_outputs(
    workloads: list[Workload],
    o: Options,
    code: Report,
    servers: Report,
    results: Results,
    runs_done: int,
) -> None:
    figures: Report = {
        "runs": runs_done,
        "runs_asked": o.runs,
        "workloads": {w.name: asdict(w) for w in workloads},
        "code": code,
        "environment": environment(),
        "servers": servers,
        "results": results,
    }
    doc = result_document(
        name=o.out.name,
        kind="workload",
        figures=figures,
        provenance=o.provenance,  # the run's start: its own writes dirty the tree
        quick=o.quick,
        options={
            "out": str(o.out.parent),
            "quick": o.quick,
            "runs": o.runs,
            "targets": o.targets,
            "any_target": o.any_target,
            "gateway_args": o.gateway_args,
        },
        ok=all_ok(results) and runs_done == o.runs,
        files=[o.out.with_suffix(".png").name],
    )
    shown = rows_for({w.name: w.driver for w in workloads})
    headers, rows = table(results, shown)
    write_all(o.out, doc, markdown(headers, rows, doc), lambda p: plot(results, shown, p))


def run_workloads(workloads: list[Workload], o: Options) -> int:
    """Runs `workloads` as `o` says, writes the report (`o.out` .json, .md, .png), prints the
    table of medians; 0 when every run succeeded."""
    work = Path(tempfile.mkdtemp(prefix="streamgate-vs-kafka-"))
    display = Display(o.progress)
    started: dict[str, Target] = {}
    extra: list[ManagedProcess] = []
    results: Results = {}
    try:
        started = start_targets(workloads, o, work, extra)
        code = code_state()
        # taken once, before this run's own result files make the tree dirty
        o.provenance = o.provenance or provenance()

        def checkpoint(results: Results, runs_done: int) -> None:
            write_outputs(workloads, o, code, server_figures(started), results, runs_done)

        results = run_all(workloads, o, started, display, checkpoint)
    finally:
        display.close()
        for t in started.values():
            t.server.close()
        for process in extra:
            process.close()
        if not o.keep_data:
            shutil.rmtree(work, ignore_errors=True)
    headers, rows = table(results, rows_for({w.name: w.driver for w in workloads}))
    print_table("Kafka 3.5.1 vs streamgate (medians)", headers, rows)
    print(f"written: {o.out.with_suffix('.json')}, .md, .png")
    return 0 if all_ok(results) else 1
