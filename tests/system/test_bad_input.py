"""Malformed and hostile input on raw sockets: the server must survive and stay usable."""

from __future__ import annotations

import socket
import struct
import time

import pytest
from confluent_kafka import Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.client import (
    API_API_VERSIONS,
    API_FETCH,
    API_LIST_OFFSETS,
    API_METADATA,
    API_PRODUCE,
    ERR_CORRUPT_MESSAGE,
    ERR_INVALID_TOPIC,
    ERR_MESSAGE_TOO_LARGE,
    ERR_NONE,
    ERR_OUT_OF_ORDER_SEQUENCE,
    ERR_UNKNOWN_TOPIC_OR_PARTITION,
    ERR_UNSUPPORTED_VERSION,
    RawClient,
    Rec,
    api_versions_ok,
    api_versions_request,
    build_record_batch,
    connection_closed,
    corrupt_crc,
    corrupt_payload,
    decode_records,
    encode_request,
    fetch_request,
    frame,
    init_producer_id_request,
    list_offsets_request,
    metadata_request,
    open_socket,
    produce_request,
    request_header,
    unique_topic,
    wait_until,
)

MAX_REQUEST_BYTES = 1024 * 1024
GATEWAY_ARGS = ("--max-request-bytes", str(MAX_REQUEST_BYTES))

FUZZ_SETTINGS = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def assert_healthy(gw) -> None:
    assert gw.is_alive(), f"gateway died:\n{gw.log_tail()}"
    assert api_versions_ok(gw.bootstrap)


def create_topic(bootstrap: str, topic: str) -> None:
    with RawClient(bootstrap) as client:
        resp = client.request(metadata_request([topic], auto_create=True))
    (t,) = resp.topics
    assert t.error_code == ERR_NONE and len(t.partitions) >= 1, t


def produce_raw(bootstrap: str, topic: str, batch: bytes, partition: int = 0):
    with RawClient(bootstrap) as client:
        resp = client.request(produce_request(topic, partition, batch))
    (t,) = resp.responses
    (p,) = t.partition_responses
    return p


def latest_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    with RawClient(bootstrap) as client:
        resp = client.request(list_offsets_request(topic, partition, -1))
    p = resp.topics[0].partitions[0]
    assert p.error_code == ERR_NONE
    return p.offset


def confluent_round_trip(bootstrap: str, topic: str, value: bytes) -> None:
    """A fresh confluent producer appends one record; a raw fetch reads exactly it back."""
    create_topic(bootstrap, topic)
    expected_offset = latest_offset(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    reports: list = []
    producer.produce(
        topic, value=value, partition=0, on_delivery=lambda e, m: reports.append((e, m.offset()))
    )
    assert producer.flush(15) == 0
    assert reports == [(None, expected_offset)]
    with RawClient(bootstrap) as client:
        resp = client.request(fetch_request(topic, 0, expected_offset, max_wait_ms=0))
    part = resp.responses[0].partitions[0]
    assert part.error_code == ERR_NONE
    got = [(o, v) for o, _k, v in decode_records(part.records) if o >= expected_offset]
    assert got == [(expected_offset, value)]


def send_and_wait_close(bootstrap: str, payload: bytes, timeout: float = 10.0) -> bool:
    sock = open_socket(bootstrap)
    try:
        try:
            sock.sendall(payload)
        except (BrokenPipeError, ConnectionResetError):
            return True
        return connection_closed(sock, timeout)
    finally:
        sock.close()


# ---------------------------------------------------------------------- framing


@pytest.mark.parametrize(
    "size",
    [MAX_REQUEST_BYTES + 1, 256 * 1024 * 1024, 2**31 - 1, -1, -(2**31)],
    ids=["max+1", "256MiB", "int32max", "minus1", "int32min"],
)
def test_bad_length_prefix_closes_connection(shared_gateway, size):
    assert send_and_wait_close(shared_gateway.bootstrap, struct.pack(">i", size) + b"\x00" * 16)
    assert_healthy(shared_gateway)


def test_zero_length_frame(shared_gateway):
    # nothing to parse: the server must drop the connection (or at least not die)
    sock = open_socket(shared_gateway.bootstrap)
    try:
        sock.sendall(struct.pack(">i", 0))
        assert connection_closed(sock, timeout=10)
    finally:
        sock.close()
    assert_healthy(shared_gateway)


def test_request_size_limit_is_enforced_exactly(shared_gateway, topic):
    create_topic(shared_gateway.bootstrap, topic)
    small = build_record_batch([Rec(b"s" * (MAX_REQUEST_BYTES - 4096))])
    p = produce_raw(shared_gateway.bootstrap, topic, small)
    assert (p.error_code, p.base_offset) == (ERR_NONE, 0)

    too_big = build_record_batch([Rec(b"b" * (MAX_REQUEST_BYTES + 10))])
    payload = encode_request(produce_request(topic, 0, too_big), 1)
    assert send_and_wait_close(shared_gateway.bootstrap, payload)
    assert_healthy(shared_gateway)
    assert latest_offset(shared_gateway.bootstrap, topic) == 1


@pytest.mark.parametrize("keep_open", [False, True])
def test_truncated_frame(shared_gateway, keep_open):
    body = request_header(API_METADATA, 1, 7) + b"\x00\x00"
    sock = open_socket(shared_gateway.bootstrap)
    try:
        sock.sendall(struct.pack(">i", 100) + body)  # announces 100 bytes, sends fewer
        if keep_open:
            # A stalled client must not block anybody else.
            assert_healthy(shared_gateway)
            confluent_round_trip(shared_gateway.bootstrap, unique_topic("stall"), b"ok")
    finally:
        sock.close()
    time.sleep(0.1)
    assert_healthy(shared_gateway)


def test_truncated_length_prefix(shared_gateway):
    sock = open_socket(shared_gateway.bootstrap)
    sock.sendall(b"\x00\x00")
    sock.close()
    time.sleep(0.1)
    assert_healthy(shared_gateway)


# ------------------------------------------------------------- api keys/versions


@pytest.mark.parametrize("api_key", [999, 32767, -1, -32768])
def test_unknown_api_key_closes_connection(shared_gateway, api_key):
    payload = frame(request_header(api_key, 0, 11) + b"\x00" * 8)
    assert send_and_wait_close(shared_gateway.bootstrap, payload)
    assert_healthy(shared_gateway)


@pytest.mark.parametrize(
    ("api_key", "version"),
    [
        (API_METADATA, 99),
        (API_METADATA, -1),
        (API_PRODUCE, 2),
        (API_PRODUCE, 99),
        (API_FETCH, 3),
        (API_FETCH, 99),
        (API_LIST_OFFSETS, 0),
        (API_LIST_OFFSETS, 99),
    ],
)
def test_unsupported_version_closes_connection(shared_gateway, api_key, version):
    payload = frame(request_header(api_key, version, 12, flexible=True) + b"\x00" * 8)
    assert send_and_wait_close(shared_gateway.bootstrap, payload)
    assert_healthy(shared_gateway)


def _parse_api_versions_v0(payload: bytes, correlation_id: int):
    corr, error_code, count = struct.unpack_from(">ihi", payload, 0)
    pos = 10
    apis = {}
    for _ in range(count):
        key, lo, hi = struct.unpack_from(">hhh", payload, pos)
        apis[key] = (lo, hi)
        pos += 6
    assert corr == correlation_id
    assert pos == len(payload), "v0 ApiVersions response must have nothing after the api list"
    return error_code, apis


@pytest.mark.parametrize("version", [5, 99, 32767])
def test_api_versions_unsupported_version_gets_v0_error_response(shared_gateway, version):
    body = b"\x05tests\x021\x00"  # v3-style body: compact strings + empty tagged fields
    sock = open_socket(shared_gateway.bootstrap)
    try:
        sock.sendall(frame(request_header(API_API_VERSIONS, version, 4242, flexible=True) + body))
        size = struct.unpack(">i", _recv_exact(sock, 4))[0]
        payload = _recv_exact(sock, size)
    finally:
        sock.close()
    error_code, apis = _parse_api_versions_v0(payload, 4242)
    assert error_code == ERR_UNSUPPORTED_VERSION
    assert apis[API_API_VERSIONS][0] == 0 and apis[API_API_VERSIONS][1] >= 3
    lo, hi = apis[API_PRODUCE]
    assert lo <= 3 and hi >= 9
    lo, hi = apis[API_FETCH]
    assert lo <= 4 and hi >= 12
    lo, hi = apis[API_LIST_OFFSETS]
    assert lo <= 1 and hi >= 7
    for key in (API_METADATA, 19, 20, 22):
        assert key in apis
    assert version > apis[API_API_VERSIONS][1]
    assert_healthy(shared_gateway)


def test_api_versions_v0_is_answered(shared_gateway):
    sock = open_socket(shared_gateway.bootstrap)
    try:
        sock.sendall(frame(request_header(API_API_VERSIONS, 0, 77)))
        size = struct.unpack(">i", _recv_exact(sock, 4))[0]
        payload = _recv_exact(sock, size)
    finally:
        sock.close()
    error_code, apis = _parse_api_versions_v0(payload, 77)
    assert error_code == ERR_NONE
    assert API_PRODUCE in apis and API_FETCH in apis


def test_pipelined_requests_answered_in_order(shared_gateway):
    with RawClient(shared_gateway.bootstrap) as client:
        ids = [client.send(api_versions_request()) for _ in range(20)]
        for cid in ids:
            assert client.receive(api_versions_request(), cid).error_code == ERR_NONE


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, "connection closed early"
        buf += chunk
    return buf


# ------------------------------------------------------------ record batch checks


@pytest.mark.parametrize("damage", [corrupt_crc, corrupt_payload], ids=["crc", "payload"])
def test_produce_with_bad_crc_is_rejected(shared_gateway, damage):
    topic = unique_topic("corrupt")
    create_topic(shared_gateway.bootstrap, topic)
    good = build_record_batch([Rec(b"one", b"k"), Rec(b"two")])

    bad = produce_raw(shared_gateway.bootstrap, topic, damage(good))
    assert bad.error_code == ERR_CORRUPT_MESSAGE
    assert latest_offset(shared_gateway.bootstrap, topic) == 0, "corrupt batch was appended"

    ok = produce_raw(shared_gateway.bootstrap, topic, good)
    assert (ok.error_code, ok.base_offset) == (ERR_NONE, 0)
    with RawClient(shared_gateway.bootstrap) as client:
        resp = client.request(fetch_request(topic, 0, 0, max_wait_ms=0))
    part = resp.responses[0].partitions[0]
    assert part.high_watermark == 2
    assert decode_records(part.records) == [(0, b"k", b"one"), (1, None, b"two")]


def test_produce_with_wrong_record_count_is_rejected(shared_gateway, topic):
    import crc32c

    create_topic(shared_gateway.bootstrap, topic)
    good = bytearray(build_record_batch([Rec(b"only")]))
    struct.pack_into(">i", good, 57, 5)  # claims 5 records, contains 1
    struct.pack_into(">I", good, 17, crc32c.crc32c(bytes(good[21:])))  # keep the CRC valid
    bad = produce_raw(shared_gateway.bootstrap, topic, bytes(good))
    assert bad.error_code != ERR_NONE
    assert latest_offset(shared_gateway.bootstrap, topic) == 0
    assert_healthy(shared_gateway)


def test_produce_to_missing_partition(shared_gateway, topic):
    create_topic(shared_gateway.bootstrap, topic)
    p = produce_raw(shared_gateway.bootstrap, topic, build_record_batch([Rec(b"x")]), partition=99)
    assert p.error_code == ERR_UNKNOWN_TOPIC_OR_PARTITION


def test_produce_truncated_batch_is_rejected(shared_gateway, topic):
    create_topic(shared_gateway.bootstrap, topic)
    good = build_record_batch([Rec(b"a" * 100), Rec(b"b" * 100)])
    bad = produce_raw(shared_gateway.bootstrap, topic, good[:-30])
    assert bad.error_code != ERR_NONE
    assert latest_offset(shared_gateway.bootstrap, topic) == 0
    assert_healthy(shared_gateway)


@pytest.mark.gateway_args("--max-message-bytes", "65536")
def test_batch_larger_than_max_message_bytes(gateway, topic):
    create_topic(gateway.bootstrap, topic)
    p = produce_raw(gateway.bootstrap, topic, build_record_batch([Rec(b"z" * 70_000)]))
    assert p.error_code == ERR_MESSAGE_TOO_LARGE
    assert latest_offset(gateway.bootstrap, topic) == 0
    p = produce_raw(gateway.bootstrap, topic, build_record_batch([Rec(b"z" * 60_000)]))
    assert (p.error_code, p.base_offset) == (ERR_NONE, 0)


@pytest.mark.parametrize("name", ["bad name", "a" * 250, ".", "..", "", "tab\tname", "ünï"])
def test_invalid_topic_names_are_rejected(shared_gateway, name):
    with RawClient(shared_gateway.bootstrap) as client:
        md = client.request(metadata_request([name], auto_create=True))
        (t,) = md.topics
        assert t.error_code == ERR_INVALID_TOPIC
        assert len(t.partitions) == 0
        resp = client.request(produce_request(name, 0, build_record_batch([Rec(b"x")])))
        (p,) = resp.responses[0].partition_responses
        assert p.error_code in (ERR_INVALID_TOPIC, ERR_UNKNOWN_TOPIC_OR_PARTITION)
        listing = client.request(metadata_request(None, auto_create=False))
    assert name not in [t.name for t in listing.topics]
    assert_healthy(shared_gateway)


# ------------------------------------------------------------- protocol details


def test_acks_0_produce_gets_no_response(shared_gateway, topic):
    create_topic(shared_gateway.bootstrap, topic)
    with RawClient(shared_gateway.bootstrap) as client:
        silent = produce_request(topic, 0, build_record_batch([Rec(b"fire-and-forget")]), acks=0)
        client.sock.sendall(encode_request(silent, 1000))
        # the next response on this connection must belong to the next request
        cid = client.send(api_versions_request())
        assert client.receive(api_versions_request(), cid).error_code == ERR_NONE
    # acks=0 promises no read-your-writes timing, only that the record lands (once)
    wait_until(lambda: latest_offset(shared_gateway.bootstrap, topic) == 1, timeout=10)
    time.sleep(0.2)
    assert latest_offset(shared_gateway.bootstrap, topic) == 1


def test_pipelined_produce_requests_keep_order(shared_gateway, topic):
    """Several Produce requests sent back to back on one connection (as clients with
    max.in.flight > 1 do) are appended in request order and answered in order."""
    create_topic(shared_gateway.bootstrap, topic)
    expected = []
    with RawClient(shared_gateway.bootstrap) as client:
        for round_no in range(30):
            requests = [
                produce_request(topic, 0, build_record_batch([Rec(f"{round_no}-{i}".encode())]), 1)
                for i in range(5)
            ]
            first_id = client.correlation_id + 1
            client.sock.sendall(
                b"".join(encode_request(r, first_id + i) for i, r in enumerate(requests))
            )
            client.correlation_id += len(requests)
            offsets = [
                client.receive(r, first_id + i).responses[0].partition_responses[0].base_offset
                for i, r in enumerate(requests)
            ]
            assert offsets == list(range(round_no * 5, round_no * 5 + 5))
            expected += [f"{round_no}-{i}".encode() for i in range(5)]
        resp = client.request(fetch_request(topic, 0, 0, max_wait_ms=0))
    stored = [v for _o, _k, v in decode_records(resp.responses[0].partitions[0].records)]
    assert stored == expected


def test_metadata_topic_list_variants(shared_gateway, topic):
    create_topic(shared_gateway.bootstrap, topic)
    unknown = unique_topic("unknown")
    with RawClient(shared_gateway.bootstrap) as client:
        none_requested = client.request(metadata_request([]))
        no_auto = client.request(metadata_request([unknown], auto_create=False))
        everything = client.request(metadata_request(None, auto_create=False))
    assert none_requested.topics == ()
    assert [(b.host, b.port) for b in none_requested.brokers] == [
        ("127.0.0.1", shared_gateway.port)
    ]
    assert none_requested.controller_id == none_requested.brokers[0].node_id
    assert [(t.name, t.error_code) for t in no_auto.topics] == [
        (unknown, ERR_UNKNOWN_TOPIC_OR_PARTITION)
    ]
    names = [t.name for t in everything.topics]
    assert topic in names
    assert unknown not in names


# ------------------------------------------------------------------- idempotence


def _producer_id(bootstrap: str) -> tuple[int, int]:
    with RawClient(bootstrap) as client:
        resp = client.request(init_producer_id_request())
    assert resp.error_code == ERR_NONE
    assert resp.producer_id >= 0 and resp.producer_epoch >= 0
    return resp.producer_id, resp.producer_epoch


def test_init_producer_id_hands_out_distinct_ids(shared_gateway):
    ids = {_producer_id(shared_gateway.bootstrap)[0] for _ in range(5)}
    assert len(ids) == 5


def test_idempotent_retry_is_not_appended_twice(shared_gateway, topic):
    create_topic(shared_gateway.bootstrap, topic)
    pid, epoch = _producer_id(shared_gateway.bootstrap)

    def batch(seq: int, *values: bytes) -> bytes:
        return build_record_batch(
            [Rec(v) for v in values], producer_id=pid, producer_epoch=epoch, base_sequence=seq
        )

    first = batch(0, b"a", b"b")
    p = produce_raw(shared_gateway.bootstrap, topic, first)
    assert (p.error_code, p.base_offset) == (ERR_NONE, 0)
    # a retry of the same batch is acknowledged with the original offset, not re-appended
    p = produce_raw(shared_gateway.bootstrap, topic, first)
    assert (p.error_code, p.base_offset) == (ERR_NONE, 0)
    p = produce_raw(shared_gateway.bootstrap, topic, batch(2, b"c"))
    assert (p.error_code, p.base_offset) == (ERR_NONE, 2)
    # a gap in the sequence is refused
    p = produce_raw(shared_gateway.bootstrap, topic, batch(9, b"gap"))
    assert p.error_code == ERR_OUT_OF_ORDER_SEQUENCE
    p = produce_raw(shared_gateway.bootstrap, topic, batch(3, b"d"))
    assert (p.error_code, p.base_offset) == (ERR_NONE, 3)

    with RawClient(shared_gateway.bootstrap) as client:
        resp = client.request(fetch_request(topic, 0, 0, max_wait_ms=0))
    part = resp.responses[0].partitions[0]
    assert part.high_watermark == 4
    assert [v for _o, _k, v in decode_records(part.records)] == [b"a", b"b", b"c", b"d"]


# ---------------------------------------------------------------------- fuzzing


def _blast(bootstrap: str, payload: bytes) -> None:
    """Send bytes, read whatever comes back for a moment, then hang up."""
    sock = open_socket(bootstrap, timeout=5)
    try:
        try:
            sock.sendall(payload)
            sock.settimeout(0.2)
            while sock.recv(65536):
                pass
        except (TimeoutError, ConnectionResetError, BrokenPipeError):
            pass
    finally:
        sock.close()


@pytest.fixture(scope="module")
def fuzz_topic(shared_gateway):
    topic = unique_topic("fuzz-health")
    create_topic(shared_gateway.bootstrap, topic)
    return topic


_counter = iter(range(10**9))


def _check_after_fuzz(gw, topic: str) -> None:
    assert gw.is_alive(), f"gateway died:\n{gw.log_tail()}"
    assert api_versions_ok(gw.bootstrap)
    confluent_round_trip(gw.bootstrap, topic, f"health-{next(_counter)}".encode())


@FUZZ_SETTINGS
@given(data=st.binary(min_size=1, max_size=512))
def test_fuzz_random_bytes(shared_gateway, fuzz_topic, data):
    _blast(shared_gateway.bootstrap, data)
    _check_after_fuzz(shared_gateway, fuzz_topic)


@FUZZ_SETTINGS
@given(data=st.binary(min_size=0, max_size=512))
def test_fuzz_random_body_with_valid_size_prefix(shared_gateway, fuzz_topic, data):
    _blast(shared_gateway.bootstrap, frame(data))
    _check_after_fuzz(shared_gateway, fuzz_topic)


_KNOWN_REQUESTS = [
    (API_API_VERSIONS, 3, True),
    (API_METADATA, 12, True),
    (API_METADATA, 1, False),
    (API_PRODUCE, 9, True),
    (API_PRODUCE, 3, False),
    (API_FETCH, 12, True),
    (API_FETCH, 4, False),
    (API_LIST_OFFSETS, 7, True),
    (API_LIST_OFFSETS, 1, False),
    (19, 5, True),  # CreateTopics
    (20, 4, True),  # DeleteTopics
    (22, 4, True),  # InitProducerId
]


@FUZZ_SETTINGS
@given(
    request=st.sampled_from(_KNOWN_REQUESTS),
    body=st.binary(min_size=0, max_size=300),
)
def test_fuzz_valid_header_random_body(shared_gateway, fuzz_topic, request, body):
    api_key, version, flexible = request
    _blast(
        shared_gateway.bootstrap,
        frame(request_header(api_key, version, 5, flexible=flexible) + body),
    )
    _check_after_fuzz(shared_gateway, fuzz_topic)


def _valid_produce_payload(topic: str) -> bytes:
    batch = build_record_batch([Rec(b"value", b"key", [("h", b"v")]), Rec(None)])
    return encode_request(produce_request(topic, 0, batch), 99)[4:]


@FUZZ_SETTINGS
@given(
    mutations=st.lists(
        st.tuples(st.integers(min_value=0, max_value=10_000), st.integers(0, 255)),
        min_size=1,
        max_size=8,
    ),
    cut=st.one_of(st.none(), st.integers(min_value=1, max_value=10_000)),
)
def test_fuzz_mutated_produce_request(shared_gateway, fuzz_topic, mutations, cut):
    target = f"{fuzz_topic}-m"
    raw = bytearray(_valid_produce_payload(target))
    for index, byte in mutations:
        raw[index % len(raw)] = byte
    if cut is not None:
        raw = raw[: cut % len(raw)]
    _blast(shared_gateway.bootstrap, frame(bytes(raw)))
    _check_after_fuzz(shared_gateway, fuzz_topic)


@FUZZ_SETTINGS
@given(
    mutations=st.lists(
        st.tuples(st.integers(min_value=0, max_value=10_000), st.integers(0, 255)),
        min_size=1,
        max_size=6,
    ),
)
def test_fuzz_mutated_fetch_request(shared_gateway, fuzz_topic, mutations):
    raw = bytearray(encode_request(fetch_request(fuzz_topic, 0, 0, max_wait_ms=100), 3)[4:])
    for index, byte in mutations:
        raw[index % len(raw)] = byte
    _blast(shared_gateway.bootstrap, frame(bytes(raw)))
    _check_after_fuzz(shared_gateway, fuzz_topic)


def test_server_survived_everything(shared_gateway):
    """Runs last in this module: after all of the above the server is still usable."""
    assert_healthy(shared_gateway)
    confluent_round_trip(shared_gateway.bootstrap, unique_topic("final"), b"still here")


def test_retry_of_any_of_the_last_five_batches_gets_its_original_offset(shared_gateway, topic):
    """Kafka keeps five batches per producer and partition; so must we, across a restart."""
    create_topic(shared_gateway.bootstrap, topic)
    pid, epoch = _producer_id(shared_gateway.bootstrap)

    def batch(seq: int, value: bytes, producer_epoch: int = epoch) -> bytes:
        return build_record_batch(
            [Rec(value)], producer_id=pid, producer_epoch=producer_epoch, base_sequence=seq
        )

    for seq in range(6):
        p = produce_raw(shared_gateway.bootstrap, topic, batch(seq, b"v%d" % seq))
        assert (p.error_code, p.base_offset) == (ERR_NONE, seq)
    for seq in (1, 3, 5):  # batches 1..5 are remembered
        p = produce_raw(shared_gateway.bootstrap, topic, batch(seq, b"v%d" % seq))
        assert (p.error_code, p.base_offset) == (ERR_NONE, seq)
    # batch 0 fell out of the cache: it is neither a known duplicate nor the next sequence
    p = produce_raw(shared_gateway.bootstrap, topic, batch(0, b"v0"))
    assert p.error_code == ERR_OUT_OF_ORDER_SEQUENCE
    # an older epoch is fenced; a newer one starts again at sequence 0
    p = produce_raw(shared_gateway.bootstrap, topic, batch(6, b"old", epoch - 1))
    assert p.error_code == 47  # INVALID_PRODUCER_EPOCH
    p = produce_raw(shared_gateway.bootstrap, topic, batch(0, b"new", epoch + 1))
    assert (p.error_code, p.base_offset) == (ERR_NONE, 6)
