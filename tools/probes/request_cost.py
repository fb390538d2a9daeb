"""One request at a time: a small Produce's round trip and the gateway's CPU for it.

For each source tree given, start a fresh gateway from that tree, open one raw TCP connection
and send the same Produce v9 request (one 1 KiB record, acks=all) again and again, each only
after the previous answer arrived, so nothing is batched or pipelined: every request pays
the whole path (socket, decode, append, group commit in a worker thread, fsync, response).
Reports the round-trip p50/p90/p99 and the gateway's CPU milliseconds per request, the
median of `--runs` runs per tree, trees alternating so the machine's noise hits them alike.
No client library sits in the measurement (librdkafka's own timers quantise its latencies).

    python -m tools.probes.request_cost --tree . --tree /tmp/base --runs 3
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from compat.benchlib.topics import create_topic
from compat.benchlib.trees import print_summary, run_alternating, tree_arguments
from core.recordbatch import build_batch
from harness.gateway import Gateway
from harness.procstats import proc_cpu_seconds
from kafkaclient.client import encode_request

_PARTITIONS = 8
_SIZE = struct.Struct(">i")


def produce_frame(topic: str, partition: int, batch: bytes) -> bytes:
    """A framed Produce v9 request for one batch, encoded once and sent again and again."""
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
    }
    return encode_request(0, 9, 1, b"probe", body)


def _receive_exactly(sock: socket.socket, size: int) -> None:
    while size:
        chunk = sock.recv(size)
        if not chunk:
            raise ConnectionError("the gateway closed the connection")
        size -= len(chunk)


def run_once(tree: Path, requests: int, warmup: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="probe-cost-") as tmp:
        gw = Gateway(Path(tmp) / "data", Path(tmp) / "gw.log", default_partitions=_PARTITIONS)
        gw.cwd = tree  # run that tree's code
        gw.start_fresh()
        try:
            create_topic(gw.bootstrap, "cost", _PARTITIONS)
            batch = build_batch([(b"k", b"x" * 1024, [])])
            frames = [produce_frame("cost", p, batch) for p in range(_PARTITIONS)]
            host, _, port = gw.bootstrap.rpartition(":")
            sock = socket.create_connection((host, int(port)), timeout=30)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pid = gw.pid
            assert pid is not None
            latencies: list[float] = []
            cpu0 = 0.0
            for i in range(warmup + requests):
                if i == warmup:
                    cpu0 = proc_cpu_seconds(pid) or 0.0
                started = time.perf_counter()
                sock.sendall(frames[i % _PARTITIONS])
                header = sock.recv(4, socket.MSG_WAITALL)
                _receive_exactly(sock, _SIZE.unpack(header)[0])
                if i >= warmup:
                    latencies.append(time.perf_counter() - started)
            cpu = (proc_cpu_seconds(pid) or 0.0) - cpu0
            sock.close()
        finally:
            gw.stop()
    latencies.sort()

    def ms(q: float) -> float:
        return round(latencies[int(len(latencies) * q)] * 1000, 3)

    return {
        "p50_ms": ms(0.5),
        "p90_ms": ms(0.9),
        "p99_ms": ms(0.99),
        "cpu_ms_per_request": round(cpu * 1000 / requests, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    tree_arguments(parser)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=500)
    args = parser.parse_args()
    results = run_alternating(
        args.tree, args.runs, lambda tree: run_once(tree, args.requests, args.warmup)
    )
    print_summary(results, ("p50_ms", "p90_ms", "p99_ms", "cpu_ms_per_request"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
