"""Named scenarios of `streamgate bench`: the procedural benchmarks (node failover, tier-2
soak, Spark, the MQTT bridge...) that a workload file cannot say. Each is a compat/ script
whose `main(argv)` the runner calls, with its output put in the run's results folder.
Importing this module imports no scenario (only the standard library)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Scenario:
    module: str
    description: str
    output_flag: str | None = "--output"  # the script's option naming its JSON file
    extra_outputs: tuple[tuple[str, str], ...] = ()  # (option, file name) also put there

    def main(self, argv: list[str]) -> int:
        code = importlib.import_module(self.module).main(argv)
        return 0 if code is None else int(code)


SCENARIOS: dict[str, Scenario] = {
    "throughput": Scenario(
        "compat.bench_throughput", "confluent-kafka produce / consume throughput (make bench)"
    ),
    "scaling": Scenario(
        "compat.bench_scaling", "10 to 5,000 partitions, idle partitions, split and merge time"
    ),
    "tier2": Scenario(
        "compat.bench_tier2",
        "tier-2 upload lag, catch-up reads, tail latency",
        extra_outputs=(("--plot", "tier2_upload_lag.png"),),
    ),
    "soak-tier2": Scenario("compat.soak_tier2", "SIGKILL soak with tier 2 busy: nothing lost"),
    "groups": Scenario("compat.bench_groups", "consumer group rebalance time, commit latency"),
    "txn": Scenario("compat.bench_txn", "transactional against idempotent producers, beside Kafka"),
    "compaction": Scenario(
        "compat.bench_compaction", "the log cleaner beside Kafka's", output_flag="--out"
    ),
    "security": Scenario("compat.bench_security", "plaintext against SASL_SSL, beside Kafka"),
    "acl": Scenario("compat.bench_acl", "the authorizer's cost, how closely a quota holds"),
    "nodes": Scenario(
        "compat.bench_nodes", "several nodes on PostgreSQL metadata: scale-out, node failover"
    ),
    "segment-move": Scenario("compat.bench_segment_move", "time a segment takes to move nodes"),
    "bridge": Scenario("compat.bench_bridge", "the MQTT bridge end to end"),
    "spark": Scenario("compat.bench_spark", "Spark pipeline throughput and replay from tier 2"),
}
