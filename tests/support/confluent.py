"""confluent-kafka shortcuts most system tests share: creating a topic and a consumer that
surfaces out-of-range positions instead of resetting them."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int = 1,
    configs: Mapping[str, str] | None = None,
    *,
    timeout: float = 90.0,
) -> None:
    """Creates `topic` (replication factor 1) and waits for the answer. The timeout is
    generous: a Kafka broker just started on a busy machine may take a while to unfence."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the future is done
    new = NewTopic(topic, partitions, 1, config=dict(configs or {}))
    admin.create_topics([new], request_timeout=timeout)[topic].result(timeout=timeout + 10)


def confluent_consumer(bootstrap: str, **extra: Any) -> Consumer:
    """A consumer in a group of its own, committing nothing by itself; out-of-range positions
    raise (`auto.offset.reset` error) rather than silently reset. `extra` overrides."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"g-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
    }
    conf.update(extra)
    return Consumer(conf)
