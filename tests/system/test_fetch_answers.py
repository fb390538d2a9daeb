"""Fetch answers, whichever way the gateway builds them: at once when the batches are at hand
(small answers joined into one buffer, larger ones sent in pieces), or after a long poll that
a later Produce wakes, also when that Produce lands right after the Fetch was read."""

from __future__ import annotations

import time

from support.client import (
    RawClient,
    Rec,
    build_record_batch,
    decode_records,
    fetch_request,
    produce_request,
)

LONG_POLL_MS = 30_000


def _produce(client: RawClient, topic: str, values: list[bytes]) -> int:
    response = client.request(
        produce_request(topic, 0, build_record_batch([Rec(v) for v in values]))
    )
    part = response.responses[0].partition_responses[0]
    assert part.error_code == 0
    return int(part.base_offset)


def _values(fetched: object) -> list[bytes | None]:
    partition = fetched.responses[0].partitions[0]  # type: ignore[attr-defined]
    assert partition.error_code == 0
    return [value for _, _, value in decode_records(partition.records)]


def test_recent_batches_answered_small_and_large(shared_gateway, topic):
    """A small answer (joined) and one past the joining threshold (pieces) carry every byte."""
    small = [f"s{i}".encode() for i in range(5)]
    large = [bytes([i]) * 9000 for i in range(3)]  # about 27 KB in one answer
    with RawClient(shared_gateway.bootstrap) as client:
        _produce(client, topic, small)
        base = _produce(client, topic, large)
        assert _values(client.request(fetch_request(topic, 0, 0, max_wait_ms=0))) == small + large
        assert _values(client.request(fetch_request(topic, 0, base, max_wait_ms=0))) == large


def test_caught_up_fetch_answers_empty_at_once(shared_gateway, topic):
    with RawClient(shared_gateway.bootstrap) as client:
        end = _produce(client, topic, [b"x"]) + 1
        for _ in range(3):  # the same connection goes on working after empty answers
            fetched = client.request(fetch_request(topic, 0, end, max_wait_ms=0))
            assert _values(fetched) == []
            assert fetched.responses[0].partitions[0].high_watermark == end


def test_long_poll_woken_by_a_produce(shared_gateway, topic):
    """A Fetch parked at the tail answers with the record a Produce on another connection
    appends, long before its max wait."""
    with RawClient(shared_gateway.bootstrap) as reader, RawClient(shared_gateway.bootstrap) as w:
        end = _produce(w, topic, [b"first"]) + 1
        request = fetch_request(topic, 0, end, max_wait_ms=LONG_POLL_MS)
        started = time.monotonic()
        correlation = reader.send(request)
        reader.wait_request_taken()
        _produce(w, topic, [b"second"])
        assert _values(reader.receive(request, correlation)) == [b"second"]
        assert time.monotonic() - started < LONG_POLL_MS / 2000  # woken, not timed out


def test_produce_right_behind_a_parked_fetch(shared_gateway, topic):
    """The Produce is sent with no pause after the Fetch: whenever it lands, the parked Fetch
    is woken (its waiters are in place from the moment it was read)."""
    with RawClient(shared_gateway.bootstrap) as reader, RawClient(shared_gateway.bootstrap) as w:
        end = _produce(w, topic, [b"first"]) + 1
        for i in range(20):
            request = fetch_request(topic, 0, end + i, max_wait_ms=LONG_POLL_MS)
            started = time.monotonic()
            correlation = reader.send(request)
            _produce(w, topic, [f"v{i}".encode()])
            assert _values(reader.receive(request, correlation)) == [f"v{i}".encode()]
            assert time.monotonic() - started < LONG_POLL_MS / 2000


def test_a_fetch_pipelined_behind_a_long_poll_sees_what_woke_it(shared_gateway, topic):
    """A caught-up Fetch sent right behind a parked long poll on the same connection is
    answered after it, and starts only once it settled: both carry the record that woke
    the first (requests on one connection take effect in order)."""
    with RawClient(shared_gateway.bootstrap) as reader, RawClient(shared_gateway.bootstrap) as w:
        end = _produce(w, topic, [b"first"]) + 1
        poll = fetch_request(topic, 0, end, max_wait_ms=LONG_POLL_MS)
        at_once = fetch_request(topic, 0, end, max_wait_ms=0)
        first = reader.send(poll)
        second = reader.send(at_once)
        reader.wait_request_taken()
        _produce(w, topic, [b"second"])
        assert _values(reader.receive(poll, first)) == [b"second"]
        assert _values(reader.receive(at_once, second)) == [b"second"]


def test_clients_gone_with_long_polls_in_flight_leave_the_partition_working(shared_gateway, topic):
    """Connections closed with a long poll waiting and another queued behind it: the
    gateway drops both (the queued one never started) and goes on waking new long polls."""
    with RawClient(shared_gateway.bootstrap) as reader, RawClient(shared_gateway.bootstrap) as w:
        end = _produce(w, topic, [b"first"]) + 1
        for _ in range(3):
            gone = RawClient(shared_gateway.bootstrap)
            for _ in range(2):
                gone.send(fetch_request(topic, 0, end, max_wait_ms=LONG_POLL_MS))
            gone.wait_request_taken()
            gone.close()
        request = fetch_request(topic, 0, end, max_wait_ms=LONG_POLL_MS)
        correlation = reader.send(request)
        reader.wait_request_taken()
        _produce(w, topic, [b"second"])
        assert _values(reader.receive(request, correlation)) == [b"second"]


def test_a_long_poll_queued_behind_an_unread_answer_is_dropped_cleanly(shared_gateway, topic):
    """A client asks for megabytes, reads none of it, sends a long poll and goes away: the
    long poll was queued behind the answer the gateway could not send, never started; it
    is closed with the connection (no coroutine left unawaited) and the partition goes on
    waking long polls."""
    chunk = [b"z" * 1_000_000]
    with RawClient(shared_gateway.bootstrap) as w:
        for _ in range(12):  # more than the two socket buffers hold
            end = _produce(w, topic, chunk) + 1
        gone = RawClient(shared_gateway.bootstrap)
        gone.send(fetch_request(topic, 0, 0, max_wait_ms=0, partition_max_bytes=64 << 20))
        gone.send(fetch_request(topic, 0, end, max_wait_ms=LONG_POLL_MS))
        time.sleep(0.5)  # the first answer fills the buffers; the long poll is read
        gone.close()
        with RawClient(shared_gateway.bootstrap) as reader:
            request = fetch_request(topic, 0, end, max_wait_ms=LONG_POLL_MS)
            correlation = reader.send(request)
            reader.wait_request_taken()
            _produce(w, topic, [b"after"])
            assert _values(reader.receive(request, correlation)) == [b"after"]
    assert "never awaited" not in shared_gateway.log_text()
