"""The scale-out driver's measurement against one real gateway: every record delivered, and
the clients' and the server's CPU reported beside the throughput (who was the limit)."""

from __future__ import annotations

from types import SimpleNamespace

from compat.bench.scaleout import measure
from harness.gateway import Gateway


def test_measure_reports_throughput_and_who_was_busy(gateway: Gateway) -> None:
    assert gateway.pid is not None
    workload = SimpleNamespace(records=3_000, record_size=1024)
    conf = {"acks": "all", "linger.ms": 5}
    figures = measure(gateway.bootstrap, 4, 2, workload, conf, [gateway.pid])
    assert figures["failed"] == 0
    assert figures["records"] == 6_000
    assert figures["mib_per_s"] > 0
    for key in ("clients_cpu_cores", "busiest_client_cpu_cores"):
        assert figures[key] > 0
    assert figures["busiest_client_cpu_cores"] <= figures["clients_cpu_cores"]
    # the server did the writes, so its CPU over the span cannot be zero
    assert 0 < figures["busiest_node_cpu_cores"] <= figures["nodes_cpu_cores"]
