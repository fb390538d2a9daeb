"""The Java column against a streamgate process: Kafka's own CLI tools (kafka-topics, console
producer/consumer, kafka-consumer-groups --reset-offsets, kafka-configs, kafka-get-offsets,
kafka-delete-records) and the verifiable producer/consumer's exactly-once check."""

from __future__ import annotations

from pathlib import Path

import pytest

from compat.matrix.model import PASS
from compat.matrix.rows import row
from compat.matrix.runner import Target, run_target
from harness.gateway import Gateway
from harness.kafka import unavailable_reason

pytestmark = pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"Java column: {unavailable_reason()}"
)

ROWS = [
    "produce-zstd",
    "idempotence",
    "keys-headers",
    "consume-subscribe",
    "list-offsets-time",
    "group-coop-sticky",
    "committed-offsets",
    "admin-topics",
    "admin-configs",
    "admin-groups",
    "admin-records",
    "restart",
]


@pytest.mark.timeout(900)
def test_java_tools_against_streamgate(gateway: Gateway, tmp_path: Path) -> None:
    results = run_target(
        Target("streamgate", gateway.bootstrap, gateway.restart),
        [row(r) for r in ROWS],
        ["java"],
        records=20,
        jobs=3,
        cell_timeout=180,
        work_dir=tmp_path,
    )
    bad = [f"{r.row}: {r.status}: {r.detail}" for r in results if r.status != PASS]
    assert not bad, "\n".join(bad)
    details = {r.row: r.detail for r in results}
    assert "each consumed exactly once" in details["idempotence"]
    assert "exactly once across the restart" in details["restart"]
    assert "reset to earliest" in details["committed-offsets"]
