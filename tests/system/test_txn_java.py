"""The Java client's transactional producer (what Kafka Streams and Flink's exactly-once
sink use) in a consume-transform-produce loop with sendOffsetsToTransaction, checked
exactly once with the Java and confluent-kafka read_committed consumers."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer
from support.client import unique_topic
from support.txn import confluent_values, create_topic

from harness import kafka as kafka_harness

SOURCE = Path(__file__).resolve().parents[1] / "support" / "java" / "TxnLoop.java"


SPARK_CLIENT = Path(__file__).resolve().parents[3] / "shared" / "spark-connector"
SPARK_CLIENT_JAR = SPARK_CLIENT / "kafka-clients-3.9.1.jar"


def _java_source_launcher(client: str) -> tuple[list[str], str]:
    """(java command with the Kafka client jars, "") or ([], why it cannot run). `client`
    3.5.1 is Kafka's own; 3.9.1 is Spark 4.0's (first on the class path, so its classes
    win over 3.5.1's; Kafka's libs give the rest: slf4j, compression codecs)."""
    reason = kafka_harness.unavailable_reason()
    if reason:
        return [], reason
    java_home, _ = kafka_harness.java_home()
    kafka_home, _ = kafka_harness.kafka_home()
    assert java_home is not None and kafka_home is not None
    if not (java_home / "bin" / "javac").is_file() and not shutil.which("javac"):
        return [], "source-file mode needs a JDK: apt-get install -y openjdk-17-jdk-headless"
    classpath = str(kafka_home / "libs" / "*")
    if client == "3.9.1":
        if not SPARK_CLIENT_JAR.is_file():
            return [], f"{SPARK_CLIENT_JAR} is not there"
        classpath = f"{SPARK_CLIENT_JAR}:{classpath}"
    return [str(java_home / "bin" / "java"), "-cp", classpath], ""


@pytest.mark.parametrize("client", ["3.5.1", "3.9.1"])
def test_java_transactional_consume_transform_produce(shared_gateway, client: str) -> None:
    java, reason = _java_source_launcher(client)
    if reason:
        pytest.skip(reason)
    bootstrap = shared_gateway.bootstrap
    source, sink, group = unique_topic("jsrc"), unique_topic("jsink"), unique_topic("jg")
    create_topic(bootstrap, source)
    create_topic(bootstrap, sink)
    count = 200
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        plain.produce(source, key=b"%d" % i, value=b"in-%d" % i)
    plain.flush(30)
    run = subprocess.run(
        [*java, str(SOURCE), bootstrap, source, sink, group, unique_topic("jtx"), str(count)],
        capture_output=True,
        text=True,
        timeout=300,
        env=kafka_harness.tool_env(),
    )
    assert run.returncode == 0 and f"done {count}" in run.stdout, run.stdout + run.stderr[-3000:]
    assert f"client {client}" in run.stdout
    out = confluent_values(bootstrap, sink, "read_committed", count)
    assert Counter(out) == Counter(b"out-in-%d" % i for i in range(count))
    java_out = kafka_harness.run_tool(
        "kafka-console-consumer.sh",
        [
            "--bootstrap-server",
            bootstrap,
            "--topic",
            sink,
            "--from-beginning",
            "--isolation-level",
            "read_committed",
            "--timeout-ms",
            "8000",
        ],
    )
    lines = [line for line in java_out.stdout.splitlines() if line]
    assert Counter(lines) == Counter(f"out-in-{i}" for i in range(count))
