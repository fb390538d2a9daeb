"""kafkawire.error_response: error responses built from Kafka's message schema."""

from __future__ import annotations

import typing

from kio.index import load_request_schema

from kafkawire.apis import ApiKey
from kafkawire.codec import build_entity
from kafkawire.error_response import Items, error_items, error_response


def _request(key: int, version: int, data: dict[str, typing.Any]) -> typing.Any:
    return build_entity(load_request_schema(key, version), data)


def test_items_nested_and_named() -> None:
    body = _request(
        ApiKey.PRODUCE,
        9,
        {"acks": -1, "topic_data": [{"name": "t", "partition_data": [{"index": 3}]}]},
    )
    pairing = Items(
        ("topic_data",), "responses", nested=Items(("partition_data",), "partition_responses")
    )
    answer = error_response(ApiKey.PRODUCE, 9, body, 29, None, pairing)
    assert answer == {
        "responses": [
            {
                "name": "t",
                "partition_responses": [
                    # base_offset has no spec default: -1; log_start_offset keeps the spec's
                    {"index": 3, "error_code": 29, "base_offset": -1, "error_message": None}
                ],
            }
        ]
    }


def test_whole_response_and_plain_value_items() -> None:
    body = _request(ApiKey.FIND_COORDINATOR, 3, {"key": "g"})
    assert error_response(ApiKey.FIND_COORDINATOR, 3, body, 30, "no") == {
        "error_code": 30,
        "error_message": "no",
        "node_id": -1,
        "port": -1,
    }
    groups = error_items(ApiKey.DESCRIBE_GROUPS, 5, Items(("groups",), "groups"), ["g"], 30)
    assert groups == [{"error_code": 30, "group_id": "g"}]


def test_keys_values_and_dotted_paths() -> None:
    body = _request(
        ApiKey.ALTER_REPLICA_LOG_DIRS,
        2,
        {"dirs": [{"path": "/a", "topics": [{"name": "t", "partitions": [0, 1]}]}]},
    )
    pairing = Items(
        ("dirs.topics",),
        "results",
        nested=Items(("partitions",), "partitions", values={"error_code": 7}),
        keys={"topic_name": "name"},
    )
    answer = error_response(ApiKey.ALTER_REPLICA_LOG_DIRS, 2, body, 31, None, pairing)
    assert answer["results"] == [
        {
            "topic_name": "t",
            "partitions": [
                {"partition_index": 0, "error_code": 7},
                {"partition_index": 1, "error_code": 7},
            ],
        }
    ]
