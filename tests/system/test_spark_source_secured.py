"""The native Spark source against a gateway with SASL users, ACLs and an HTTPS admin
listener: HTTP Basic on the chunk map (READ on the topic), SASL/PLAIN and SCRAM on the
Kafka connection over plain TCP and over TLS, and clear errors without or with wrong
credentials."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.client import unique_topic
from support.spark import wait_for
from test_spark_source import FAST_TIER_ARGS, VALUE, source

from harness.gateway import REPO_ROOT, Gateway
from harness.security import Certs, SecureListeners, make_certs

pytestmark = pytest.mark.timeout(600)
__all__ = ["source"]  # the fixture shared with the batch tests

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "mallory": "mallory-secret"}
RECORDS = 200


def _conf(bootstrap: str, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": PASSWORDS[user],
    }


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory, spark
) -> Iterator[tuple[Gateway, SecureListeners, Certs, str]]:
    """A gateway with SASL users, an authorizer and HTTPS admin, tier 2 in a folder; a
    topic of RECORDS records that alice may READ and DESCRIBE and mallory may not."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    base = tmp_path_factory.mktemp("spark-source-secured")
    certs = make_certs(base / "certs")
    listeners = SecureListeners(certs)
    for name, password in PASSWORDS.items():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "gateway",
                "users",
                "add",
                name,
                "--data-dir",
                str(base / "data"),
            ],
            input=password + "\n",
            text=True,
            check=True,
            timeout=60,
            cwd=REPO_ROOT,
        )
    gw = Gateway(
        base / "data",
        base / "server.log",
        [
            *FAST_TIER_ARGS,
            *listeners.gateway_args(),
            *("--authorizer", "true", "--super-users", "User:admin", "--admin-tls", "true"),
        ],
        metrics=True,
    )
    gw.start_fresh()
    try:
        bootstrap = listeners.bootstrap("SASL_PLAINTEXT")
        topic = unique_topic("native-secured")
        admin = AdminClient(_conf(bootstrap, "admin"))
        for future in admin.create_topics([NewTopic(topic, 2)]).values():
            future.result(timeout=30)
        acls = [
            AclBinding(
                ResourceType.TOPIC,
                topic,
                ResourcePatternType.LITERAL,
                "User:alice",
                "*",
                operation,
                AclPermissionType.ALLOW,
            )
            for operation in (AclOperation.READ, AclOperation.DESCRIBE)
        ]
        for future in admin.create_acls(acls).values():
            future.result(timeout=30)
        producer = Producer(_conf(bootstrap, "admin"))
        for i in range(RECORDS):
            producer.produce(topic, value=b"%d|" % i + VALUE, partition=i % 2)
        assert producer.flush(30) == 0
        yield gw, listeners, certs, topic
    finally:
        gw.close()


def _read(spark: Any, gw: Gateway, certs: Certs, topic: str, **options: str) -> Any:
    reader = spark.read.format("streamgate").options(
        admin=f"https://127.0.0.1:{gw.metrics_port}", sslCaFile=str(certs.ca), topic=topic
    )
    return reader.options(**options).load()


def _error(call: Any) -> str:
    with pytest.raises(Exception) as info:
        call()
    return str(info.value)


def test_reads_with_credentials_over_sasl_plaintext_and_sasl_ssl_plain_and_scram(
    source, secured
) -> None:
    gw, listeners, certs, topic = secured
    expected = sorted((p, o) for p in range(2) for o in range(RECORDS // 2))
    # startingTimestamp: ListOffsets through the Kafka protocol, so the SASL login is used
    # whether or not the tail is in tier 2 yet
    for protocol, tls, mechanism in (
        ("SASL_PLAINTEXT", "false", "PLAIN"),
        ("SASL_SSL", "true", "SCRAM-SHA-512"),
        ("SASL_PLAINTEXT", "false", "SCRAM-SHA-256"),
    ):
        df = _read(
            source,
            gw,
            certs,
            topic,
            gateway=listeners.bootstrap(protocol),
            gatewayTls=tls,
            saslMechanism=mechanism,
            user="alice",
            password=PASSWORDS["alice"],
            startingTimestamp="0",
        )
        rows = df.collect()
        assert sorted((r.partition, r.offset) for r in rows) == expected, mechanism
        assert {bytes(r.value).split(b"|")[0] for r in rows} == {b"%d" % i for i in range(RECORDS)}


def test_tail_through_sasl(source, secured) -> None:
    """Records produced just now are read through the Kafka protocol (the tail), logged in."""
    gw, listeners, certs, topic = secured
    bootstrap = listeners.bootstrap("SASL_SSL")
    from confluent_kafka import Producer

    producer = Producer(
        {
            **_conf(bootstrap, "admin"),
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(certs.ca),
        }
    )
    for i in range(RECORDS, RECORDS + 50):
        producer.produce(topic, value=b"%d|" % i + VALUE, partition=0)
    assert producer.flush(30) == 0

    def read() -> list[Any] | None:
        rows = _read(
            source,
            gw,
            certs,
            topic,
            gateway=bootstrap,
            gatewayTls="true",
            user="alice",
            password=PASSWORDS["alice"],
        ).collect()
        return rows if len(rows) >= RECORDS + 50 else None

    rows = wait_for(read, timeout=60)
    assert len({(r.partition, r.offset) for r in rows}) == len(rows) >= RECORDS + 50


def test_missing_or_wrong_credentials_name_the_options(source, secured) -> None:
    gw, listeners, certs, topic = secured
    bootstrap = listeners.bootstrap("SASL_PLAINTEXT")
    message = _error(lambda: _read(source, gw, certs, topic, gateway=bootstrap).collect())
    assert "wants credentials" in message and "options 'user' and 'password'" in message
    message = _error(
        lambda: _read(
            source, gw, certs, topic, gateway=bootstrap, user="alice", password="nope"
        ).collect()
    )
    assert "invalid username or password" in message
    message = _error(
        lambda: _read(
            source,
            gw,
            certs,
            topic,
            gateway=bootstrap,
            user="mallory",
            password=PASSWORDS["mallory"],
        ).collect()
    )
    assert "User:mallory may not READ" in message and "needs READ on the topic" in message
    message = _error(
        lambda: (
            source.read.format("streamgate")
            .options(gateway=bootstrap, admin="127.0.0.1:1", topic=topic, user="alice")
            .load()
        )
    )
    assert "options 'user' and 'password' go together" in message


def test_the_kafka_login_is_checked(source, secured, tmp_path: Path) -> None:
    """Planned from the metadata store (no admin request), so the Kafka login alone is
    tested: a wrong password is refused with the options named."""
    gw, listeners, certs, topic = secured
    metadata = str(gw.data_dir / "metadata.db")
    df = source.read.format("streamgate").options(
        gateway=listeners.bootstrap("SASL_PLAINTEXT"),
        metadata=metadata,
        topic=topic,
        user="alice",
        password="nope",
        startingTimestamp="0",
    )
    message = _error(lambda: df.load().collect())
    assert "refused the login of 'alice'" in message
    message = _error(lambda: df.option("saslMechanism", "SCRAM-SHA-256").load().collect())
    assert "refused the login of 'alice'" in message
