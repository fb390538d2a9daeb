"""Round trips through the gateway with the kcat command line tool (librdkafka)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest
from support.client import DEFAULT_PARTITIONS, unique_topic

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat is not installed")

FORMAT = "%k %s %o %p\\n"


def kcat(*args: str, stdin: str | None = None, timeout: float = 60.0) -> str:
    cmd = [KCAT, *args]
    proc = subprocess.run(
        cmd, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    return proc.stdout


def produce(bootstrap: str, topic: str, lines: list[str], *extra: str) -> None:
    kcat("-P", "-b", bootstrap, "-t", topic, *extra, stdin="".join(f"{line}\n" for line in lines))


def consume(bootstrap: str, topic: str, *extra: str, fmt: str = FORMAT) -> list[str]:
    out = kcat("-C", "-b", bootstrap, "-t", topic, "-e", "-q", "-f", fmt, *extra)
    return out.splitlines()


def test_metadata_list(shared_gateway, topic):
    produce(shared_gateway.bootstrap, topic, ["hello"])
    listing = json.loads(kcat("-L", "-J", "-b", shared_gateway.bootstrap))
    assert [b["name"] for b in listing["brokers"]] == [shared_gateway.bootstrap]
    topics = {t["topic"]: t for t in listing["topics"]}
    assert topic in topics
    parts = topics[topic]["partitions"]
    assert sorted(p["partition"] for p in parts) == list(range(DEFAULT_PARTITIONS))
    broker_id = listing["brokers"][0]["id"]
    assert all(p["leader"] == broker_id for p in parts)

    text = kcat("-L", "-b", shared_gateway.bootstrap, "-t", topic)
    assert f'topic "{topic}" with {DEFAULT_PARTITIONS} partitions:' in text


def test_auto_create_and_keyed_produce_consume(shared_gateway, topic):
    produce(shared_gateway.bootstrap, topic, ["k1:v1", "k2:v2", "k1:v3"], "-K:", "-p", "1")
    assert consume(shared_gateway.bootstrap, topic, "-o", "beginning") == [
        "k1 v1 0 1",
        "k2 v2 1 1",
        "k1 v3 2 1",
    ]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compression(shared_gateway, codec):
    topic = unique_topic(f"kcat-{codec}")
    lines = [f"key{i % 4}:value-{i}-{'x' * (i % 17)}" for i in range(100)]
    extra = [] if codec == "none" else ["-z", codec]
    produce(shared_gateway.bootstrap, topic, lines, "-K:", "-p", "0", *extra)
    expected = [f"{line.replace(':', ' ', 1)} {i} 0" for i, line in enumerate(lines)]
    assert consume(shared_gateway.bootstrap, topic, "-p", "0", "-o", "beginning") == expected


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(shared_gateway, acks):
    topic = unique_topic(f"kcat-acks-{acks}")
    produce(shared_gateway.bootstrap, topic, ["a", "b", "c"], "-p", "2", "-X", f"acks={acks}")
    assert consume(
        shared_gateway.bootstrap, topic, "-p", "2", "-o", "beginning", fmt="%s@%o\\n"
    ) == [
        "a@0",
        "b@1",
        "c@2",
    ]


def test_consume_from_offset(shared_gateway, topic):
    produce(shared_gateway.bootstrap, topic, [f"m{i}" for i in range(8)], "-p", "0")
    out = consume(shared_gateway.bootstrap, topic, "-p", "0", "-o", "5", fmt="%s %o\\n")
    assert out == ["m5 5", "m6 6", "m7 7"]
    # relative offset from the end
    out = consume(shared_gateway.bootstrap, topic, "-p", "0", "-o", "-2", fmt="%s %o\\n")
    assert out == ["m6 6", "m7 7"]


def test_headers(shared_gateway, topic):
    produce(
        shared_gateway.bootstrap,
        topic,
        ["one", "two"],
        "-p",
        "0",
        "-H",
        "trace=abc",
        "-H",
        "empty=",
        "-H",
        "trace=second",
    )
    out = consume(shared_gateway.bootstrap, topic, "-p", "0", "-o", "beginning", fmt="%s|%h\\n")
    assert out == [
        "one|trace=abc,empty=,trace=second",
        "two|trace=abc,empty=,trace=second",
    ]


def test_all_partitions_and_keys(shared_gateway, topic):
    lines = [f"user{i % 9}:{i}" for i in range(90)]
    produce(shared_gateway.bootstrap, topic, lines, "-K:")
    out = consume(shared_gateway.bootstrap, topic, "-o", "beginning")
    rows = [line.split(" ") for line in out]
    assert sorted(int(v) for _k, v, _o, _p in rows) == list(range(90))
    key_parts: dict[str, set[str]] = {}
    offsets: dict[str, list[int]] = {}
    for key, value, offset, part in rows:
        key_parts.setdefault(key, set()).add(part)
        offsets.setdefault(part, []).append(int(offset))
        assert value.isdigit()
    assert all(len(p) == 1 for p in key_parts.values()), key_parts
    for part, offs in offsets.items():
        assert offs == list(range(len(offs))), part


def test_query_offset_by_timestamp(shared_gateway, topic):
    base = int(time.time() * 1000) - 10_000
    # kcat cannot set per-message timestamps on the command line, so produce twice
    # with a pause and use the consumed timestamps as reference points.
    produce(shared_gateway.bootstrap, topic, ["a", "b"], "-p", "0")
    time.sleep(0.05)
    produce(shared_gateway.bootstrap, topic, ["c"], "-p", "0")
    rows = consume(shared_gateway.bootstrap, topic, "-p", "0", "-o", "beginning", fmt="%s %T\\n")
    stamps = {v: int(ts) for v, ts in (r.split() for r in rows)}
    assert sorted(stamps) == ["a", "b", "c"]
    assert all(ts > base for ts in stamps.values())
    assert stamps["c"] > stamps["b"]

    def query(ts: int) -> str:
        return kcat("-Q", "-b", shared_gateway.bootstrap, "-t", f"{topic}:0:{ts}").strip()

    assert query(base) == f"{topic} [0] offset 0"
    assert query(stamps["b"] + 1) == f"{topic} [0] offset 2"
    assert query(stamps["c"]) == f"{topic} [0] offset 2"
    assert query(stamps["c"] + 60_000) == f"{topic} [0] offset -1"
