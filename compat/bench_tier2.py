"""Tier 2 benchmark: upload lag, catch-up reads from tier 2, tail latency (not a test).

For each tier-2 backend (`folder`: DATA/tier2; `s3`: a moto S3 server this script starts),
against a fresh `streamgate serve` per run (free loopback ports, temporary data dir, the
admin endpoint on so /tier can be sampled):

1. **lag**: produce at a steady high rate for a while (confluent-kafka, acks=all, 1 KiB
   values, 8 partitions) while /tier is sampled every 250 ms: tier1_pending_bytes over time
   and the upload lag p50/p99 the gateway reports, with the default chunk settings and with
   small chunks (--chunk-bytes 1 MiB --chunk-age-ms 1000).
2. **catchup**: produce ~200 MiB, wait until all of it is in tier 2, and read it all from
   offset 0: with --local-retain-bytes 0 (everything trimmed: reads come from tier 2) and with
   a large --local-retain-bytes (everything still in tier 1).
3. **tail**: a consumer at the end of a fresh topic while a producer writes at a moderate rate
   (2,000 records/s, linger.ms=1): produce (acks=all) and produce-to-consume latency, with
   tier-2 uploads going on in the background.

Each run also records the local disk used (du of DATA/streams), the bytes in tier 2 and the
gateway's peak RSS. Prints tables, writes compat/results/tier2.json and, with matplotlib,
compat/results/tier2_upload_lag.png. See compat/README.md ("Tier 2").
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from array import array
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "tests"))  # for tests/s3server.py (MotoServer)

from compat.bench_throughput import (  # noqa: E402
    KEY_FORMAT,
    ConsumeVerifier,
    DeliveryTracker,
    ErrorLog,
    _free_port,
    _machine_busy_seconds,
    _proc_cpu_seconds,
    _proc_status_kib,
    environment,
    make_payloads,
    percentile,
    source_version,
)

DEFAULT_OUTPUT = REPO_ROOT / "compat" / "results" / "tier2.json"
DEFAULT_PLOT = REPO_ROOT / "compat" / "results" / "tier2_upload_lag.png"
MIB = 1024 * 1024
GATEWAY_START_TIMEOUT = 30.0
GATEWAY_STOP_TIMEOUT = 30.0
ADMIN_TIMEOUT = 30.0
S3_BUCKET = "streamgate-bench"
MAX_SAMPLES = 10
HAVE_RICH = importlib.util.find_spec("rich") is not None
HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
BACKENDS = ("folder", "s3")
SCENARIOS = ("lag", "catchup", "tail")

Report = dict[str, Any]


# --------------------------------------------------------------------------- options


def _positive_int(value: str) -> int:
    number = int(value.replace("_", ""))
    if number <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return number


def _positive_float(value: str) -> float:
    number = float(value)
    if not number > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value!r}")
    return number


def _choices(allowed: tuple[str, ...]) -> Callable[[str], list[str]]:
    def parse(value: str) -> list[str]:
        picked = [v.strip() for v in value.split(",") if v.strip()]
        bad = [v for v in picked if v not in allowed]
        if bad or not picked:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated subset of {','.join(allowed)}, got {value!r}")
        return picked

    return parse


def _key_value(value: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {value!r}")
    return key, val


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--backends", type=_choices(BACKENDS), default=list(BACKENDS), metavar="LIST",
        help="tier-2 backends to measure: folder, s3 (moto) (default: folder,s3)")
    add("--scenarios", type=_choices(SCENARIOS), default=list(SCENARIOS), metavar="LIST",
        help="what to measure: lag, catchup, tail (default: all three)")
    add("--repeat", type=_positive_int, default=1, metavar="N",
        help="run everything N times; tables show the median and the range (default: 1)")
    add("--record-size", type=_positive_int, default=1024, metavar="BYTES",
        help="value bytes per record; keys are 12 bytes more (default: %(default)s)")
    add("--partitions", type=_positive_int, default=8, metavar="N",
        help="partitions per topic (default: %(default)s)")
    # lag
    add("--lag-seconds", type=_positive_float, default=20.0, metavar="S",
        help="lag: how long to produce (default: %(default)s)")
    add("--lag-rate", type=_positive_int, default=20_000, metavar="RECORDS_PER_S",
        help="lag: steady produce rate (default: %(default)s, ~19.5 MiB/s of values)")
    add("--lag-linger-ms", type=float, default=5.0, metavar="MS",
        help="lag and catchup producers' linger.ms (default: %(default)s)")
    add("--sample-interval", type=_positive_float, default=0.25, metavar="S",
        help="how often /tier is sampled (default: %(default)s)")
    add("--small-chunk-bytes", type=_positive_int, default=1 << 20, metavar="BYTES",
        help="the small-chunk variant's --chunk-bytes (default: %(default)s)")
    add("--small-chunk-age-ms", type=_positive_int, default=1000, metavar="MS",
        help="the small-chunk variant's --chunk-age-ms (default: %(default)s)")
    add("--chunk-variants", type=_choices(("default", "small")), default=["default", "small"],
        metavar="LIST", help="chunk settings for lag and tail: default, small (default: both)")
    # catch-up
    add("--catchup-mib", type=_positive_int, default=200, metavar="MIB",
        help="catchup: MiB of values produced and read back (default: %(default)s)")
    add("--retain-large-bytes", type=_positive_int, default=4 << 30, metavar="BYTES",
        help="catchup: --local-retain-bytes of the tier-1 read (default: 4 GiB)")
    add("--consumer-config", type=_key_value, action="append", default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka consumer property (repeatable); fetch.queue.backoff.ms=10 is set")
    # tail
    add("--tail-seconds", type=_positive_float, default=20.0, metavar="S",
        help="tail: how long to produce (default: %(default)s)")
    add("--tail-rate", type=_positive_int, default=2000, metavar="RECORDS_PER_S",
        help="tail: produce rate (default: %(default)s)")
    add("--tail-linger-ms", type=float, default=1.0, metavar="MS",
        help="tail: producer linger.ms (default: %(default)s)")
    add("--tail-warmup", type=float, default=1.0, metavar="S",
        help="tail: latencies of records produced in the first S seconds are left out "
             "(default: %(default)s)")
    # general
    add("--upload-timeout", type=_positive_float, default=180.0, metavar="S",
        help="give up waiting for tier1_pending_bytes to reach 0 after this long "
             "(default: %(default)s)")
    add("--stall-timeout", type=_positive_float, default=60.0, metavar="S",
        help="give up on a produce or consume phase that makes no progress for this long "
             "(default: %(default)s)")
    add("--gateway-arg", action="append", default=[], metavar="ARG",
        help="extra argument for every started gateway (repeatable)")
    add("--keep-data", action="store_true",
        help="keep the temporary dirs (data, gateway.log, moto-server.log)")
    add("--progress", choices=["auto", "rich", "plain", "none"], default="auto",
        help="auto: rich bars on a terminal if rich is installed, else a line a second")
    add("--output", type=Path, default=DEFAULT_OUTPUT, metavar="PATH",
        help="JSON results (default: compat/results/tier2.json)")
    add("--plot", type=Path, default=DEFAULT_PLOT, metavar="PATH",
        help="PNG of tier1_pending_bytes over time (default: "
             "compat/results/tier2_upload_lag.png; needs matplotlib)")
    return parser


@dataclass(slots=True)
class Options:
    backends: list[str]
    scenarios: list[str]
    repeat: int
    record_size: int
    partitions: int
    lag_seconds: float
    lag_rate: int
    lag_linger_ms: float
    sample_interval: float
    small_chunk_bytes: int
    small_chunk_age_ms: int
    chunk_variants: list[str]
    catchup_mib: int
    retain_large_bytes: int
    consumer_extra: dict[str, str]
    tail_seconds: float
    tail_rate: int
    tail_linger_ms: float
    tail_warmup: float
    upload_timeout: float
    stall_timeout: float
    gateway_args: list[str]
    keep_data: bool

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Options:
        return cls(
            backends=args.backends, scenarios=args.scenarios, repeat=args.repeat,
            record_size=args.record_size, partitions=args.partitions,
            lag_seconds=args.lag_seconds, lag_rate=args.lag_rate,
            lag_linger_ms=args.lag_linger_ms, sample_interval=args.sample_interval,
            small_chunk_bytes=args.small_chunk_bytes,
            small_chunk_age_ms=args.small_chunk_age_ms, chunk_variants=args.chunk_variants,
            catchup_mib=args.catchup_mib, retain_large_bytes=args.retain_large_bytes,
            consumer_extra=dict(args.consumer_config), tail_seconds=args.tail_seconds,
            tail_rate=args.tail_rate, tail_linger_ms=args.tail_linger_ms,
            tail_warmup=args.tail_warmup, upload_timeout=args.upload_timeout,
            stall_timeout=args.stall_timeout, gateway_args=list(args.gateway_arg),
            keep_data=args.keep_data,
        )

    def chunk_args(self, variant: str) -> list[str]:
        if variant == "small":
            return ["--chunk-bytes", str(self.small_chunk_bytes),
                    "--chunk-age-ms", str(self.small_chunk_age_ms)]
        return []

    def chunk_label(self, variant: str) -> str:
        if variant == "small":
            return (f"{_size_label(self.small_chunk_bytes)} / "
                    f"{self.small_chunk_age_ms / 1000:g} s")
        return "8 MiB / 5 s (defaults)"


def _size_label(n: int) -> str:
    return f"{n / MIB:g} MiB" if n >= MIB else f"{n / 1024:g} KiB"


# --------------------------------------------------------------------------- display


Poll = Callable[[], tuple[float, str]]


class Display:
    """Progress bars (rich) or a line a second (plain) for each phase, and log lines."""

    def __init__(self, requested: str) -> None:
        if requested == "rich" and not HAVE_RICH:
            raise SystemExit("--progress rich: rich is not installed (pip install rich)")
        if requested == "auto":
            requested = "rich" if HAVE_RICH and sys.stderr.isatty() else "plain"
        self.mode = requested
        self._progress: Any = None
        if self.mode == "rich":
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                Progress,
                TaskProgressColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                TextColumn("{task.description:<30}"), BarColumn(bar_width=30),
                TaskProgressColumn(), TextColumn("{task.fields[status]}"),
                TimeElapsedColumn(), console=Console(stderr=True))
            self._progress.start()

    def log(self, text: str) -> None:
        if self._progress is not None:
            self._progress.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def phase(self, label: str, total: float | None, poll: Poll) -> Iterator[None]:
        """Shows poll() -> (done, status) of total while the body runs (a watcher thread)."""
        if self.mode == "none":
            yield
            return
        started = time.monotonic()
        stop = threading.Event()
        task = None
        if self._progress is not None:
            task = self._progress.add_task(label, total=total, status="")

        def render() -> None:
            try:
                done, status = poll()
            except Exception as exc:  # a display problem must not end the run
                done, status = 0.0, f"({exc!r})"
            if task is not None:
                self._progress.update(task, completed=done, status=status)
            else:
                count = f"{done:,.0f}/{total:,.0f} " if total else ""
                print(f"[{label}] {count}{status} ({time.monotonic() - started:.1f} s)",
                      file=sys.stderr, flush=True)

        def watch() -> None:
            while not stop.wait(0.25 if task is not None else 1.0):
                render()

        watcher = threading.Thread(target=watch, name=f"progress-{label}", daemon=True)
        watcher.start()
        try:
            yield
        finally:
            stop.set()
            watcher.join()
            render()
            if task is not None:
                if total is None:  # finish the pulsing bar of an open-ended wait
                    self._progress.update(task, total=1, completed=1)
                self._progress.stop_task(task)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


# --------------------------------------------------------------------------- disk / http


def du_bytes(path: Path) -> tuple[int, int]:
    """(allocated bytes as du counts them, apparent bytes) of everything under path."""
    allocated = apparent = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(root, name))
                allocated += st.st_blocks * 512
                apparent += st.st_size
    return allocated, apparent


_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxies


def http_json(url: str, timeout: float = 5.0) -> Any:
    with _HTTP.open(url, timeout=timeout) as resp:
        return json.loads(resp.read())


# --------------------------------------------------------------------------- moto (S3)


class S3Backend:
    """A moto S3 server (tests/s3server.py) and a boto3 client to measure and empty it."""

    def __init__(self, log_dir: Path) -> None:
        from s3server import MotoServer

        self.server = MotoServer(log_dir)
        self._client: Any = None

    def start(self) -> None:
        self.server.start()
        import boto3

        self._client = boto3.session.Session().client(
            "s3", endpoint_url=self.server.endpoint, region_name="us-east-1",
            aws_access_key_id="testing", aws_secret_access_key="testing")

    def env(self) -> dict[str, str]:
        return self.server.env()

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    def _keys(self, prefix: str) -> Iterator[tuple[str, int]]:
        paginator = self._client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=S3_BUCKET, Prefix=prefix + "/"):
                for obj in page.get("Contents", []):
                    yield obj["Key"], obj["Size"]
        except self._client.exceptions.NoSuchBucket:
            return

    def sizes(self, prefix: str) -> list[int]:
        """Sizes of the objects under prefix."""
        return [n for _key, n in self._keys(prefix)]

    def empty(self, prefix: str) -> None:
        """Delete a run's objects: moto keeps everything in memory."""
        keys = [k for k, _ in self._keys(prefix)]
        for i in range(0, len(keys), 1000):
            self._client.delete_objects(
                Bucket=S3_BUCKET,
                Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]], "Quiet": True})

    def peak_rss_kib(self) -> int | None:
        proc = self.server.proc
        return _proc_status_kib(proc.pid, "VmHWM") if proc is not None else None

    def stop(self) -> None:
        self.server.stop()


# --------------------------------------------------------------------------- the gateway


class GatewayError(RuntimeError):
    pass


class Gateway:
    """`python -m gateway serve` with the admin endpoint on, in a throwaway dir."""

    def __init__(self, work_root: Path, name: str, backend: str, s3: S3Backend | None,
                 extra_args: list[str]) -> None:
        self.work_dir = work_root / name
        self.work_dir.mkdir(parents=True)
        self.data_dir = self.work_dir / "data"
        self.log_path = self.work_dir / "gateway.log"
        self.port = _free_port()
        self.metrics_port = _free_port()
        self.backend = backend
        self.s3 = s3
        self.s3_prefix = f"{name}-{uuid.uuid4().hex[:8]}"
        self.extra_args = extra_args
        self.proc: subprocess.Popen[bytes] | None = None
        self.exit_code: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "gateway", "serve", "--listen", self.bootstrap,
               "--data-dir", str(self.data_dir),
               "--metrics-listen", f"127.0.0.1:{self.metrics_port}"]
        if self.backend == "s3":
            assert self.s3 is not None
            cmd += ["--tier2", f"s3://{S3_BUCKET}/{self.s3_prefix}",
                    "--s3-endpoint", self.s3.endpoint]
        return cmd + self.extra_args

    def start(self) -> None:
        # STREAMGATE_* variables would silently change the server under test.
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGATE_")}
        env["PYTHONUNBUFFERED"] = "1"
        if self.s3 is not None:
            env.update(self.s3.env())
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(self.command(), cwd=REPO_ROOT, env=env,
                                         stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + GATEWAY_START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise GatewayError(f"gateway exited with code {self.proc.returncode} "
                                   f"during start-up:\n{self.log_tail()}")
            if "listening on" in self.log_text():
                with contextlib.suppress(OSError, ValueError):
                    self.tier()
                    return
            time.sleep(0.05)
        raise GatewayError(f"gateway not ready within {GATEWAY_START_TIMEOUT:.0f} s:\n"
                           f"{self.log_tail()}")

    def tier(self) -> Report:
        return http_json(self.metrics_url + "/tier")

    def stream(self, topic: str) -> Report | None:
        try:
            return http_json(f"{self.metrics_url}/streams/{topic}")
        except (OSError, ValueError):
            return None

    def peak_rss_kib(self) -> int | None:
        return _proc_status_kib(self.pid, "VmHWM") if self.proc else None

    def cpu_seconds(self) -> float | None:
        return _proc_cpu_seconds(self.pid) if self.proc else None

    def local_disk(self) -> tuple[int, int]:
        return du_bytes(self.data_dir / "streams")

    def tier2_sizes(self) -> list[int]:
        """Sizes of the chunks in this gateway's tier 2."""
        if self.backend == "s3":
            assert self.s3 is not None
            return self.s3.sizes(self.s3_prefix)
        sizes = []
        for path in (self.data_dir / "tier2").rglob("*.chunk"):
            with contextlib.suppress(OSError):
                sizes.append(path.stat().st_size)
        return sizes

    def tier2_usage(self) -> tuple[int, int]:
        """(objects, bytes) in this gateway's tier 2."""
        sizes = self.tier2_sizes()
        return len(sizes), sum(sizes)

    def stop(self) -> int | None:
        if self.proc is None or self.exit_code is not None:
            return self.exit_code
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=GATEWAY_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.exit_code = self.proc.returncode
        return self.exit_code

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def log_problems(self) -> Report:
        """WARNING / ERROR / Traceback lines of the gateway's log."""
        counts = {"WARNING": 0, "ERROR": 0, "CRITICAL": 0, "Traceback": 0}
        samples: list[str] = []
        for line in self.log_text().splitlines():
            for word in counts:
                if f" {word} " in line or line.startswith(word):
                    counts[word] += 1
                    if len(samples) < MAX_SAMPLES:
                        samples.append(line[:300])
                    break
        return {"counts": counts, "samples": samples}

    def cleanup(self, keep: bool) -> None:
        if self.s3 is not None:
            with contextlib.suppress(Exception):
                self.s3.empty(self.s3_prefix)
        if not keep:
            shutil.rmtree(self.work_dir, ignore_errors=True)


def code_state() -> Report:
    """The commit and a hash of the gateway's code as it is on disk now (other people may
    edit or commit while a long run goes on: each gateway run records what it started with)."""
    digest = hashlib.sha1()
    for folder in ("core", "gateway"):
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            with contextlib.suppress(OSError):
                digest.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0")
                digest.update(path.read_bytes())
    return {"commit": source_version()["commit"], "code_sha1": digest.hexdigest()[:12]}


class CpuMeter:
    """Gateway and machine CPU seconds from creation to read()."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.start = (time.process_time(), gateway.cpu_seconds(), _machine_busy_seconds())

    def read(self) -> Report:
        client, gw, machine = (time.process_time(), self.gateway.cpu_seconds(),
                               _machine_busy_seconds())
        d_client = client - self.start[0]
        d_gw = None if gw is None or self.start[1] is None else gw - self.start[1]
        d_machine = None if machine is None or self.start[2] is None else machine - self.start[2]
        others = (None if d_machine is None
                  else max(0.0, d_machine - d_client - (d_gw or 0.0)))
        return {"gateway": _r(d_gw, 2), "client": round(d_client, 2), "others": _r(others, 2)}


def _r(value: float | None, digits: int) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) \
        else round(value, digits)


# --------------------------------------------------------------------------- /tier sampler


SAMPLE_FIELDS = ("t", "tier1_pending_bytes", "tier1_retained_bytes", "chunks_uploaded",
                 "bytes_uploaded", "upload_errors", "local_disk_bytes")


class TierSampler:
    """Samples /tier (and du of DATA/streams) every interval in a thread."""

    FIELDS = ("tier1_pending_bytes", "tier1_retained_bytes", "chunks_uploaded",
              "bytes_uploaded", "upload_errors", "cache_hits", "cache_misses", "bytes_fetched",
              "tier2_upload_lag_p50_seconds", "tier2_upload_lag_p99_seconds")

    def __init__(self, gateway: Gateway, interval: float) -> None:
        self.gateway = gateway
        self.interval = interval
        self.t0 = time.perf_counter()
        self.samples: list[Report] = []
        self.errors = 0
        self.last: Report = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tier-sampler", daemon=True)

    def __enter__(self) -> TierSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        next_at = time.perf_counter()
        while not self._stop.is_set():
            self.sample()
            next_at += self.interval
            self._stop.wait(max(0.0, next_at - time.perf_counter()))

    def sample(self) -> Report | None:
        t = time.perf_counter() - self.t0
        try:
            tier = self.gateway.tier()
        except (OSError, ValueError):
            self.errors += 1
            return None
        row = {"t": round(t, 3), **{k: tier.get(k) for k in self.FIELDS},
               "local_disk_bytes": self.gateway.local_disk()[0]}
        self.samples.append(row)
        self.last = row
        return row

    def compact(self) -> Report:
        """The samples for the JSON: one row of SAMPLE_FIELDS each."""
        return {"sample_fields": list(SAMPLE_FIELDS),
                "samples": [[s.get(f) for f in SAMPLE_FIELDS] for s in self.samples]}

    def between(self, start: float, end: float) -> list[Report]:
        return [s for s in self.samples if start <= s["t"] <= end]


def wait_uploaded(gateway: Gateway, display: Display, label: str,
                  timeout: float) -> tuple[float, bool]:
    """Wait until tier1_pending_bytes is 0: (time.perf_counter() then, reached)."""
    started = time.perf_counter()
    state: Report = {}

    def poll() -> tuple[float, str]:
        pending = state.get("tier1_pending_bytes")
        return 0.0, ("" if pending is None else
                     f"pending {pending / MIB:,.1f} MiB, {state.get('chunks_uploaded')} chunks")

    with display.phase(label, None, poll):
        while True:
            with contextlib.suppress(OSError, ValueError):
                state.update(gateway.tier())
                if state.get("tier1_pending_bytes") == 0:
                    return time.perf_counter(), True
            if time.perf_counter() - started > timeout:
                return time.perf_counter(), False
            time.sleep(0.05)


# --------------------------------------------------------------------------- clients


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.list_topics(timeout=10)
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                            replication_factor=1)],
                                  operation_timeout=ADMIN_TIMEOUT)
    futures[topic].result(timeout=ADMIN_TIMEOUT)
    deadline = time.monotonic() + ADMIN_TIMEOUT
    while True:
        meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        if meta is not None and meta.error is None and len(meta.partitions) == partitions:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {topic} did not show {partitions} partitions")
        time.sleep(0.1)


def latency_ms(sorted_seconds: list[float]) -> Report:
    return {name: _r(percentile(sorted_seconds, q) * 1000, 2)
            for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))}


class IndexedTracker(DeliveryTracker):
    """DeliveryTracker that also remembers which record each latency belongs to."""

    def __init__(self, sent_at: array, partitions: int) -> None:
        super().__init__(sent_at, partitions)
        self.indices: list[int] = []
        self.produce_requests: int | None = None  # from librdkafka's statistics

    def on_stats(self, stats_json: str) -> None:
        """librdkafka's stats_cb: ProduceRequests sent so far, over all brokers."""
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            brokers = json.loads(stats_json).get("brokers", {}).values()
            self.produce_requests = sum(b.get("req", {}).get("Produce", 0) for b in brokers)

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        super().__call__(err, msg)
        if err is None:
            self.indices.append(int(msg.key()))


@dataclass(slots=True)
class ProduceRun:
    """One Producer writing records 0..n-1 round robin, at a rate or flat out."""

    topic: str
    partitions: int
    payloads: list[bytes]
    capacity: int  # most records this run may produce
    tracker: IndexedTracker = field(init=False)
    sent_at: array = field(init=False)
    sent: int = 0
    started: float = 0.0
    finished_sending: float = 0.0
    unflushed: int = 0
    stalled: bool = False

    def __post_init__(self) -> None:
        self.sent_at = array("d", bytes(8 * self.capacity))
        self.tracker = IndexedTracker(self.sent_at, self.partitions)

    def run(self, producer: Producer, rate: float | None, count: int | None,
            duration: float | None, stall_timeout: float) -> None:
        """Produce until count records or duration seconds (whichever is given first)."""
        limit = min(count or self.capacity, self.capacity)
        topic, partitions, pool = self.topic, self.partitions, len(self.payloads)
        sent_at, tracker = self.sent_at, self.tracker
        self.started = start = time.perf_counter()
        i = 0
        while i < limit:
            elapsed = time.perf_counter() - start
            if duration is not None and elapsed >= duration:
                break
            due = limit if rate is None else min(limit, int(elapsed * rate) + 1)
            while i < due:
                now = sent_at[i] = time.perf_counter()
                try:
                    producer.produce(topic, value=self.payloads[i % pool], key=KEY_FORMAT % i,
                                     partition=i % partitions, on_delivery=tracker)
                except BufferError:  # local queue full: serve delivery reports, then retry
                    blocked = now
                    while True:
                        producer.poll(0.005)
                        try:
                            sent_at[i] = time.perf_counter()
                            producer.produce(topic, value=self.payloads[i % pool],
                                             key=KEY_FORMAT % i, partition=i % partitions,
                                             on_delivery=tracker)
                            break
                        except BufferError:
                            if time.perf_counter() - blocked > stall_timeout:
                                self.stalled = True
                                self.sent = i
                                return
                i += 1
                self.sent = i
                producer.poll(0)
            if rate is not None:
                wait = min(i / rate - (time.perf_counter() - start), 0.01)
                # poll() takes whole milliseconds: a shorter wait would be poll(0), a spin.
                if wait >= 0.001:
                    producer.poll(wait)
                elif wait > 0:
                    time.sleep(wait)
        self.finished_sending = time.perf_counter()
        last_done, last_move = -1, time.monotonic()
        while (left := producer.flush(1.0)) > 0:
            done = tracker.delivered + tracker.failed
            if done != last_done:
                last_done, last_move = done, time.monotonic()
            elif time.monotonic() - last_move > stall_timeout:
                self.unflushed = left
                self.stalled = True
                return
        time.sleep(0.6)  # one more statistics report, for the final ProduceRequest count
        producer.poll(0)

    def per_partition(self) -> list[int]:
        return [len(o) for o in self.tracker.offsets]

    def offsets_dense(self) -> bool:
        return all(sorted(o) == list(range(len(o))) for o in self.tracker.offsets)

    def summary(self, record_size: int) -> Report:
        t = self.tracker
        seconds = max(t.last_delivery - self.started, 1e-9) if t.delivered else 0.0
        lat = sorted(t.latencies)
        return {
            "records_sent": self.sent,
            "records_delivered": t.delivered,
            "delivery_errors": t.failed,
            "client_errors": t.total() - t.failed,
            "error_samples": t.samples,
            "unflushed": self.unflushed,
            "stalled": self.stalled,
            "offsets_dense": self.offsets_dense(),
            "seconds": round(seconds, 3),
            "mib": round(t.delivered * record_size / MIB, 2),
            "mib_per_s": round(t.delivered * record_size / MIB / seconds, 2) if seconds else 0.0,
            "records_per_s": round(t.delivered / seconds, 1) if seconds else 0.0,
            # produce() calls per second, first to last (the delivered rate above runs to
            # the last delivery, so a backlog lowers it)
            "sent_records_per_s": (round(self.sent / (self.finished_sending - self.started), 1)
                                   if self.finished_sending > self.started else None),
            "delivery_latency_ms": latency_ms(lat),
            "produce_requests": t.produce_requests,
            "records_per_request": (round(t.delivered / t.produce_requests, 1)
                                    if t.produce_requests else None),
        }


def producer_config(bootstrap: str, linger_ms: float, tracker: IndexedTracker) -> Report:
    return {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": linger_ms,
            "error_cb": tracker.on_client_error,
            "statistics.interval.ms": 500, "stats_cb": tracker.on_stats}


def consumer_config(bootstrap: str, extra: dict[str, str], errors: ErrorLog) -> Report:
    conf: Report = {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex[:10]}",  # required by the binding; never joined
        "enable.auto.commit": False,
        "auto.offset.reset": "error",
        # librdkafka pauses fetching for fetch.queue.backoff.ms (1 s by default) whenever
        # its local queue is full; see compat/README.md.
        "fetch.queue.backoff.ms": 10,
        "error_cb": errors.on_client_error,
    }
    conf.update(extra)
    return conf


def read_all(bootstrap: str, topic: str, expected: list[int], payloads: list[bytes],
             extra: dict[str, str], stall_timeout: float,
             display: Display, label: str) -> tuple[Report, ConsumeVerifier]:
    """Read every partition from offset 0 to its expected end; figures and the check."""
    total = sum(expected)
    check = ConsumeVerifier(total, len(expected), payloads)
    consumer = Consumer(consumer_config(bootstrap, extra, check))
    completed = True
    try:
        consumer.list_topics(topic, timeout=10)  # connect before the clock starts
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, 0) for p in range(len(expected))])

        def poll() -> tuple[float, str]:
            elapsed = time.perf_counter() - start
            mib = check.consumed * len(payloads[0]) / MIB
            return check.consumed, f"{mib / elapsed:,.1f} MiB/s" if elapsed > 0 else ""

        with display.phase(label, total, poll):
            last_move = time.monotonic()
            while any(got < want for got, want in zip(check.next_offset, expected, strict=True)):
                want = max(1, min(1000, total - check.consumed))
                messages = consumer.consume(num_messages=want, timeout=0.2)
                if messages:
                    for msg in messages:
                        check.add_message(msg)
                    check.last_receive = time.perf_counter()
                    last_move = time.monotonic()
                elif time.monotonic() - last_move > stall_timeout:
                    completed = False
                    check.add("stalled", f"no record for {stall_timeout:.0f} s")
                    break
        seconds = max(check.last_receive - start, 1e-9)
    finally:
        consumer.close()
    mib = check.consumed * len(payloads[0]) / MIB
    missing = total - check.seen.count(1)
    result = {
        "records": check.consumed, "mib": round(mib, 2), "seconds": round(seconds, 3),
        "mib_per_s": round(mib / seconds, 2), "records_per_s": round(check.consumed / seconds, 1),
        "completed": completed, "missing": missing, "anomalies": check.to_json(),
        "ok": completed and missing == 0 and check.total() == 0,
    }
    return result, check


# --------------------------------------------------------------------------- scenarios


@dataclass(slots=True)
class Context:
    opts: Options
    display: Display
    work_root: Path
    s3: S3Backend | None
    payloads: list[bytes]
    problems: list[str] = field(default_factory=list)
    code: Report = field(default_factory=dict)  # code_state() at the last gateway start

    @contextlib.contextmanager
    def gateway(self, name: str, backend: str, args: list[str]) -> Iterator[Gateway]:
        gw = Gateway(self.work_root, name, backend, self.s3 if backend == "s3" else None,
                     args + self.opts.gateway_args)
        try:
            self.code = code_state()
            gw.start()
            self.display.log(f"  gateway pid {gw.pid} on {gw.bootstrap} "
                             f"(admin {gw.metrics_url}): {' '.join(gw.command()[3:])}")
            yield gw
        except BaseException:
            self.display.log(f"--- gateway log (tail) ---\n{gw.log_tail()}")
            raise
        finally:
            gw.stop()
            gw.cleanup(self.opts.keep_data)

    def finish(self, gw: Gateway, result: Report, label: str) -> None:
        """Disk, tier-2 usage, RSS and log findings of a gateway about to be stopped."""
        allocated, apparent = gw.local_disk()
        sizes = sorted(gw.tier2_sizes())
        objects, tier2_bytes = len(sizes), sum(sizes)
        if sizes:  # a chunk is at least --chunk-bytes (unless age-rolled), often more
            result["tier2_chunk_mib"] = {
                "min": round(sizes[0] / MIB, 2), "median": round(statistics.median(sizes) / MIB, 2),
                "max": round(sizes[-1] / MIB, 2)}
        result["local_disk_mib"] = round(allocated / MIB, 2)
        result["local_apparent_mib"] = round(apparent / MIB, 2)
        result["tier2_objects"] = objects
        result["tier2_mib"] = round(tier2_bytes / MIB, 2)
        rss = gw.peak_rss_kib()
        result["gateway_peak_rss_mib"] = _r(rss / 1024 if rss else None, 1)
        with contextlib.suppress(OSError, ValueError):
            result["tier_at_end"] = gw.tier()
        result["code"] = self.code
        result["gateway_exit_code"] = gw.stop()
        result["gateway_log"] = gw.log_problems()
        result["gateway_log_path"] = str(gw.log_path) if self.opts.keep_data else None
        counts = result["gateway_log"]["counts"]
        if result["gateway_exit_code"] != 0:
            self.problems.append(f"{label}: gateway exit code {result['gateway_exit_code']}")
        if counts["ERROR"] or counts["Traceback"] or counts["CRITICAL"]:
            self.problems.append(f"{label}: gateway log has {counts['ERROR']} ERROR, "
                                 f"{counts['Traceback']} Traceback lines")
        tier_end = result.get("tier_at_end", {})
        for name in ("upload_errors", "read_errors"):
            if tier_end.get(name):
                self.problems.append(f"{label}: /tier {name} = {tier_end[name]}")

    def check_produce(self, run: ProduceRun, label: str) -> None:
        s = run.summary(self.opts.record_size)
        if s["delivery_errors"] or s["client_errors"] or s["unflushed"] or s["stalled"]:
            self.problems.append(f"{label}: produce: {s['delivery_errors']} delivery errors, "
                                 f"{s['client_errors']} client errors, {s['unflushed']} "
                                 f"unflushed, stalled={s['stalled']}: {s['error_samples'][:3]}")
        if not s["offsets_dense"]:
            self.problems.append(f"{label}: delivered offsets are not dense")


def _produce_phase(ctx: Context, gw: Gateway, run: ProduceRun, label: str,
                   rate: float | None, count: int | None, duration: float | None,
                   linger_ms: float, sampler: TierSampler | None) -> None:
    producer = Producer(producer_config(gw.bootstrap, linger_ms, run.tracker))
    producer.list_topics(run.topic, timeout=10)  # connect before the clock starts
    total = duration if duration is not None else float(count or 0)

    def poll() -> tuple[float, str]:
        started = run.started or time.perf_counter()
        elapsed = time.perf_counter() - started
        rec = run.tracker.delivered
        status = f"{rec / elapsed:,.0f} rec/s" if elapsed > 0 and rec else ""
        last = sampler.last if sampler is not None else {}
        if last:
            status += (f", pending {last['tier1_pending_bytes'] / MIB:,.1f} MiB, "
                       f"{last['chunks_uploaded']} chunks")
        done = min(elapsed, total) if duration is not None else rec
        return done, status

    with ctx.display.phase(label, total, poll):
        run.run(producer, rate, count, duration, ctx.opts.stall_timeout)


def run_lag(ctx: Context, backend: str, variant: str, rep: int) -> Report:
    opts = ctx.opts
    label = f"lag {backend} {variant}"
    topic = f"lag-{uuid.uuid4().hex[:8]}"
    with ctx.gateway(f"lag-{backend}-{variant}-{rep}", backend, opts.chunk_args(variant)) as gw:
        create_topic(gw.bootstrap, topic, opts.partitions)
        capacity = int(opts.lag_rate * opts.lag_seconds * 1.05) + 1000
        run = ProduceRun(topic, opts.partitions, ctx.payloads, capacity)
        with TierSampler(gw, opts.sample_interval) as sampler:
            cpu = CpuMeter(gw)
            _produce_phase(ctx, gw, run, f"{label}: produce", opts.lag_rate, None,
                           opts.lag_seconds, opts.lag_linger_ms, sampler)
            produce_cpu = cpu.read()
            produce_start = run.started - sampler.t0
            produce_end = run.tracker.last_delivery - sampler.t0
            drained_at, drained = wait_uploaded(gw, ctx.display, f"{label}: drain",
                                                opts.upload_timeout)
            drain_s = drained_at - run.tracker.last_delivery
            sampler.sample()
        ctx.check_produce(run, label)
        if not drained:
            ctx.problems.append(f"{label}: tier1_pending_bytes not 0 after {drain_s:.0f} s")
        window = sampler.between(produce_start, produce_end)
        pending = [s["tier1_pending_bytes"] for s in window] or [0]
        tier_end = sampler.last
        produce = run.summary(opts.record_size)
        result: Report = {
            "scenario": "lag", "backend": backend, "chunks": variant, "repetition": rep,
            "chunk_settings": opts.chunk_label(variant), "topic": topic,
            "target_records_per_s": opts.lag_rate,
            "target_mib_per_s": round(opts.lag_rate * opts.record_size / MIB, 2),
            "produce": produce,
            "produce_cpu_seconds": produce_cpu,
            "pending_peak_mib": round(max(pending) / MIB, 2),
            "pending_mean_mib": round(statistics.fmean(pending) / MIB, 2),
            "drain_seconds": round(drain_s, 2),
            "drained": drained,
            "lag_p50_s": tier_end.get("tier2_upload_lag_p50_seconds"),
            "lag_p99_s": tier_end.get("tier2_upload_lag_p99_seconds"),
            "chunks_uploaded": tier_end.get("chunks_uploaded"),
            "mib_uploaded": round((tier_end.get("bytes_uploaded") or 0) / MIB, 2),
            "upload_errors": tier_end.get("upload_errors"),
            "segments": _segments(gw, topic),
            "produce_window_s": [round(produce_start, 3), round(produce_end, 3)],
            **sampler.compact(),
            "sampler_errors": sampler.errors,
        }
        ctx.finish(gw, result, label)
    ctx.display.log(
        f"  {label}: {produce['mib_per_s']:.1f} MiB/s produced, pending peak "
        f"{result['pending_peak_mib']:.1f} MiB, lag p50/p99 {result['lag_p50_s']}/"
        f"{result['lag_p99_s']} s, {result['chunks_uploaded']} chunks, drained in "
        f"{drain_s:.1f} s")
    return result


def _segments(gw: Gateway, topic: str) -> int | None:
    desc = gw.stream(topic)
    return len(desc["segments"]) if desc and "segments" in desc else None


def run_catchup(ctx: Context, backend: str, source: str, rep: int) -> Report:
    opts = ctx.opts
    label = f"catchup {backend} {source}"
    retain = 0 if source == "tier2" else opts.retain_large_bytes
    topic = f"catchup-{uuid.uuid4().hex[:8]}"
    records = max(opts.partitions, opts.catchup_mib * MIB // opts.record_size)
    with ctx.gateway(f"catchup-{backend}-{source}-{rep}", backend,
                     ["--local-retain-bytes", str(retain)]) as gw:
        create_topic(gw.bootstrap, topic, opts.partitions)
        run = ProduceRun(topic, opts.partitions, ctx.payloads, records)
        cpu = CpuMeter(gw)
        _produce_phase(ctx, gw, run, f"{label}: produce", None, records, None,
                       opts.lag_linger_ms, None)
        produce_cpu = cpu.read()
        ctx.check_produce(run, label)
        uploaded_at, uploaded = wait_uploaded(gw, ctx.display, f"{label}: upload",
                                              opts.upload_timeout)
        wait_s = uploaded_at - run.tracker.last_delivery
        if not uploaded:
            ctx.problems.append(f"{label}: tier1_pending_bytes not 0 after {wait_s:.0f} s")
        before = gw.tier()
        disk_before = gw.local_disk()[0]
        tier2_before = gw.tier2_usage()
        cpu = CpuMeter(gw)
        read, _check = read_all(gw.bootstrap, topic, run.per_partition(), ctx.payloads,
                                opts.consumer_extra, opts.stall_timeout, ctx.display,
                                f"{label}: read")
        read["cpu_seconds"] = cpu.read()
        after = gw.tier()
        if not read["ok"]:
            ctx.problems.append(f"{label}: read back: {read['missing']} missing, "
                                f"{read['anomalies']['total']} anomalies "
                                f"{read['anomalies']['samples'][:3]}")
        delta = {k: (after.get(k) or 0) - (before.get(k) or 0)
                 for k in ("cache_hits", "cache_misses", "bytes_fetched")}
        produce = run.summary(opts.record_size)
        result: Report = {
            "scenario": "catchup", "backend": backend, "source": source, "repetition": rep,
            "local_retain_bytes": retain, "topic": topic,
            "produce": produce, "produce_cpu_seconds": produce_cpu,
            "upload_wait_seconds": round(wait_s, 2), "uploaded": uploaded,
            "lag_p50_s": before.get("tier2_upload_lag_p50_seconds"),
            "lag_p99_s": before.get("tier2_upload_lag_p99_seconds"),
            "chunks_uploaded": before.get("chunks_uploaded"),
            "local_disk_before_read_mib": round(disk_before / MIB, 2),
            "tier1_retained_before_read_mib": round(
                (before.get("tier1_retained_bytes") or 0) / MIB, 2),
            "tier2_before_read_mib": round(tier2_before[1] / MIB, 2),
            "read": read,
            "read_cache_hits": delta["cache_hits"],
            "read_cache_misses": delta["cache_misses"],
            "read_mib_fetched": round(delta["bytes_fetched"] / MIB, 2),
        }
        ctx.finish(gw, result, label)
    ctx.display.log(
        f"  {label}: produced {produce['mib']:.0f} MiB at {produce['mib_per_s']:.1f} MiB/s, "
        f"uploaded {wait_s:.1f} s later; read {read['mib_per_s']:.1f} MiB/s "
        f"({delta['cache_misses']} ranged GETs, {delta['bytes_fetched'] / MIB:.0f} MiB fetched)")
    return result


class TailConsumer:
    """A consumer thread reading a fresh topic from 0; end-to-end latency per record."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, sent_at: array,
                 extra: dict[str, str]) -> None:
        self.errors = ErrorLog()
        self.consumer = Consumer(consumer_config(bootstrap, extra, self.errors))
        self.topic = topic
        self.partitions = partitions
        self.sent_at = sent_at
        self.latencies: list[tuple[float, float]] = []  # (produced at, seconds)
        self.consumed = 0
        self.target: int | None = None  # set once the producer knows how many it sent
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="tail-consumer", daemon=True)

    def start(self) -> None:
        self.consumer.list_topics(self.topic, timeout=10)
        self.consumer.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
        deadline = time.monotonic() + 1.0  # let the first (empty) fetches go out
        while time.monotonic() < deadline:
            self.consumer.consume(num_messages=1, timeout=0.1)
        self.thread.start()

    def _run(self) -> None:
        sent_at = self.sent_at
        while not self.stop.is_set():
            if self.target is not None and self.consumed >= self.target:
                return
            try:
                # poll() returns as soon as a record is there; consume(n) would wait for n.
                msg = self.consumer.poll(0.1)
            except KafkaException as exc:
                self.errors.add("consume", repr(exc))
                continue
            if msg is None:
                continue
            now = time.perf_counter()
            if msg.error() is not None:
                err: KafkaError = msg.error()
                self.errors.add(err.name(), err.str())
                continue
            index = int(msg.key())
            self.latencies.append((sent_at[index], now - sent_at[index]))
            self.consumed += 1

    def close(self, timeout: float) -> None:
        self.thread.join(timeout)
        self.stop.set()
        self.thread.join()
        self.consumer.close()


def run_tail(ctx: Context, backend: str, variant: str, rep: int) -> Report:
    opts = ctx.opts
    label = f"tail {backend} {variant}"
    topic = f"tail-{uuid.uuid4().hex[:8]}"
    with ctx.gateway(f"tail-{backend}-{variant}-{rep}", backend, opts.chunk_args(variant)) as gw:
        create_topic(gw.bootstrap, topic, opts.partitions)
        capacity = int(opts.tail_rate * opts.tail_seconds * 1.05) + 1000
        run = ProduceRun(topic, opts.partitions, ctx.payloads, capacity)
        tail = TailConsumer(gw.bootstrap, topic, opts.partitions, run.sent_at,
                            opts.consumer_extra)
        tail.start()
        before = gw.tier()
        with TierSampler(gw, opts.sample_interval) as sampler:
            cpu = CpuMeter(gw)
            _produce_phase(ctx, gw, run, f"{label}: produce+tail", opts.tail_rate, None,
                           opts.tail_seconds, opts.tail_linger_ms, sampler)
            tail.target = run.sent
            tail.close(timeout=opts.stall_timeout)
            phase_cpu = cpu.read()
        after = gw.tier()
        ctx.check_produce(run, label)
        warm_until = run.started + opts.tail_warmup
        produce_lat = sorted(
            lat for lat, idx in zip(run.tracker.latencies, run.tracker.indices, strict=True)
            if run.sent_at[idx] >= warm_until)
        e2e = sorted(lat for at, lat in tail.latencies if at >= warm_until)
        if tail.consumed < run.tracker.delivered:
            ctx.problems.append(f"{label}: tail consumer read {tail.consumed} of "
                                f"{run.tracker.delivered} records")
        if tail.errors.total():
            ctx.problems.append(f"{label}: consumer errors {tail.errors.samples[:3]}")
        produce = run.summary(opts.record_size)
        result: Report = {
            "scenario": "tail", "backend": backend, "chunks": variant, "repetition": rep,
            "chunk_settings": opts.chunk_label(variant), "topic": topic,
            "target_records_per_s": opts.tail_rate, "linger_ms": opts.tail_linger_ms,
            "warmup_s": opts.tail_warmup,
            "produce": produce, "cpu_seconds": phase_cpu,
            "produce_latency_ms": latency_ms(produce_lat),
            "e2e_latency_ms": latency_ms(e2e),
            "by_second": _by_second(run, tail),
            "consumed": tail.consumed, "consumer_errors": tail.errors.to_json(),
            "chunks_uploaded_during": (after.get("chunks_uploaded") or 0)
                                      - (before.get("chunks_uploaded") or 0),
            "lag_p50_s": after.get("tier2_upload_lag_p50_seconds"),
            "lag_p99_s": after.get("tier2_upload_lag_p99_seconds"),
            "pending_peak_mib": round(max(
                [s["tier1_pending_bytes"] for s in sampler.samples] or [0]) / MIB, 2),
            **sampler.compact(),
        }
        ctx.finish(gw, result, label)
    ctx.display.log(
        f"  {label}: produce p50/p99 {result['produce_latency_ms']['p50']}/"
        f"{result['produce_latency_ms']['p99']} ms, end-to-end p50/p99 "
        f"{result['e2e_latency_ms']['p50']}/{result['e2e_latency_ms']['p99']} ms, "
        f"{result['chunks_uploaded_during']} chunks uploaded meanwhile")
    return result


def _by_second(run: ProduceRun, tail: TailConsumer) -> list[Report]:
    """Produce and end-to-end latency p50/p99 per second of send time: shows a backlog."""
    produce: dict[int, list[float]] = {}
    for lat, idx in zip(run.tracker.latencies, run.tracker.indices, strict=True):
        produce.setdefault(int(run.sent_at[idx] - run.started), []).append(lat)
    e2e: dict[int, list[float]] = {}
    for at, lat in tail.latencies:
        e2e.setdefault(int(at - run.started), []).append(lat)
    rows = []
    for second in sorted(produce):
        p, e = sorted(produce[second]), sorted(e2e.get(second, []))
        rows.append({"second": second, "records": len(p),
                     "produce_p50_ms": _r(percentile(p, 0.5) * 1000, 2),
                     "produce_p99_ms": _r(percentile(p, 0.99) * 1000, 2),
                     "e2e_p50_ms": _r(percentile(e, 0.5) * 1000, 2),
                     "e2e_p99_ms": _r(percentile(e, 0.99) * 1000, 2)})
    return rows


# --------------------------------------------------------------------------- summary


def _median_range(values: list[float | None]) -> tuple[float, float, float] | None:
    nums = [float(v) for v in values if v is not None and not
            (isinstance(v, float) and math.isnan(v))]
    if not nums:
        return None
    return statistics.median(nums), min(nums), max(nums)


def _get(result: Report, path: str) -> Any:
    value: Any = result
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _cell(results: list[Report], path: str, fmt: str) -> str:
    agg = _median_range([_get(r, path) for r in results])
    if agg is None:
        return "-"
    med, lo, hi = agg
    if len(results) == 1 or lo == hi:
        return format(med, fmt)
    return f"{format(med, fmt)} [{format(lo, fmt)}–{format(hi, fmt)}]"


# Row label, paths of figures in a result (shown joined by " / "), format; a path may
# carry its own format as "path:format".
Metric = tuple[str, list[str], str]

LAG_METRICS: list[Metric] = [
    ("produced MiB/s", ["produce.mib_per_s"], ",.1f"),
    ("delivery latency p50 / p99 ms", ["produce.delivery_latency_ms.p50",
                                       "produce.delivery_latency_ms.p99"], ",.0f"),
    ("tier1_pending MiB: peak / mean", ["pending_peak_mib", "pending_mean_mib"], ",.1f"),
    ("upload lag p50 / p99 s (/tier)", ["lag_p50_s", "lag_p99_s"], ".2f"),
    ("chunks uploaded / upload errors", ["chunks_uploaded", "upload_errors"], ",.0f"),
    ("drain s: last delivery to pending 0", ["drain_seconds"], ".1f"),
    ("local disk MiB at end (du DATA/streams)", ["local_disk_mib"], ",.1f"),
    ("tier 2 MiB at end", ["tier2_mib"], ",.1f"),
    ("gateway peak RSS MiB", ["gateway_peak_rss_mib"], ",.0f"),
    ("gateway CPU s", ["produce_cpu_seconds.gateway"], ".1f"),
    ("CPU s: client / others", ["produce_cpu_seconds.client", "produce_cpu_seconds.others"],
     ".1f"),
]
CATCHUP_METRICS: list[Metric] = [
    ("read MiB/s", ["read.mib_per_s"], ",.1f"),
    ("read s / MiB", ["read.seconds", "read.mib:,.0f"], ",.2f"),
    ("read records/s", ["read.records_per_s"], ",.0f"),
    ("ranged GETs / MiB fetched", ["read_cache_misses", "read_mib_fetched"], ",.0f"),
    ("read: gateway CPU s", ["read.cpu_seconds.gateway"], ".1f"),
    ("read CPU s: client / others", ["read.cpu_seconds.client", "read.cpu_seconds.others"],
     ".1f"),
    ("fill: produced MiB/s", ["produce.mib_per_s"], ",.1f"),
    ("last delivery to all uploaded s", ["upload_wait_seconds"], ".1f"),
    ("upload lag p50 / p99 s (/tier)", ["lag_p50_s", "lag_p99_s"], ".2f"),
    ("before the read: local disk MiB", ["local_disk_before_read_mib"], ",.1f"),
    ("before the read: tier 2 MiB", ["tier2_before_read_mib"], ",.1f"),
    ("gateway peak RSS MiB", ["gateway_peak_rss_mib"], ",.0f"),
]
TAIL_METRICS: list[Metric] = [
    ("records/s: sent / delivered", ["produce.sent_records_per_s",
                                     "produce.records_per_s"], ",.0f"),
    ("records per ProduceRequest", ["produce.records_per_request"], ",.1f"),
    ("produce latency p50 / p99 ms", ["produce_latency_ms.p50", "produce_latency_ms.p99"],
     ",.1f"),
    ("produce latency max ms", ["produce_latency_ms.max"], ",.1f"),
    ("end-to-end latency p50 / p99 ms", ["e2e_latency_ms.p50", "e2e_latency_ms.p99"], ",.1f"),
    ("end-to-end latency max ms", ["e2e_latency_ms.max"], ",.1f"),
    ("chunks uploaded meanwhile", ["chunks_uploaded_during"], ",.0f"),
    ("upload lag p50 / p99 s (/tier)", ["lag_p50_s", "lag_p99_s"], ".2f"),
    ("local disk MiB at end (du DATA/streams)", ["local_disk_mib"], ",.1f"),
    ("tier 2 MiB at end", ["tier2_mib"], ",.1f"),
    ("gateway peak RSS MiB", ["gateway_peak_rss_mib"], ",.0f"),
    ("gateway CPU s", ["cpu_seconds.gateway"], ".1f"),
    ("CPU s: client / others", ["cpu_seconds.client", "cpu_seconds.others"], ".1f"),
]


def _metric_cell(results: list[Report], path: str, fmt: str) -> str:
    path, _, own_fmt = path.partition(":")
    return _cell(results, path, own_fmt or fmt)


def grouped(results: list[Report], scenario: str, key: str) -> dict[str, list[Report]]:
    """Results of a scenario by configuration ("folder default", "s3 tier2", ...)."""
    groups: dict[str, list[Report]] = {}
    for r in results:
        if r["scenario"] == scenario:
            groups.setdefault(f"{r['backend']} {r[key]}", []).append(r)
    return groups


def print_table(title: str, headers: list[str], rows: list[list[str]]) -> None:
    if HAVE_RICH:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        table = Table(*map(escape, headers), title=escape(title), title_justify="left")
        for column in table.columns[1:]:
            column.justify = "right"
        for row in rows:
            table.add_row(*map(escape, row))
        # Off a terminal rich assumes 80 columns and would squeeze the cells.
        Console(width=None if sys.stdout.isatty() else 200).print(table)
        return
    print(title)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    for line in [headers, *rows]:
        print("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                        for i, (cell, w) in enumerate(zip(line, widths, strict=True))))
    print()


def print_tables(results: list[Report], opts: Options) -> list[Report]:
    """Prints a table per scenario (a column per configuration); returns them for the JSON."""
    out = []
    specs = [
        ("lag", "chunks", LAG_METRICS,
         f"1. Upload lag: {opts.lag_rate:,} records/s of {opts.record_size} B for "
         f"{opts.lag_seconds:g} s, acks=all, linger.ms={opts.lag_linger_ms:g}, "
         f"{opts.partitions} partitions; chunks default = 8 MiB / 5 s, small = "
         f"{opts.chunk_label('small')}"),
        ("catchup", "source", CATCHUP_METRICS,
         f"2. Catch-up read of {opts.catchup_mib} MiB from offset 0, "
         f"fetch.queue.backoff.ms=10 (tier2: --local-retain-bytes 0, all trimmed; "
         f"tier1: --local-retain-bytes {_size_label(opts.retain_large_bytes)})"),
        ("tail", "chunks", TAIL_METRICS,
         f"3. Tail: {opts.tail_rate:,} records/s for {opts.tail_seconds:g} s, acks=all, "
         f"linger.ms={opts.tail_linger_ms:g}, a consumer at the end; records of the first "
         f"{opts.tail_warmup:g} s left out of the latencies"),
    ]
    for scenario, key, metrics, title in specs:
        groups = grouped(results, scenario, key)
        if not groups:
            continue
        if opts.repeat > 1:
            title += f". Median [range] of {opts.repeat} runs"
        headers = ["", *groups]
        rows = [[label] + [" / ".join(_metric_cell(rs, path, fmt) for path in paths)
                           for rs in groups.values()]
                for label, paths, fmt in metrics]
        print_table(title, headers, rows)
        out.append({"title": title, "headers": headers, "rows": rows})
    return out


# --------------------------------------------------------------------------- plot


def make_plot(results: list[Report], opts: Options, path: Path) -> Path | None:
    lag = [r for r in results if r["scenario"] == "lag"]
    if not lag or not HAVE_MATPLOTLIB:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = [v for v in opts.chunk_variants if any(r["chunks"] == v for r in lag)]
    fig, axes = plt.subplots(len(variants), 1, figsize=(10, 3.6 * len(variants)),
                             squeeze=False, sharex=True)
    colours = {"folder": "tab:blue", "s3": "tab:orange"}
    for ax, variant in zip(axes[:, 0], variants, strict=True):
        seen: set[str] = set()
        for r in lag:
            if r["chunks"] != variant:
                continue
            start, end = r["produce_window_s"]
            t_col = r["sample_fields"].index("t")
            p_col = r["sample_fields"].index("tier1_pending_bytes")
            t = [row[t_col] - start for row in r["samples"]]
            pending = [row[p_col] / MIB for row in r["samples"]]
            name = "folder" if r["backend"] == "folder" else "S3 (moto)"
            same = [x for x in lag if x["chunks"] == variant and x["backend"] == r["backend"]]
            p50, p99 = (_cell(same, "lag_p50_s", ".2f"), _cell(same, "lag_p99_s", ".2f"))
            lbl = None if r["backend"] in seen else f"{name}: upload lag p50 {p50} s, p99 {p99} s"
            seen.add(r["backend"])
            ax.plot(t, pending, color=colours.get(r["backend"]), linewidth=1.2, label=lbl,
                    alpha=0.9 if opts.repeat == 1 else 0.6)
            ax.axvline(end - start, color=colours.get(r["backend"]), linestyle=":",
                       linewidth=0.8)
        ax.axvspan(0, opts.lag_seconds, color="0.93", zorder=0)
        ax.set_title(f"chunks {opts.chunk_label(variant)}", fontsize=10)
        ax.set_ylabel("tier1_pending_bytes (MiB)")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("seconds since the first produce (grey: producing; dotted: last "
                           "delivery)")
    fig.suptitle(f"Tier-1 bytes not yet in tier 2 while producing {opts.lag_rate:,} records/s "
                 f"of {opts.record_size} B (acks=all, {opts.partitions} partitions); "
                 f"/tier sampled every {opts.sample_interval:g} s", fontsize=10)
    fig.tight_layout()
    path = path if path.is_absolute() else Path.cwd() / path
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- main


_NUMBER_LIST = re.compile(
    r"\[\s*((?:-?[0-9][0-9.eE+-]*|null)(?:,\s*(?:-?[0-9][0-9.eE+-]*|null))*)\s*\]")


def write_report(path: Path, report: Report) -> Path:
    """Indented JSON, but a list of plain numbers (a /tier sample) stays on one line."""
    text = json.dumps(report, indent=2)
    text = _NUMBER_LIST.sub(lambda m: "[" + ", ".join(
        x.strip() for x in m.group(1).split(",")) + "]", text)
    path = path if path.is_absolute() else Path.cwd() / path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text + "\n")
    tmp.replace(path)
    return path


def run_all(ctx: Context) -> list[Report]:
    opts = ctx.opts
    plan: list[tuple[str, Callable[[], Report]]] = []
    for rep in range(1, opts.repeat + 1):
        for backend in opts.backends:
            if "lag" in opts.scenarios:
                for variant in opts.chunk_variants:
                    plan.append((f"lag {backend} {variant}",
                                 lambda b=backend, v=variant, r=rep: run_lag(ctx, b, v, r)))
            if "catchup" in opts.scenarios:
                for source in ("tier2", "tier1"):
                    plan.append((f"catchup {backend} {source}",
                                 lambda b=backend, s=source, r=rep: run_catchup(ctx, b, s, r)))
            if "tail" in opts.scenarios:
                for variant in opts.chunk_variants:
                    plan.append((f"tail {backend} {variant}",
                                 lambda b=backend, v=variant, r=rep: run_tail(ctx, b, v, r)))
    results = []
    for n, (name, step) in enumerate(plan, 1):
        ctx.display.log(f"[{n}/{len(plan)}] {name}")
        try:
            results.append(step())
        except Exception as exc:
            ctx.problems.append(f"{name}: failed: {exc!r}")
            ctx.display.log(f"  ! {name} failed: {exc!r}")
    return results


def benchmark(args: argparse.Namespace) -> int:
    opts = Options.from_args(args)
    display = Display(args.progress)
    work_root = Path(tempfile.mkdtemp(prefix="streamgate-tier2-bench-"))
    s3: S3Backend | None = None
    began = time.monotonic()
    results: list[Report] = []
    ctx = Context(opts, display, work_root, None, make_payloads(opts.record_size))
    try:
        if "s3" in opts.backends:
            s3 = S3Backend(work_root / "moto")
            s3.start()
            ctx.s3 = s3
            display.log(f"moto S3 server on {s3.endpoint} "
                        f"(started in {s3.server.startup_seconds:.1f} s)")
        # Runs the scenarios; a run that fails is reported and the others go on.
        results = run_all(ctx)
    finally:
        moto_rss = s3.peak_rss_kib() if s3 is not None else None
        if s3 is not None:
            s3.stop()
        display.close()
        if not opts.keep_data:
            shutil.rmtree(work_root, ignore_errors=True)
    # Tables first: they are what a person reads.
    tables = print_tables(results, opts)
    plot = None
    if "lag" in opts.scenarios:
        if HAVE_MATPLOTLIB:
            plot = make_plot(results, opts, args.plot)
        else:
            print("matplotlib is not installed: no plot (pip install matplotlib)")
    codes = sorted({json.dumps(r["code"], sort_keys=True) for r in results if "code" in r})
    # A commit of tests or docs alone leaves the code hash as it was: not a problem.
    if len({json.loads(c)["code_sha1"] for c in codes}) > 1:
        ctx.problems.append(f"the gateway's code changed during the run ({', '.join(codes)}); "
                            f"see each run's 'code'")
    report = {
        "benchmark": "compat/bench_tier2.py",
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "wall_seconds": round(time.monotonic() - began, 1),
        "ok": not ctx.problems,
        "problems": ctx.problems,
        "units": {"MiB": "2**20 bytes of record values (keys and batch overhead not counted), "
                         "except disk, tier-2 and pending figures, which are bytes as stored",
                  "lag": "/tier tier2_upload_lag_*: a log file's first entry to its chunk "
                         "being confirmed in tier 2",
                  "local_disk": "du (allocated blocks) of DATA/streams"},
        "config": asdict(opts),
        "source": source_version(),
        "code_versions": [json.loads(c) for c in codes],
        "environment": environment(),
        "moto_peak_rss_mib": _r(moto_rss / 1024 if moto_rss else None, 1),
        "work_dir": str(work_root) if opts.keep_data else None,
        "tables": tables,
        "plot": str(plot) if plot else None,
        "runs": results,
    }
    if ctx.problems:
        print("problems:")
        for problem in ctx.problems:
            print(f"  ! {problem}")
    print(f"figures written to {write_report(args.output, report)}")
    if plot:
        print(f"plot written to {plot}")
    print(f"wall time {report['wall_seconds']:.0f} s; result: "
          f"{'OK' if report['ok'] else 'PROBLEMS (see above)'}", flush=True)
    return 0 if report["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return benchmark(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        print(f"benchmark failed: {exc!r}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
