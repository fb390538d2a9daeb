"""Client quotas: kafka-configs.sh sets them (AlterClientQuotas), DescribeClientQuotas lists
them, producers and consumers over a byte rate get `throttle_time_ms` and are slowed to it;
--max-connections-per-ip refuses the connection over the limit."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from support.acl import ADMIN, PrincipalClient, acl_gateway, client_config, java_properties
from support.client import (
    RawClient,
    Rec,
    api_versions_ok,
    api_versions_request,
    build_record_batch,
    connection_closed,
    open_socket,
    wait_until,
)

from harness.gateway import Gateway
from harness.kafka import run_tool, unavailable_reason

# Short quota windows (Kafka's quota.window.num / quota.window.size.seconds) so a test
# reaches the steady state in seconds.
WINDOWS = ["--quota-window-num", "3", "--quota-window-size-seconds", "1"]
INVALID_REQUEST = 42


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Gateway]:
    gateway = Gateway(tmp_path / "data", tmp_path / "server.log", WINDOWS, default_partitions=1)
    gateway.start_fresh()
    yield gateway
    gateway.close()


def alter(client: PrincipalClient, entity: dict[str, str | None], **ops: float | None) -> Any:
    return client.call(
        49,
        1,
        {
            "entries": [
                {
                    "entity": [{"entity_type": k, "entity_name": v} for k, v in entity.items()],
                    "ops": [
                        {"key": k, "value": v or 0.0, "remove": v is None} for k, v in ops.items()
                    ],
                }
            ],
            "validate_only": False,
        },
    )


def describe(client: PrincipalClient, entity_type: str, name: str | None) -> dict[str, float]:
    match_type = 1 if name is None else 0
    response = client.call(
        48,
        1,
        {
            "components": [{"entity_type": entity_type, "match_type": match_type, "match": name}],
            "strict": True,
        },
    )
    assert int(response.error_code) == 0, response.error_message
    return {v.key: v.value for e in (response.entries or ()) for v in e.values}


def produce_batch(client: PrincipalClient, topic: str, size: int) -> Any:
    batch = build_record_batch([Rec(b"k", os.urandom(size))])
    response = client.call(
        0,
        9,
        {
            "acks": 1,
            "timeout": 10_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
        },
    )
    (topic_response,) = response.responses
    assert int(topic_response.partition_responses[0].error_code) == 0
    return response


@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
def test_kafka_configs_sets_user_and_client_quotas(gw: Gateway, tmp_path: Path) -> None:
    props = java_properties(ADMIN, tmp_path / "admin.properties")
    base = ["--bootstrap-server", gw.bootstrap, "--command-config", str(props), "--alter"]
    for args in (
        [
            "--add-config",
            "producer_byte_rate=1024",
            "--entity-type",
            "users",
            "--entity-name",
            "alice",
        ],
        [
            "--add-config",
            "consumer_byte_rate=2048,producer_byte_rate=4096",
            "--entity-type",
            "clients",
            "--entity-default",
        ],
    ):
        out = run_tool("kafka-configs.sh", base + args, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
    with PrincipalClient(gw.bootstrap, ADMIN) as client:
        assert describe(client, "user", "alice") == {"producer_byte_rate": 1024.0}
        assert describe(client, "client-id", None) == {
            "consumer_byte_rate": 2048.0,
            "producer_byte_rate": 4096.0,
        }
    out = run_tool(
        "kafka-configs.sh",
        base
        + [
            "--delete-config",
            "producer_byte_rate",
            "--entity-type",
            "users",
            "--entity-name",
            "alice",
        ],
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    out = run_tool(
        "kafka-configs.sh",
        [
            "--bootstrap-server",
            gw.bootstrap,
            "--command-config",
            str(props),
            "--describe",
            "--entity-type",
            "clients",
            "--entity-default",
        ],
        timeout=120,
    )
    assert "producer_byte_rate=4096.0" in out.stdout, out.stdout + out.stderr
    gw.restart()  # stored in SQLite
    with PrincipalClient(gw.bootstrap, ADMIN) as client:
        assert describe(client, "user", "alice") == {}
        assert describe(client, "client-id", None)["consumer_byte_rate"] == 2048.0


def test_bad_quota_requests(gw: Gateway) -> None:
    with PrincipalClient(gw.bootstrap, ADMIN) as client:
        for entity, ops in (
            ({"user": "a"}, {"no_such_quota": 1.0}),
            ({"ip": "10.0.0.1"}, {"connection_creation_rate": 1.0}),
            ({"user": "a"}, {"producer_byte_rate": -5.0}),
        ):
            (entry,) = alter(client, entity, **ops).entries
            assert int(entry.error_code) == INVALID_REQUEST and entry.error_message
        response = client.call(
            48,
            1,
            {
                "components": [{"entity_type": "nonsense", "match_type": 0, "match": "x"}],
                "strict": False,
            },
        )
        assert int(response.error_code) == INVALID_REQUEST


def test_producer_throttled_to_its_quota(gw: Gateway) -> None:
    """A confluent-kafka producer over producer_byte_rate: throttled (librdkafka reports the
    broker's throttle_time_ms) and its measured rate comes down to about the quota."""
    quota = 100_000
    with PrincipalClient(gw.bootstrap, ADMIN) as client:
        (entry,) = alter(client, {"client-id": "quota-app"}, producer_byte_rate=quota).entries
        assert int(entry.error_code) == 0
    throttles: list[int] = []
    producer = Producer(
        client_config(
            "quota-app",
            gw.bootstrap,
            **{
                "linger.ms": 5,
                "batch.size": 16384,
                "throttle_cb": lambda e: throttles.append(int(e.throttle_time * 1000)),
            },
        )
    )
    value = os.urandom(10_000)
    total = 60 * len(value)
    start = time.monotonic()
    for _ in range(60):
        producer.produce("quota-topic", value)
        producer.poll(0)
    assert producer.flush(120) == 0
    elapsed = time.monotonic() - start
    producer.poll(0.5)
    rate = total / elapsed
    print(
        f"producer quota {quota} B/s: measured {rate:.0f} B/s over {elapsed:.1f} s, "
        f"{len(throttles)} throttle reports, max {max(throttles, default=0)} ms"
    )
    assert throttles and max(throttles) > 0
    # Throttling can only make it slower: an upper bound holds on any machine. Unthrottled,
    # 600 KB takes well under a second here.
    assert rate < 2 * quota


def test_throttle_time_in_produce_and_fetch_responses(gw: Gateway) -> None:
    with PrincipalClient(gw.bootstrap, ADMIN) as admin:
        alter(admin, {"client-id": "slow"}, producer_byte_rate=5000, consumer_byte_rate=5000)
    with (
        PrincipalClient(gw.bootstrap, "slow") as slow,
        PrincipalClient(gw.bootstrap, "fast") as fast,
    ):
        throttled = [produce_batch(slow, "q", 20_000).throttle_time for _ in range(2)]
        assert throttled[-1].total_seconds() > 0
        assert produce_batch(fast, "q", 20_000).throttle_time.total_seconds() == 0
        fetch = {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "topics": [
                {
                    "topic": "q",
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
        }
        first = slow.call(1, 12, fetch)
        assert first.responses[0].partitions[0].records  # data came back
        second = slow.call(1, 12, fetch)  # 60 KB fetched against 5 KB/s
        assert second.throttle_time.total_seconds() > 0
        assert fast.call(1, 12, fetch).throttle_time.total_seconds() == 0


def test_user_quota_follows_the_principal(tmp_path: Path) -> None:
    gateway = acl_gateway(tmp_path, *WINDOWS, allow_if_no_acl=True)
    gateway.start_fresh()
    try:
        with PrincipalClient(gateway.bootstrap, ADMIN) as admin:
            alter(admin, {"user": "alice"}, producer_byte_rate=2000)
        with (
            PrincipalClient(gateway.bootstrap, "alice") as alice,
            PrincipalClient(gateway.bootstrap, "bob") as bob,
        ):
            last = [produce_batch(alice, "uq", 10_000).throttle_time for _ in range(2)][-1]
            assert last.total_seconds() > 0
            assert produce_batch(bob, "uq", 10_000).throttle_time.total_seconds() == 0
    finally:
        gateway.close()


def _connects(bootstrap: str) -> bool:
    try:
        return api_versions_ok(bootstrap)
    except ConnectionError:  # refused while the server has not yet seen the close
        return False


def _served(bootstrap: str) -> RawClient | None:
    client = RawClient(bootstrap)
    try:
        client.request(api_versions_request())
        return client
    except ConnectionError:
        client.close()
        return None


def test_max_connections_per_ip(tmp_path: Path) -> None:
    gateway = Gateway(
        tmp_path / "data",
        tmp_path / "server.log",
        ["--max-connections-per-ip", "2"],
        default_partitions=1,
    )
    gateway.start_fresh()
    try:
        # Served (so counted); retried while the harness's readiness probe still counts.
        first = wait_until(lambda: _served(gateway.bootstrap), timeout=10)
        second = wait_until(lambda: _served(gateway.bootstrap), timeout=10)
        third = open_socket(gateway.bootstrap)
        assert connection_closed(third)
        assert "max-connections-per-ip" in gateway.log_tail()
        first.close()
        wait_until(lambda: _connects(gateway.bootstrap), timeout=10)
        second.close()
        third.close()
    finally:
        gateway.close()
