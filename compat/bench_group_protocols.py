"""Rebalance time of the classic and the consumer group protocol, with confluent-kafka.

N consumers of a fresh group subscribe to a fresh topic at the same moment; the time from
the subscribe() calls to the members holding non-empty, disjoint assignments that cover
every partition. Classic: `partition.assignment.strategy=range`, heartbeat 500 ms, and the
gateway's group.initial.rebalance.delay.ms; consumer protocol: the server's `uniform`
assignor with the gateway's heartbeat interval (`--heartbeat-ms`, given to the gateway).

    python compat/bench_group_protocols.py --members 3 10 --rounds 3

A fresh `streamgate serve` is started on a free loopback port with a temporary data dir.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from harness.gateway import Gateway  # noqa: E402


def one_round(bootstrap: str, protocol: str, members: int, partitions: int) -> float | None:
    """Seconds from subscribe to a full disjoint cover (None: not within 60 s)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(20)
    conf: dict[str, object] = {"bootstrap.servers": bootstrap, "group.id": f"g-{topic}"}
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        conf.update({"heartbeat.interval.ms": 500, "partition.assignment.strategy": "range"})
    consumers = [Consumer({**conf, "client.id": f"c{i}"}) for i in range(members)]
    assigned: list[frozenset[int]] = [frozenset()] * members
    stop = threading.Event()

    def poll(i: int) -> None:
        while not stop.is_set():
            consumers[i].poll(0.02)
            assigned[i] = frozenset(p.partition for p in consumers[i].assignment())

    start = time.monotonic()
    for c in consumers:
        c.subscribe([topic])
    threads = [threading.Thread(target=poll, args=(i,)) for i in range(members)]
    for t in threads:
        t.start()
    took = None
    while time.monotonic() - start < 60:
        now = list(assigned)
        owned = [p for a in now for p in a]
        if all(now) and len(owned) == len(set(owned)) == partitions:
            took = time.monotonic() - start
            break
        time.sleep(0.005)
    stop.set()
    for t in threads:
        t.join()
    for c in consumers:
        c.close()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, nargs="+", default=[3, 10])
    parser.add_argument("--partitions", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--heartbeat-ms", type=int, default=5000, help="consumer protocol")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-group-protocols-") as tmp:
        gw = Gateway(
            Path(tmp) / "data",
            Path(tmp) / "server.log",
            ("--group-consumer-heartbeat-interval-ms", str(args.heartbeat_ms)),
        )
        gw.start_fresh()
        try:
            print("| protocol | members | partitions | rounds (s) | median (s) |")
            print("| --- | --- | --- | --- | --- |")
            for n in args.members:
                for protocol in ("classic", "consumer"):
                    times = [
                        one_round(gw.bootstrap, protocol, n, args.partitions)
                        for _ in range(args.rounds)
                    ]
                    done = [t for t in times if t is not None]
                    shown = " ".join("timeout" if t is None else f"{t:.2f}" for t in times)
                    median = f"{statistics.median(done):.2f}" if done else "-"
                    print(f"| {protocol} | {n} | {args.partitions} | {shown} | {median} |")
        finally:
            gw.close()


if __name__ == "__main__":
    main()
