"""The hand-written Produce request decoder against kio's reader, every accepted version."""

from __future__ import annotations

import datetime
import io
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_writer

from kafkawire.apis import SUPPORTED_APIS, ApiKey
from kafkawire.codec import ProtocolError, RequestHeader, decode_body
from kafkawire.produce_request import decode_produce_request

VERSIONS = range(SUPPORTED_APIS[ApiKey.PRODUCE].accepted_min or 0, 13)
_PREFIX = b"\x00\x00\x00\x07hdr"  # the body need not start at 0


def _encode(version: int, txn: str | None, acks: int, timeout: int, topics: list) -> bytes:
    cls: Any = load_request_schema(ApiKey.PRODUCE, version)
    module = __import__(cls.__module__, fromlist=["TopicProduceData"])
    topic_cls = module.TopicProduceData
    part_cls = module.PartitionProduceData
    body = cls(
        transactional_id=txn,
        acks=acks,
        timeout=datetime.timedelta(milliseconds=timeout),
        topic_data=tuple(
            topic_cls(
                name=name,
                partition_data=tuple(part_cls(index=i, records=r) for i, r in parts),
            )
            for name, parts in topics
        ),
    )
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, body)
    return _PREFIX + buffer.getvalue()


def _same(version: int, raw: bytes) -> None:
    header = RequestHeader(ApiKey.PRODUCE, version, 1, "c", version >= 9)
    want = decode_body(header, raw, len(_PREFIX))
    got = decode_produce_request(raw, len(_PREFIX), version)
    assert got.transactional_id == want.transactional_id
    assert got.acks == want.acks
    assert got.timeout == want.timeout
    assert len(got.topic_data) == len(want.topic_data)
    for mine, theirs in zip(got.topic_data, want.topic_data, strict=True):
        assert mine.name == theirs.name
        assert [(p.index, p.records) for p in mine.partition_data] == [
            (p.index, None if p.records is None else bytes(p.records))
            for p in theirs.partition_data
        ]


_topics = st.lists(
    st.tuples(
        st.text(min_size=1, max_size=30),
        st.lists(
            st.tuples(st.integers(-(2**31), 2**31 - 1), st.none() | st.binary(max_size=300)),
            max_size=4,
        ),
    ),
    max_size=4,
)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=150, deadline=None)
@given(
    txn=st.none() | st.text(max_size=20),
    acks=st.sampled_from([-1, 0, 1, 2, -7]),
    timeout=st.integers(0, 2**31 - 1),
    topics=_topics,
)
def test_matches_kio(version: int, txn: str | None, acks: int, timeout: int, topics) -> None:
    _same(version, _encode(version, txn, acks, timeout, topics))


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncation_is_a_protocol_error(version: int) -> None:
    raw = _encode(version, "tx", -1, 30000, [("t", [(0, b"x" * 70), (1, None)]), ("u", [])])
    _same(version, raw)
    for end in range(len(_PREFIX), len(raw)):
        with pytest.raises(ProtocolError):
            decode_produce_request(raw[:end], len(_PREFIX), version)


def test_hostile_lengths_are_refused_before_allocating() -> None:
    raw = _PREFIX + b"\xff\xff" + b"\xff\xff" + b"\x00\x00\x75\x30" + b"\x7f\xff\xff\xff"
    with pytest.raises(ProtocolError, match="truncated"):
        decode_produce_request(raw, len(_PREFIX), 3)
    bad_name = _PREFIX + b"\xff\xff\xff\xff\x00\x00\x75\x30\x00\x00\x00\x01\x00\x01\xff"
    with pytest.raises(ProtocolError, match="malformed"):
        decode_produce_request(bad_name, len(_PREFIX), 3)


@pytest.mark.parametrize("version", [0, 2, 13])
def test_refuses_versions_it_does_not_know(version: int) -> None:
    with pytest.raises(ProtocolError):
        decode_produce_request(_PREFIX + b"\x00" * 20, len(_PREFIX), version)
