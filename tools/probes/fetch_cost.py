"""The gateway's CPU per Fetch, one request at a time over raw sockets (no client library).

For each source tree given, a fresh gateway from that tree, a topic of 8 partitions, and
these phases, each `--cycles` lock-step cycles, the gateway's CPU (utime+stime) over them:

* `produce`: one Produce (one 100-byte record, acks=all) at a time, round robin over the
  partitions: CPU per Produce.
* `woken`: a Fetch of all 8 partitions at their ends (max_wait 5 s) is sent and left
  waiting; then the same Produce; the cycle ends when both answers are in (the Fetch woken
  by the durable record, carrying it). CPU per woken Fetch = cycle CPU - CPU per Produce
  (the cycle's own CPU is reported too: it does not carry the Produce phase's noise).
* `empty`: a Fetch of the 8 partitions at their ends with max_wait 0: nothing new.
* `ready`: a Fetch of the 8 partitions with max_wait 0 from a few batches before each end
  (batches in memory): answered at once with data.

The counts are exact (each cycle is one request of each kind), so CPU per request is a
ratio of two measured quantities, robust on a busy machine; trees alternate run by run.

    python -m tools.probes.fetch_cost --tree . --tree /tmp/base --runs 3
"""

from __future__ import annotations

import argparse
import select
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
from tools.probes.request_cost import produce_frame

_PARTITIONS = 8
_TOPIC = "fetchcost"
_SIZE = struct.Struct(">i")
_READY_BACK = 3  # batches before the end a `ready` Fetch starts at


def fetch_frame(offsets: list[int], max_wait_ms: int, correlation_id: int) -> bytes:
    """A framed Fetch v11 (topic names, no session) of every partition from `offsets`."""
    partitions = [
        {
            "partition": p,
            "current_leader_epoch": -1,
            "fetch_offset": offset,
            "log_start_offset": -1,
            "partition_max_bytes": 1 << 20,
        }
        for p, offset in enumerate(offsets)
    ]
    body = {
        "replica_id": -1,
        "max_wait": max_wait_ms,  # (kio's field name; a wrong name would mean 0)
        "min_bytes": 1,
        "max_bytes": 50 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": _TOPIC, "partitions": partitions}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    return encode_request(1, 11, correlation_id, b"probe", body)


def _response(sock: socket.socket) -> bytes:
    header = sock.recv(4, socket.MSG_WAITALL)
    if len(header) < 4:
        raise ConnectionError("the gateway closed the connection")
    size = _SIZE.unpack(header)[0]
    body = sock.recv(size, socket.MSG_WAITALL)
    if len(body) < size:
        raise ConnectionError("the gateway closed the connection")
    return body


def _not_answered_yet(sock: socket.socket) -> None:
    """Fail unless nothing has come back on `sock` yet (its Fetch is still waiting)."""
    readable, _, _ = select.select([sock], [], [], 0)
    if readable:
        raise RuntimeError("a Fetch meant to wait for data was answered at once")


def _connect(bootstrap: str) -> socket.socket:
    host, _, port = bootstrap.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _phases(gw: Gateway, cycles: int) -> dict[str, Any]:
    pid = gw.pid
    assert pid is not None
    batch = build_batch([(b"k", b"x" * 100, [])])
    produces = [produce_frame(_TOPIC, p, batch) for p in range(_PARTITIONS)]
    ends = [0] * _PARTITIONS
    producer = _connect(gw.bootstrap)
    consumer = _connect(gw.bootstrap)

    def produce(i: int) -> None:
        producer.sendall(produces[i % _PARTITIONS])
        _response(producer)
        ends[i % _PARTITIONS] += 1

    def cpu() -> float:
        return proc_cpu_seconds(pid) or 0.0

    for i in range(200):  # warm up: connections, caches, a few batches per partition
        produce(i)
    start = cpu()
    for i in range(cycles):
        produce(i)
    per_produce = (cpu() - start) / cycles

    start = cpu()
    for i in range(cycles):
        consumer.sendall(fetch_frame(ends, 5000, i))
        time.sleep(0.0005)  # the Fetch is waiting before the record arrives
        _not_answered_yet(consumer)
        produce(i)
        if len(_response(consumer)) < 200:
            raise RuntimeError("a woken Fetch came back without the new batch")
    woken_cycle = (cpu() - start) / cycles
    woken = woken_cycle - per_produce

    empty_frame = fetch_frame(ends, 0, 1)
    start = cpu()
    for _ in range(cycles):
        consumer.sendall(empty_frame)
        _response(consumer)
    empty = (cpu() - start) / cycles

    ready_frame = fetch_frame([end - _READY_BACK for end in ends], 0, 2)
    start = cpu()
    for _ in range(cycles):
        consumer.sendall(ready_frame)
        _response(consumer)
    ready = (cpu() - start) / cycles
    producer.close()
    consumer.close()
    return {
        "cpu_ms_per_produce": round(per_produce * 1000, 4),
        "cpu_ms_per_woken_fetch": round(woken * 1000, 4),
        "cpu_ms_per_woken_cycle": round(woken_cycle * 1000, 4),
        "cpu_ms_per_empty_fetch": round(empty * 1000, 4),
        "cpu_ms_per_ready_fetch": round(ready * 1000, 4),
    }


def run_once(tree: Path, cycles: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="probe-fetch-cost-") as tmp:
        gw = Gateway(Path(tmp) / "data", Path(tmp) / "gw.log", default_partitions=_PARTITIONS)
        gw.cwd = tree  # run that tree's code
        gw.start_fresh()
        try:
            create_topic(gw.bootstrap, _TOPIC, _PARTITIONS)
            return _phases(gw, cycles)
        finally:
            gw.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    tree_arguments(parser)
    parser.add_argument("--cycles", type=int, default=2000)
    args = parser.parse_args()
    results = run_alternating(args.tree, args.runs, lambda tree: run_once(tree, args.cycles))
    keys = (
        "cpu_ms_per_produce",
        "cpu_ms_per_woken_fetch",
        "cpu_ms_per_woken_cycle",
        "cpu_ms_per_empty_fetch",
        "cpu_ms_per_ready_fetch",
    )
    print_summary(results, keys)
    return 0


if __name__ == "__main__":
    sys.exit(main())
