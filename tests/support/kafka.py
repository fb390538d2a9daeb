"""Apache Kafka next to streamgate, for the tests that compare the two: one Kafka 3.5.1 per
module (the `kafka` fixture), or None when it cannot run here; `need_kafka` skips the Kafka
half of a test, after its streamgate half ran, in that case.

A pytest plugin (conftest.py); a module with a `kafka` fixture of its own overrides it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.kafka import KafkaBroker, unavailable_reason


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker | None]:
    """One Kafka 3.5.1 for the module, or None when it cannot run here."""
    if unavailable_reason() is not None:
        yield None
        return
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"))
    broker.start()
    yield broker
    broker.stop()


def need_kafka(kafka: KafkaBroker | None) -> KafkaBroker:
    """The Kafka half: skip (after the streamgate half ran) when Kafka is unavailable."""
    if kafka is None:
        pytest.skip(f"Kafka half skipped: {unavailable_reason()}")
    return kafka
