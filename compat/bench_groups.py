"""Consumer group figures with confluent-kafka (librdkafka): rebalance time and commit latency.

* rebalance: two members of a group own every partition; a third member subscribes. The
  time from that subscribe() to all three members holding a non-empty, disjoint assignment
  that covers every partition. Repeated with a fresh group per round. The two members
  only learn about the rebalance from their next heartbeat, so this is at most about one
  heartbeat.interval.ms plus the protocol round trips.
* commit latency: one member commits an offset synchronously (commit(asynchronous=False))
  over and over; p50/p99 of the round trip (each commit is fsync'd by the gateway).

By default a fresh `streamgate serve` is started on a free loopback port with a temporary
data dir; `--bootstrap HOST:PORT` measures a server that is already running instead (for a
comparison with Apache Kafka, whose group.initial.rebalance.delay.ms is 3 s by default).
Results are printed as a table; run it with `streamgate bench run scenario:groups` (`--runs N`:
N rebalances; `--quick`: 2 rebalances, 200 commits).
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from compat.benchlib.report import code_state, environment, log_problems  # noqa: E402
from compat.benchlib.scenario import RunOptions, scenario_args, standalone  # noqa: E402
from harness.gateway import Gateway  # noqa: E402

QUICK = ("--rounds", "2", "--commits", "200")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="measure this running server instead")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=5, help="rebalances to time")
    parser.add_argument("--commits", type=int, default=2000, help="commits to time")
    parser.add_argument("--strategy", default="range", help="partition.assignment.strategy")
    parser.add_argument("--heartbeat-ms", type=int, default=500, help="heartbeat.interval.ms")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument(
        "--initial-delay-ms",
        type=int,
        default=300,
        help="the managed gateway's group initial rebalance delay",
    )
    return parser


# --- the server under test ------------------------------------------------------------------


@contextmanager
def managed_gateway(initial_delay_ms: int) -> Iterator[Gateway]:
    """`streamgate serve` on a free port with a temporary data dir (harness.gateway)."""
    workdir = Path(tempfile.mkdtemp(prefix="streamgate-bench-groups-"))
    gateway = Gateway(
        workdir / "data",
        workdir / "server.log",
        ["--group-initial-rebalance-delay-ms", str(initial_delay_ms), "--log-level", "WARNING"],
        default_partitions=None,
    )
    try:
        gateway.start_fresh()
        yield gateway
    finally:
        gateway.close()
        shutil.rmtree(workdir, ignore_errors=True)


# --- members ---------------------------------------------------------------------------------


class Member:
    """A confluent consumer polling in a thread, publishing the assignment it holds."""

    def __init__(self, conf: dict[str, Any], topic: str) -> None:
        self.conf = conf
        self.topic = topic
        self.assignment: frozenset[int] = frozenset()
        self.subscribed_at = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Member:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        consumer = Consumer(self.conf)
        self.subscribed_at = time.perf_counter()
        consumer.subscribe([self.topic])
        try:
            while not self._stop.is_set():
                consumer.poll(0.01)
                self.assignment = frozenset(tp.partition for tp in consumer.assignment())
        finally:
            consumer.close()


def covered(members: list[Member], partitions: int) -> bool:
    owned = [p for m in members for p in m.assignment]
    return all(m.assignment for m in members) and sorted(owned) == list(range(partitions))


def wait_covered(members: list[Member], partitions: int, timeout: float = 60.0) -> float:
    deadline = time.perf_counter() + timeout
    while not covered(members, partitions):
        if time.perf_counter() > deadline:
            raise RuntimeError(f"no full assignment: {[sorted(m.assignment) for m in members]}")
        time.sleep(0.001)
    return time.perf_counter()


def member_conf(bootstrap: str, group: str, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "partition.assignment.strategy": args.strategy,
        "heartbeat.interval.ms": args.heartbeat_ms,
        "session.timeout.ms": args.session_timeout_ms,
    }


# --- measurements ----------------------------------------------------------------------------


def time_rebalances(bootstrap: str, topic: str, args: argparse.Namespace) -> list[float]:
    """Seconds from the third member's subscribe() to a full three-way assignment."""
    times = []
    for _ in range(args.rounds):
        conf = member_conf(bootstrap, f"bench-rebalance-{uuid.uuid4().hex[:8]}", args)
        members = [Member(conf, topic).start(), Member(conf, topic).start()]
        try:
            wait_covered(members, args.partitions)
            # The others learn about a rebalance from their next heartbeat: join at a random
            # point of their heartbeat cycle, not right after they synced.
            time.sleep(random.uniform(1.0, 2.0) * args.heartbeat_ms / 1000)
            third = Member(conf, topic).start()
            members.append(third)
            done = wait_covered(members, args.partitions)
            times.append(done - third.subscribed_at)
        finally:
            for member in members:
                member.stop()
    return times


def time_commits(bootstrap: str, topic: str, args: argparse.Namespace) -> list[float]:
    """Seconds per synchronous commit of one partition's offset by a group member."""
    conf = member_conf(bootstrap, f"bench-commit-{uuid.uuid4().hex[:8]}", args)
    consumer = Consumer(conf)
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 60
        while not consumer.assignment():
            consumer.poll(0.05)
            if time.monotonic() > deadline:
                raise RuntimeError("the commit member got no assignment")
        partition = consumer.assignment()[0].partition
        latencies = []
        for i in range(args.commits):
            offsets = [TopicPartition(topic, partition, i + 1)]
            started = time.perf_counter()
            consumer.commit(offsets=offsets, asynchronous=False)
            latencies.append(time.perf_counter() - started)
        return latencies
    finally:
        consumer.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summary_ms(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values) * 1000, 2),
        "p50": round(percentile(values, 0.50) * 1000, 2),
        "p99": round(percentile(values, 0.99) * 1000, 2),
        "max": round(max(values) * 1000, 2),
        "mean": round(statistics.fmean(values) * 1000, 2),
    }


def measure(args: argparse.Namespace, bootstrap: str) -> dict[str, Any]:
    topic = f"bench-groups-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
    rebalances = time_rebalances(bootstrap, topic, args)
    commits = time_commits(bootstrap, topic, args)
    return {
        "rebalance_third_member_ms": {**summary_ms(rebalances), "rounds": len(rebalances)},
        "commit_latency_ms": {**summary_ms(commits), "commits": len(commits)},
    }


def print_table(results: dict[str, Any]) -> None:
    rows = [
        ("rebalance: third member joins 3-member group", results["rebalance_third_member_ms"]),
        ("commit(asynchronous=False) latency", results["commit_latency_ms"]),
    ]
    header = f"{'measurement':<46} {'min':>8} {'p50':>8} {'p99':>8} {'max':>8} {'mean':>8}  (ms)"
    print(header)
    print("-" * len(header))
    for name, s in rows:
        cells = " ".join(f"{s[k]:>8.2f}" for k in ("min", "p50", "p99", "max", "mean"))
        print(f"{name:<46} {cells}")


def run(options: RunOptions) -> dict[str, Any]:
    args = scenario_args(build_parser(), options, quick=QUICK, runs="--rounds")
    started = datetime.now(UTC)
    if args.bootstrap:
        target = {"kind": "external", "bootstrap": args.bootstrap}
        results = measure(args, args.bootstrap)
    else:
        with managed_gateway(args.initial_delay_ms) as gateway:
            target = {
                "kind": "managed streamgate",
                "bootstrap": gateway.bootstrap,
                "group_initial_rebalance_delay_ms": args.initial_delay_ms,
                "code": code_state(),
            }
            results = measure(args, gateway.bootstrap)
            target["gateway_exit_code"] = gateway.stop()
            target["gateway_log_problems"] = log_problems(gateway.log_text())
    report = {
        "benchmark": "compat/bench_groups.py",
        "started_at": started.isoformat(timespec="seconds"),
        "target": target,
        "config": {
            "client": f"confluent-kafka {confluent_kafka.__version__}, "
            f"librdkafka {confluent_kafka.libversion()[0]}",
            "partitions": args.partitions,
            "partition.assignment.strategy": args.strategy,
            "heartbeat.interval.ms": args.heartbeat_ms,
            "session.timeout.ms": args.session_timeout_ms,
        },
        "environment": environment(),
        "results": results,
    }
    print_table(results)
    report["ok"] = target.get("gateway_exit_code") in (None, 0)
    return report


def main(argv: list[str] | None = None) -> int:
    return standalone("groups", argv)


if __name__ == "__main__":
    sys.exit(main())
