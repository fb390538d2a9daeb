"""The compatibility matrix (compat/matrix) at small sizes: against a streamgate process,
against Apache Kafka (the reference), and against deliberately broken targets (it can fail)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from compat.cli import allowed, read_allowlist
from compat.matrix.model import FAIL, NA, PASS, CellResult
from compat.matrix.rows import ROWS, row
from compat.matrix.runner import Target, run_target
from harness.gateway import Gateway
from harness.kafka import KafkaBroker, unavailable_reason
from harness.ports import free_port

REPO = Path(__file__).resolve().parents[2]
SUITES = REPO / "compat" / "suites"
# the Java column has its own test (tests/system/test_compat_java.py): a JVM per tool is slow
COLUMNS = ["kafka-python", "confluent-kafka", "aiokafka", "kcat"]
SUITE_OF = {
    "kafka-python": "kafka-python",
    "confluent-kafka": "confluent-kafka",
    "aiokafka": "aiokafka",
    "kcat": "kcat",
    "java": "java-tools",
}
RECORDS = 12


def _run(
    target: Target, tmp_path: Path, rows=ROWS, columns=COLUMNS, cell_timeout: float = 90.0
) -> list[CellResult]:
    return run_target(
        target, rows, columns, records=RECORDS, jobs=4, cell_timeout=cell_timeout, work_dir=tmp_path
    )


def _table(results: list[CellResult]) -> str:
    return "\n".join(
        f"{r.row}/{r.column}: {r.status}: {r.detail[:200]}" for r in results if r.status != PASS
    )


def test_matrix_against_streamgate(gateway: Gateway, tmp_path: Path) -> None:
    results = _run(Target("streamgate", gateway.bootstrap, gateway.restart), tmp_path)
    assert len(results) == len(ROWS) * len(COLUMNS)
    regressions = []
    for r in results:
        entries = read_allowlist(SUITES / SUITE_OF[r.column] / "allowlist.txt")
        if allowed(entries, r.column, r.row) and r.status != PASS:
            regressions.append(r)
    assert not regressions, _table(regressions)
    by = {(r.row, r.column): r for r in results}
    # transactions, compacted topics and topic ids landed on main: they pass for every
    # client with the API (the allowlists hold them too) and are n/a for the others
    for column in ("kafka-python", "confluent-kafka", "aiokafka"):
        assert by[("transactions", column)].status == PASS, by[("transactions", column)]
        assert by[("compacted-topic", column)].status == PASS, by[("compacted-topic", column)]
    for column in ("kafka-python", "confluent-kafka"):
        assert by[("topic-ids", column)].status == PASS, by[("topic-ids", column)]
    # a client without the API is n/a, never a pass
    for r in ("transactions", "compacted-topic", "topic-ids", "admin-topics"):
        assert by[(r, "kcat")].status == NA, by[(r, "kcat")]
    assert by[("topic-ids", "aiokafka")].status == NA
    assert by[("group-coop-sticky", "aiokafka")].status == NA
    # share groups: confluent-kafka's ShareConsumer; the other clients have none
    assert by[("share-group", "confluent-kafka")].status == PASS, by[
        ("share-group", "confluent-kafka")
    ]
    for column in ("kafka-python", "aiokafka", "kcat"):
        assert by[("share-group", column)].status == NA, by[("share-group", column)]
    # the consumer group protocol: confluent-kafka has it, the other clients do not
    assert by[("group-consumer-protocol", "confluent-kafka")].status == PASS
    for column in ("kafka-python", "aiokafka", "kcat"):
        assert by[("group-consumer-protocol", column)].status == NA


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    why = unavailable_reason()
    if why:
        pytest.skip(why)
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"))
    broker.start()
    yield broker
    broker.close()


@pytest.mark.beside_kafka
def test_matrix_against_kafka(kafka: KafkaBroker, tmp_path: Path) -> None:
    def restart() -> None:
        kafka.stop(timeout=60)
        kafka.start()

    results = _run(Target("kafka", kafka.bootstrap, restart), tmp_path)
    # the reference passes every cell its client can express, transactions included; except
    # kafka-python's group joins against Kafka, which sometimes get no assignment in time on
    # a loaded machine (a client quirk in compat/suites/kafka-python/FINDINGS.md)
    flaky = {
        "group-range",
        "group-roundrobin",
        "group-coop-sticky",
        "static-members",
        "consume-subscribe",
        "committed-offsets",
    }
    bad = [
        r
        for r in results
        if r.status == FAIL
        # Kafka 3.5.1, the reference here, predates the consumer group protocol
        and r.row != "group-consumer-protocol"
        and not (
            r.column == "kafka-python"
            and r.row in flaky
            and ("timed out" in r.detail or "not read back" in r.detail)
        )
    ]
    assert not bad, _table(bad)
    assert {(r.row, r.column) for r in results if r.status == NA} == {
        ("group-coop-sticky", "aiokafka"),
        ("admin-topics", "kcat"),
        ("admin-partitions", "kcat"),
        ("admin-configs", "kcat"),
        ("admin-groups", "kcat"),
        ("admin-records", "kcat"),
        ("transactions", "kcat"),
        ("compacted-topic", "kcat"),
        ("oversize-refused", "kcat"),
        ("topic-ids", "kcat"),
        ("topic-ids", "aiokafka"),
        # Kafka 3.5 has no share groups (and only confluent-kafka has a share consumer)
        ("share-group", "kafka-python"),
        ("share-group", "confluent-kafka"),
        ("share-group", "aiokafka"),
        ("share-group", "kcat"),
        ("group-consumer-protocol", "kafka-python"),
        ("group-consumer-protocol", "aiokafka"),
        ("group-consumer-protocol", "kcat"),
    }


@pytest.mark.gateway_args("--auto-create-topics", "false")
def test_a_feature_switched_off_shows_failed(gateway: Gateway, tmp_path: Path) -> None:
    results = _run(
        Target("no-auto-create", gateway.bootstrap),
        tmp_path,
        rows=[row("auto-create"), row("produce-gzip")],
        cell_timeout=60,
    )
    by = {(r.row, r.column): r for r in results}
    for column in COLUMNS:
        assert by[("auto-create", column)].status == FAIL, by[("auto-create", column)]
        assert by[("produce-gzip", column)].status == PASS, by[("produce-gzip", column)]


def test_an_unreachable_endpoint_fails_every_cell(tmp_path: Path) -> None:
    target = Target("closed", f"127.0.0.1:{free_port()}")
    results = _run(
        target,
        tmp_path,
        rows=[row("produce-gzip"), row("admin-topics")],
        columns=["confluent-kafka", "kafka-python"],
        cell_timeout=20,
    )
    assert results and all(r.status == FAIL for r in results), _table(results)


def test_a_restart_row_on_a_foreign_target_is_not_green(gateway: Gateway, tmp_path: Path) -> None:
    results = _run(
        Target("foreign", gateway.bootstrap),
        tmp_path,
        rows=[row("restart")],
        columns=["confluent-kafka"],
    )
    assert [r.status for r in results] == [NA]
    assert "cannot restart" in results[0].detail
