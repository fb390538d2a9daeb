"""Unit tests of the pieces behind topic ids and per-topic produce rules (no server)."""

from __future__ import annotations

import uuid

import pytest
from kio.index import load_response_schema
from kio.serial import entity_reader

from core.configs.produce_rules import ProduceRules, apply_rules, rules_for
from core.recordbatch import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_ZSTD,
    build_batch,
    decode_records,
    read_batch_header,
    split_batches,
)
from kafkawire.apis import ApiKey
from kafkawire.fetch_response import PartitionData, encode_fetch_response


@pytest.mark.parametrize("version", range(13, 16))
def test_fetch_encoder_by_topic_id_matches_the_spec(version: int) -> None:
    topic_id = uuid.uuid4()
    raw = b"".join(
        encode_fetch_response(9, version, [(topic_id, [PartitionData(0, 0, 5, 0, [b"xyz"])])])
    )
    body, size = entity_reader(load_response_schema(ApiKey.FETCH, version))(raw, 5)
    assert size + 5 == len(raw)
    (topic,) = body.responses
    assert topic.topic_id == topic_id
    assert topic.partitions[0].records == b"xyz"


def test_rules_only_for_topics_that_need_them() -> None:
    assert rules_for({}) is None
    assert rules_for({"compression.type": "producer", "cleanup.policy": "delete"}) is None
    assert rules_for({"compression.type": "zstd"}) == ProduceRules(COMPRESSION_ZSTD, False, False)
    assert rules_for({"cleanup.policy": "delete,compact"}) == ProduceRules(None, False, True)
    assert rules_for({"message.timestamp.type": "LogAppendTime"}) == ProduceRules(None, True, False)


def _batch(codec: int) -> bytes:
    records = [(b"k%d" % i, b"value %d" % i * 20, []) for i in range(10)]
    return build_batch(
        records,
        compression=codec,
        producer_id=42,
        producer_epoch=3,
        base_sequence=17,
        base_timestamp_ms=1_000,
    )


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (COMPRESSION_NONE, COMPRESSION_GZIP),
        (COMPRESSION_LZ4, COMPRESSION_NONE),
        (COMPRESSION_GZIP, COMPRESSION_ZSTD),
    ],
)
def test_recompression_keeps_records_and_producer_fields(source: int, target: int) -> None:
    original = _batch(source)
    out = apply_rules(ProduceRules(target, False, False), original, "t", 0, 5_000)
    assert out.error == 0 and out.log_append_time == -1
    ((header, view),) = split_batches(out.records)  # CRC and lengths check out
    before = read_batch_header(original)
    assert header.compression == target
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 17)
    assert (header.record_count, header.max_timestamp) == (10, before.max_timestamp)
    assert [(r.key, r.value) for r in decode_records(view)] == [
        (r.key, r.value) for r in decode_records(original)
    ]


def test_same_codec_passes_through_untouched() -> None:
    original = _batch(COMPRESSION_GZIP)
    out = apply_rules(ProduceRules(COMPRESSION_GZIP, False, True), original, "t", 0, 5_000)
    assert out.records is original


def test_log_append_time_stamps_the_batch() -> None:
    out = apply_rules(ProduceRules(None, True, False), _batch(COMPRESSION_NONE), "t", 0, 99_000)
    ((header, view),) = split_batches(out.records)
    assert header.timestamp_type == 1 and header.max_timestamp == 99_000
    assert out.log_append_time == 99_000
    assert {r.timestamp for r in decode_records(view)} == {99_000}


def test_keyless_records_in_a_compacted_topic() -> None:
    batch = build_batch([(b"k", b"a", []), (None, b"b", []), (None, b"c", [])])
    out = apply_rules(ProduceRules(None, False, True), batch, "topic", 3, 0)
    assert out.error == 87
    assert [i for i, _ in out.record_errors] == [1, 2]
    assert "topic partition topic-3" in out.record_errors[0][1]
    assert out.message and "2 record errors" in out.message


def test_corrupt_input_is_left_to_the_append_path() -> None:
    batch = bytearray(_batch(COMPRESSION_NONE))
    batch[-1] ^= 0xFF  # CRC no longer matches
    out = apply_rules(ProduceRules(COMPRESSION_GZIP, True, True), bytes(batch), "t", 0, 0)
    assert out.error == 0 and out.records == bytes(batch)
