"""The gateway's CPU per small Produce and per Fetch request, and where a produce's latency goes.

CPU time is robust on a busy machine where wall-clock throughput is not: the gateway's
utime+stime (/proc/PID/stat) over a phase, divided by the requests the clients sent in it
(librdkafka's own request counters, read with the CPU in each statistics callback, so both
come from the same instants). For each source tree given (`--tree`, default this one; trees
alternate run by run), a fresh gateway per run and these phases, one confluent-kafka client
each, 100-byte records, acks=all, 8 partitions:

* `produce-linger0`: a producer at `--rate0` records/s, linger 0 (about a request a record).
* `produce-linger1`: `--rate` records/s, linger 1 ms (the 2k/s workload's shape).
* `tail`: the linger-0 producer again plus a consumer reading at the tail (a long-poll Fetch
  woken per durable group). CPU per Fetch = (the phase's CPU per second - Produces per second
  x CPU per Produce of the linger-0 phase) / Fetches per second: a difference, so noisy when
  the machine is busy (its rates come from each client's own samples).
* `fetch-empty`: only a caught-up consumer with fetch.wait.max.ms=0: each Fetch finds nothing
  new, the cheapest read the path has.

Beside them, the latency breakdown: a small durable append (`pwritev` with RWF_DSYNC, as the
segment logs write a group) in the temporary directory's file system, beside every run (what
every acknowledged batch waits for; it varies with the machine's load), and one Produce at a
time over a raw socket (tools.probes.request_cost: no client library timers in the figure).

    python -m compat.bench_request_cpu [--quick] [--runs N] [--out DIR] [-- --tree PATH ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from compat.benchlib.report import environment  # noqa: E402
from compat.benchlib.scenario import RunOptions, scenario_args, standalone  # noqa: E402
from compat.benchlib.trees import tree_commit, tree_gateway  # noqa: E402
from harness.gateway import Gateway  # noqa: E402
from harness.procstats import proc_cpu_seconds  # noqa: E402

QUICK = ("--seconds", "2", "--raw-requests", "300")
_PARTITIONS = 8
_TOPIC = "cpu"
_STATS_MS = 100


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tree",
        action="append",
        type=Path,
        help="a checkout whose gateway runs (repeatable, default .; the last one is `latest`)",
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0, help="each phase's length")
    parser.add_argument("--rate", type=float, default=2000, help="records/s, linger 1 ms")
    parser.add_argument("--rate0", type=float, default=1000, help="records/s, linger 0")
    parser.add_argument("--size", type=int, default=100, help="record value bytes")
    parser.add_argument("--raw-requests", type=int, default=2000)
    return parser


class _Counter:
    """A client's request count of one kind, with the gateway's CPU seconds read at the same
    moment (in the statistics callback): pairs to take differences of."""

    def __init__(self, pid: int, kind: str) -> None:
        self.pid = pid
        self.kind = kind
        self.samples: list[tuple[float, int, float]] = []  # (monotonic, requests, cpu s)
        self.lock = threading.Lock()

    def callback(self, raw: str) -> None:
        brokers = json.loads(raw)["brokers"].values()
        count = sum(b.get("req", {}).get(self.kind, 0) for b in brokers)
        cpu = proc_cpu_seconds(self.pid) or 0.0
        with self.lock:
            self.samples.append((time.monotonic(), count, cpu))

    def latest(self) -> tuple[float, int, float]:
        with self.lock:
            return self.samples[-1]

    def next_after(self, moment: float, timeout: float = 5.0) -> tuple[float, int, float]:
        """The first sample taken after `moment` (the caller keeps the client polled)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                for sample in self.samples:
                    if sample[0] > moment:
                        return sample
            time.sleep(0.01)
        raise TimeoutError(f"no statistics from the {self.kind} client")


class _Paced:
    """A producer sending records at a fixed rate in a thread, keeping delivery latencies."""

    def __init__(self, bootstrap: str, pid: int, linger_ms: float, rate: float, size: int):
        self.counter = _Counter(pid, "Produce")
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": linger_ms,
                "statistics.interval.ms": _STATS_MS,
                "stats_cb": self.counter.callback,
            }
        )
        self.producer.list_topics(_TOPIC, timeout=30)
        self.rate = rate
        self.payload = b"x" * size
        self.latencies: list[float] = []
        self.errors = 0
        self.recording = False
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        start = time.perf_counter()
        i = 0
        while self.running:
            due = start + i / self.rate
            now = time.perf_counter()
            if due > now:
                self.producer.poll(due - now)
                continue
            sent = time.perf_counter()
            record = self.recording

            def delivered(err: Any, _msg: Any, sent: float = sent, record: bool = record) -> None:
                if err is not None:
                    self.errors += 1
                elif record:
                    self.latencies.append(time.perf_counter() - sent)

            self.producer.produce(
                _TOPIC, self.payload, partition=i % _PARTITIONS, on_delivery=delivered
            )
            self.producer.poll(0)
            i += 1
        self.producer.flush(30)

    def stop(self) -> None:
        self.running = False
        self.thread.join()


class _Tail:
    """A consumer at the tail of the topic in a thread (its Fetches counted)."""

    def __init__(self, bootstrap: str, pid: int, extra: dict[str, Any] | None = None) -> None:
        self.counter = _Counter(pid, "Fetch")
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"cpu-{time.monotonic_ns()}",
                "enable.auto.commit": False,
                "statistics.interval.ms": _STATS_MS,
                "stats_cb": self.counter.callback,
                **(extra or {}),
            }
        )
        self.consumer.assign([TopicPartition(_TOPIC, p, OFFSET_END) for p in range(_PARTITIONS)])
        self.consumed = 0
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.running:
            for message in self.consumer.consume(1000, timeout=0.05):
                if message.error() is None:
                    self.consumed += 1

    def stop(self) -> None:
        self.running = False
        self.thread.join()
        self.consumer.close()


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 3)


def _window(counter: _Counter, seconds: float) -> tuple[int, float]:
    """Requests and gateway CPU seconds over the next `seconds`, between two samples."""
    first = counter.next_after(time.monotonic())
    time.sleep(seconds)
    last = counter.next_after(time.monotonic())
    return last[1] - first[1], last[2] - first[2]


def _produce_phase(
    gw: Gateway, args: argparse.Namespace, linger_ms: float, rate: float, tail: bool
) -> dict[str, Any]:
    assert gw.pid is not None
    producer = _Paced(gw.bootstrap, gw.pid, linger_ms, rate, args.size)
    tailing = _Tail(gw.bootstrap, gw.pid) if tail else None
    try:
        time.sleep(1.0)  # connections settled, caches warm
        producer.recording = True
        first = producer.counter.next_after(time.monotonic())
        fetch_first = tailing.counter.next_after(time.monotonic()) if tailing else None
        time.sleep(args.seconds)
        last = producer.counter.next_after(time.monotonic())
        fetch_last = tailing.counter.next_after(time.monotonic()) if tailing else None
        producer.recording = False
    finally:
        producer.stop()
        if tailing is not None:
            tailing.stop()
    # CPU over the span both counters cover (the two clients' samples are not simultaneous).
    produces = last[1] - first[1]
    result: dict[str, Any] = {
        "linger_ms": linger_ms,
        "rate": rate,
        "produce_requests": produces,
        "records_per_request": round(len(producer.latencies) / produces, 2) if produces else None,
        "errors": producer.errors,
        "p50_ms": _ms(_quantile(producer.latencies, 0.5)),
        "p99_ms": _ms(_quantile(producer.latencies, 0.99)),
    }
    cpu = last[2] - first[2]
    result["cpu_s"] = round(cpu, 3)
    result["cpu_ms_per_produce"] = round(cpu * 1000 / produces, 4) if produces else None
    if fetch_first is not None and fetch_last is not None:
        # The two clients' samples are not simultaneous: rates over each one's own span.
        result["produces_per_s"] = round(produces / (last[0] - first[0]), 1)
        result["fetches_per_s"] = round(
            (fetch_last[1] - fetch_first[1]) / (fetch_last[0] - fetch_first[0]), 1
        )
        result["cpu_per_s"] = round(
            (fetch_last[2] - fetch_first[2]) / (fetch_last[0] - fetch_first[0]), 4
        )
    return result


def _fetch_empty_phase(gw: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    assert gw.pid is not None
    tailing = _Tail(gw.bootstrap, gw.pid, {"fetch.wait.max.ms": 0})
    try:
        time.sleep(1.0)
        fetches, cpu = _window(tailing.counter, args.seconds)
    finally:
        tailing.stop()
    return {
        "fetch_requests": fetches,
        "cpu_s": round(cpu, 3),
        "cpu_ms_per_fetch": round(cpu * 1000 / fetches, 4) if fetches else None,
    }


def run_once(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One fresh gateway from `tree` and every phase against it."""
    with tree_gateway(tree, _TOPIC, _PARTITIONS) as gw:
        linger0 = _produce_phase(gw, args, 0, args.rate0, tail=False)
        linger1 = _produce_phase(gw, args, 1, args.rate, tail=False)
        tail = _produce_phase(gw, args, 0, args.rate0, tail=True)
        empty = _fetch_empty_phase(gw, args)
    # What the Fetches cost: the phase's CPU less its Produces at the cost measured alone.
    per_produce = linger0["cpu_ms_per_produce"]
    tail.pop("cpu_ms_per_produce")
    if per_produce is not None and tail["fetches_per_s"]:
        spent = tail["cpu_per_s"] * 1000 - per_produce * tail["produces_per_s"]
        tail["cpu_ms_per_fetch"] = round(spent / tail["fetches_per_s"], 4)
    return {
        "produce-linger0": linger0,
        "produce-linger1": linger1,
        "tail": tail,
        "fetch-empty": empty,
    }


def fsync_latency(directory: Path, count: int = 500, size: int = 200) -> dict[str, Any]:
    """Append `size` bytes durably, `count` times, as a segment log writes a group (one
    `pwritev` with RWF_DSYNC): the wait every acknowledged batch has, whatever the gateway
    does."""
    times: list[float] = []
    fd, path = tempfile.mkstemp(prefix="bench-request-cpu-fsync-", dir=directory)
    try:
        block = b"x" * size
        for i in range(count):
            started = time.perf_counter()
            os.pwritev(fd, [block], i * size, os.RWF_DSYNC)
            times.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        os.unlink(path)
    return {
        "directory": str(directory),
        **{f"p{round(q * 100)}_ms": _ms(_quantile(times, q)) for q in (0.1, 0.5, 0.9, 0.99)},
    }


def _median_of(runs: list[dict[str, Any]], phase: str, key: str) -> float | None:
    values = [v for r in runs if (v := r[phase].get(key)) is not None]
    return round(statistics.median(values), 4) if values else None


_SUMMARY_KEYS = {
    "produce-linger0": ("cpu_ms_per_produce", "records_per_request", "p50_ms", "p99_ms"),
    "produce-linger1": ("cpu_ms_per_produce", "records_per_request", "p50_ms", "p99_ms"),
    "tail": ("cpu_ms_per_fetch", "fetches_per_s", "produces_per_s", "p50_ms", "p99_ms"),
    "fetch-empty": ("cpu_ms_per_fetch",),
}


def _label(tree: Path) -> str:
    """A tree's key in the summary: "this tree" for the checkout running the benchmark."""
    return "this tree" if tree == REPO_ROOT else tree.name


def run(options: RunOptions) -> dict[str, Any]:
    args = scenario_args(build_parser(), options, quick=QUICK, runs="--runs")
    trees = [t.resolve() for t in (args.tree or [REPO_ROOT])]
    runs: dict[str, list[dict[str, Any]]] = {str(t): [] for t in trees}
    raw: dict[str, list[dict[str, Any]]] = {str(t): [] for t in trees}
    from tools.probes.request_cost import run_once as raw_once

    fsyncs: list[dict[str, Any]] = []  # the disk's fsync, beside every run (it varies)

    for index in range(args.runs):
        order = trees[index % len(trees) :] + trees[: index % len(trees)]
        for tree in order:
            result = run_once(tree, args)
            runs[str(tree)].append(result)
            print(tree, json.dumps(result), file=sys.stderr, flush=True)
            raw[str(tree)].append(raw_once(tree, args.raw_requests, 200))
            fsyncs.append(fsync_latency(Path(tempfile.gettempdir())))
    summary: dict[str, Any] = {}
    for tree in map(str, trees):
        summary[_label(Path(tree))] = {
            "tree": tree,
            "commit": tree_commit(Path(tree)),
            **{
                phase: {key: _median_of(runs[tree], phase, key) for key in keys}
                for phase, keys in _SUMMARY_KEYS.items()
            },
            "raw-produce-one-at-a-time": {
                key: round(statistics.median(r[key] for r in raw[tree]), 4)
                for key in ("p50_ms", "p99_ms", "cpu_ms_per_request")
            },
        }
    fsync_summary = {
        key: round(statistics.median(f[key] for f in fsyncs), 3)
        for key in ("p10_ms", "p50_ms", "p90_ms", "p99_ms")
    }
    return {
        "settings": {k: str(v) for k, v in vars(args).items()},
        "environment": environment(),
        "summary": summary,
        "latest": summary[_label(trees[-1])],  # the last tree given: the headline figures
        "fsync": {"directory": tempfile.gettempdir(), "median_of_runs": fsync_summary},
        "fsync_runs": fsyncs,
        "runs": runs,
        "raw_runs": raw,
    }


def main(argv: list[str] | None = None) -> int:
    return standalone("request-cpu", argv)


if __name__ == "__main__":
    sys.exit(main())
