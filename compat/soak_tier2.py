"""Soak of tier 2 under SIGKILL (a script, not a test): nothing acknowledged is lost or doubled.

Starts its own `streamgate serve` (free loopback ports, temporary data dir) with tiny chunks
and immediate trimming (`--chunk-bytes 32768 --chunk-age-ms 100 --local-retain-bytes 0`),
on the folder tier 2 or on S3 (its own moto server). An idempotent acks=all confluent-kafka
producer writes uniquely numbered records while the gateway is killed with SIGKILL and
restarted N times, so the kills land while files roll, upload, commit and trim. Then it waits
until tier 2 has everything, reads the whole topic back (mostly from tier 2) and checks every
acknowledged record: at its acknowledged offset, exactly once, offsets dense. Prints a line
per cycle and a table. Run it with `streamgate bench run scenario:soak-tier2` (`--runs N`: N
cycles; `--quick`: 5 cycles); the run fails (exit status 1) when a check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from compat.benchlib.scenario import RunOptions, scenario_args, standalone  # noqa: E402
from compat.benchlib.tier import http_json  # noqa: E402
from harness.gateway import Gateway as HarnessGateway  # noqa: E402
from harness.moto import MotoServer  # noqa: E402

QUICK = ("--cycles", "5", "--stall-timeout", "60")

START_TIMEOUT = 60.0
MAX_QUEUED = 50_000  # unacknowledged records in the producer before it holds back
ID_DIGITS = 10  # a record's value starts with its zero-padded number
BAD_LOG_PATTERNS = {"tracebacks": "Traceback", "upload failures": "upload failed"}

console = Console(width=None if sys.stdout.isatty() else 120)
# librdkafka reports every refused connection while the gateway is down: keep them quiet.
_quiet = logging.getLogger("soak.rdkafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


# --------------------------------------------------------------------------- processes


class Gateway(HarnessGateway):
    """A gateway on a fixed port and data dir (admin API on) that is killed and restarted."""

    def __init__(self, data_dir: Path, log_path: Path, args: list[str], env: dict[str, str]):
        super().__init__(data_dir, log_path, args, default_partitions=None, metrics=True, env=env)

    def timed_start(self) -> float:
        """Start and wait until it listens; returns the seconds that took."""
        began = time.monotonic()
        self.start(timeout=START_TIMEOUT)
        return time.monotonic() - began

    def tier(self) -> dict[str, Any]:
        return http_json(self.admin_url + "/tier", timeout=10)


# --------------------------------------------------------------------------- records


@dataclass
class Ledger:
    """What was sent and acknowledged, by record number (compact: millions of records)."""

    sent: int = 0
    acked_partition: array = field(default_factory=lambda: array("h"))
    acked_offset: array = field(default_factory=lambda: array("q"))
    acked: int = 0
    failures: list[str] = field(default_factory=list)
    fatal: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def new_record(self) -> dict[str, Any]:
        self.acked_partition.append(-1)
        self.acked_offset.append(-1)
        self.sent += 1
        return self.sent - 1

    def on_delivery(self, err: Any, msg: Any) -> None:
        number = int(msg.value()[:ID_DIGITS])
        with self.lock:
            if err is None:
                self.acked_partition[number] = msg.partition()
                self.acked_offset[number] = msg.offset()
                self.acked += 1
            elif len(self.failures) < 1000:
                self.failures.append(f"record {number}: {err}")

    def on_error(self, err: Any) -> None:
        if err.fatal():
            self.fatal.append(str(err))


def make_producer(bootstrap: str, ledger: Ledger) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": 300_000,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 200,
            # Without this librdkafka re-bootstraps each time every broker is down and can
            # spend whole cycles without producing (see tests/system/test_tier2_crash.py).
            "metadata.recovery.strategy": "none",
            "error_cb": ledger.on_error,
            "logger": _quiet,
        }
    )


def produce_for(
    producer: Producer, ledger: Ledger, topic: str, seconds: float, burst: int, pad: bytes
) -> None:
    """`burst` records every 5 ms for `seconds` (held back while too much is unacknowledged)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if len(producer) > MAX_QUEUED:
            producer.poll(0.05)
            continue
        for _ in range(burst):
            number = ledger.sent
            value = b"%0*d" % (ID_DIGITS, number) + pad
            try:
                producer.produce(
                    topic, key=b"k%d" % (number % 97), value=value, on_delivery=ledger.on_delivery
                )
            except BufferError:
                producer.poll(0.05)
                break
            ledger.new_record()
        producer.poll(0.005)


@dataclass
class Verdict:
    read: int = 0
    verified: int = 0
    duplicates: int = 0
    missing: int = 0
    misplaced: int = 0
    gaps: int = 0
    unknown: int = 0
    read_seconds: float = 0.0
    samples: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.samples) < 10:
            self.samples.append(text)


def verify(bootstrap: str, topic: str, partitions: int, ledger: Ledger, stall: float) -> Verdict:
    """Read every partition from offset 0 and check each acknowledged record."""
    verdict = Verdict()
    began = time.monotonic()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"soak-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "logger": _quiet,
        }
    )
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
        for p in range(partitions)
    }
    total = sum(ends.values())
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    seen_partition = array("h", [-1]) * ledger.sent
    seen_offset = array("q", [-1]) * ledger.sent
    next_offset = dict.fromkeys(range(partitions), 0)
    last_progress = time.monotonic()
    with Progress(
        TextColumn("reading back"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("read", total=total)
        while verdict.read < total and time.monotonic() - last_progress < stall:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                verdict.note(f"consumer error: {msg.error()}")
                continue
            last_progress = time.monotonic()
            verdict.read += 1
            bar.advance(task)
            partition, offset = msg.partition(), msg.offset()
            if offset != next_offset[partition]:
                verdict.gaps += 1
                verdict.note(
                    f"partition {partition}: offset {offset}, expected {next_offset[partition]}"
                )
            next_offset[partition] = offset + 1
            try:
                number = int(msg.value()[:ID_DIGITS])
            except ValueError:
                number = -1
            if not 0 <= number < ledger.sent:
                verdict.unknown += 1
                verdict.note(f"unknown record at {partition}/{offset}")
                continue
            if seen_partition[number] >= 0:
                verdict.duplicates += 1
                verdict.note(
                    f"record {number} at {partition}/{offset} and "
                    f"{seen_partition[number]}/{seen_offset[number]}"
                )
                continue
            seen_partition[number] = partition
            seen_offset[number] = offset
    consumer.close()
    if verdict.read < total:
        verdict.note(f"read {verdict.read} of {total} records, then nothing for {stall:.0f} s")
    for number in range(ledger.sent):
        if ledger.acked_partition[number] < 0:
            continue
        if seen_partition[number] < 0:
            verdict.missing += 1
            verdict.note(f"acknowledged record {number} missing")
        elif (seen_partition[number], seen_offset[number]) != (
            ledger.acked_partition[number],
            ledger.acked_offset[number],
        ):
            verdict.misplaced += 1
            verdict.note(
                f"record {number} acknowledged at {ledger.acked_partition[number]}/"
                f"{ledger.acked_offset[number]}, stored at {seen_partition[number]}/"
                f"{seen_offset[number]}"
            )
        else:
            verdict.verified += 1
    verdict.read_seconds = time.monotonic() - began
    return verdict


# --------------------------------------------------------------------------- tier 2


def tier2_objects(
    data_dir: Path, moto: MotoServer | None, bucket: str
) -> tuple[dict[str, int], int, int]:
    """(chunk object key -> bytes, temporary files left by interrupted folder-store PUTs,
    their bytes)."""
    sizes: dict[str, int] = {}
    leftovers = leftover_bytes = 0
    if moto is None:
        root = data_dir / "tier2"
        for path in root.rglob("*"):
            if path.name.startswith("."):  # the folder store's temporary files
                leftovers += 1
                leftover_bytes += path.stat().st_size
            elif path.suffix == ".chunk":
                sizes[path.relative_to(root).as_posix()] = path.stat().st_size
    else:
        import boto3

        client = boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1")
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="soak/"):
            for item in page.get("Contents", []):
                if item["Key"].endswith(".chunk"):
                    sizes[item["Key"][len("soak/") :]] = item["Size"]
    return sizes, leftovers, leftover_bytes


def metadata_chunk_keys(data_dir: Path) -> list[str]:
    import sqlite3

    db = sqlite3.connect(f"file:{data_dir / 'metadata.db'}?mode=ro", uri=True)
    try:
        return [row[0] for row in db.execute("SELECT object_key FROM chunks")]
    finally:
        db.close()


def local_bytes(data_dir: Path) -> tuple[int, int]:
    """(tier-1 log bytes, everything else in the data dir but the tier-2 folder)."""
    logs = other = 0
    for path in data_dir.rglob("*"):
        if not path.is_file() or (data_dir / "tier2") in path.parents:
            continue
        if path.suffix == ".log":
            logs += path.stat().st_size
        else:
            other += path.stat().st_size
    return logs, other


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


# --------------------------------------------------------------------------- soak


def soak(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    env: dict[str, str] = {}
    moto: MotoServer | None = None
    bucket = ""
    gateway_args = [
        "--chunk-bytes",
        str(args.chunk_bytes),
        "--chunk-age-ms",
        str(args.chunk_age_ms),
        "--local-retain-bytes",
        str(args.local_retain_bytes),
        "--log-level",
        "INFO",
    ]
    data_dir = workdir / "data"
    gateway: Gateway | None = None
    try:
        if args.tier2 == "s3":
            moto = MotoServer(workdir / "moto")
            moto.start()
            env.update(moto.env())
            os.environ.update(moto.env())  # for the boto3 client that lists the bucket
            bucket = f"soak-{uuid.uuid4().hex[:12]}"
            gateway_args += ["--tier2", f"s3://{bucket}/soak", "--s3-endpoint", moto.endpoint]
        gateway = Gateway(data_dir, workdir / "gateway.log", gateway_args, env)
        gateway.timed_start()
        return run_cycles(args, gateway, moto, bucket)
    except Exception as exc:
        console.print(f"[red]soak failed: {exc!r}")
        if gateway is not None:
            console.print("--- gateway log (tail) ---", markup=False)
            console.print(gateway.log_text()[-4000:], markup=False, highlight=False)
        raise
    finally:
        if gateway is not None:
            gateway.close()
        if moto is not None:
            moto.stop()


def run_cycles(
    args: argparse.Namespace, gateway: Gateway, moto: MotoServer | None, bucket: str
) -> dict[str, Any]:
    began = time.monotonic()
    rng = random.Random(args.seed)
    topic = f"soak-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap, "logger": _quiet})
    admin.create_topics([NewTopic(topic, num_partitions=args.partitions)])[topic].result(30)
    ledger = Ledger()
    producer = make_producer(gateway.bootstrap, ledger)
    burst = max(1, round(args.rate * 0.005))
    pad = b"." * max(0, args.record_bytes - ID_DIGITS)
    chunks_total = 0
    console.print(
        f"soak: {args.cycles} SIGKILL cycles, tier 2 = {args.tier2}, ~{args.rate} records/s "
        f"of {args.record_bytes} bytes, {args.partitions} partitions, data in {gateway.data_dir}"
    )
    with Progress(
        TextColumn("kill cycles"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
        task = bar.add_task("cycles", total=args.cycles)
        for cycle in range(1, args.cycles + 1):
            # Mostly a while under load; a quarter of the kills come almost at once (while
            # the files replayed at start are still being uploaded).
            if rng.random() < 0.25:
                uptime = rng.uniform(0.0, 0.15)
            else:
                uptime = rng.uniform(0.5, 1.5) * args.seconds_per_cycle
            produce_for(producer, ledger, topic, uptime, burst, pad)
            try:
                tier = gateway.tier()
            except OSError:
                tier = {}
            gateway.kill()
            producer.poll(rng.uniform(0.0, 0.3))
            restart = gateway.timed_start()
            chunks = tier.get("chunks_uploaded", 0)
            chunks_total += chunks
            pending = tier.get("tier1_pending_bytes")
            pending_text = "?" if pending is None else _bytes(pending)
            with ledger.lock:
                acked = ledger.acked
            bar.console.print(
                f"cycle {cycle:>4}/{args.cycles}  up {uptime:4.2f}s  acked {acked:>9,} of "
                f"{ledger.sent:>9,}  tier-1 pending {pending_text:>9}  chunks {chunks:>3} "
                f"(total {chunks_total:>6,})  restart {restart:3.1f}s",
                highlight=False,
            )
            bar.advance(task)
    produce_for(producer, ledger, topic, 0.5, burst, pad)
    console.print("flushing the producer ...")
    producer.flush(300)
    unflushed = len(producer)
    deadline = time.monotonic() + args.stall_timeout
    tier = gateway.tier()
    while tier["tier1_pending_bytes"] and time.monotonic() < deadline:
        time.sleep(0.2)
        tier = gateway.tier()
    console.print(f"tier 2 caught up: {tier['tier1_pending_bytes']} bytes pending")
    verdict = verify(gateway.bootstrap, topic, args.partitions, ledger, args.stall_timeout)
    objects, leftovers, leftover_bytes = tier2_objects(gateway.data_dir, moto, bucket)
    known = metadata_chunk_keys(gateway.data_dir)
    unbacked = [k for k in known if k not in objects]
    logs, other = local_bytes(gateway.data_dir)
    log_text = gateway.log_text()
    log_counts = {
        name: sum(pattern in line for line in log_text.splitlines())
        for name, pattern in BAD_LOG_PATTERNS.items()
    }
    torn = log_text.count("torn or corrupt tail")

    failed = {
        "delivery failures": len(ledger.failures) + len(ledger.fatal) + unflushed,
        "duplicates": verdict.duplicates,
        "missing": verdict.missing,
        "misplaced": verdict.misplaced,
        "offset gaps": verdict.gaps,
        "unknown records": verdict.unknown,
        "chunks in metadata, not in tier 2": len(unbacked),
        "tier-1 bytes never uploaded": tier["tier1_pending_bytes"],
        **log_counts,
    }
    table = Table(title=f"tier-2 SIGKILL soak ({args.tier2})")
    table.add_column("")
    table.add_column("value", justify="right")
    table.add_column("", justify="center")

    def row(name: str, value: object, check: bool | None = None) -> None:
        mark = "" if check is None else ("[green]ok" if check else "[red]FAIL")
        table.add_row(name, f"{value:,}" if isinstance(value, int) else str(value), mark)

    row("kill cycles", args.cycles)
    row("records sent", ledger.sent)
    row("records acked", ledger.acked)
    row("records read back", verdict.read)
    row(
        "records verified (at their acked offset)",
        verdict.verified,
        verdict.verified == ledger.acked,
    )
    for name, value in failed.items():
        row(name, value, value == 0)
    row("torn tails cut on restart", torn)
    row("chunks uploaded (seen at kills)", chunks_total)
    row("chunks in tier 2 / in metadata", f"{len(objects):,} / {len(known):,}")
    row("tier-2 bytes", _bytes(sum(objects.values())))
    if moto is None:
        row("temp files of interrupted PUTs in tier 2", f"{leftovers} ({_bytes(leftover_bytes)})")
    row("local disk: tier-1 logs", _bytes(logs))
    row("local disk: metadata etc.", _bytes(other))
    row("final read", f"{verdict.read_seconds:.1f} s")
    row("wall time", f"{time.monotonic() - began:.0f} s")
    console.print(table)
    for sample in verdict.samples + ledger.failures[:5] + ledger.fatal[:5] + unbacked[:5]:
        console.print(f"  {sample}", highlight=False)
    ok = verdict.verified == ledger.acked and not any(failed.values())
    summary = {
        "benchmark": "compat/soak_tier2.py",
        "ok": ok,
        "settings": vars(args),
        "records_sent": ledger.sent,
        "records_acked": ledger.acked,
        "records_verified": verdict.verified,
        "failed": failed,
        "torn_tails": torn,
        "chunks_uploaded_seen": chunks_total,
        "tier2_objects": len(objects),
        "wall_seconds": round(time.monotonic() - began, 1),
    }
    console.print("[green]PASSED" if ok else "[red]FAILED")
    return summary


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--cycles", type=int, default=100, help="SIGKILL + restart cycles (default: %(default)s)")
    add("--tier2", choices=["folder", "s3"], default="folder", help="tier-2 store")
    add(
        "--seconds-per-cycle",
        type=float,
        default=1.0,
        help="mean time under load before a kill; each is random within 0.5x..1.5x, and a "
        "quarter of the kills come within 0.15 s of the restart (default: %(default)s)",
    )
    add("--rate", type=int, default=10_000, help="records/s produced (default: %(default)s)")
    add("--record-bytes", type=int, default=100, help="value size (default: %(default)s)")
    add("--partitions", type=int, default=8, help="partitions (default: %(default)s)")
    add("--seed", type=int, default=1, help="seed of the kill moments (default: %(default)s)")
    add("--chunk-bytes", type=int, default=32768, help="gateway --chunk-bytes")
    add("--chunk-age-ms", type=int, default=100, help="gateway --chunk-age-ms")
    add("--local-retain-bytes", type=int, default=0, help="gateway --local-retain-bytes")
    add(
        "--stall-timeout",
        type=float,
        default=120.0,
        help="give up the catch-up wait or the final read after this long without progress",
    )
    add("--keep-data", action="store_true", help="keep the temp dir (data, gateway.log)")
    return parser


def run(options: RunOptions) -> dict[str, Any]:
    args = scenario_args(build_parser(), options, quick=QUICK, runs="--cycles")
    workdir = Path(tempfile.mkdtemp(prefix="soak-tier2-"))
    try:
        return soak(args, workdir)
    finally:
        if args.keep_data:
            console.print(f"kept {workdir}")
        else:
            with contextlib.suppress(OSError):
                shutil.rmtree(workdir)


def main(argv: list[str] | None = None) -> int:
    return standalone("soak-tier2", argv)


if __name__ == "__main__":
    sys.exit(main())
