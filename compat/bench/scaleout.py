"""The `scale-out` driver: aggregate produce throughput of `serve --nodes N` for each N of
a workload's `nodes`, with client processes (not threads: each a librdkafka producer in
a process of its own, so the clients are not one Python process's limit).

On a Kafka target the same clients, measured the same way, show what they can drive at
all (the clients' own limit); with streamgate each node count gets a fresh cluster
(`harness.nodes_cluster.NodesCluster`: an embedded PostgreSQL, N node processes).
Every client produces `records` records of `record_size` bytes, spread over the topic's
partitions, acks and linger as the workload says; all start at one wall-clock instant.
The figure is the total bytes over the span from that instant to the last delivery.
Node counts above the usable cores are left out (and listed in the result).

Beside it, who was busy: the clients' CPU (each process's own, librdkafka's threads
included) and the nodes' CPU over the same span, in cores. A client near one core, or
clients and nodes together near the machine's cores, mark the clients' or the machine's
limit rather than the nodes'.
"""

from __future__ import annotations

import multiprocessing
import shutil
import tempfile
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from compat.benchlib.topics import create_topic
from harness.procstats import proc_cpu_seconds

Report = dict[str, Any]
START_DELAY_S = 3.0  # spawned clients import, connect and fetch metadata before the start


def client(
    bootstrap: str, topic: str, records: int, size: int, conf: Report, start_at: float
) -> tuple[int, int, float, float]:
    """One client process: (delivered, failed, wall-clock time of the last delivery, CPU
    seconds from the start to the end)."""
    from confluent_kafka import Producer

    delivered = failed = 0
    last = 0.0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal delivered, failed, last
        if err is None:
            delivered += 1
            last = time.time()
        else:
            failed += 1

    producer = Producer({"bootstrap.servers": bootstrap, **conf})
    producer.list_topics(topic, timeout=30)
    payload = b"x" * size
    time.sleep(max(0.0, start_at - time.time()))
    cpu_at_start = time.process_time()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, payload, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(120)
    return delivered, failed, last, time.process_time() - cpu_at_start


def measure(
    bootstrap: str,
    partitions: int,
    clients: int,
    w: Any,
    conf: Report,
    node_pids: Sequence[int] = (),
) -> Report:
    """`clients` processes producing into a new topic of `partitions` on `bootstrap`;
    `node_pids`: the server processes whose CPU is reported beside."""
    topic = f"scale-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions)
    start_at = time.time() + START_DELAY_S + 0.2 * clients
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(clients, mp_context=context) as pool:
        futures = [
            pool.submit(client, bootstrap, topic, w.records, w.record_size, conf, start_at)
            for _ in range(clients)
        ]
        time.sleep(max(0.0, start_at - time.time()))
        nodes_cpu_at_start = [proc_cpu_seconds(pid) or 0.0 for pid in node_pids]
        outcomes = [f.result() for f in futures]
    nodes_cpu = [
        (proc_cpu_seconds(pid) or 0.0) - before
        for pid, before in zip(node_pids, nodes_cpu_at_start, strict=True)
    ]
    nodes_span = time.time() - start_at
    delivered = sum(o[0] for o in outcomes)
    failed = sum(o[1] for o in outcomes)
    seconds = max(o[2] for o in outcomes) - start_at
    mib = delivered * w.record_size / 2**20
    figures: Report = {
        "clients": clients,
        "records": delivered,
        "failed": failed,
        "seconds": round(seconds, 3),
        "mib_per_s": round(mib / seconds, 2) if seconds > 0 else None,
        "records_per_s": round(delivered / seconds, 1) if seconds > 0 else None,
    }
    if seconds > 0:
        client_cpu = [o[3] for o in outcomes]
        figures["clients_cpu_cores"] = round(sum(client_cpu) / seconds, 2)
        figures["busiest_client_cpu_cores"] = round(max(client_cpu) / seconds, 2)
        if node_pids:  # from the start to the clients' exit: a little longer than `seconds`
            figures["nodes_cpu_cores"] = round(sum(nodes_cpu) / nodes_span, 2)
            figures["busiest_node_cpu_cores"] = round(max(nodes_cpu) / nodes_span, 2)
    return figures


def scale_out(target: str, bootstrap: str, w: Any, conf: Report, gateway_args: list[str]) -> Report:
    """The driver's body for one target (see the module)."""
    # here, not at the top: the spawned client processes import this module
    from cli.serve import usable_cores
    from harness.nodes_cluster import NodesCluster

    result: Report = {"ok": True}
    cores = usable_cores()
    # more node processes than cores measures the scheduler, not scale-out: left out (the
    # same file then runs on a laptop and on a 64-core machine)
    counts = [n for n in w.nodes if n <= cores] or [min(w.nodes)]
    result["usable_cores"] = cores
    result["left_out"] = [n for n in w.nodes if n not in counts]
    if target != "streamgate":  # the clients' own limit, against one Kafka broker
        for n in counts:
            figures = measure(bootstrap, w.partitions, w.clients * n, w, conf)
            result[f"n{n}"] = figures
            result["ok"] = result["ok"] and figures["failed"] == 0
        return result
    for n in counts:
        work = Path(tempfile.mkdtemp(prefix="streamgate-scaleout-"))
        cluster = NodesCluster(work, n, gateway_args, default_partitions=8)
        try:
            cluster.start()
            pids = [cluster.node_pid(i) for i in range(1, n + 1)]
            figures = measure(cluster.bootstrap, w.partitions, w.clients * n, w, conf, pids)
        finally:
            cluster.close()
            shutil.rmtree(work, ignore_errors=True)
        figures["nodes"] = n
        result[f"n{n}"] = figures
        result["ok"] = result["ok"] and figures["failed"] == 0
    first = result[f"n{counts[0]}"]["mib_per_s"]
    last = result[f"n{counts[-1]}"]["mib_per_s"]
    result["most_over_one"] = round(last / first, 3) if first and last else None
    return result
