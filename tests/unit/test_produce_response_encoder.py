"""The hand-written Produce response encoder against kio's generic path, every version."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkawire.apis import SUPPORTED_APIS, ApiKey
from kafkawire.codec import RequestHeader, encode_response
from kafkawire.produce_response import encode_produce_response

VERSIONS = range(SUPPORTED_APIS[ApiKey.PRODUCE].accepted_min or 0, 13)

_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)
_text = st.none() | st.text(max_size=12)

_partition = st.fixed_dictionaries(
    {
        "index": _i32,
        "error_code": st.sampled_from([0, 1, 2, 10, 47, 87]),
        "base_offset": _i64,
    },
    optional={
        "log_append_time": st.sampled_from([-1, 0]) | st.integers(0, 2**41),
        "log_start_offset": _i64,
        "error_message": _text,
        "record_errors": st.lists(
            st.fixed_dictionaries(
                {"batch_index": _i32}, optional={"batch_index_error_message": _text}
            ),
            max_size=3,
        ),
    },
)
_response = st.fixed_dictionaries(
    {
        "responses": st.lists(
            st.fixed_dictionaries(
                {
                    "name": st.text(min_size=1, max_size=20),
                    "partition_responses": st.lists(_partition, max_size=4),
                }
            ),
            max_size=3,
        )
    },
    optional={"throttle_time": st.integers(0, 2**31 - 1)},
)


def _kio(version: int, data: dict[str, Any]) -> bytes:
    header = RequestHeader(ApiKey.PRODUCE, version, 42, "c", version >= 9)
    return encode_response(header, data)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=150, deadline=None)
@given(data=_response)
def test_matches_kio_for_any_response(version: int, data: dict[str, Any]) -> None:
    assert encode_produce_response(42, version, data) == _kio(version, data)


@pytest.mark.parametrize("version", VERSIONS)
def test_matches_kio_for_the_handlers_usual_answer(version: int) -> None:
    data = {
        "responses": [
            {
                "name": "orders",
                "partition_responses": [
                    {
                        "index": 3,
                        "error_code": 0,
                        "base_offset": 1234,
                        "log_append_time": -1,
                        "log_start_offset": 0,
                        "error_message": None,
                    }
                ],
            }
        ]
    }
    assert encode_produce_response(42, version, data) == _kio(version, data)


@pytest.mark.parametrize("version", [0, 2, 13])
def test_refuses_versions_it_does_not_know(version: int) -> None:
    with pytest.raises(ValueError, match="not supported"):
        encode_produce_response(1, version, {"responses": []})
