"""Produce and consume throughput of confluent-kafka (librdkafka) against a Kafka endpoint.

By default a fresh ``streamgate serve`` is started on a free loopback port with a temporary
data dir and stopped afterwards; ``--bootstrap HOST:PORT`` measures a server that is already
running instead (streamgate or Apache Kafka, for comparison). See compat/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO_ROOT / "compat" / "results" / "throughput.json"
MB = 1024 * 1024  # kafka-producer-perf-test's MB, so figures compare directly
KEY_FORMAT = b"%012d"  # keys are the record index, zero padded
PAYLOAD_POOL_BYTES = 8 * MB  # > batch.size, so no two records in one batch share a value
GATEWAY_START_TIMEOUT = 30.0
GATEWAY_STOP_TIMEOUT = 20.0
ADMIN_TIMEOUT = 30.0
MAX_SAMPLES = 10  # error / anomaly messages kept verbatim in the report
HAVE_RICH = importlib.util.find_spec("rich") is not None

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


def _positive_int(value: str) -> int:
    number = int(value.replace("_", ""))
    if number <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return number


def _bool(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def _key_value(value: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {value!r}")
    return key, val


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    add = parser.add_argument
    add("--bootstrap", metavar="HOST:PORT",
        help="measure this running server instead of starting a gateway")
    add("--records", type=_positive_int, default=200_000, metavar="N",
        help="records to produce and read back (default: %(default)s)")
    add("--record-size", type=_positive_int, default=1024, metavar="BYTES",
        help="value bytes per record; each record also has a 12-byte key "
             "(default: %(default)s)")
    add("--partitions", type=_positive_int, default=8, metavar="N",
        help="partitions of the topic (default: %(default)s)")
    add("--replication-factor", type=_positive_int, default=1, metavar="N",
        help="replication factor of the topic (default: %(default)s)")
    add("--topic", help="topic to create (default: a fresh bench-<random> name)")
    add("--acks", default="all", choices=["all", "-1", "0", "1"],
        help="producer acks (default: %(default)s)")
    add("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"],
        help="compression.type (default: %(default)s)")
    add("--producers", type=_positive_int, default=1, metavar="N",
        help="producer threads, each with its own Producer (default: %(default)s)")
    add("--linger-ms", type=float, default=5.0, metavar="MS",
        help="linger.ms (default: %(default)s)")
    add("--batch-size", type=_positive_int, metavar="BYTES",
        help="batch.size (default: librdkafka's, 1000000)")
    add("--batch-num-messages", type=_positive_int, metavar="N",
        help="batch.num.messages (default: librdkafka's, 10000)")
    add("--idempotence", type=_bool, metavar="true|false",
        help="enable.idempotence (default: librdkafka's, false)")
    add("-X", "--producer-config", type=_key_value, action="append", default=[],
        metavar="KEY=VALUE", help="any other librdkafka producer property (repeatable)")
    add("--consumer-config", type=_key_value, action="append", default=[],
        metavar="KEY=VALUE", help="any other librdkafka consumer property (repeatable)")
    add("--stall-timeout", type=float, default=60.0, metavar="SECONDS",
        help="give up on a phase after this long without progress (default: %(default)s)")
    add("--gateway-arg", action="append", default=[], metavar="ARG",
        help="extra argument for the started gateway (repeatable), "
             "e.g. --gateway-arg=--log-level=WARNING")
    add("--keep-data", action="store_true",
        help="keep the started gateway's temporary dir (data and gateway.log)")
    add("--keep-topic", action="store_true",
        help="with --bootstrap: leave the topic in place (it is deleted by default)")
    add("--progress", choices=["auto", "rich", "plain", "none"], default="auto",
        help="auto (the default): rich bars on a terminal if rich is installed, "
             "else a line a second")
    add("--output", type=Path, default=DEFAULT_OUTPUT, metavar="PATH",
        help="where the JSON figures go (default: compat/results/throughput.json)")
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


# --------------------------------------------------------------------------- progress


Render = Callable[[int, float], None]


def resolve_progress_mode(requested: str) -> str:
    if requested == "rich" and not HAVE_RICH:
        raise SystemExit("--progress rich: rich is not installed (pip install rich)")
    if requested != "auto":
        return requested
    return "rich" if HAVE_RICH and sys.stderr.isatty() else "plain"


def _rich_view(label: str, total: int) -> tuple[Render, Callable[[], None]]:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    bar = Progress(
        TextColumn("{task.description:<8}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]:>16}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    )
    task = bar.add_task(label, total=total, rate="")
    bar.start()

    def render(done: int, elapsed: float) -> None:
        rate = f"{done / elapsed:,.0f} rec/s" if elapsed > 0 else ""
        bar.update(task, completed=done, rate=rate)

    return render, bar.stop


def _plain_view(label: str, total: int) -> tuple[Render, Callable[[], None]]:
    def render(done: int, elapsed: float) -> None:
        rate = done / elapsed if elapsed > 0 else 0.0
        print(f"[{label}] {done:,}/{total:,} records ({100 * done / total:.0f}%), "
              f"{rate:,.0f} rec/s, {elapsed:.1f} s", file=sys.stderr, flush=True)

    return render, lambda: None


@contextlib.contextmanager
def progress(mode: str, label: str, total: int, done: Callable[[], int]) -> Iterator[None]:
    """Shows done() of total while the body runs; a watcher thread polls, so hot loops don't."""
    if mode == "none":
        yield
        return
    render, close = _rich_view(label, total) if mode == "rich" else _plain_view(label, total)
    interval = 0.2 if mode == "rich" else 1.0
    started = time.perf_counter()
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(interval):
            render(done(), time.perf_counter() - started)

    watcher = threading.Thread(target=watch, name=f"progress-{label}", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
        render(done(), time.perf_counter() - started)
        close()


# --------------------------------------------------------------------------- the gateway


class GatewayError(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _proc_status_kib(pid: int, field_name: str) -> int | None:
    """A `kB` line of /proc/PID/status, e.g. VmHWM (peak resident set size)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name == field_name:
                return int(rest.split()[0])
    return None


def _proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process, from /proc/PID/stat."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ManagedGateway:
    """`python -m gateway serve` as a child on a free loopback port with a throwaway data dir."""

    def __init__(self, extra_args: list[str], keep_data: bool) -> None:
        self.work_dir = Path(tempfile.mkdtemp(prefix="streamgate-bench-"))
        self.log_path = self.work_dir / "gateway.log"
        self.port = _free_port()
        self.extra_args = extra_args
        self.keep_data = keep_data
        self.proc: subprocess.Popen[bytes] | None = None
        self.exit_code: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def command(self) -> list[str]:
        return [sys.executable, "-m", "gateway", "serve", "--listen", self.bootstrap,
                "--data-dir", str(self.work_dir / "data"), *self.extra_args]

    def start(self) -> None:
        # STREAMGATE_* variables would silently change the server under test.
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGATE_")}
        env["PYTHONUNBUFFERED"] = "1"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(self.command(), cwd=REPO_ROOT, env=env,
                                         stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT)
        self._wait_until_listening()

    def _wait_until_listening(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + GATEWAY_START_TIMEOUT
        while time.monotonic() < deadline:
            if "listening on" in self.log_text():
                return
            code = self.proc.poll()
            if code is not None:
                raise GatewayError(f"gateway exited with code {code} during start-up")
            time.sleep(0.05)
        raise GatewayError(f"gateway did not print 'listening on' within "
                           f"{GATEWAY_START_TIMEOUT:.0f} s")

    def peak_rss_kib(self) -> int | None:
        return _proc_status_kib(self.pid, "VmHWM") if self.proc else None

    def cpu_seconds(self) -> float | None:
        return _proc_cpu_seconds(self.pid) if self.proc else None

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL if it does not exit in time; returns the exit code."""
        if self.proc is None or self.exit_code is not None:
            return self.exit_code
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=GATEWAY_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                print(f"gateway ignored SIGTERM for {GATEWAY_STOP_TIMEOUT:.0f} s; killing it",
                      file=sys.stderr)
                self.proc.kill()
                self.proc.wait()
        self.exit_code = self.proc.returncode
        return self.exit_code

    def cleanup(self) -> None:
        if not self.keep_data:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


# --------------------------------------------------------------------------- shared helpers


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


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _machine_busy_seconds() -> float | None:
    """CPU time all processes on this machine have used, from /proc/stat (idle excluded)."""
    try:
        first_line = Path("/proc/stat").read_text().splitlines()[0]
    except OSError:
        return None
    # cpu user nice system idle iowait irq softirq steal ...
    ticks = [int(x) for x in first_line.split()[1:9]]
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / os.sysconf("SC_CLK_TCK")


def _delta(end: float | None, start: float | None) -> float | None:
    return None if end is None or start is None else end - start


@dataclass(frozen=True, slots=True)
class CpuUsage:
    client: float  # this process, all threads (librdkafka's included)
    gateway: float | None  # only known for a gateway this script started
    machine: float | None

    def others(self) -> float | None:
        """What everything else on the machine used: a sign the figures are disturbed."""
        if self.machine is None:
            return None
        return max(0.0, self.machine - self.client - (self.gateway or 0.0))

    def to_json(self) -> Report:
        return {"client": round(self.client, 2), "gateway": _round(self.gateway, 2),
                "other_processes": _round(self.others(), 2)}


class CpuMeter:
    """Measures CpuUsage from its creation to each read()."""

    def __init__(self, gateway: ManagedGateway | None) -> None:
        self.gateway = gateway
        self.start = self._sample()

    def _sample(self) -> tuple[float, float | None, float | None]:
        gateway = self.gateway.cpu_seconds() if self.gateway else None
        return time.process_time(), gateway, _machine_busy_seconds()

    def read(self) -> CpuUsage:
        client, gateway, machine = self._sample()
        return CpuUsage(client - self.start[0], _delta(gateway, self.start[1]),
                        _delta(machine, self.start[2]))


class ErrorLog:
    """Counts errors by name and keeps the first few messages verbatim."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.samples: list[str] = []

    def add(self, name: str, text: str) -> None:
        self.counts[name] += 1
        if len(self.samples) < MAX_SAMPLES:
            self.samples.append(text)

    def on_client_error(self, err: KafkaError) -> None:
        """librdkafka's error_cb: client-level trouble (connections, brokers down...)."""
        self.add(f"client:{err.name()}", f"client error: {err.str()}")

    def total(self) -> int:
        return sum(self.counts.values())

    def to_json(self) -> Report:
        return {"total": self.total(), "by_name": dict(self.counts), "samples": self.samples}


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def create_topic(bootstrap: str, cfg: BenchConfig) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.list_topics(timeout=10)  # fails fast, with a clear error, if nothing answers
    new_topic = NewTopic(cfg.topic, num_partitions=cfg.partitions,
                         replication_factor=cfg.replication_factor)
    futures = admin.create_topics([new_topic], operation_timeout=ADMIN_TIMEOUT)
    futures[cfg.topic].result(timeout=ADMIN_TIMEOUT)
    deadline = time.monotonic() + ADMIN_TIMEOUT
    while _partition_count(admin, cfg.topic) != cfg.partitions:
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {cfg.topic} did not show {cfg.partitions} partitions")
        time.sleep(0.1)


def _partition_count(admin: AdminClient, topic: str) -> int:
    metadata = admin.list_topics(topic, timeout=10).topics.get(topic)
    if metadata is None or metadata.error is not None:
        return -1
    return len(metadata.partitions)


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], operation_timeout=ADMIN_TIMEOUT)[topic].result(
        timeout=ADMIN_TIMEOUT)


def make_payloads(record_size: int) -> list[bytes]:
    """Random (incompressible) values; a pool larger than a batch so none repeats in one."""
    count = max(1, PAYLOAD_POOL_BYTES // record_size)
    rng = random.Random(20240601)
    return [rng.randbytes(record_size) for _ in range(count)]


# --------------------------------------------------------------------------- produce


class DeliveryTracker(ErrorLog):
    """One Producer's delivery callback: latency, per-partition offsets, errors."""

    def __init__(self, sent_at: array[float], partitions: int) -> None:
        super().__init__()
        self.sent_at = sent_at  # produce() time per record index, shared by all producers
        self.sent = 0
        self.delivered = 0
        self.failed = 0
        self.unflushed = 0
        self.first_send = math.inf
        self.last_delivery = 0.0
        self.latencies: list[float] = []
        self.offsets: list[list[int]] = [[] for _ in range(partitions)]

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        now = time.perf_counter()
        self.last_delivery = now
        if err is not None:
            self.failed += 1
            self.add(err.name(), f"partition {msg.partition()}: {err.str()}")
            return
        self.delivered += 1
        self.latencies.append(now - self.sent_at[int(msg.key())])
        self.offsets[msg.partition()].append(msg.offset())


class PhaseStalled(RuntimeError):
    pass


def producer_config(cfg: BenchConfig, bootstrap: str, errors: ErrorLog) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "acks": cfg.acks,
        "compression.type": cfg.compression,
        "linger.ms": cfg.linger_ms,
        "error_cb": errors.on_client_error,
    }
    optional = {"batch.size": cfg.batch_size, "batch.num.messages": cfg.batch_num_messages,
                "enable.idempotence": cfg.idempotence}
    conf.update({k: v for k, v in optional.items() if v is not None})
    conf.update(cfg.producer_extra)
    return conf


def produce_share(producer: Producer, cfg: BenchConfig, indices: range,
                  payloads: list[bytes], tracker: DeliveryTracker) -> None:
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
                producer.produce(topic, value=value, key=key, partition=partition,
                                 on_delivery=tracker)
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                blocked_since = blocked_since or sent_at[i]
                if sent_at[i] - blocked_since > cfg.stall_timeout:
                    raise PhaseStalled("producer queue stayed full") from None
                producer.poll(0.005)
        tracker.sent += 1
        producer.poll(0)


def drain(producer: Producer, tracker: DeliveryTracker, stall_timeout: float) -> int:
    """flush() until all is delivered or nothing moves for stall_timeout; returns what's left."""
    last_done, last_move = -1, time.monotonic()
    while (left := producer.flush(1.0)) > 0:
        done = tracker.delivered + tracker.failed
        if done != last_done:
            last_done, last_move = done, time.monotonic()
        elif time.monotonic() - last_move > stall_timeout:
            return left
    return 0


def _producer_thread(producer: Producer, cfg: BenchConfig, indices: range,
                     payloads: list[bytes], tracker: DeliveryTracker) -> None:
    try:
        produce_share(producer, cfg, indices, payloads, tracker)
        tracker.unflushed = drain(producer, tracker, cfg.stall_timeout)
    except Exception as exc:  # keep it for the report rather than dying quietly in a thread
        tracker.add("exception", f"producer thread: {exc!r}")
        tracker.unflushed = len(producer)


def split_range(total: int, parts: int) -> list[range]:
    bounds = [total * k // parts for k in range(parts + 1)]
    return [range(lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False)]


def dense_offset_problems(offsets: list[list[int]]) -> list[str]:
    """Delivered offsets of each partition should be exactly 0..n-1."""
    problems = []
    for partition, got in enumerate(offsets):
        if sorted(got) != list(range(len(got))):
            problems.append(f"partition {partition}: {len(got)} deliveries, offsets "
                            f"{min(got, default=None)}..{max(got, default=None)} not dense")
    return problems


@dataclass(slots=True)
class ProduceOutcome:
    result: PhaseResult
    per_partition: list[int]
    latencies: list[float]  # sorted, seconds
    errors: ErrorLog
    unflushed: int
    offset_problems: list[str]

    def ok(self, expected: int) -> bool:
        return (self.result.records == expected and self.errors.total() == 0
                and self.unflushed == 0 and not self.offset_problems)

    def to_json(self, expected: int) -> Report:
        lat = self.latencies
        latency_ms = {name: _round(percentile(lat, q) * 1000, 3)
                      for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))}
        return {**self.result.to_json(), "ok": self.ok(expected),
                "per_partition": self.per_partition, "delivery_latency_ms": latency_ms,
                "errors": self.errors.to_json(), "unflushed": self.unflushed,
                "offset_problems": self.offset_problems[:MAX_SAMPLES]}


def run_produce(cfg: BenchConfig, bootstrap: str, mode: str,
                gateway: ManagedGateway | None) -> ProduceOutcome:
    sent_at = array("d", bytes(8 * cfg.records))
    payloads = make_payloads(cfg.record_size)
    shares = split_range(cfg.records, cfg.producers)
    trackers = [DeliveryTracker(sent_at, cfg.partitions) for _ in shares]
    producers = [Producer(producer_config(cfg, bootstrap, t)) for t in trackers]
    for producer in producers:  # connect and fetch metadata before the clock starts
        producer.list_topics(cfg.topic, timeout=10)
    threads = [threading.Thread(target=_producer_thread, args=(p, cfg, share, payloads, t),
                                name=f"producer-{n}", daemon=True)
               for n, (p, share, t) in enumerate(zip(producers, shares, trackers, strict=True))]

    def done() -> int:
        return sum(t.delivered + t.failed for t in trackers)

    cpu = CpuMeter(gateway)
    with progress(mode, "produce", cfg.records, done):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return _produce_outcome(cfg, trackers, cpu)


def _produce_outcome(cfg: BenchConfig, trackers: list[DeliveryTracker],
                     cpu: CpuMeter) -> ProduceOutcome:
    errors = ErrorLog()
    offsets: list[list[int]] = [[] for _ in range(cfg.partitions)]
    latencies: list[float] = []
    for tracker in trackers:
        errors.counts.update(tracker.counts)
        errors.samples.extend(tracker.samples[:MAX_SAMPLES - len(errors.samples)])
        latencies.extend(tracker.latencies)
        for partition, got in enumerate(tracker.offsets):
            offsets[partition].extend(got)
    delivered = sum(t.delivered for t in trackers)
    seconds = max(t.last_delivery for t in trackers) - min(t.first_send for t in trackers)
    result = PhaseResult("produce", delivered, delivered * cfg.record_size, max(seconds, 0.0),
                         cpu.read())
    latencies.sort()
    # With acks=0 there is no answer, so delivery reports carry no offsets to check.
    problems = dense_offset_problems(offsets) if cfg.acks != "0" else []
    return ProduceOutcome(result, [len(o) for o in offsets], latencies, errors,
                          sum(t.unflushed for t in trackers), problems)


# --------------------------------------------------------------------------- consume


class ConsumeVerifier(ErrorLog):
    """Checks what comes back: dense offsets per partition, every key once, the same value."""

    def __init__(self, records: int, partitions: int, payloads: list[bytes]) -> None:
        super().__init__()
        self.payloads = payloads
        self.next_offset = [0] * partitions
        self.seen = bytearray(records)
        self.consumed = 0
        self.last_receive = 0.0

    def add_message(self, msg: Message) -> None:
        err = msg.error()
        if err is not None:
            self.add(err.name(), f"partition {msg.partition()}: {err.str()}")
            return
        self.consumed += 1
        partition, offset = msg.partition(), msg.offset()
        if offset != self.next_offset[partition]:
            self.add("offset_gap", f"partition {partition}: expected offset "
                                   f"{self.next_offset[partition]}, got {offset}")
        self.next_offset[partition] = offset + 1
        self._check_record(msg.key(), msg.value())

    def _check_record(self, key: bytes | None, value: bytes | None) -> None:
        try:
            index = int(key or b"")
        except ValueError:
            index = -1
        if not 0 <= index < len(self.seen):
            self.add("unknown_key", f"unexpected key {key!r}")
        elif self.seen[index]:
            self.add("duplicate", f"record {index} read twice")
        else:
            self.seen[index] = 1
        if index >= 0 and value != self.payloads[index % len(self.payloads)]:
            self.add("wrong_value", f"record {index}: value differs from what was produced "
                                    f"({len(value or b'')} bytes)")

    def complete(self, expected: list[int]) -> bool:
        return all(got >= want for got, want in zip(self.next_offset, expected, strict=True))

    def missing(self, delivered: int) -> int:
        """Acknowledged records that never came back (read ones are all distinct keys)."""
        return max(0, delivered - self.seen.count(1))


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


def read_watermarks(consumer: Consumer, cfg: BenchConfig,
                    errors: ErrorLog) -> list[tuple[int, int]]:
    """(low, high) per partition; on failure the error is logged and the list is empty."""
    try:
        return [consumer.get_watermark_offsets(TopicPartition(cfg.topic, p), timeout=10)
                for p in range(cfg.partitions)]
    except KafkaException as exc:
        errors.add("watermarks", f"reading watermarks: {exc}")
        return []


def consume_all(consumer: Consumer, verifier: ConsumeVerifier, expected: list[int],
                stall_timeout: float) -> bool:
    """Reads until every partition reached its expected end; False if it stalled."""
    total = sum(expected)
    last_move = time.monotonic()
    while not verifier.complete(expected):
        # Never ask for more than is left: consume() waits out its timeout for a full batch.
        want = max(1, min(1000, total - verifier.consumed))
        messages = consumer.consume(num_messages=want, timeout=0.2)
        if messages:
            for msg in messages:
                verifier.add_message(msg)
            verifier.last_receive = time.perf_counter()
            last_move = time.monotonic()
        elif time.monotonic() - last_move > stall_timeout:
            return False
    return True


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
        return {**self.result.to_json(), "ok": not self.problems(), "problems": self.problems(),
                "per_partition_expected": self.expected,
                "per_partition_end_offset": self.verifier.next_offset,
                "watermarks_before": [list(w) for w in self.watermarks],
                "errors": self.verifier.to_json()}


def run_consume(cfg: BenchConfig, bootstrap: str, mode: str, gateway: ManagedGateway | None,
                expected: list[int]) -> ConsumeOutcome:
    verifier = ConsumeVerifier(cfg.records, cfg.partitions, make_payloads(cfg.record_size))
    consumer = Consumer(consumer_config(cfg, bootstrap, verifier))
    try:
        # Also connects to the partition leaders before the clock starts.
        watermarks = read_watermarks(consumer, cfg, verifier)
        cpu = CpuMeter(gateway)
        start = time.perf_counter()
        consumer.assign([TopicPartition(cfg.topic, p, OFFSET_BEGINNING)
                         for p in range(cfg.partitions)])
        with progress(mode, "consume", sum(expected), lambda: verifier.consumed):
            completed = consume_all(consumer, verifier, expected, cfg.stall_timeout)
        seconds = max(verifier.last_receive - start, 0.0)
        result = PhaseResult("consume", verifier.consumed, verifier.consumed * cfg.record_size,
                             seconds, cpu.read())
    finally:
        consumer.close()
    return ConsumeOutcome(result, verifier, expected, watermarks, completed, cfg.acks != "0")


# --------------------------------------------------------------------------- reporting


def _version_string(version: str | tuple[str, int]) -> str:
    # Older bindings return (string, int) like libversion(); newer ones just the string.
    return version if isinstance(version, str) else version[0]


def environment() -> Report:
    return {
        "python": platform.python_version(),
        "confluent_kafka": _version_string(confluent_kafka.version()),
        "librdkafka": confluent_kafka.libversion()[0],
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        # Other work on the machine skews the figures; this shows whether there was any.
        "loadavg_1m_5m_15m_at_end": [round(x, 2) for x in os.getloadavg()],
    }


def _table_rows(phases: list[PhaseResult]) -> list[list[str]]:
    return [[r.phase, f"{r.records:,}", f"{r.mb:,.1f}", f"{r.seconds:.2f}", f"{r.mb_per_s:,.1f}",
             f"{r.records_per_s:,.0f}",
             _cpu_cell(r.cpu.gateway), _cpu_cell(r.cpu.client), _cpu_cell(r.cpu.others())]
            for r in phases]


def _cpu_cell(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}"


TABLE_HEADERS = ["phase", "records", "MB", "seconds", "MB/s", "records/s",
                 "gateway CPU s", "client CPU s", "others CPU s"]


def print_table(phases: list[PhaseResult]) -> None:
    rows = _table_rows(phases)
    if HAVE_RICH:
        from rich.console import Console
        from rich.table import Table

        table = Table(*TABLE_HEADERS)
        for column in table.columns[1:]:
            column.justify = "right"
        for row in rows:
            table.add_row(*row)
        # Off a terminal rich assumes 80 columns and would squeeze the headers.
        Console(width=None if sys.stdout.isatty() else 120).print(table)
        return
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(TABLE_HEADERS)]
    for line in [TABLE_HEADERS, *rows]:
        cells = [line[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(line[1:], widths[1:], strict=True)]
        print("  ".join(cells))


def print_summary(report: Report, produce: ProduceOutcome, consume: ConsumeOutcome) -> None:
    print_table([produce.result, consume.result])
    lat = report["produce"]["delivery_latency_ms"]
    print(f"produce delivery latency: p50 {lat['p50']} ms, p99 {lat['p99']} ms, "
          f"max {lat['max']} ms ({len(produce.latencies):,} deliveries)")
    print(f"produce errors: {produce.errors.total()}, unflushed: {produce.unflushed}; "
          f"consume errors/anomalies: {consume.verifier.total()}")
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


def build_report(cfg: BenchConfig, target: Report, produce: ProduceOutcome,
                 consume: ConsumeOutcome) -> Report:
    produce_json = produce.to_json(cfg.records)
    consume_json = consume.to_json()
    return {
        "benchmark": "compat/bench_throughput.py",
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        # A gateway that crashes or hangs on SIGTERM is misbehaving too.
        "ok": produce_json["ok"] and consume_json["ok"]
              and target.get("gateway_exit_code") in (None, 0),
        "units": {"MB": "2**20 bytes of record values (keys not counted)",
                  "seconds": "produce: first produce() to last delivery report; "
                             "consume: assign() to last record received"},
        "target": target,
        "config": cfg.to_json(),
        "environment": environment(),
        "produce": produce_json,
        "consume": consume_json,
    }


def write_json(path: Path, report: Report) -> Path:
    path = path if path.is_absolute() else Path.cwd() / path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(path)
    return path


# --------------------------------------------------------------------------- main


def run_phases(cfg: BenchConfig, bootstrap: str, mode: str,
               gateway: ManagedGateway | None) -> tuple[ProduceOutcome, ConsumeOutcome]:
    print(f"topic {cfg.topic}: {cfg.partitions} partitions, {cfg.records:,} records of "
          f"{cfg.record_size} bytes, acks={cfg.acks}, compression={cfg.compression}",
          file=sys.stderr)
    create_topic(bootstrap, cfg)
    produce = run_produce(cfg, bootstrap, mode, gateway)
    consume = run_consume(cfg, bootstrap, mode, gateway, produce.per_partition)
    return produce, consume


def source_version() -> Report:
    """Which gateway code ran: the commit, and whether gateway/ or core/ had local changes."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True,
                                  text=True, timeout=10, check=True)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    status = git("status", "--porcelain", "--", "gateway", "core")
    return {"commit": git("rev-parse", "--short", "HEAD"),
            "uncommitted_changes": None if status is None else bool(status)}


def gateway_target(gateway: ManagedGateway) -> Report:
    """Read peak RSS while the process still exists, then stop it."""
    peak = gateway.peak_rss_kib()
    return {"kind": "managed streamgate", "bootstrap": gateway.bootstrap,
            "source": source_version(),
            "command": gateway.command(), "gateway_peak_rss_kib": peak,
            "gateway_exit_code": gateway.stop(),
            "gateway_log": str(gateway.log_path) if gateway.keep_data else None}


def benchmark(args: argparse.Namespace, gateway: ManagedGateway | None) -> int:
    cfg = config_from_args(args)
    mode = resolve_progress_mode(args.progress)
    if gateway is not None:
        gateway.start()
        print(f"gateway pid {gateway.pid} listening on {gateway.bootstrap} "
              f"(log {gateway.log_path})", file=sys.stderr)
    bootstrap = args.bootstrap or (gateway.bootstrap if gateway else "")
    produce, consume = run_phases(cfg, bootstrap, mode, gateway)
    if gateway is not None:
        target = gateway_target(gateway)
    else:
        target = {"kind": "external", "bootstrap": bootstrap}
        if not args.keep_topic:
            delete_topic(bootstrap, cfg.topic)
    report = build_report(cfg, target, produce, consume)
    print_summary(report, produce, consume)
    print(f"figures written to {write_json(args.output, report)}", flush=True)
    if not report["ok"] and gateway is not None:
        print(f"--- gateway log (tail) ---\n{gateway.log_tail()}", file=sys.stderr)
    return 0 if report["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    gateway = None if args.bootstrap else ManagedGateway(args.gateway_arg, args.keep_data)
    try:
        return benchmark(args, gateway)
    except Exception as exc:
        print(f"benchmark failed: {exc!r}", file=sys.stderr)
        if gateway is not None:
            print(f"--- gateway log (tail) ---\n{gateway.log_tail()}", file=sys.stderr)
        return 2
    finally:
        if gateway is not None:
            gateway.stop()
            gateway.cleanup()


if __name__ == "__main__":
    sys.exit(main())
