"""No transactions yet: a transactional producer must fail at once with an error, not hang
retrying a coordinator lookup until its timeout (found by the compat matrix)."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaError

from harness.gateway import Gateway


def test_transactional_producer_fails_fast(shared_gateway: Gateway, topic: str) -> None:
    producer = KafkaProducer(
        bootstrap_servers=shared_gateway.bootstrap,
        transactional_id=f"{topic}-tx",
        max_block_ms=120_000,
    )
    started = time.monotonic()
    try:
        with pytest.raises(KafkaError, match="InitProducerId"):
            producer.init_transactions()
    finally:
        producer.close(timeout=5)
    # well under max_block_ms: the refusal is not retried
    assert time.monotonic() - started < 60
