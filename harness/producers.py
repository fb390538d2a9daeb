"""librdkafka settings for a producer that must ride out servers being killed and restarted
(the SIGKILL tests and benchmarks): idempotent, acks=all, reconnecting fast to the same
addresses, giving up on a record only after a long while."""

from __future__ import annotations

from typing import Any


def surviving_producer(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 2,
        "message.timeout.ms": 90000,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 200,
        # librdkafka's default (KIP-899 "rebootstrap") drops the known broker each time it
        # finds every broker down; with a kill every second or two the producer then spends
        # whole cycles re-bootstrapping and waiting for a producer id. Keep reconnecting.
        "metadata.recovery.strategy": "none",
        **overrides,
    }
