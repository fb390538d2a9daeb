"""The repository's blocking protocol client (kafkaclient) against a real gateway: one
request at a time, and several in flight at once (`pipeline`), answered in order."""

from __future__ import annotations

from typing import Any

import pytest

from core.recordbatch import build_batch
from kafkaclient.client import KafkaClient, produce_body


def _produce_body(topic: str, partition: int, value: bytes) -> dict[str, Any]:
    return produce_body(topic, {partition: build_batch([(b"k", value, [])])})


def test_pipeline_answers_every_request_in_order(shared_gateway, topic: str) -> None:
    values = [f"record-{i}".encode() for i in range(23)]
    with KafkaClient(shared_gateway.bootstrap, timeout=30) as client:
        responses = list(
            client.pipeline(0, 9, (_produce_body(topic, 0, v) for v in values), in_flight=5)
        )
        assert len(responses) == len(values)
        offsets = []
        for response in responses:
            (part,) = response.responses[0].partition_responses
            assert part.error_code == 0
            offsets.append(part.base_offset)
        # appended in the order sent, and each answer belongs to its own request
        assert offsets == list(range(len(values)))

        # the connection is still in step: a plain request after the pipelined ones
        listed = client.request(
            2,
            1,
            {
                "replica_id": -1,
                "topics": [
                    {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}
                ],
            },
        )
        assert listed.topics[0].partitions[0].offset == len(values)


def test_pipeline_builds_each_body_when_it_is_sent(shared_gateway, topic: str) -> None:
    """A body is taken from the iterator only when a slot is free: a caller can decide the
    next request from the answers so far."""
    taken = 0

    def bodies():
        nonlocal taken
        for i in range(6):
            taken += 1
            yield _produce_body(topic, 0, b"x%d" % i)

    with KafkaClient(shared_gateway.bootstrap, timeout=30) as client:
        answers = client.pipeline(0, 9, bodies(), in_flight=2)
        next(answers)
        assert taken == 2  # two sent, one answered: the third waits for the loop to resume
        assert len(list(answers)) == 5
        assert taken == 6


def test_pipeline_needs_a_window(shared_gateway) -> None:
    with KafkaClient(shared_gateway.bootstrap) as client, pytest.raises(ValueError):
        next(client.pipeline(0, 9, iter([]), in_flight=0))
