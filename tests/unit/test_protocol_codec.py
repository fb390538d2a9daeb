"""The hand-written Fetch encoder and the dict-to-kio response builder, checked against kio."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from kafkawire.apis import SUPPORTED_APIS, ApiKey
from kafkawire.codec import (
    ProtocolError,
    RequestHeader,
    decode_body,
    decode_header,
    encode_response,
)
from kafkawire.fetch_response import PartitionData, encode_fetch_response
from kafkawire.framing import FrameDecoder, FrameError, frame


@pytest.mark.parametrize("version", range(4, 13))
def test_fetch_encoder_matches_the_spec(version: int) -> None:
    topics = [
        (
            "orders",
            [
                PartitionData(1, 0, 10, 2, [b"abc", memoryview(b"de")]),
                PartitionData(2, 1, 3, 0, []),
            ],
        ),
        ("empty", []),
    ]
    raw = b"".join(encode_fetch_response(77, version, topics))
    header_size = 5 if version >= 12 else 4
    assert raw[:4] == (77).to_bytes(4, "big")
    body, size = entity_reader(load_response_schema(ApiKey.FETCH, version))(raw, header_size)
    assert size + header_size == len(raw)
    first, second = body.responses[0].partitions
    assert body.responses[0].topic == "orders" and body.responses[1].topic == "empty"
    assert (first.partition_index, first.high_watermark, first.records) == (1, 10, b"abcde")
    assert second.error_code == ErrorCode.offset_out_of_range
    if version >= 5:
        assert first.log_start_offset == 2


@pytest.mark.parametrize("version", range(0, 13))
def test_metadata_response_fills_defaults_for_every_version(version: int) -> None:
    header = RequestHeader(
        ApiKey.METADATA, version, 5, "t", SUPPORTED_APIS[ApiKey.METADATA].is_flexible(version)
    )
    raw = encode_response(
        header,
        {
            "brokers": [{"node_id": 1, "host": "h", "port": 9}],
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "leader_id": 1}]}],
            "controller_id": 1,
        },
    )
    header_size = 5 if header.flexible else 4
    body, size = entity_reader(load_response_schema(ApiKey.METADATA, version))(raw, header_size)
    assert size + header_size == len(raw)
    assert body.topics[0].partitions[0].leader_id == 1


def test_frame_decoder_splits_and_rejects_oversized_frames() -> None:
    decoder = FrameDecoder(max_frame_bytes=10)
    stream = frame(b"one") + frame(b"two")
    decoder.feed(stream[:5])
    assert decoder.next_frame() is None
    decoder.feed(stream[5:])
    assert decoder.next_frame() == b"one"
    assert decoder.next_frame() == b"two"
    assert decoder.next_frame() is None
    decoder.feed((11).to_bytes(4, "big"))
    with pytest.raises(FrameError):
        decoder.next_frame()
    negative = FrameDecoder(max_frame_bytes=10)
    negative.feed(b"\xff\xff\xff\xff")
    with pytest.raises(FrameError):
        negative.next_frame()


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=20),
    cuts=st.lists(st.integers(min_value=1, max_value=700), max_size=40),
)
def test_frame_decoder_gives_back_the_frames_however_the_bytes_arrive(
    payloads: list[bytes], cuts: list[int]
) -> None:
    """Frames come out whole and in order whatever the receive sizes: a size prefix split
    across receives, several frames in one, a frame over many."""
    stream = b"".join(frame(p) for p in payloads)
    decoder = FrameDecoder(max_frame_bytes=300)
    out: list[bytes] = []
    pos = 0
    for size in [*cuts, len(stream)]:
        decoder.feed(stream[pos : pos + size])
        pos += size
        while (got := decoder.next_frame()) is not None:
            out.append(got)
    assert out == payloads
    assert decoder.buffered == 0


def _request_header(api_key: int, version: int, flexible: bool) -> bytes:
    return (
        api_key.to_bytes(2, "big")
        + version.to_bytes(2, "big")
        + (9).to_bytes(4, "big")
        + (1).to_bytes(2, "big")
        + b"c"
        + (b"\x00" if flexible else b"")
    )


@pytest.mark.parametrize("api_key", sorted(SUPPORTED_APIS))
def test_huge_declared_lengths_are_rejected_without_allocating(api_key: int) -> None:
    """Huge declared lengths raise ProtocolError or decode; never reserve 32 GiB (or abort)."""
    support = SUPPORTED_APIS[api_key]
    for version in range(support.min_version, support.max_version + 1):
        flexible = support.is_flexible(version)
        for body in (b"\x7f\xff\xff\xff" * 6, b"\xff\xff\xff\xff\x0f" * 6, b"\x00\x01"):
            frame_bytes = _request_header(api_key, version, flexible) + body
            header, pos = decode_header(frame_bytes)
            with contextlib.suppress(ProtocolError):
                decode_body(header, frame_bytes, pos)


def test_metadata_with_a_two_billion_topic_array_is_a_protocol_error() -> None:
    frame_bytes = _request_header(3, 1, False) + b"\x7f\xff\xff\xff" + b"\x00\x01a"
    header, pos = decode_header(frame_bytes)
    with pytest.raises(ProtocolError, match="array of 2147483647"):
        decode_body(header, frame_bytes, pos)
