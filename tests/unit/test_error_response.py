"""kafkawire.error_response: error responses built from Kafka's message schema, and the
authorization table's pairings checked against the schemas of every supported version."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from kio.index import load_request_schema, load_response_schema

from gateway.authorization.rules import RULES
from kafkawire.apis import SUPPORTED_APIS, ApiKey
from kafkawire.codec import build_entity, unwrap_optional
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


def _collections(cls: type) -> dict[str, type]:
    hints = typing.get_type_hints(cls)
    found = {}
    for f in dataclasses.fields(cls):
        tp = unwrap_optional(hints[f.name])
        if typing.get_origin(tp) is tuple:
            found[f.name] = typing.get_args(tp)[0]
    return found


def _check(request_cls: type, response_cls: type, pairing: Items, version: int) -> None:
    answers = _collections(response_cls)
    assert pairing.response in answers, f"v{version}: no {pairing.response}"
    item_cls = answers[pairing.response]
    item_fields = {f.name for f in dataclasses.fields(item_cls)}
    assert set(pairing.keys) | set(pairing.values) <= item_fields, f"v{version}"
    requested = [
        path for path in pairing.request if path.split(".")[0] in _collections(request_cls)
    ]
    if pairing.request:
        assert requested, f"v{version}: none of {pairing.request} in the request"
    if pairing.nested is not None:
        for path in requested:
            inner = request_cls
            for part in path.split("."):
                inner = _collections(inner)[part]
            _check(inner, item_cls, pairing.nested, version)


@pytest.mark.parametrize(
    "key", sorted(k for k, rule in RULES.items() if rule.items), ids=lambda k: ApiKey(k).name
)
def test_rule_pairings_match_every_version(key: int) -> None:
    """A typo in the table would only show when a request is denied: checked here."""
    pairing = RULES[key].items
    assert pairing is not None
    support = SUPPORTED_APIS[key]
    last = support.max_version
    if key == ApiKey.OFFSET_FETCH:
        last = 7  # v8+ (several groups) is guarded by guard._offset_fetch, not the row
    if key == ApiKey.FIND_COORDINATOR:
        last = 3  # v4+ (several keys): guard._find_coordinator
    for version in range(support.min_version, last + 1):
        _check(
            load_request_schema(key, version), load_response_schema(key, version), pairing, version
        )
