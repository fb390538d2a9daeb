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
gateway's peak RSS. Prints tables; run it with `streamgate bench run scenario:tier2`, which
writes the figures and, with matplotlib, tier2_upload_lag.png in the results folder (`--runs
N`: --repeat N; `--quick`: the folder store, a few seconds per phase). See compat/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from compat.benchlib.display import PROGRESS_MODES, Display, print_table  # noqa: E402
from compat.benchlib.options import choices, key_value, positive_float, positive_int  # noqa: E402
from compat.benchlib.records import (  # noqa: E402
    latency_ms,
    make_payloads,
    percentile,
    round_or_none,
)
from compat.benchlib.report import (  # noqa: E402
    code_state,
    environment,
    log_problems,
)
from compat.benchlib.runs import ProduceRun, TailConsumer, producer_config, read_all  # noqa: E402
from compat.benchlib.scenario import RunOptions, scenario_args, standalone  # noqa: E402
from compat.benchlib.summary import Metric, cell, grouped, metric_cell  # noqa: E402
from compat.benchlib.tier import (  # noqa: E402
    S3Backend,
    TierGateway,
    TierSampler,
    wait_uploaded,
)
from compat.benchlib.topics import create_topic  # noqa: E402
from harness.procstats import CpuMeter  # noqa: E402

PLOT = "tier2_upload_lag.png"
QUICK = ("--backends", "folder", "--lag-seconds", "3", "--lag-rate", "2000", "--catchup-mib", "8")
QUICK += ("--tail-seconds", "3", "--tail-rate", "500")
MIB = 1024 * 1024
HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
BACKENDS = ("folder", "s3")
SCENARIOS = ("lag", "catchup", "tail")

Report = dict[str, Any]


# --------------------------------------------------------------------------- options


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add(
        "--backends",
        type=choices(BACKENDS),
        default=list(BACKENDS),
        metavar="LIST",
        help="tier-2 backends to measure: folder, s3 (moto) (default: folder,s3)",
    )
    add(
        "--scenarios",
        type=choices(SCENARIOS),
        default=list(SCENARIOS),
        metavar="LIST",
        help="what to measure: lag, catchup, tail (default: all three)",
    )
    add(
        "--repeat",
        type=positive_int,
        default=1,
        metavar="N",
        help="run everything N times; tables show the median and the range (default: 1)",
    )
    add(
        "--record-size",
        type=positive_int,
        default=1024,
        metavar="BYTES",
        help="value bytes per record; keys are 12 bytes more (default: %(default)s)",
    )
    add(
        "--partitions",
        type=positive_int,
        default=8,
        metavar="N",
        help="partitions per topic (default: %(default)s)",
    )
    # lag
    add(
        "--lag-seconds",
        type=positive_float,
        default=20.0,
        metavar="S",
        help="lag: how long to produce (default: %(default)s)",
    )
    add(
        "--lag-rate",
        type=positive_int,
        default=20_000,
        metavar="RECORDS_PER_S",
        help="lag: steady produce rate (default: %(default)s, ~19.5 MiB/s of values)",
    )
    add(
        "--lag-linger-ms",
        type=float,
        default=5.0,
        metavar="MS",
        help="lag and catchup producers' linger.ms (default: %(default)s)",
    )
    add(
        "--sample-interval",
        type=positive_float,
        default=0.25,
        metavar="S",
        help="how often /tier is sampled (default: %(default)s)",
    )
    add(
        "--small-chunk-bytes",
        type=positive_int,
        default=1 << 20,
        metavar="BYTES",
        help="the small-chunk variant's --chunk-bytes (default: %(default)s)",
    )
    add(
        "--small-chunk-age-ms",
        type=positive_int,
        default=1000,
        metavar="MS",
        help="the small-chunk variant's --chunk-age-ms (default: %(default)s)",
    )
    add(
        "--chunk-variants",
        type=choices(("default", "small")),
        default=["default", "small"],
        metavar="LIST",
        help="chunk settings for lag and tail: default, small (default: both)",
    )
    # catch-up
    add(
        "--catchup-mib",
        type=positive_int,
        default=200,
        metavar="MIB",
        help="catchup: MiB of values produced and read back (default: %(default)s)",
    )
    add(
        "--retain-large-bytes",
        type=positive_int,
        default=4 << 30,
        metavar="BYTES",
        help="catchup: --local-retain-bytes of the tier-1 read (default: 4 GiB)",
    )
    add(
        "--consumer-config",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka consumer property (repeatable); fetch.queue.backoff.ms=10 is set",
    )
    # tail
    add(
        "--tail-seconds",
        type=positive_float,
        default=20.0,
        metavar="S",
        help="tail: how long to produce (default: %(default)s)",
    )
    add(
        "--tail-rate",
        type=positive_int,
        default=2000,
        metavar="RECORDS_PER_S",
        help="tail: produce rate (default: %(default)s)",
    )
    add(
        "--tail-linger-ms",
        type=float,
        default=1.0,
        metavar="MS",
        help="tail: producer linger.ms (default: %(default)s)",
    )
    add(
        "--tail-warmup",
        type=float,
        default=1.0,
        metavar="S",
        help="tail: latencies of records produced in the first S seconds are left out "
        "(default: %(default)s)",
    )
    # general
    add(
        "--upload-timeout",
        type=positive_float,
        default=180.0,
        metavar="S",
        help="give up waiting for tier1_pending_bytes to reach 0 after this long "
        "(default: %(default)s)",
    )
    add(
        "--stall-timeout",
        type=positive_float,
        default=60.0,
        metavar="S",
        help="give up on a produce or consume phase that makes no progress for this long "
        "(default: %(default)s)",
    )
    add(
        "--gateway-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for every started gateway (repeatable)",
    )
    add(
        "--keep-data",
        action="store_true",
        help="keep the temporary dirs (data, gateway.log, moto-server.log)",
    )
    add(
        "--progress",
        choices=PROGRESS_MODES,
        default="auto",
        help="auto: rich bars on a terminal if rich is installed, else a line a second",
    )
    add(
        "--plot",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"PNG of tier1_pending_bytes over time (default: {PLOT} in the results folder; "
        "needs matplotlib)",
    )
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
            backends=args.backends,
            scenarios=args.scenarios,
            repeat=args.repeat,
            record_size=args.record_size,
            partitions=args.partitions,
            lag_seconds=args.lag_seconds,
            lag_rate=args.lag_rate,
            lag_linger_ms=args.lag_linger_ms,
            sample_interval=args.sample_interval,
            small_chunk_bytes=args.small_chunk_bytes,
            small_chunk_age_ms=args.small_chunk_age_ms,
            chunk_variants=args.chunk_variants,
            catchup_mib=args.catchup_mib,
            retain_large_bytes=args.retain_large_bytes,
            consumer_extra=dict(args.consumer_config),
            tail_seconds=args.tail_seconds,
            tail_rate=args.tail_rate,
            tail_linger_ms=args.tail_linger_ms,
            tail_warmup=args.tail_warmup,
            upload_timeout=args.upload_timeout,
            stall_timeout=args.stall_timeout,
            gateway_args=list(args.gateway_arg),
            keep_data=args.keep_data,
        )

    def chunk_args(self, variant: str) -> list[str]:
        if variant == "small":
            return [
                "--chunk-bytes",
                str(self.small_chunk_bytes),
                "--chunk-age-ms",
                str(self.small_chunk_age_ms),
            ]
        return []

    def chunk_label(self, variant: str) -> str:
        if variant == "small":
            return f"{_size_label(self.small_chunk_bytes)} / {self.small_chunk_age_ms / 1000:g} s"
        return "8 MiB / 5 s (defaults)"


def _size_label(n: int) -> str:
    return f"{n / MIB:g} MiB" if n >= MIB else f"{n / 1024:g} KiB"


# --------------------------------------------------------------------------- display


# --------------------------------------------------------------------------- disk / http


# --------------------------------------------------------------------------- moto (S3)


# --------------------------------------------------------------------------- the gateway


# --------------------------------------------------------------------------- /tier sampler


# --------------------------------------------------------------------------- clients


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
    def gateway(self, name: str, backend: str, args: list[str]) -> Iterator[TierGateway]:
        gw = TierGateway(
            self.work_root,
            name,
            backend,
            self.s3 if backend == "s3" else None,
            args + self.opts.gateway_args,
        )
        try:
            self.code = code_state()
            gw.start_fresh()
            self.display.log(
                f"  gateway pid {gw.pid} on {gw.bootstrap} "
                f"(admin {gw.admin_url}): {' '.join(gw.command()[3:])}"
            )
            yield gw
        except BaseException:
            self.display.log(f"--- gateway log (tail) ---\n{gw.log_tail()}")
            raise
        finally:
            gw.cleanup(self.opts.keep_data)

    def finish(self, gw: TierGateway, result: Report, label: str) -> None:
        """Disk, tier-2 usage, RSS and log findings of a gateway about to be stopped."""
        allocated, apparent = gw.local_disk()
        sizes = sorted(gw.tier2_sizes())
        objects, tier2_bytes = len(sizes), sum(sizes)
        if sizes:  # a chunk is at least --chunk-bytes (unless age-rolled), often more
            result["tier2_chunk_mib"] = {
                "min": round(sizes[0] / MIB, 2),
                "median": round(statistics.median(sizes) / MIB, 2),
                "max": round(sizes[-1] / MIB, 2),
            }
        result["local_disk_mib"] = round(allocated / MIB, 2)
        result["local_apparent_mib"] = round(apparent / MIB, 2)
        result["tier2_objects"] = objects
        result["tier2_mib"] = round(tier2_bytes / MIB, 2)
        rss = gw.peak_rss_kib()
        result["gateway_peak_rss_mib"] = round_or_none(rss / 1024 if rss else None, 1)
        with contextlib.suppress(OSError, ValueError):
            result["tier_at_end"] = gw.tier()
        result["code"] = self.code
        result["gateway_exit_code"] = gw.stop(timeout=30)
        result["gateway_log"] = log_problems(gw.log_text())
        result["gateway_log_path"] = str(gw.log_path) if self.opts.keep_data else None
        counts = result["gateway_log"]["counts"]
        if result["gateway_exit_code"] != 0:
            self.problems.append(f"{label}: gateway exit code {result['gateway_exit_code']}")
        if counts["ERROR"] or counts["Traceback"] or counts["CRITICAL"]:
            self.problems.append(
                f"{label}: gateway log has {counts['ERROR']} ERROR, "
                f"{counts['Traceback']} Traceback lines"
            )
        tier_end = result.get("tier_at_end", {})
        for name in ("upload_errors", "read_errors"):
            if tier_end.get(name):
                self.problems.append(f"{label}: /tier {name} = {tier_end[name]}")

    def check_produce(self, run: ProduceRun, label: str) -> None:
        s = run.summary(self.opts.record_size)
        if s["delivery_errors"] or s["client_errors"] or s["unflushed"] or s["stalled"]:
            self.problems.append(
                f"{label}: produce: {s['delivery_errors']} delivery errors, "
                f"{s['client_errors']} client errors, {s['unflushed']} "
                f"unflushed, stalled={s['stalled']}: {s['error_samples'][:3]}"
            )
        if not s["offsets_dense"]:
            self.problems.append(f"{label}: delivered offsets are not dense")


def _produce_phase(
    ctx: Context,
    gw: TierGateway,
    run: ProduceRun,
    label: str,
    rate: float | None,
    count: int | None,
    duration: float | None,
    linger_ms: float,
    sampler: TierSampler | None,
) -> None:
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
            status += (
                f", pending {last['tier1_pending_bytes'] / MIB:,.1f} MiB, "
                f"{last['chunks_uploaded']} chunks"
            )
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
            cpu = CpuMeter(gw.cpu_seconds)
            _produce_phase(
                ctx,
                gw,
                run,
                f"{label}: produce",
                opts.lag_rate,
                None,
                opts.lag_seconds,
                opts.lag_linger_ms,
                sampler,
            )
            produce_cpu = cpu.read().to_json()
            produce_start = run.started - sampler.t0
            produce_end = run.tracker.last_delivery - sampler.t0
            drained_at, drained = wait_uploaded(
                gw, ctx.display, f"{label}: drain", opts.upload_timeout
            )
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
            "scenario": "lag",
            "backend": backend,
            "chunks": variant,
            "repetition": rep,
            "chunk_settings": opts.chunk_label(variant),
            "topic": topic,
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
        f"{drain_s:.1f} s"
    )
    return result


def _segments(gw: TierGateway, topic: str) -> int | None:
    desc = gw.stream(topic)
    return len(desc["segments"]) if desc and "segments" in desc else None


def run_catchup(ctx: Context, backend: str, source: str, rep: int) -> Report:
    opts = ctx.opts
    label = f"catchup {backend} {source}"
    retain = 0 if source == "tier2" else opts.retain_large_bytes
    topic = f"catchup-{uuid.uuid4().hex[:8]}"
    records = max(opts.partitions, opts.catchup_mib * MIB // opts.record_size)
    with ctx.gateway(
        f"catchup-{backend}-{source}-{rep}", backend, ["--local-retain-bytes", str(retain)]
    ) as gw:
        create_topic(gw.bootstrap, topic, opts.partitions)
        run = ProduceRun(topic, opts.partitions, ctx.payloads, records)
        cpu = CpuMeter(gw.cpu_seconds)
        _produce_phase(
            ctx, gw, run, f"{label}: produce", None, records, None, opts.lag_linger_ms, None
        )
        produce_cpu = cpu.read().to_json()
        ctx.check_produce(run, label)
        uploaded_at, uploaded = wait_uploaded(
            gw, ctx.display, f"{label}: upload", opts.upload_timeout
        )
        wait_s = uploaded_at - run.tracker.last_delivery
        if not uploaded:
            ctx.problems.append(f"{label}: tier1_pending_bytes not 0 after {wait_s:.0f} s")
        before = gw.tier()
        disk_before = gw.local_disk()[0]
        tier2_before = gw.tier2_usage()
        cpu = CpuMeter(gw.cpu_seconds)
        read, _check = read_all(
            gw.bootstrap,
            topic,
            run.per_partition(),
            ctx.payloads,
            opts.consumer_extra,
            opts.stall_timeout,
            ctx.display,
            f"{label}: read",
        )
        read["cpu_seconds"] = cpu.read().to_json()
        after = gw.tier()
        if not read["ok"]:
            ctx.problems.append(
                f"{label}: read back: {read['missing']} missing, "
                f"{read['anomalies']['total']} anomalies "
                f"{read['anomalies']['samples'][:3]}"
            )
        delta = {
            k: (after.get(k) or 0) - (before.get(k) or 0)
            for k in ("cache_hits", "cache_misses", "bytes_fetched")
        }
        produce = run.summary(opts.record_size)
        result: Report = {
            "scenario": "catchup",
            "backend": backend,
            "source": source,
            "repetition": rep,
            "local_retain_bytes": retain,
            "topic": topic,
            "produce": produce,
            "produce_cpu_seconds": produce_cpu,
            "upload_wait_seconds": round(wait_s, 2),
            "uploaded": uploaded,
            "lag_p50_s": before.get("tier2_upload_lag_p50_seconds"),
            "lag_p99_s": before.get("tier2_upload_lag_p99_seconds"),
            "chunks_uploaded": before.get("chunks_uploaded"),
            "local_disk_before_read_mib": round(disk_before / MIB, 2),
            "tier1_retained_before_read_mib": round(
                (before.get("tier1_retained_bytes") or 0) / MIB, 2
            ),
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
        f"({delta['cache_misses']} ranged GETs, {delta['bytes_fetched'] / MIB:.0f} MiB fetched)"
    )
    return result


def run_tail(ctx: Context, backend: str, variant: str, rep: int) -> Report:
    opts = ctx.opts
    label = f"tail {backend} {variant}"
    topic = f"tail-{uuid.uuid4().hex[:8]}"
    with ctx.gateway(f"tail-{backend}-{variant}-{rep}", backend, opts.chunk_args(variant)) as gw:
        create_topic(gw.bootstrap, topic, opts.partitions)
        capacity = int(opts.tail_rate * opts.tail_seconds * 1.05) + 1000
        run = ProduceRun(topic, opts.partitions, ctx.payloads, capacity)
        tail = TailConsumer(gw.bootstrap, topic, opts.partitions, run.sent_at, opts.consumer_extra)
        tail.start()
        before = gw.tier()
        with TierSampler(gw, opts.sample_interval) as sampler:
            cpu = CpuMeter(gw.cpu_seconds)
            _produce_phase(
                ctx,
                gw,
                run,
                f"{label}: produce+tail",
                opts.tail_rate,
                None,
                opts.tail_seconds,
                opts.tail_linger_ms,
                sampler,
            )
            tail.target = run.sent
            tail.close(timeout=opts.stall_timeout)
            phase_cpu = cpu.read().to_json()
        after = gw.tier()
        ctx.check_produce(run, label)
        warm_until = run.started + opts.tail_warmup
        produce_lat = sorted(
            lat
            for lat, idx in zip(run.tracker.latencies, run.tracker.indices, strict=True)
            if run.sent_at[idx] >= warm_until
        )
        e2e = sorted(lat for at, lat in tail.latencies if at >= warm_until)
        if tail.consumed < run.tracker.delivered:
            ctx.problems.append(
                f"{label}: tail consumer read {tail.consumed} of {run.tracker.delivered} records"
            )
        if tail.errors.total():
            ctx.problems.append(f"{label}: consumer errors {tail.errors.samples[:3]}")
        produce = run.summary(opts.record_size)
        result: Report = {
            "scenario": "tail",
            "backend": backend,
            "chunks": variant,
            "repetition": rep,
            "chunk_settings": opts.chunk_label(variant),
            "topic": topic,
            "target_records_per_s": opts.tail_rate,
            "linger_ms": opts.tail_linger_ms,
            "warmup_s": opts.tail_warmup,
            "produce": produce,
            "cpu_seconds": phase_cpu,
            "produce_latency_ms": latency_ms(produce_lat),
            "e2e_latency_ms": latency_ms(e2e),
            "by_second": _by_second(run, tail),
            "consumed": tail.consumed,
            "consumer_errors": tail.errors.to_json(),
            "chunks_uploaded_during": (after.get("chunks_uploaded") or 0)
            - (before.get("chunks_uploaded") or 0),
            "lag_p50_s": after.get("tier2_upload_lag_p50_seconds"),
            "lag_p99_s": after.get("tier2_upload_lag_p99_seconds"),
            "pending_peak_mib": round(
                max([s["tier1_pending_bytes"] for s in sampler.samples] or [0]) / MIB, 2
            ),
            **sampler.compact(),
        }
        ctx.finish(gw, result, label)
    ctx.display.log(
        f"  {label}: produce p50/p99 {result['produce_latency_ms']['p50']}/"
        f"{result['produce_latency_ms']['p99']} ms, end-to-end p50/p99 "
        f"{result['e2e_latency_ms']['p50']}/{result['e2e_latency_ms']['p99']} ms, "
        f"{result['chunks_uploaded_during']} chunks uploaded meanwhile"
    )
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
        rows.append(
            {
                "second": second,
                "records": len(p),
                "produce_p50_ms": round_or_none(percentile(p, 0.5) * 1000, 2),
                "produce_p99_ms": round_or_none(percentile(p, 0.99) * 1000, 2),
                "e2e_p50_ms": round_or_none(percentile(e, 0.5) * 1000, 2),
                "e2e_p99_ms": round_or_none(percentile(e, 0.99) * 1000, 2),
            }
        )
    return rows


# --------------------------------------------------------------------------- summary


LAG_METRICS: list[Metric] = [
    ("produced MiB/s", ["produce.mib_per_s"], ",.1f"),
    (
        "delivery latency p50 / p99 ms",
        ["produce.delivery_latency_ms.p50", "produce.delivery_latency_ms.p99"],
        ",.0f",
    ),
    ("tier1_pending MiB: peak / mean", ["pending_peak_mib", "pending_mean_mib"], ",.1f"),
    ("upload lag p50 / p99 s (/tier)", ["lag_p50_s", "lag_p99_s"], ".2f"),
    ("chunks uploaded / upload errors", ["chunks_uploaded", "upload_errors"], ",.0f"),
    ("drain s: last delivery to pending 0", ["drain_seconds"], ".1f"),
    ("local disk MiB at end (du DATA/streams)", ["local_disk_mib"], ",.1f"),
    ("tier 2 MiB at end", ["tier2_mib"], ",.1f"),
    ("gateway peak RSS MiB", ["gateway_peak_rss_mib"], ",.0f"),
    ("gateway CPU s", ["produce_cpu_seconds.gateway"], ".1f"),
    ("CPU s: client / others", ["produce_cpu_seconds.client", "produce_cpu_seconds.others"], ".1f"),
]
CATCHUP_METRICS: list[Metric] = [
    ("read MiB/s", ["read.mib_per_s"], ",.1f"),
    ("read s / MiB", ["read.seconds", "read.mib:,.0f"], ",.2f"),
    ("read records/s", ["read.records_per_s"], ",.0f"),
    ("ranged GETs / MiB fetched", ["read_cache_misses", "read_mib_fetched"], ",.0f"),
    ("read: gateway CPU s", ["read.cpu_seconds.gateway"], ".1f"),
    ("read CPU s: client / others", ["read.cpu_seconds.client", "read.cpu_seconds.others"], ".1f"),
    ("fill: produced MiB/s", ["produce.mib_per_s"], ",.1f"),
    ("last delivery to all uploaded s", ["upload_wait_seconds"], ".1f"),
    ("upload lag p50 / p99 s (/tier)", ["lag_p50_s", "lag_p99_s"], ".2f"),
    ("before the read: local disk MiB", ["local_disk_before_read_mib"], ",.1f"),
    ("before the read: tier 2 MiB", ["tier2_before_read_mib"], ",.1f"),
    ("gateway peak RSS MiB", ["gateway_peak_rss_mib"], ",.0f"),
]
TAIL_METRICS: list[Metric] = [
    (
        "records/s: sent / delivered",
        ["produce.sent_records_per_s", "produce.records_per_s"],
        ",.0f",
    ),
    ("records per ProduceRequest", ["produce.records_per_request"], ",.1f"),
    ("produce latency p50 / p99 ms", ["produce_latency_ms.p50", "produce_latency_ms.p99"], ",.1f"),
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


def print_tables(results: list[Report], opts: Options) -> list[Report]:
    """Prints a table per scenario (a column per configuration); returns them for the JSON."""
    out = []
    specs = [
        (
            "lag",
            "chunks",
            LAG_METRICS,
            f"1. Upload lag: {opts.lag_rate:,} records/s of {opts.record_size} B for "
            f"{opts.lag_seconds:g} s, acks=all, linger.ms={opts.lag_linger_ms:g}, "
            f"{opts.partitions} partitions; chunks default = 8 MiB / 5 s, small = "
            f"{opts.chunk_label('small')}",
        ),
        (
            "catchup",
            "source",
            CATCHUP_METRICS,
            f"2. Catch-up read of {opts.catchup_mib} MiB from offset 0, "
            f"fetch.queue.backoff.ms=10 (tier2: --local-retain-bytes 0, all trimmed; "
            f"tier1: --local-retain-bytes {_size_label(opts.retain_large_bytes)})",
        ),
        (
            "tail",
            "chunks",
            TAIL_METRICS,
            f"3. Tail: {opts.tail_rate:,} records/s for {opts.tail_seconds:g} s, acks=all, "
            f"linger.ms={opts.tail_linger_ms:g}, a consumer at the end; records of the first "
            f"{opts.tail_warmup:g} s left out of the latencies",
        ),
    ]
    for scenario, key, metrics, title in specs:
        groups = grouped(results, scenario, key)
        if not groups:
            continue
        if opts.repeat > 1:
            title += f". Median [range] of {opts.repeat} runs"
        headers = ["", *groups]
        rows = [
            [label]
            + [" / ".join(metric_cell(rs, path, fmt) for path in paths) for rs in groups.values()]
            for label, paths, fmt in metrics
        ]
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
    fig, axes = plt.subplots(
        len(variants), 1, figsize=(10, 3.6 * len(variants)), squeeze=False, sharex=True
    )
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
            p50, p99 = (cell(same, "lag_p50_s", ".2f"), cell(same, "lag_p99_s", ".2f"))
            lbl = None if r["backend"] in seen else f"{name}: upload lag p50 {p50} s, p99 {p99} s"
            seen.add(r["backend"])
            ax.plot(
                t,
                pending,
                color=colours.get(r["backend"]),
                linewidth=1.2,
                label=lbl,
                alpha=0.9 if opts.repeat == 1 else 0.6,
            )
            ax.axvline(end - start, color=colours.get(r["backend"]), linestyle=":", linewidth=0.8)
        ax.axvspan(0, opts.lag_seconds, color="0.93", zorder=0)
        ax.set_title(f"chunks {opts.chunk_label(variant)}", fontsize=10)
        ax.set_ylabel("tier1_pending_bytes (MiB)")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel(
        "seconds since the first produce (grey: producing; dotted: last delivery)"
    )
    fig.suptitle(
        f"Tier-1 bytes not yet in tier 2 while producing {opts.lag_rate:,} records/s "
        f"of {opts.record_size} B (acks=all, {opts.partitions} partitions); "
        f"/tier sampled every {opts.sample_interval:g} s",
        fontsize=10,
    )
    fig.tight_layout()
    path = path if path.is_absolute() else Path.cwd() / path
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- main


def run_all(ctx: Context) -> list[Report]:
    opts = ctx.opts
    plan: list[tuple[str, Callable[[], Report]]] = []
    for rep in range(1, opts.repeat + 1):
        for backend in opts.backends:
            if "lag" in opts.scenarios:
                for variant in opts.chunk_variants:
                    plan.append(
                        (
                            f"lag {backend} {variant}",
                            lambda b=backend, v=variant, r=rep: run_lag(ctx, b, v, r),
                        )
                    )
            if "catchup" in opts.scenarios:
                for source in ("tier2", "tier1"):
                    plan.append(
                        (
                            f"catchup {backend} {source}",
                            lambda b=backend, s=source, r=rep: run_catchup(ctx, b, s, r),
                        )
                    )
            if "tail" in opts.scenarios:
                for variant in opts.chunk_variants:
                    plan.append(
                        (
                            f"tail {backend} {variant}",
                            lambda b=backend, v=variant, r=rep: run_tail(ctx, b, v, r),
                        )
                    )
    results = []
    for n, (name, step) in enumerate(plan, 1):
        ctx.display.log(f"[{n}/{len(plan)}] {name}")
        try:
            results.append(step())
        except Exception as exc:
            ctx.problems.append(f"{name}: failed: {exc!r}")
            ctx.display.log(f"  ! {name} failed: {exc!r}")
    return results


def benchmark(args: argparse.Namespace) -> Report:
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
            display.log(
                f"moto S3 server on {s3.endpoint} (started in {s3.server.startup_seconds:.1f} s)"
            )
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
        ctx.problems.append(
            f"the gateway's code changed during the run ({', '.join(codes)}); see each run's 'code'"
        )
    report = {
        "benchmark": "compat/bench_tier2.py",
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "wall_seconds": round(time.monotonic() - began, 1),
        "ok": not ctx.problems,
        "problems": ctx.problems,
        "units": {
            "MiB": "2**20 bytes of record values (keys and batch overhead not counted), "
            "except disk, tier-2 and pending figures, which are bytes as stored",
            "lag": "/tier tier2_upload_lag_*: a log file's first entry to its chunk "
            "being confirmed in tier 2",
            "local_disk": "du (allocated blocks) of DATA/streams",
        },
        "config": asdict(opts),
        "code_versions": [json.loads(c) for c in codes],
        "environment": environment(),
        "moto_peak_rss_mib": round_or_none(moto_rss / 1024 if moto_rss else None, 1),
        "work_dir": str(work_root) if opts.keep_data else None,
        "tables": tables,
        "plot": str(plot) if plot else None,
        "runs": results,
    }
    if ctx.problems:
        print("problems:")
        for problem in ctx.problems:
            print(f"  ! {problem}")
    if plot:
        print(f"plot written to {plot}")
    print(
        f"wall time {report['wall_seconds']:.0f} s; result: "
        f"{'OK' if report['ok'] else 'PROBLEMS (see above)'}",
        flush=True,
    )
    return report


def run(options: RunOptions) -> Report:
    args = scenario_args(build_parser(), options, quick=QUICK, runs="--repeat")
    if args.plot is None:
        args.plot = options.out / PLOT
    return benchmark(args)


def main(argv: list[str] | None = None) -> int:
    return standalone("tier2", argv)


if __name__ == "__main__":
    sys.exit(main())
