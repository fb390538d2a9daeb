"""Produce latency and gateway CPU per request, for one or more source trees side by side.

A quick, noise-tolerant probe for produce-path work (issue 15): for each tree given, start a
fresh gateway from that tree (`python -m gateway serve`, via `harness.gateway.Gateway`),
produce 1 KiB records with confluent-kafka at a fixed rate (acks=all), and report the
delivery latency p50/p99 and the gateway's CPU milliseconds per produce request. With
`--tail` a consumer reads every record as it arrives (the end-to-end workloads' load: a Fetch
answered per durable group), and the CPU per produce request then includes those fetches.
Trees alternate run by run so the machine's noise hits them alike.

    python -m tools.probes.produce_latency --tree . --tree /tmp/base --rate 2000 --runs 3
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

from compat.benchlib.topics import create_topic
from compat.benchlib.trees import print_summary, run_alternating, tree_arguments
from harness.gateway import Gateway
from harness.procstats import proc_cpu_seconds

_PARTITIONS = 8


class _Tail:
    """A confluent-kafka consumer in a thread, reading the probe topic from its end as the
    benchmark's end-to-end workloads do (a Fetch answered per durable group)."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"probe-tail-{time.monotonic_ns()}",
                "auto.offset.reset": "latest",
                "enable.auto.commit": False,
                "statistics.interval.ms": 500,
                "stats_cb": self._stats,
            }
        )
        self.fetches = 0
        self.consumer.assign([TopicPartition("probe", p, OFFSET_END) for p in range(_PARTITIONS)])
        self.consumed = 0
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _stats(self, raw: str) -> None:
        brokers = json.loads(raw)["brokers"].values()
        self.fetches = sum(b.get("req", {}).get("Fetch", 0) for b in brokers)

    def _run(self) -> None:
        while self.running:
            for message in self.consumer.consume(1000, timeout=0.1):
                if message.error() is None:
                    self.consumed += 1

    def stop(self) -> int:
        time.sleep(0.5)  # the last records' fetches
        self.running = False
        self.thread.join()
        self.consumer.close()
        return self.consumed


def run_once(
    tree: Path,
    rate: float,
    seconds: float,
    linger_ms: float,
    producers: int,
    grep: str = "",
    size: int = 1024,
    tail: bool = False,
) -> dict[str, Any]:
    """One fresh gateway from `tree`; `producers` clients share `rate` records/s."""
    with tempfile.TemporaryDirectory(prefix="probe-") as tmp:
        gw = Gateway(Path(tmp) / "data", Path(tmp) / "gw.log", default_partitions=8)
        gw.cwd = tree  # run that tree's code: `-m gateway` imports from the working dir
        gw.start_fresh()
        try:
            create_topic(gw.bootstrap, "probe", _PARTITIONS)
            latencies: list[float] = []
            requests = [0] * producers
            errors = [0]

            def stats_cb(index: int) -> Any:
                def cb(raw: str) -> None:
                    data = json.loads(raw)
                    requests[index] = sum(
                        b.get("req", {}).get("Produce", 0) for b in data["brokers"].values()
                    )

                return cb

            clients = [
                Producer(
                    {
                        "bootstrap.servers": gw.bootstrap,
                        "acks": "all",
                        "linger.ms": linger_ms,
                        "statistics.interval.ms": 500,
                        "stats_cb": stats_cb(i),
                    }
                )
                for i in range(producers)
            ]
            for c in clients:
                c.list_topics("probe", timeout=30)
            payload = b"x" * size
            count = int(rate * seconds)
            tailing = _Tail(gw.bootstrap) if tail else None
            pid = gw.pid
            assert pid is not None
            cpu0 = proc_cpu_seconds(pid) or 0.0
            start = time.perf_counter()
            for i in range(count):
                due = start + i / rate
                now = time.perf_counter()
                if due > now:
                    time.sleep(due - now)
                sent = time.perf_counter()

                def on_delivery(err: Any, _msg: Any, sent: float = sent) -> None:
                    if err is not None:
                        errors[0] += 1
                    else:
                        latencies.append(time.perf_counter() - sent)

                c = clients[i % producers]
                c.produce("probe", payload, partition=i % _PARTITIONS, on_delivery=on_delivery)
                c.poll(0)
            for c in clients:
                c.flush(30)
            cpu = (proc_cpu_seconds(pid) or 0.0) - cpu0
            consumed = tailing.stop() if tailing is not None else None
            time.sleep(0.7)  # one more stats callback
            for c in clients:
                c.poll(0.1)
            latencies.sort()
            total_requests = sum(requests)
            elapsed = time.perf_counter() - start
            return {
                "records_per_s": round(len(latencies) / elapsed),
                "requests_per_s": round(sum(requests) / elapsed),
                "records": len(latencies),
                "errors": errors[0],
                "p50_ms": round(latencies[len(latencies) // 2] * 1000, 2),
                "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 2),
                "requests": total_requests,
                "gateway_cpu_s": round(cpu, 3),
                "tail_consumed": consumed,
                "tail_fetches": tailing.fetches if tailing is not None else None,
                "cpu_ms_per_request": round(cpu * 1000 / total_requests, 3)
                if total_requests
                else None,
            }
        finally:
            gw.stop()
            if grep:
                for line in gw.log_text().splitlines():
                    if grep in line:
                        print(line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    tree_arguments(parser)
    parser.add_argument("--rate", type=float, default=2000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--linger-ms", type=float, default=1)
    parser.add_argument("--producers", type=int, default=1)
    parser.add_argument("--size", type=int, default=1024, help="record value bytes")
    parser.add_argument(
        "--tail", action="store_true", help="a consumer reads every record as it arrives"
    )
    parser.add_argument("--grep", default="", help="print the gateway log lines containing this")
    args = parser.parse_args()
    results = run_alternating(
        args.tree,
        args.runs,
        lambda tree: run_once(
            tree,
            args.rate,
            args.seconds,
            args.linger_ms,
            args.producers,
            args.grep,
            args.size,
            args.tail,
        ),
    )
    print_summary(results, ("p50_ms", "p99_ms", "cpu_ms_per_request", "requests"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
