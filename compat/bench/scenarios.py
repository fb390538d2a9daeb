"""Named scenarios of `streamgate bench`: the procedural benchmarks (node failover, tier-2
soak, Spark, the MQTT bridge...) that a workload file cannot say. Each is a compat/ module
with `run(options: RunOptions) -> dict` (compat.benchlib.scenario): the runner calls it and
writes the result itself (compat.bench.output).

`headlines` name the few figures `streamgate bench report` puts in docs/performance.md:
(label, path into the figures, format). A path's parts are split on "/" (a key may hold a
dot); an integer part indexes a list (-1: the last); where a path ends on a list of numbers
the report shows their median; the format "row" shows a table row's label and first
cell. Importing this module imports no scenario (only the
standard library)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

Headline = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class Scenario:
    module: str
    description: str
    headlines: tuple[Headline, ...] = ()

    def run(self, options: Any) -> dict[str, Any]:
        figures = importlib.import_module(self.module).run(options)
        if not isinstance(figures, dict):
            raise TypeError(f"{self.module}.run returned {type(figures).__name__}, not a dict")
        return figures


SCENARIOS: dict[str, Scenario] = {
    "throughput": Scenario(
        "compat.bench_throughput",
        "confluent-kafka produce / consume throughput (make bench)",
        (
            ("produce MiB/s", "produce/mb_per_s", ",.1f"),
            ("consume MiB/s", "consume/mb_per_s", ",.1f"),
            ("delivery p99 ms", "produce/delivery_latency_ms/p99", ",.0f"),
        ),
    ),
    "scaling": Scenario(
        "compat.bench_scaling",
        "10 to 5,000 partitions, idle partitions, split and merge time",
        (
            ("fewest partitions MiB/s", "throughput/0/mib_per_s", ",.1f"),
            ("most partitions MiB/s", "throughput/-1/mib_per_s", ",.1f"),
            ("split over HTTP ms", "scale/http_split_ms_median", ",.2f"),
        ),
    ),
    "tier2": Scenario(
        "compat.bench_tier2",
        "tier-2 upload lag, catch-up reads, tail latency",
        (
            ("", "tables/0/rows/0", "row"),
            ("", "tables/0/rows/1", "row"),
        ),
    ),
    "soak-tier2": Scenario(
        "compat.soak_tier2",
        "SIGKILL soak with tier 2 busy: nothing lost",
        (
            ("cycles", "settings/cycles", ",d"),
            ("records acknowledged", "records_acked", ",d"),
            ("verified", "records_verified", ",d"),
        ),
    ),
    "groups": Scenario(
        "compat.bench_groups",
        "consumer group rebalance time, commit latency",
        (
            ("rebalance p50 ms", "results/rebalance_third_member_ms/p50", ",.0f"),
            ("commit p50 ms", "results/commit_latency_ms/p50", ",.2f"),
            ("commit p99 ms", "results/commit_latency_ms/p99", ",.2f"),
        ),
    ),
    "txn": Scenario(
        "compat.bench_txn",
        "transactional against idempotent producers, beside Kafka",
        (
            ("100 per txn rec/s", "streamgate/txn_every_100/records_per_s", ",.0f"),
            ("Kafka: 100 per txn rec/s", "kafka/txn_every_100/records_per_s", ",.0f"),
            ("idempotent rec/s", "streamgate/idempotent/records_per_s", ",.0f"),
        ),
    ),
    "compaction": Scenario(
        "compat.bench_compaction",
        "the log cleaner beside Kafka's",
        (
            ("cleaner MB/s", "streamgate/compaction/input_mb_per_s", ",.1f"),
            ("Kafka cleaner MB/s", "kafka/compaction/input_mb_per_s", ",.1f"),
            ("space reclaimed %", "streamgate/compaction/space_reclaimed_pct", ".1f"),
        ),
    ),
    "security": Scenario(
        "compat.bench_security",
        "plaintext against SASL_SSL, beside Kafka",
        (
            ("plaintext produce MB/s", "median/streamgate/plaintext.produce_mb_s", ",.1f"),
            ("SASL_SSL produce MB/s", "median/streamgate/sasl_ssl.produce_mb_s", ",.1f"),
            ("Kafka SASL_SSL produce MB/s", "median/kafka-3.5.1/sasl_ssl.produce_mb_s", ",.1f"),
        ),
    ),
    "acl": Scenario(
        "compat.bench_acl",
        "the authorizer's cost, how closely a quota holds",
        (
            ("produce rec/s, no authorizer", "authorizer_off/produce_median", ",.0f"),
            ("produce rec/s, authorizer", "authorizer_on/produce_median", ",.0f"),
            ("first quota: measured B/s", "quota/0/measured_bytes_per_s", ",.0f"),
        ),
    ),
    "nodes": Scenario(
        "compat.bench_nodes",
        "several nodes on PostgreSQL metadata: scale-out, node failover",
        (
            ("produce rec/s (PostgreSQL)", "throughput_postgresql/produce_records_per_s", ",.0f"),
            ("most nodes / one, produce", "scale_out/-1/produce_ratio_to_first", ".2f"),
            ("failover s, 1 s lease", "failover_s/lease_1s", ".2f"),
        ),
    ),
    "segment-move": Scenario(
        "compat.bench_segment_move",
        "time a segment takes to move nodes",
        (
            ("uploaded p50 s", "uploaded_s/p50", ".3f"),
            ("committed p50 s", "committed_s/p50", ".3f"),
            ("first ack p50 s", "first_ack_s/p50", ".3f"),
        ),
    ),
    "bridge": Scenario(
        "compat.bench_bridge",
        "the MQTT bridge end to end",
        (
            ("burst msg/s", "burst/messages_per_s", ",.0f"),
            ("paced p50 ms", "paced/latency/p50_ms", ",.0f"),
            ("paced p99 ms", "paced/latency/p99_ms", ",.0f"),
        ),
    ),
    "request-cpu": Scenario(
        "compat.bench_request_cpu",
        "the gateway's CPU per small Produce and per Fetch, produce latency at 2k/s",
        (
            ("CPU ms / Produce", "latest/produce-linger1/cpu_ms_per_produce", ".3f"),
            ("CPU ms / empty Fetch", "latest/fetch-empty/cpu_ms_per_fetch", ".3f"),
            ("durable append p50 ms", "fsync/median_of_runs/p50_ms", ".2f"),
        ),
    ),
    "produce-cpu": Scenario(
        "compat.bench_produce_cpu",
        "the gateway's CPU per MB of Produce: Kafka's perf producer, and the append path alone",
        (
            ("perf-producer CPU ms/MB", "trees/-1/perf_producer/median/cpu_ms_per_mb", ".2f"),
            ("append loop ms/MB", "trees/-1/in_process/median/loop_ms_per_mb", ".2f"),
            (
                "instructions/request",
                "trees/-1/in_process_instructions/instructions_per_request",
                ",d",
            ),
        ),
    ),
    "read-ahead": Scenario(
        "compat.bench_read_ahead",
        "sequential consumers behind the tail: tier-1 read-ahead on against off, and Kafka",
        (
            ("perf-consumer / Kafka, on", "summary/on/perf_consumer_vs_kafka", ".2f"),
            ("perf-consumer / Kafka, off", "summary/off/perf_consumer_vs_kafka", ".2f"),
            ("first byte p50 ms, on", "summary/on/probe_first_byte_p50_ms", ".2f"),
            ("first byte p50 ms, off", "summary/off/probe_first_byte_p50_ms", ".2f"),
            ("first byte p50 ms, Kafka", "summary/kafka/probe_first_byte_p50_ms", ".2f"),
        ),
    ),
    "wal": Scenario(
        "compat.bench_wal",
        "--wal object: write-ahead objects per second, takeover time over kill cycles",
        (
            ("takeover p50 s", "takeover/seconds_p50", ".2f"),
            ("takeover p99 s", "takeover/seconds_p99", ".2f"),
        ),
    ),
    "soak-wal": Scenario(
        "compat.soak_wal",
        "--wal object: nodes killed, disks removed, nodes frozen; every record checked",
        (
            ("faults", "kills", ",d"),
            ("takeover p99 s", "seconds_p99", ".2f"),
            ("records verified", "records_verified", ",d"),
        ),
    ),
    "spark": Scenario(
        "compat.bench_spark",
        "Spark pipeline throughput and replay from tier 2",
        (
            (
                "pipeline rec/s (Parquet)",
                "runs/streamgate_pipeline/parquet_query/records_per_s",
                ",.0f",
            ),
            ("replay from tier 2 MiB/s", "runs/streamgate_tier2_replay/read_mib_per_s", ",.0f"),
            ("Kafka replay MiB/s", "runs/kafka_replay/read_mib_per_s", ",.0f"),
        ),
    ),
}
