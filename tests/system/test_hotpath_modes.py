"""A gateway with the compiled hot path and one with STREAMGATE_PURE_PYTHON=1, each serving
confluent-kafka's producer (several batches per request, acks=all) and consumer; each says
in its startup log which form it runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from support.confluent import confluent_consumer, create_topic

import hotpath
from harness.gateway import Gateway
from hotpath.build import built_files

_COUNT = 600


def _round_trip(gw: Gateway, topic: str) -> None:
    create_topic(gw.bootstrap, topic, 3)
    producer = Producer(
        {"bootstrap.servers": gw.bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 4096}
    )
    sent = [f"{i:05d}".encode() * 20 for i in range(_COUNT)]  # 100-byte records
    for i, value in enumerate(sent):
        producer.produce(topic, value, key=str(i).encode(), partition=i % 3)
    assert producer.flush(30) == 0
    consumer = confluent_consumer(gw.bootstrap, **{"auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    got: list[bytes] = []
    try:
        for _ in range(200):
            for message in consumer.consume(200, timeout=1.0):
                assert message.error() is None, message.error()
                got.append(message.value())
            if len(got) >= _COUNT:
                break
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent)


@pytest.mark.parametrize("pure", [False, True], ids=["default", "pure"])
def test_both_modes_serve_real_clients(tmp_path: Path, pure: bool) -> None:
    env = {hotpath.PURE_PYTHON_ENV: "1" if pure else "0"}
    gw = Gateway(tmp_path / "data", tmp_path / "server.log", env=env)
    gw.start_fresh()
    try:
        _round_trip(gw, f"hotpath-{'pure' if pure else 'default'}")
        log = gw.log_since_start().decode(errors="replace")
    finally:
        gw.close()
    line = next(line for line in log.splitlines() if "hot path" in line)
    if pure:
        assert "hot path pure Python" in line and "STREAMGATE_PURE_PYTHON set" in line, line
    elif len(built_files()) == len(hotpath.MODULES) + 1 and not hotpath.stale_modules():
        assert "hot path compiled" in line, line
    else:
        assert "hot path pure Python" in line, line
    assert "kafkawire.produce_request" in line, line
