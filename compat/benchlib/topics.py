"""Create and delete a benchmark's topics with confluent-kafka's AdminClient."""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient, NewTopic

ADMIN_TIMEOUT = 30.0


def partition_count(admin: AdminClient, topic: str) -> int:
    """Partitions the cluster's metadata shows for `topic`; -1 while it shows none."""
    metadata = admin.list_topics(topic, timeout=10).topics.get(topic)
    if metadata is None or metadata.error is not None:
        return -1
    return len(metadata.partitions)


def create_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int = 1) -> None:
    """Create `topic` and wait until the metadata shows all its partitions."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.list_topics(timeout=10)  # fails fast, with a clear error, if nothing answers
    new_topic = NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor)
    futures = admin.create_topics([new_topic], operation_timeout=ADMIN_TIMEOUT)
    futures[topic].result(timeout=ADMIN_TIMEOUT)
    deadline = time.monotonic() + ADMIN_TIMEOUT
    while partition_count(admin, topic) != partitions:
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {topic} did not show {partitions} partitions")
        time.sleep(0.1)


def create_topics(bootstrap: str, topics: list[str], partitions: int, per_call: int = 10) -> None:
    """Create many topics, `per_call` per CreateTopics request, and wait until the metadata
    shows each one's partitions. Each batch has an AdminClient of its own: librdkafka
    refreshes every topic its client has seen at once, and one client per topic (or one
    for all) made each creation slower than the last towards a million partitions."""
    AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)  # fails fast
    for first in range(0, len(topics), per_call):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        names = topics[first : first + per_call]
        futures = admin.create_topics(
            [NewTopic(t, num_partitions=partitions) for t in names],
            operation_timeout=ADMIN_TIMEOUT,
        )
        for topic in names:
            futures[topic].result(timeout=ADMIN_TIMEOUT)
        for topic in names:
            deadline = time.monotonic() + ADMIN_TIMEOUT
            while partition_count(admin, topic) != partitions:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"topic {topic} did not show {partitions} partitions")
                time.sleep(0.1)


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], operation_timeout=ADMIN_TIMEOUT)[topic].result(
        timeout=ADMIN_TIMEOUT
    )
