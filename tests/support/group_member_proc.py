"""A confluent-kafka group member in its own process, for tests that SIGKILL it.

Usage: python group_member_proc.py '{"bootstrap": ..., "group": ..., "topics": [...],
"name": ..., "session_timeout_ms": ..., "heartbeat_ms": ...}'

It prints JSON lines on stdout: {"type": "assignment", "partitions": [[topic, p], ...]}
whenever its assignment changes, and {"type": "record", ...} for each record before the
batch is committed (so a kill between the two leaves records consumed but uncommitted).
"""

from __future__ import annotations

import contextlib
import json
import sys

from confluent_kafka import Consumer, KafkaError, KafkaException


def main() -> None:
    config = json.loads(sys.argv[1])
    consumer = Consumer(
        {
            "bootstrap.servers": config["bootstrap"],
            "group.id": config["group"],
            "client.id": config["name"],
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": config["session_timeout_ms"],
            "heartbeat.interval.ms": config["heartbeat_ms"],
            "partition.assignment.strategy": "range",
        }
    )
    consumer.subscribe(config["topics"])
    last: list[list[object]] | None = None
    while True:
        msgs = consumer.consume(num_messages=100, timeout=0.1)
        for m in msgs:
            if m.error():
                if m.error().code() != KafkaError._PARTITION_EOF:
                    print(json.dumps({"type": "error", "error": str(m.error())}), flush=True)
                continue
            event = {
                "type": "record",
                "topic": m.topic(),
                "partition": m.partition(),
                "offset": m.offset(),
                "value": m.value().decode(),
            }
            print(json.dumps(event), flush=True)
        if msgs:
            with contextlib.suppress(KafkaException):
                consumer.commit(asynchronous=False)
        current = sorted([p.topic, p.partition] for p in consumer.assignment())
        if current != last:
            last = current
            print(json.dumps({"type": "assignment", "partitions": current}), flush=True)


if __name__ == "__main__":
    main()
