"""Kafka's own Java tools against streamgate's secured listeners.

kafka-configs.sh adds and removes SCRAM users (AlterUserScramCredentials: the tool salts the
password, the server never sees it); the console producer and consumer log in as that user
with a client properties file over SASL_SSL (PEM truststore) and SASL_PLAINTEXT.
Skipped, with the reason, when ../shared/kafka or Java is missing.
"""

from __future__ import annotations

import pytest
from support.client import unique_topic
from support.security import secure_gateway

from harness.kafka import run_tool, unavailable_reason
from harness.security import SecureListeners

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))

USER, PASSWORD = "carol", "carol-secret-3"


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    base = tmp_path_factory.mktemp("secure-java")
    with secure_gateway(base) as (gw, listeners):
        yield gw, listeners, base


def _configs(bootstrap: str, *args: str) -> str:
    proc = run_tool("kafka-configs.sh", ["--bootstrap-server", bootstrap, *args], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _properties(base, listeners: SecureListeners, protocol: str, mechanism: str) -> str:
    module = (
        "org.apache.kafka.common.security.plain.PlainLoginModule"
        if mechanism == "PLAIN"
        else "org.apache.kafka.common.security.scram.ScramLoginModule"
    )
    lines = [
        f"security.protocol={protocol}",
        f"sasl.mechanism={mechanism}",
        f'sasl.jaas.config={module} required username="{USER}" password="{PASSWORD}";',
    ]
    if "SSL" in protocol:
        lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={listeners.certs.ca}"]
    path = base / f"client-{protocol}-{mechanism}.properties"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_kafka_configs_adds_and_removes_scram_users(secure):
    from confluent_kafka.admin import AdminClient

    gw, _listeners, _base = secure
    _configs(
        gw.bootstrap,
        "--alter",
        "--add-config",
        f"SCRAM-SHA-256=[iterations=8192,password={PASSWORD}],SCRAM-SHA-512=[password={PASSWORD}]",
        "--entity-type",
        "users",
        "--entity-name",
        USER,
    )
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})  # kept: futures need it alive
    described = admin.describe_user_scram_credentials([USER])
    infos = described[USER].result(timeout=30).scram_credential_infos
    assert sorted((info.mechanism.name, info.iterations) for info in infos) == [
        ("SCRAM_SHA_256", 8192),
        ("SCRAM_SHA_512", 4096),
    ]
    # A second user, then removed again.
    _configs(
        gw.bootstrap,
        "--alter",
        "--add-config",
        "SCRAM-SHA-512=[password=tmp-pass]",
        "--entity-type",
        "users",
        "--entity-name",
        "dave",
    )
    _configs(
        gw.bootstrap,
        "--alter",
        "--delete-config",
        "SCRAM-SHA-512",
        "--entity-type",
        "users",
        "--entity-name",
        "dave",
    )
    everyone = admin.describe_user_scram_credentials()
    assert set(everyone.result(timeout=30)) == {USER}
    # No password in the log, ever.
    assert PASSWORD not in gw.log_tail() and "tmp-pass" not in gw.log_tail()


@pytest.mark.parametrize(
    ("protocol", "mechanism"),
    [("SASL_SSL", "SCRAM-SHA-256"), ("SASL_SSL", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-512")],
)
def test_console_producer_and_consumer(secure, protocol, mechanism):
    gw, listeners, base = secure
    _configs(
        gw.bootstrap,
        "--alter",
        "--add-config",
        f"SCRAM-SHA-256=[password={PASSWORD}],SCRAM-SHA-512=[password={PASSWORD}]",
        "--entity-type",
        "users",
        "--entity-name",
        USER,
    )
    props = _properties(base, listeners, protocol, mechanism)
    bootstrap = listeners.bootstrap(protocol)
    topic = unique_topic("java-sec")
    lines = [f"line-{i}" for i in range(20)]
    produced = run_tool(
        "kafka-console-producer.sh",
        ["--bootstrap-server", bootstrap, "--topic", topic, "--producer.config", props],
        input="\n".join(lines) + "\n",
        timeout=120,
    )
    assert produced.returncode == 0, produced.stdout + produced.stderr
    consumed = run_tool(
        "kafka-console-consumer.sh",
        [
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--from-beginning",
            "--max-messages",
            str(len(lines)),
            "--timeout-ms",
            "60000",
            "--consumer.config",
            props,
        ],
        timeout=120,
    )
    assert consumed.returncode == 0, consumed.stdout + consumed.stderr
    assert sorted(consumed.stdout.split()) == sorted(lines)


def test_kafka_configs_describes_scram_users(secure):
    gw, _listeners, _base = secure
    _configs(
        gw.bootstrap,
        "--alter",
        "--add-config",
        f"SCRAM-SHA-512=[password={PASSWORD}]",
        "--entity-type",
        "users",
        "--entity-name",
        USER,
    )
    out = _configs(gw.bootstrap, "--describe", "--entity-type", "users", "--entity-name", USER)
    assert f"SCRAM credential configs for user-principal '{USER}'" in out
    assert "SCRAM-SHA-512=iterations=4096" in out
