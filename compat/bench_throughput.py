"""Produce and consume throughput of confluent-kafka (librdkafka) against a Kafka endpoint.

By default a fresh ``streamgate serve`` is started on a free loopback port with a temporary
data dir and stopped afterwards; ``--bootstrap HOST:PORT`` measures a server that is already
running instead (streamgate or Apache Kafka, for comparison). See compat/README.md.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
import uuid
from array import array
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from compat.benchlib.display import PROGRESS_MODES, Display, print_table, rate_poll  # noqa: E402
from compat.benchlib.options import boolean, key_value, positive_int  # noqa: E402
from compat.benchlib.records import (  # noqa: E402
    KEY_FORMAT,
    MAX_SAMPLES,
    ConsumeVerifier,
    DeliveryTracker,
    ErrorLog,
    PhaseStalled,
    consume_all,
    dense_offset_problems,
    drain,
    latency_ms,
    make_payloads,
    split_range,
)
from compat.benchlib.report import code_state, environment, log_problems  # noqa: E402
from compat.benchlib.scenario import RunOptions, scenario_args, standalone  # noqa: E402
from compat.benchlib.topics import create_topic, delete_topic  # noqa: E402
from harness.gateway import Gateway  # noqa: E402
from harness.procstats import CpuMeter, CpuUsage  # noqa: E402

QUICK = ("--records", "20000")
MB = 1024 * 1024  # kafka-producer-perf-test's MB, so figures compare directly

Report = dict[str, Any]


# --------------------------------------------------------------------------- options


@dataclass(frozen=True, slots=True)
class BenchConfig:
    topic: str
    records: int
    record_size: int
    partitions: int
    replication_factor: int
    acks: str
    compression: str
    producers: int
    linger_ms: float
    batch_size: int | None
    batch_num_messages: int | None
    idempotence: bool | None
    producer_extra: dict[str, str]
    consumer_extra: dict[str, str]
    stall_timeout: float

    def to_json(self) -> Report:
        return asdict(self)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    add = parser.add_argument
    add(
        "--bootstrap",
        metavar="HOST:PORT",
        help="measure this running server instead of starting a gateway",
    )
    add(
        "--records",
        type=positive_int,
        default=200_000,
        metavar="N",
        help="records to produce and read back (default: %(default)s)",
    )
    add(
        "--record-size",
        type=positive_int,
        default=1024,
        metavar="BYTES",
        help="value bytes per record; each record also has a 12-byte key (default: %(default)s)",
    )
    add(
        "--partitions",
        type=positive_int,
        default=8,
        metavar="N",
        help="partitions of the topic (default: %(default)s)",
    )
    add(
        "--replication-factor",
        type=positive_int,
        default=1,
        metavar="N",
        help="replication factor of the topic (default: %(default)s)",
    )
    add("--topic", help="topic to create (default: a fresh bench-<random> name)")
    add(
        "--acks",
        default="all",
        choices=["all", "-1", "0", "1"],
        help="producer acks (default: %(default)s)",
    )
    add(
        "--compression",
        default="none",
        choices=["none", "gzip", "snappy", "lz4", "zstd"],
        help="compression.type (default: %(default)s)",
    )
    add(
        "--producers",
        type=positive_int,
        default=1,
        metavar="N",
        help="producer threads, each with its own Producer (default: %(default)s)",
    )
    add(
        "--linger-ms",
        type=float,
        default=5.0,
        metavar="MS",
        help="linger.ms (default: %(default)s)",
    )
    add(
        "--batch-size",
        type=positive_int,
        metavar="BYTES",
        help="batch.size (default: librdkafka's, 1000000)",
    )
    add(
        "--batch-num-messages",
        type=positive_int,
        metavar="N",
        help="batch.num.messages (default: librdkafka's, 10000)",
    )
    add(
        "--idempotence",
        type=boolean,
        metavar="true|false",
        help="enable.idempotence (default: librdkafka's, false)",
    )
    add(
        "-X",
        "--producer-config",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other librdkafka producer property (repeatable)",
    )
    add(
        "--consumer-config",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other librdkafka consumer property (repeatable)",
    )
    add(
        "--stall-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="give up on a phase after this long without progress (default: %(default)s)",
    )
    add(
        "--gateway-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for the started gateway (repeatable), "
        "e.g. --gateway-arg=--log-level=WARNING",
    )
    add(
        "--keep-data",
        action="store_true",
        help="keep the started gateway's temporary dir (data and gateway.log)",
    )
    add(
        "--keep-topic",
        action="store_true",
        help="with --bootstrap: leave the topic in place (it is deleted by default)",
    )
    add(
        "--progress",
        choices=PROGRESS_MODES,
        default="auto",
        help="auto (the default): rich bars on a terminal if rich is installed, "
        "else a line a second",
    )
    return parser


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    return BenchConfig(
        topic=args.topic or f"bench-{uuid.uuid4().hex[:10]}",
        records=args.records,
        record_size=args.record_size,
        partitions=args.partitions,
        replication_factor=args.replication_factor,
        acks=args.acks,
        compression=args.compression,
        producers=min(args.producers, args.records),
        linger_ms=args.linger_ms,
        batch_size=args.batch_size,
        batch_num_messages=args.batch_num_messages,
        idempotence=args.idempotence,
        producer_extra=dict(args.producer_config),
        consumer_extra=dict(args.consumer_config),
        stall_timeout=args.stall_timeout,
    )


# --------------------------------------------------------------------------- phases


@dataclass(slots=True)
class PhaseResult:
    phase: str
    records: int
    value_bytes: int
    seconds: float
    cpu: CpuUsage

    @property
    def mb(self) -> float:
        return self.value_bytes / MB

    @property
    def mb_per_s(self) -> float:
        return self.mb / self.seconds if self.seconds > 0 else 0.0

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> Report:
        return {
            "records": self.records,
            "mb": round(self.mb, 3),
            "seconds": round(self.seconds, 3),
            "mb_per_s": round(self.mb_per_s, 2),
            "records_per_s": round(self.records_per_s, 1),
            "cpu_seconds": self.cpu.to_json(),
        }


# --------------------------------------------------------------------------- produce


def producer_config(cfg: BenchConfig, bootstrap: str, errors: ErrorLog) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "acks": cfg.acks,
        "compression.type": cfg.compression,
        "linger.ms": cfg.linger_ms,
        "error_cb": errors.on_client_error,
    }
    optional = {
        "batch.size": cfg.batch_size,
        "batch.num.messages": cfg.batch_num_messages,
        "enable.idempotence": cfg.idempotence,
    }
    conf.update({k: v for k, v in optional.items() if v is not None})
    conf.update(cfg.producer_extra)
    return conf


def produce_share(
    producer: Producer,
    cfg: BenchConfig,
    indices: range,
    payloads: list[bytes],
    tracker: DeliveryTracker,
) -> None:
    """Round-robin over partitions by record index; the key is the index itself."""
    topic, partitions, pool = cfg.topic, cfg.partitions, len(payloads)
    sent_at = tracker.sent_at
    tracker.first_send = time.perf_counter()
    for i in indices:
        key, value, partition = KEY_FORMAT % i, payloads[i % pool], i % partitions
        blocked_since = 0.0
        while True:
            sent_at[i] = time.perf_counter()
            try:
                producer.produce(
                    topic, value=value, key=key, partition=partition, on_delivery=tracker
                )
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                blocked_since = blocked_since or sent_at[i]
                if sent_at[i] - blocked_since > cfg.stall_timeout:
                    raise PhaseStalled("producer queue stayed full") from None
                producer.poll(0.005)
        tracker.sent += 1
        producer.poll(0)


def _producer_thread(
    producer: Producer,
    cfg: BenchConfig,
    indices: range,
    payloads: list[bytes],
    tracker: DeliveryTracker,
) -> None:
    try:
        produce_share(producer, cfg, indices, payloads, tracker)
        tracker.unflushed = drain(producer, tracker, cfg.stall_timeout)
    except Exception as exc:  # keep it for the report rather than dying quietly in a thread
        tracker.add("exception", f"producer thread: {exc!r}")
        tracker.unflushed = len(producer)


@dataclass(slots=True)
class ProduceOutcome:
    result: PhaseResult
    per_partition: list[int]
    latencies: list[float]  # sorted, seconds
    errors: ErrorLog
    unflushed: int
    offset_problems: list[str]

    def ok(self, expected: int) -> bool:
        return (
            self.result.records == expected
            and self.errors.total() == 0
            and self.unflushed == 0
            and not self.offset_problems
        )

    def to_json(self, expected: int) -> Report:
        lat = self.latencies
        return {
            **self.result.to_json(),
            "ok": self.ok(expected),
            "per_partition": self.per_partition,
            "delivery_latency_ms": latency_ms(lat, 3),
            "errors": self.errors.to_json(),
            "unflushed": self.unflushed,
            "offset_problems": self.offset_problems[:MAX_SAMPLES],
        }


def run_produce(
    cfg: BenchConfig, bootstrap: str, display: Display, gateway: Gateway | None
) -> ProduceOutcome:
    sent_at = array("d", bytes(8 * cfg.records))
    payloads = make_payloads(cfg.record_size)
    shares = split_range(cfg.records, cfg.producers)
    trackers = [DeliveryTracker(sent_at, cfg.partitions) for _ in shares]
    producers = [Producer(producer_config(cfg, bootstrap, t)) for t in trackers]
    for producer in producers:  # connect and fetch metadata before the clock starts
        producer.list_topics(cfg.topic, timeout=10)
    threads = [
        threading.Thread(
            target=_producer_thread,
            args=(p, cfg, share, payloads, t),
            name=f"producer-{n}",
            daemon=True,
        )
        for n, (p, share, t) in enumerate(zip(producers, shares, trackers, strict=True))
    ]

    def done() -> int:
        return sum(t.delivered + t.failed for t in trackers)

    cpu = CpuMeter(gateway.cpu_seconds if gateway else None)
    with display.phase("produce", cfg.records, rate_poll(done)):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return _produce_outcome(cfg, trackers, cpu)


def _produce_outcome(
    cfg: BenchConfig, trackers: list[DeliveryTracker], cpu: CpuMeter
) -> ProduceOutcome:
    errors = ErrorLog()
    offsets: list[list[int]] = [[] for _ in range(cfg.partitions)]
    latencies: list[float] = []
    for tracker in trackers:
        errors.counts.update(tracker.counts)
        errors.samples.extend(tracker.samples[: MAX_SAMPLES - len(errors.samples)])
        latencies.extend(tracker.latencies)
        for partition, got in enumerate(tracker.offsets):
            offsets[partition].extend(got)
    delivered = sum(t.delivered for t in trackers)
    seconds = max(t.last_delivery for t in trackers) - min(t.first_send for t in trackers)
    result = PhaseResult(
        "produce", delivered, delivered * cfg.record_size, max(seconds, 0.0), cpu.read()
    )
    latencies.sort()
    # With acks=0 there is no answer, so delivery reports carry no offsets to check.
    problems = dense_offset_problems(offsets) if cfg.acks != "0" else []
    return ProduceOutcome(
        result,
        [len(o) for o in offsets],
        latencies,
        errors,
        sum(t.unflushed for t in trackers),
        problems,
    )


# --------------------------------------------------------------------------- consume


def consumer_config(cfg: BenchConfig, bootstrap: str, errors: ErrorLog) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex[:10]}",  # required by the binding; never joined
        "enable.auto.commit": False,
        "auto.offset.reset": "error",  # an out-of-range fetch should show, not silently skip
        "error_cb": errors.on_client_error,
    }
    conf.update(cfg.consumer_extra)
    return conf


def read_watermarks(
    consumer: Consumer, cfg: BenchConfig, errors: ErrorLog
) -> list[tuple[int, int]]:
    """(low, high) per partition; on failure the error is logged and the list is empty."""
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(cfg.topic, p), timeout=10)
            for p in range(cfg.partitions)
        ]
    except KafkaException as exc:
        errors.add("watermarks", f"reading watermarks: {exc}")
        return []


@dataclass(slots=True)
class ConsumeOutcome:
    result: PhaseResult
    verifier: ConsumeVerifier
    expected: list[int]
    watermarks: list[tuple[int, int]]
    completed: bool
    check_watermarks: bool  # with acks=0 they may legitimately lag behind the deliveries

    def problems(self) -> list[str]:
        found = []
        if not self.completed:
            found.append("stalled before reading everything")
        if self.result.records != sum(self.expected):
            found.append(f"read {self.result.records} records, expected {sum(self.expected)}")
        missing = self.verifier.missing(sum(self.expected))
        if missing:
            found.append(f"{missing} acknowledged records never read")
        if self.verifier.total():
            found.append(f"{self.verifier.total()} errors/anomalies")
        want = [(0, n) for n in self.expected]
        if self.check_watermarks and self.watermarks != want:
            found.append(f"watermarks {self.watermarks} != {want}")
        return found

    def to_json(self) -> Report:
        return {
            **self.result.to_json(),
            "ok": not self.problems(),
            "problems": self.problems(),
            "per_partition_expected": self.expected,
            "per_partition_end_offset": self.verifier.next_offset,
            "watermarks_before": [list(w) for w in self.watermarks],
            "errors": self.verifier.to_json(),
        }


def run_consume(
    cfg: BenchConfig, bootstrap: str, display: Display, gateway: Gateway | None, expected: list[int]
) -> ConsumeOutcome:
    verifier = ConsumeVerifier(cfg.records, cfg.partitions, make_payloads(cfg.record_size))
    consumer = Consumer(consumer_config(cfg, bootstrap, verifier))
    try:
        # Also connects to the partition leaders before the clock starts.
        watermarks = read_watermarks(consumer, cfg, verifier)
        cpu = CpuMeter(gateway.cpu_seconds if gateway else None)
        start = time.perf_counter()
        consumer.assign(
            [TopicPartition(cfg.topic, p, OFFSET_BEGINNING) for p in range(cfg.partitions)]
        )
        with display.phase("consume", sum(expected), rate_poll(lambda: verifier.consumed)):
            completed = consume_all(consumer, verifier, expected, cfg.stall_timeout)
        seconds = max(verifier.last_receive - start, 0.0)
        result = PhaseResult(
            "consume", verifier.consumed, verifier.consumed * cfg.record_size, seconds, cpu.read()
        )
    finally:
        consumer.close()
    return ConsumeOutcome(result, verifier, expected, watermarks, completed, cfg.acks != "0")


# --------------------------------------------------------------------------- reporting


def _table_rows(phases: list[PhaseResult]) -> list[list[str]]:
    return [
        [
            r.phase,
            f"{r.records:,}",
            f"{r.mb:,.1f}",
            f"{r.seconds:.2f}",
            f"{r.mb_per_s:,.1f}",
            f"{r.records_per_s:,.0f}",
            _cpu_cell(r.cpu.server),
            _cpu_cell(r.cpu.client),
            _cpu_cell(r.cpu.others()),
        ]
        for r in phases
    ]


def _cpu_cell(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}"


TABLE_HEADERS = [
    "phase",
    "records",
    "MB",
    "seconds",
    "MB/s",
    "records/s",
    "gateway CPU s",
    "client CPU s",
    "others CPU s",
]


def print_phases(phases: list[PhaseResult]) -> None:
    print_table("", TABLE_HEADERS, _table_rows(phases))


def print_summary(report: Report, produce: ProduceOutcome, consume: ConsumeOutcome) -> None:
    print_phases([produce.result, consume.result])
    lat = report["produce"]["delivery_latency_ms"]
    print(
        f"produce delivery latency: p50 {lat['p50']} ms, p99 {lat['p99']} ms, "
        f"max {lat['max']} ms ({len(produce.latencies):,} deliveries)"
    )
    print(
        f"produce errors: {produce.errors.total()}, unflushed: {produce.unflushed}; "
        f"consume errors/anomalies: {consume.verifier.total()}"
    )
    rss = report["target"].get("gateway_peak_rss_kib")
    if rss is not None:
        print(f"gateway peak RSS (VmHWM): {rss / 1024:.1f} MiB")
    if report["target"].get("gateway_exit_code") not in (None, 0):
        print(f"  ! gateway exit code after SIGTERM: {report['target']['gateway_exit_code']}")
    for sample in produce.errors.samples + consume.verifier.samples:
        print(f"  ! {sample}")
    for problem in produce.offset_problems[:MAX_SAMPLES] + consume.problems():
        print(f"  ! {problem}")
    print("result: OK" if report["ok"] else "result: FAILED")


def build_report(
    cfg: BenchConfig, target: Report, produce: ProduceOutcome, consume: ConsumeOutcome
) -> Report:
    produce_json = produce.to_json(cfg.records)
    consume_json = consume.to_json()
    return {
        "benchmark": "compat/bench_throughput.py",
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        # A gateway that crashes or hangs on SIGTERM is misbehaving too.
        "ok": produce_json["ok"]
        and consume_json["ok"]
        and target.get("gateway_exit_code") in (None, 0),
        "units": {
            "MB": "2**20 bytes of record values (keys not counted)",
            "seconds": "produce: first produce() to last delivery report; "
            "consume: assign() to last record received",
        },
        "target": target,
        "config": cfg.to_json(),
        "environment": environment(),
        "produce": produce_json,
        "consume": consume_json,
    }


# --------------------------------------------------------------------------- main


def run_phases(
    cfg: BenchConfig, bootstrap: str, display: Display, gateway: Gateway | None
) -> tuple[ProduceOutcome, ConsumeOutcome]:
    print(
        f"topic {cfg.topic}: {cfg.partitions} partitions, {cfg.records:,} records of "
        f"{cfg.record_size} bytes, acks={cfg.acks}, compression={cfg.compression}",
        file=sys.stderr,
    )
    create_topic(bootstrap, cfg.topic, cfg.partitions, cfg.replication_factor)
    produce = run_produce(cfg, bootstrap, display, gateway)
    consume = run_consume(cfg, bootstrap, display, gateway, produce.per_partition)
    return produce, consume


def gateway_target(gateway: Gateway, keep_data: bool) -> Report:
    """Read peak RSS while the process still exists, then stop it."""
    peak = gateway.peak_rss_kib()
    code = code_state()
    exit_code = gateway.stop(timeout=20)
    return {
        "kind": "managed streamgate",
        "bootstrap": gateway.bootstrap,
        "code": code,
        "command": gateway.command(),
        "gateway_peak_rss_kib": peak,
        "gateway_exit_code": exit_code,
        "gateway_log_problems": log_problems(gateway.log_text()),
        "gateway_log": str(gateway.log_path) if keep_data else None,
    }


def benchmark(args: argparse.Namespace, gateway: Gateway | None) -> Report:
    cfg = config_from_args(args)
    display = Display(args.progress)
    if gateway is not None:
        gateway.start_fresh()
        print(
            f"gateway pid {gateway.pid} listening on {gateway.bootstrap} (log {gateway.log_path})",
            file=sys.stderr,
        )
    bootstrap = args.bootstrap or (gateway.bootstrap if gateway else "")
    try:
        produce, consume = run_phases(cfg, bootstrap, display, gateway)
    finally:
        display.close()
    if gateway is not None:
        target = gateway_target(gateway, args.keep_data)
    else:
        target = {"kind": "external", "bootstrap": bootstrap}
        if not args.keep_topic:
            delete_topic(bootstrap, cfg.topic)
    report = build_report(cfg, target, produce, consume)
    print_summary(report, produce, consume)
    if not report["ok"] and gateway is not None:
        print(f"--- gateway log (tail) ---\n{gateway.log_tail()}", file=sys.stderr)
    return report


def run(options: RunOptions) -> Report:
    args = scenario_args(build_parser(), options, quick=QUICK)
    gateway = work_dir = None
    if not args.bootstrap:
        work_dir = Path(tempfile.mkdtemp(prefix="streamgate-bench-"))
        # default_partitions=None: the gateway's own default, as `streamgate serve` has it
        gateway = Gateway(
            work_dir / "data", work_dir / "gateway.log", args.gateway_arg, default_partitions=None
        )
    try:
        return benchmark(args, gateway)
    except Exception:
        if gateway is not None:
            print(f"--- gateway log (tail) ---\n{gateway.log_tail()}", file=sys.stderr)
        raise
    finally:
        if gateway is not None:
            gateway.close()
        if work_dir is not None and not args.keep_data:
            shutil.rmtree(work_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    return standalone("throughput", argv)


if __name__ == "__main__":
    sys.exit(main())
