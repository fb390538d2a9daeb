"""Scale events against a real gateway with real clients.

Concurrent confluent-kafka producers write per-key sequence numbers to a 16-partition topic
while segments are split and merged by hand (admin HTTP endpoint, CLI) and by the data-rate
policy; a consumer long-polls throughout. Afterwards every partition is read back: dense
offsets, per-key order, nothing missing or doubled, no produce error. Restarts between
scale events and crashes inside one (STREAMGATE_TEST_CRASH_AT) keep every acked record.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from conftest import Gateway
from support.client import wait_until
from support.confluent import create_topic
from support.scaling import (
    METRICS_ARGS,
    admin_url,
    check_complete,
    describe,
    finish,
    http,
    open_segments,
    read_all,
    run_producers,
    scale,
)

from core.segments.log import parse_log_file_name
from harness.gateway import REPO_ROOT

PARTITIONS = 16
FAST_SCALER = ("--scaling-window-s", "1.5", "--scaling-interval-s", "0.25")


class LongPollConsumer(threading.Thread):
    """Consumes every partition from the start with long polls until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.count = 0
        self.errors: list[str] = []
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"live-{topic}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 500,
            }
        )
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])

    def run(self) -> None:
        while not self.stop.is_set():
            msg = self.consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                self.errors.append(str(msg.error()))
            else:
                self.count += 1
        self.consumer.close()


def _cli(gateway: Gateway, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "streams", *args, "--admin", admin_url(gateway)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.gateway_args(*METRICS_ARGS)
def test_manual_split_split_merge_under_load(gateway, topic) -> None:
    create_topic(gateway.bootstrap, topic, PARTITIONS, {})
    live = LongPollConsumer(gateway.bootstrap, topic)
    live.start()
    producers, stop = run_producers(gateway.bootstrap, topic, 4)
    time.sleep(1.0)
    first = scale(gateway, topic, {"split": 0, "parts": 2})
    assert [(s["first_partition"], s["last_partition"]) for s in first["successors"]] == [
        (0, 7),
        (8, 15),
    ]
    time.sleep(0.7)
    left, right = (s["segment_id"] for s in first["successors"])
    done = _cli(gateway, "scale", topic, "--split", str(left), "--parts", "4")
    assert done.returncode == 0, done.stderr
    assert "split: epoch 2" in done.stdout
    time.sleep(0.7)
    ids = [s["segment_id"] for s in open_segments(gateway, topic)]
    assert len(ids) == 5 and right in ids
    merged = scale(gateway, topic, {"merge": [ids[2], ids[3]]})
    assert merged["kind"] == "merge" and merged["epoch"] == 3
    refused = http(gateway, f"/streams/{topic}/scale", {"merge": [ids[0], ids[3]]})
    assert refused[0] == 400, refused
    time.sleep(0.7)
    sent = finish(producers, stop)
    acked = {k: v for p in producers for k, v in p.acked.items()}
    wait_until(lambda: live.count >= len(acked), timeout=30)
    live.stop.set()
    live.join(10)
    assert not live.errors and live.count == len(acked)

    records, ends = read_all(gateway.bootstrap, topic, PARTITIONS)
    check_complete(records, ends, sent, acked)
    body = describe(gateway, topic)
    assert body["epoch"] == 3 and body["open_segments"] == 4
    assert body["scale_events"] == {"split": 2, "merge": 1}
    assert sum(s["records_in"] for s in body["segments"]) == len(acked)
    table = _cli(gateway, "describe", topic)
    assert table.returncode == 0 and "sealed" in table.stdout and "EPOCH" in table.stdout
    status, metrics = http(gateway, "/metrics")
    assert status == 200
    assert f'streamgate_stream_open_segments{{topic="{topic}"}} 4.0' in metrics
    assert f'streamgate_scale_events_total{{kind="split",topic="{topic}"}} 2.0' in metrics
    assert "streamgate_segment_bytes_out_total" in metrics


@pytest.mark.gateway_args(*METRICS_ARGS, *FAST_SCALER)
def test_policy_splits_under_load_and_merges_when_idle(gateway, topic) -> None:
    create_topic(gateway.bootstrap, topic, PARTITIONS, {"streamgate.scaling.policy": "fixed"})
    producers, stop = run_producers(gateway.bootstrap, topic, 2, value_bytes=200, pause=0.005)
    time.sleep(2.0)
    assert len(open_segments(gateway, topic)) == 1, "fixed policy must not scale"
    # The scaler reads the policy from the topic's configs at each evaluation.
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(
                "streamgate.scaling.policy",
                "data-rate",
                incremental_operation=AlterConfigOpType.SET,
            ),
            ConfigEntry(
                "streamgate.scaling.target.rate", "4", incremental_operation=AlterConfigOpType.SET
            ),
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=10)
    wait_until(lambda: len(open_segments(gateway, topic)) >= 4, timeout=20, interval=0.2)
    sent_before = finish(producers, stop)
    wait_until(lambda: len(open_segments(gateway, topic)) == 1, timeout=20, interval=0.2)
    body = describe(gateway, topic)
    assert body["scale_events"]["split"] >= 2 and body["scale_events"]["merge"] >= 1
    assert "policy: rate" in gateway.log_text() and "policy: combined rate" in gateway.log_text()
    records, ends = read_all(gateway.bootstrap, topic, PARTITIONS)
    acked = {k: v for p in producers for k, v in p.acked.items()}
    check_complete(records, ends, sent_before, acked)


@pytest.mark.gateway_args(*METRICS_ARGS)
def test_restart_between_scale_events(gateway, topic) -> None:
    create_topic(gateway.bootstrap, topic, PARTITIONS, {})
    all_acked: dict = {}
    sent: dict[str, int] = {}
    steps = [
        {"split": 0, "parts": 4},
        {"split": 2, "parts": 2},
        {"merge": [3, 4]},
    ]
    for round_, step in enumerate([*steps, None]):
        producers, stop = run_producers(
            gateway.bootstrap, topic, 2, prefix=f"r{round_}-", limit=400
        )
        time.sleep(0.3)
        if step is not None:
            scale(gateway, topic, step)
        for producer in producers:
            producer.join(60)
        sent.update(finish(producers, stop))
        for producer in producers:
            all_acked.update(producer.acked)
        gateway.restart()
    body = describe(gateway, topic)
    assert body["epoch"] == 3
    ranges = [
        (s["first_partition"], s["last_partition"])
        for s in body["segments"]
        if s["state"] == "open"
    ]
    assert ranges == [(0, 3), (4, 5), (6, 7), (8, 15)]
    records, ends = read_all(gateway.bootstrap, topic, PARTITIONS)
    check_complete(records, ends, sent, all_acked)


@pytest.mark.parametrize("point", ["scale-before-commit", "scale-after-commit"])
def test_crash_inside_scale_event(tmp_path: Path, topic: str, point: str) -> None:
    class CrashingGateway(Gateway):
        crash_at: str | None = point

        def env(self) -> dict[str, str]:
            env = super().env()
            if self.crash_at:
                env["STREAMGATE_TEST_CRASH_AT"] = self.crash_at
            return env

    gateway = CrashingGateway(tmp_path / "data", tmp_path / "server.log", METRICS_ARGS)
    gateway.start_fresh()
    try:
        create_topic(gateway.bootstrap, topic, PARTITIONS, {})
        producers, stop = run_producers(gateway.bootstrap, topic, 2, limit=800)
        for producer in producers:
            producer.join(60)
        sent = finish(producers, stop)
        acked = {k: v for p in producers for k, v in p.acked.items()}
        with pytest.raises(OSError):
            http(gateway, f"/streams/{topic}/scale", {"split": 0, "parts": 2})
        assert gateway.proc is not None and gateway.proc.wait(10) == 137
        gateway.crash_at = None
        gateway.start()
        body = describe(gateway, topic)
        files = os.listdir(next((tmp_path / "data" / "streams").iterdir()))
        # (the folder also holds the local log's marker file, which is no log file)
        segment_ids = {parsed[0] for name in files if (parsed := parse_log_file_name(name))}
        if point == "scale-before-commit":
            assert body["epoch"] == 0 and body["open_segments"] == 1
            assert segment_ids == {0}, "uncommitted successor files are removed"
        else:
            assert body["epoch"] == 1 and body["open_segments"] == 2
            assert 0 in segment_ids and segment_ids <= {0, 1, 2}
        records, ends = read_all(gateway.bootstrap, topic, PARTITIONS)
        check_complete(records, ends, sent, acked)
        # The stream goes on: more records after the recovered (or not) scale event.
        more, stop = run_producers(gateway.bootstrap, topic, 1, prefix="after-", limit=100)
        more[0].join(60)
        sent.update(finish(more, stop))
        records, ends = read_all(gateway.bootstrap, topic, PARTITIONS)
        check_complete(records, ends, sent)
    finally:
        gateway.close()
