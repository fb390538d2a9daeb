"""The console in headless Chromium (Debian's /usr/bin/chromium driven by Playwright) against a
real gateway: the stream picture shows a split and a merge made through the scale route,
a group's lag falls to 0 as a real consumer catches up, and the nodes page of a three-node
cluster (PostgreSQL metadata) shows the three. Screenshots go to the test's tmp dir."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.confluent import create_topic
from support.nodes import gateway_args, pg_url, postgres, requires_postgres, running  # noqa: F401
from support.scaling import finish, run_producers

from harness.gateway import Gateway

CHROMIUM = "/usr/bin/chromium"
# a scaler that reacts in seconds (as in test_scaling.py); topics scale only by their policy
FAST_SCALER = ("--scaling-window-s", "1.5", "--scaling-interval-s", "0.25")
# consumer-protocol members settle in a second; share groups read from the start
GROUP_ARGS = (
    "--group-consumer-heartbeat-interval-ms",
    "300",
    "--share-auto-offset-reset",
    "earliest",
)
pytestmark = pytest.mark.skipif(
    not os.access(CHROMIUM, os.X_OK), reason=f"no Chromium at {CHROMIUM} (Debian's chromium)"
)


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url, json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=15) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def _get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=15) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    base = tmp_path_factory.mktemp("console")
    gw = Gateway(
        base / "data",
        base / "server.log",
        (*FAST_SCALER, *GROUP_ARGS),
        metrics=True,
        default_partitions=8,
    )
    gw.start_fresh()
    try:
        yield gw
    finally:
        gw.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


def _produce(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, key=str(i).encode(), value=b"v" * 64)
    assert producer.flush(30) == 0


def test_stream_picture_shows_split_and_merge(
    gateway: Gateway, browser: Any, tmp_path: Path
) -> None:
    topic = f"picture-{uuid.uuid4().hex[:6]}"
    _produce(gateway.bootstrap, topic, 200)
    base = gateway.admin_url
    first = _get(f"{base}/streams/{topic}")["segments"][0]["segment_id"]
    split = _post(f"{base}/streams/{topic}/scale", {"split": first, "parts": 2})
    halves = [s["segment_id"] for s in split["successors"]]
    _produce(gateway.bootstrap, topic, 200)
    time.sleep(1.5)  # the halves get a visible width in the picture
    merged = _post(f"{base}/streams/{topic}/scale", {"merge": halves})["successors"][0]

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{base}/#/topic/{topic}")
    page.wait_for_selector("#stream-picture rect.seg.open")
    bands = page.eval_on_selector_all(
        "#stream-picture rect.seg",
        "els => els.map(e => [Number(e.dataset.segmentId), e.dataset.state,"
        " Number(e.dataset.first), Number(e.dataset.last)])",
    )
    by_id = {band[0]: band for band in bands}
    assert by_id[first][1] == "sealed" and (by_id[first][2], by_id[first][3]) == (0, 7)
    assert [by_id[h][1] for h in halves] == ["sealed", "sealed"]
    assert sorted((by_id[h][2], by_id[h][3]) for h in halves) == [(0, 3), (4, 7)]
    assert by_id[merged["segment_id"]][1:] == ["open", 0, 7]
    events = "#stream-picture g.event"
    kinds = page.eval_on_selector_all(events, "els => els.map(e => e.dataset.kind)")
    assert kinds == ["split", "merge"]
    causes = page.eval_on_selector_all(f"{events} title", "els => els.map(e => e.textContent)")
    assert all("manual" in cause for cause in causes), causes
    page.screenshot(path=str(tmp_path / "stream-picture.png"), full_page=True)

    page.goto(f"{base}/#/topics")
    page.wait_for_selector(f'#topics tr[data-topic="{topic}"]')
    page.screenshot(path=str(tmp_path / "topics.png"), full_page=True)
    page.close()


def test_picture_follows_the_policy_live(gateway: Gateway, browser: Any, tmp_path: Path) -> None:
    """Load splits the stream and idleness merges it while the page is open: the picture
    updates by polling and tells the policy's cause."""
    topic = f"live-{uuid.uuid4().hex[:6]}"
    policy = {"streamgate.scaling.policy": "data-rate", "streamgate.scaling.target.rate": "4"}
    create_topic(gateway.bootstrap, topic, 8, policy)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(f"{gateway.admin_url}/#/topic/{topic}")
        page.wait_for_selector("#stream-picture rect.seg.open")
        producers, stop = run_producers(gateway.bootstrap, topic, 2, value_bytes=200, pause=0.005)
        try:
            page.wait_for_selector(
                '#stream-picture g.event[data-kind="split"]', state="attached", timeout=30_000
            )
        finally:
            finish(producers, stop)
        page.screenshot(path=str(tmp_path / "policy-split.png"), full_page=True)
        page.wait_for_selector(
            '#stream-picture g.event[data-kind="merge"]', state="attached", timeout=30_000
        )
        page.screenshot(path=str(tmp_path / "policy-merge.png"), full_page=True)
        causes = page.eval_on_selector_all(
            "#stream-picture g.event title", "els => els.map(e => e.textContent)"
        )
        assert causes and all("cause: policy: " in cause for cause in causes), causes
    finally:
        page.close()


def test_group_lag_falls_to_zero(gateway: Gateway, browser: Any, tmp_path: Path) -> None:
    from confluent_kafka import Consumer

    topic, group = f"lag-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    _produce(gateway.bootstrap, topic, 400)
    consumer = Consumer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        read = 0
        while read < 100:  # part of the topic, committed: lag stays
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                read += 1
        consumer.commit(asynchronous=False)
        page.goto(f"{gateway.admin_url}/#/group/{group}")
        page.wait_for_function(
            "() => Number(document.querySelector('#group-lag')?.dataset.lag) > 0", timeout=20_000
        )
        page.screenshot(path=str(tmp_path / "group-lagging.png"), full_page=True)
        while read < 400:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                read += 1
        consumer.commit(asynchronous=False)
        page.wait_for_function(
            "() => document.querySelector('#group-lag')?.dataset.lag === '0'", timeout=20_000
        )
        page.screenshot(path=str(tmp_path / "group-caught-up.png"), full_page=True)
        page.goto(f"{gateway.admin_url}/#/groups")
        page.wait_for_selector(f'#groups tr[data-group="{group}"]')
        page.screenshot(path=str(tmp_path / "groups.png"), full_page=True)
    finally:
        page.close()
        consumer.close()


def test_groups_page_shows_consumer_and_share_groups(
    gateway: Gateway, browser: Any, tmp_path: Path
) -> None:
    """A `group.protocol=consumer` member and a share consumer, both confluent-kafka: the
    list tells their types, the consumer group's page its member, assignment and lag, the
    share group's page its share-partition windows."""
    from confluent_kafka import Consumer
    from support.share import poll_records, share_consumer

    topic = f"kinds-{uuid.uuid4().hex[:6]}"
    consumer_group, share_group = f"cg-{uuid.uuid4().hex[:6]}", f"sg-{uuid.uuid4().hex[:6]}"
    create_topic(gateway.bootstrap, topic, 2)
    _produce(gateway.bootstrap, topic, 60)
    consumer = Consumer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "group.id": consumer_group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    sharer = share_consumer(gateway.bootstrap, share_group, topic)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        read = 0
        deadline = time.monotonic() + 30
        while read < 60 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                read += 1
        assert read == 60
        consumer.commit(asynchronous=False)
        shared = poll_records(sharer, lambda r: len(r) >= 60, timeout=30)
        assert len(shared) == 60
        sharer.commit_sync(15)

        page.goto(f"{gateway.admin_url}/#/groups")
        for group, kind in ((consumer_group, "consumer"), (share_group, "share")):
            page.wait_for_selector(f'#groups tr[data-group="{group}"][data-type="{kind}"]')
        page.screenshot(path=str(tmp_path / "group-kinds.png"), full_page=True)

        page.goto(f"{gateway.admin_url}/#/group/{consumer_group}")
        page.wait_for_function(
            "() => document.querySelector('#group-lag')?.dataset.lag === '0'"
            " && document.querySelectorAll('#offsets tbody tr').length === 2",
            timeout=20_000,
        )
        assert page.inner_text("#group-type") == "consumer"
        member = page.inner_text("#members tbody tr")
        assert f"{topic}: 0, 1" in member, member
        page.screenshot(path=str(tmp_path / "consumer-group.png"), full_page=True)

        page.goto(f"{gateway.admin_url}/#/group/{share_group}")
        page.wait_for_selector("#share-partitions tbody tr td.num")
        assert page.inner_text("#group-type") == "share"
        described = _get(f"{gateway.admin_url}/api/groups/{share_group}")
        windows = described["share_partitions"]
        assert sorted(w["partition"] for w in windows) == [0, 1]
        # everything acknowledged: each window closed up at the partition's end
        assert all(w["start"] == w["end"] == w["high_watermark"] for w in windows), windows
        assert sum(w["high_watermark"] for w in windows) == 60
        assert all(w["in_flight"] == 0 and w["lag"] == 0 for w in windows), windows
        assert len(described["members"]) == 1
        page.screenshot(path=str(tmp_path / "share-group.png"), full_page=True)
    finally:
        page.close()
        consumer.close()
        sharer.close()


@requires_postgres
def test_nodes_page_shows_three_nodes(
    tmp_path: Path,
    pg_url: str,  # noqa: F811
    browser: Any,
) -> None:
    """Three nodes with their leases; a move through POST /streams/TOPIC/move shows as a
    move on the giving node and as received on the taking one; a stopped node shows down."""
    from confluent_kafka.admin import AdminClient, NewTopic

    nodes = [
        Gateway(
            tmp_path / f"n{i}",
            tmp_path / f"n{i}.log",
            [*gateway_args(pg_url, i, multi_node=True), "--tier2", str(tmp_path / "t2")],
            metrics=True,
            env={"STREAMGATE_PLACEMENT": "least-loaded"},
        )
        for i in (1, 2, 3)
    ]
    with running(nodes):
        admin = AdminClient({"bootstrap.servers": nodes[0].bootstrap})
        topic = f"spread-{uuid.uuid4().hex[:6]}"
        for future in admin.create_topics([NewTopic(topic, 6)]).values():
            future.result(timeout=30)
        page = browser.new_page(viewport={"width": 1280, "height": 700})
        try:
            page.goto(f"{nodes[0].admin_url}/#/nodes")
            page.wait_for_function(
                "() => document.querySelectorAll('#nodes tr[data-node]').length === 3",
                timeout=30_000,
            )
            shown = page.eval_on_selector_all(
                "#nodes tr[data-node]", "els => els.map(e => Number(e.dataset.node))"
            )
            assert shown == [1, 2, 3]
            listed = _get(f"{nodes[0].admin_url}/api/nodes")["nodes"]
            assert all(n["live"] and n["incarnation"] >= 1 for n in listed), listed
            assert all(0 < n["lease_expires_in_s"] <= 3.5 for n in listed), listed
            assert "expires in" in page.inner_text("#nodes tr[data-node='2'] td.lease")

            segment, giver = _open_segment_and_owner(nodes[0].admin_url, topic)
            taker = 1 + giver % 3
            moved = _post(
                f"{nodes[giver - 1].admin_url}/streams/{topic}/move",
                {"segment": segment, "to_node": taker},
            )
            given = _get(f"{nodes[giver - 1].admin_url}/api/nodes/events")["events"]
            assert given[0]["kind"] == "move" and given[0]["topic"] == topic, given
            assert given[0]["segments"] == [segment] and given[0]["to_nodes"] == [taker]
            assert given[0]["successors"] == [s["segment_id"] for s in moved["successors"]]
            assert given[0]["from_node"] == giver and given[0]["cause"] == "requested"
            deadline = time.monotonic() + 15
            received: list[dict[str, Any]] = []
            while not received and time.monotonic() < deadline:
                events = _get(f"{nodes[taker - 1].admin_url}/api/nodes/events")["events"]
                received = [e for e in events if e["kind"] == "received" and e["topic"] == topic]
                time.sleep(0.2)
            assert received and received[0]["segments"] == given[0]["successors"], received

            page.goto(f"{nodes[giver - 1].admin_url}/#/nodes")
            page.wait_for_selector(f'#node-events tr[data-kind="move"][data-topic="{topic}"]')
            led = {
                n["node_id"]: n["segments"]
                for n in _get(f"{nodes[0].admin_url}/api/nodes")["nodes"]
            }
            assert f"{topic}/{segment}" not in led[giver], led  # sealed: led by nobody now
            nodes[2].stop()
            page.wait_for_selector("#nodes tr[data-node='3'][data-live='false']", timeout=20_000)
            page.screenshot(path=str(tmp_path / "nodes.png"), full_page=True)
        finally:
            page.close()


def _open_segment_and_owner(admin_url: str, topic: str) -> tuple[int, int]:
    """An open segment of `topic` and its node, once node 1 has synced the topic."""
    deadline = time.monotonic() + 15
    while True:
        try:
            described = _get(f"{admin_url}/streams/{topic}")
            return next(
                (s["segment_id"], s["node"])
                for s in described["segments"]
                if s["state"] == "open" and s["node"] is not None
            )
        except (urllib.error.HTTPError, StopIteration):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_gateway_page_shows_open_transaction(
    gateway: Gateway, browser: Any, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    topic, txn_id = f"txn-{uuid.uuid4().hex[:6]}", f"tx-{uuid.uuid4().hex[:6]}"
    _produce(gateway.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"in a transaction")
    assert producer.flush(30) == 0
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(f"{gateway.admin_url}/#/gateway")
        row = f'#transactions tr[data-open="true"]:has-text("{txn_id}")'
        page.wait_for_selector(row, timeout=20_000)
        assert "Ongoing" in page.inner_text(row)
        page.screenshot(path=str(tmp_path / "gateway.png"), full_page=True)
        producer.commit_transaction(30)
        page.wait_for_selector(f'#transactions tr[data-open="false"]:has-text("{txn_id}")')
    finally:
        page.close()


def test_gateway_page_shows_mqtt_bridge_counters(browser: Any, tmp_path: Path) -> None:
    """A real bridge (mosquitto, paho devices) whose /metrics the gateway is told about:
    the console shows its counters, and a bridge that stops answering shows down."""
    from support.bridge import Fleet, wait_metric

    from harness.bridge import MqttBridge
    from harness.mosquitto import Mosquitto, unavailable_reason

    if unavailable_reason():
        pytest.skip(unavailable_reason() or "")
    broker = Mosquitto(tmp_path / "mosquitto")
    broker.start()
    topic = f"mqtt-{uuid.uuid4().hex[:6]}"
    bridge = MqttBridge(tmp_path, [])  # its metrics port is known before it starts
    metrics_url = f"http://127.0.0.1:{bridge.metrics_port}/metrics"
    gw = Gateway(
        tmp_path / "data",
        tmp_path / "server.log",
        ["--console-bridge-metrics", metrics_url],
        metrics=True,
        default_partitions=2,
    )
    fleet = None
    try:
        gw.start_fresh()
        bridge.args = [
            *("--mqtt", broker.url, "--gateway", gw.bootstrap),
            *("--map", f"plant/+/sensors/#={topic}", "--key-level", "2"),
            *("--client-id", f"bridge-{uuid.uuid4().hex[:8]}"),
            *("--spool-dir", str(tmp_path / "spool")),
        ]
        bridge.start(timeout=30)
        fleet = Fleet(broker, devices=5)
        sent = fleet.publish_round(per_device=4)
        wait_metric(bridge, "forwarded", lambda v: v >= sent, timeout=30)

        answer = _get(f"{gw.admin_url}/api/bridges")["bridges"]
        assert len(answer) == 1 and answer[0]["up"], answer
        assert answer[0]["counters"]["received"] >= sent
        assert answer[0]["counters"]["forwarded"] >= sent
        assert answer[0]["gauges"]["mqtt_connected"] == 1
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        try:
            page.goto(f"{gw.admin_url}/#/gateway")
            row = '.bridge-counters tr[data-counter="forwarded"] td.num'
            page.wait_for_selector(row)
            assert int(page.inner_text(row)) >= sent
            page.screenshot(path=str(tmp_path / "bridge.png"), full_page=True)
            bridge.stop()
            page.wait_for_selector('dl.bridge[data-up="false"]', timeout=20_000)
            assert "not answering" in page.inner_text('dl.bridge[data-up="false"]')
            page.screenshot(path=str(tmp_path / "bridge-down.png"), full_page=True)
        finally:
            page.close()
    finally:
        if fleet is not None:
            fleet.close()
        bridge.close()
        gw.close()
        broker.close()
