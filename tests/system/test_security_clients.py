"""Real clients over SSL, SASL_PLAINTEXT and SASL_SSL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).

One gateway with a plaintext listener (the harness's) plus one listener per secured
protocol; the user is created through the plaintext listener with AlterUserScramCredentials.
Each client produces and consumes back through its listener, and Metadata must send it to
that listener's address (not the plaintext one).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid

import pytest
from support.client import unique_topic
from support.security import secure_gateway

from harness.security import SecureListeners

USER, PASSWORD = "alice", "alice-secret-1"
COMBINATIONS = [
    ("SSL", None),
    ("SASL_PLAINTEXT", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
    ("SASL_SSL", "PLAIN"),
    ("SASL_SSL", "SCRAM-SHA-256"),
    ("SASL_SSL", "SCRAM-SHA-512"),
]
IDS = [f"{p}-{m or 'none'}" for p, m in COMBINATIONS]


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    base = tmp_path_factory.mktemp("secure")
    with secure_gateway(base, USER, PASSWORD) as (gw, listeners):
        yield gw, listeners


def _messages(n: int = 10) -> list[bytes]:
    return [f"m{i}-{uuid.uuid4().hex[:6]}".encode() for i in range(n)]


def _confluent_conf(listeners: SecureListeners, protocol: str, mechanism: str | None) -> dict:
    conf = {
        "bootstrap.servers": listeners.bootstrap(protocol),
        "security.protocol": protocol,
        "ssl.ca.location": str(listeners.certs.ca),
    }
    if mechanism:
        conf.update({"sasl.mechanism": mechanism, "sasl.username": USER, "sasl.password": PASSWORD})
    return conf


@pytest.mark.parametrize(("protocol", "mechanism"), COMBINATIONS, ids=IDS)
def test_confluent_kafka(secure, protocol, mechanism):
    from confluent_kafka import Consumer, Producer

    _gw, listeners = secure
    conf = _confluent_conf(listeners, protocol, mechanism)
    topic = unique_topic("sec")
    producer = Producer(conf)
    sent = _messages()
    errors: list = []
    for value in sent:
        producer.produce(topic, value, on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(30) == 0
    assert errors == [None] * len(sent)
    # Metadata gives this listener's address back.
    brokers = producer.list_topics(timeout=10).brokers
    assert {str(b) for b in brokers.values()} == {f"{listeners.bootstrap(protocol)}/1"}
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        for _ in range(120):
            if len(got) >= len(sent):
                break
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent)


def test_confluent_wrong_password_fails(secure):
    from confluent_kafka import KafkaException, Producer

    _gw, listeners = secure
    for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        conf = _confluent_conf(listeners, "SASL_SSL", mechanism)
        conf["sasl.password"] = "wrong"
        errors: list = []
        conf["error_cb"] = errors.append
        conf["log_level"] = 0  # librdkafka retries: keep the test output readable
        producer = Producer(conf)
        with pytest.raises(KafkaException):
            producer.list_topics(timeout=3)
        producer.poll(1)  # delivers the error callbacks
        assert any("Authentication failed" in str(e) for e in errors), errors


@pytest.mark.parametrize(("protocol", "mechanism"), COMBINATIONS, ids=IDS)
def test_kafka_python(secure, protocol, mechanism):
    from kafka import KafkaConsumer, KafkaProducer

    _gw, listeners = secure
    conf: dict = {
        "bootstrap_servers": listeners.bootstrap(protocol),
        "security_protocol": protocol,
        "ssl_cafile": str(listeners.certs.ca),
    }
    if mechanism:
        conf.update(
            sasl_mechanism=mechanism, sasl_plain_username=USER, sasl_plain_password=PASSWORD
        )
    topic = unique_topic("sec")
    sent = _messages()
    producer = KafkaProducer(**conf)
    for value in sent:
        producer.send(topic, value).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(
        topic, auto_offset_reset="earliest", consumer_timeout_ms=10_000, **conf
    )
    got = [record.value for record in consumer]
    consumer.close()
    assert sorted(got) == sorted(sent)


@pytest.mark.parametrize(("protocol", "mechanism"), COMBINATIONS, ids=IDS)
def test_aiokafka(secure, protocol, mechanism):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    _gw, listeners = secure
    topic = unique_topic("sec")
    sent = _messages()

    def conf() -> dict:
        c: dict = {
            "bootstrap_servers": listeners.bootstrap(protocol),
            "security_protocol": protocol,
        }
        if "SSL" in protocol:
            c["ssl_context"] = create_ssl_context(cafile=str(listeners.certs.ca))
        if mechanism:
            c.update(
                sasl_mechanism=mechanism, sasl_plain_username=USER, sasl_plain_password=PASSWORD
            )
        return c

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**conf())
        await producer.start()
        try:
            for value in sent:
                await producer.send_and_wait(topic, value)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **conf())
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                async for record in consumer:
                    got.append(record.value)
                    if len(got) >= len(sent):
                        break
        finally:
            await consumer.stop()
        return got

    assert sorted(asyncio.run(run())) == sorted(sent)


KCAT = shutil.which("kcat") or shutil.which("kafkacat")


@pytest.mark.parametrize(("protocol", "mechanism"), COMBINATIONS, ids=IDS)
def test_kcat(secure, protocol, mechanism):
    assert KCAT is not None, "kcat is not installed (make test installs it)"
    _gw, listeners = secure
    args = [
        "-b",
        listeners.bootstrap(protocol),
        "-X",
        f"security.protocol={protocol}",
        "-X",
        f"ssl.ca.location={listeners.certs.ca}",
    ]
    if mechanism:
        args += ["-X", f"sasl.mechanism={mechanism}", "-X", f"sasl.username={USER}"]
        args += ["-X", f"sasl.password={PASSWORD}"]
    topic = unique_topic("sec")
    lines = [value.decode() for value in _messages()]

    def kcat(*extra: str, stdin: str | None = None) -> str:
        proc = subprocess.run(
            [KCAT, *args, *extra], input=stdin, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    kcat("-P", "-t", topic, stdin="".join(f"{line}\n" for line in lines))
    out = kcat("-C", "-t", topic, "-e", "-q", "-f", "%s\\n")
    assert sorted(out.splitlines()) == sorted(lines)


def test_mutual_tls_client_certificate(secure):
    """A client presenting a certificate (client auth "requested") is served; the principal
    it maps to is checked in tests/system/test_security_protocol.py."""
    from confluent_kafka import Producer

    _gw, listeners = secure
    conf = _confluent_conf(listeners, "SSL", None)
    conf.update(
        {
            "ssl.certificate.location": str(listeners.certs.client_cert),
            "ssl.key.location": str(listeners.certs.client_key),
        }
    )
    producer = Producer(conf)
    producer.produce(unique_topic("mtls"), b"x")
    assert producer.flush(30) == 0


@pytest.mark.parametrize("protocol", ["SASL_SSL", "SSL"])
def test_describe_cluster_names_the_listener(secure, protocol):
    from confluent_kafka.admin import AdminClient

    _gw, listeners = secure
    admin = AdminClient(
        _confluent_conf(listeners, protocol, "SCRAM-SHA-512" if "SASL" in protocol else None)
    )
    cluster = admin.describe_cluster(request_timeout=30).result(timeout=30)
    assert [(node.host, node.port) for node in cluster.nodes] == [
        ("127.0.0.1", listeners.ports[protocol])
    ]
