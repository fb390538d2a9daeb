"""Tier 2 that does not work at start: one clear line, the server serves anyway, no tracebacks.

A real gateway process against a real S3 API (moto's server) or a folder:

- no AWS credentials: one line at start says so; a produce/consume round trip works (acks
  come from tier 1); uploads fail again and again, and the log has one line about them and
  no traceback;
- a missing bucket the key may not create (a moto server that checks IAM policies): one
  line naming the bucket;
- an endpoint nobody listens on: one line; when it answers later, one line says uploads
  work again;
- a working S3 or folder tier 2: no warning, just an INFO line;
- a tier-2 folder that cannot be created: the start stops with one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from confluent_kafka import Producer, TopicPartition
from conftest import Gateway
from support.client import wait_until
from support.confluent import confluent_consumer, create_topic
from support.scaling import METRICS_ARGS, http

from harness.moto import MotoServer
from harness.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
FAST_UPLOADS = ("--chunk-age-ms", "100")
# no credentials anywhere: not in the environment, not in files, no instance metadata
NO_AWS_ENV = {
    "AWS_CONFIG_FILE": "/nonexistent/streamgate-test-aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/streamgate-test-aws-credentials",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class _Gateway(Gateway):
    """A gateway whose environment can also lose variables (the AWS credentials)."""

    def __init__(self, *args, drop: tuple[str, ...] = (), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.drop = drop

    def env(self) -> dict[str, str]:
        env = super().env()
        for name in self.drop:
            env.pop(name, None)
        return env


@pytest.fixture
def start(tmp_path: Path) -> Iterator:
    started: list[Gateway] = []

    def make(args: tuple[str, ...], env: dict[str, str] | None = None, drop=()) -> Gateway:
        gw = _Gateway(
            tmp_path / "data",
            tmp_path / "server.log",
            (*METRICS_ARGS, *args),
            default_partitions=1,
            env=env,
            drop=drop,
        )
        started.append(gw)
        gw.start_fresh()
        return gw

    yield make
    for gw in started:
        gw.close()


def _s3_args(endpoint: str, bucket: str | None = None) -> tuple[str, ...]:
    bucket = bucket or f"sg-unreach-{uuid.uuid4().hex[:10]}"
    return ("--tier2", f"s3://{bucket}/node-a", "--s3-endpoint", endpoint)


def _tier2_lines(gw: Gateway) -> list[str]:
    return [line for line in gw.log_text().splitlines() if " tier 2 " in f" {line}"]


def _start_line(gw: Gateway) -> str:
    """Waits for the start-up check's line; returns it (exactly one)."""

    def found() -> list[str] | None:
        lines = [line for line in _tier2_lines(gw) if "serving anyway" in line]
        return lines or None

    lines = wait_until(found, timeout=15)
    assert len(lines) == 1, lines
    return lines[0]


def _round_trip(bootstrap: str, count: int = 20) -> None:
    topic = f"unreach-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
    assert producer.flush(20) == 0
    consumer = confluent_consumer(bootstrap)
    consumer.assign([TopicPartition(topic, 0, 0)])  # no group to join: quicker
    got: list[bytes] = []
    try:
        wait_until(
            lambda: (
                (m := consumer.poll(0.2)) is not None
                and m.error() is None
                and got.append(m.value()) is None
                and len(got) >= count
            ),
            timeout=30,
            interval=0,
        )
    finally:
        consumer.close()
    assert got == [b"v%d" % i for i in range(count)]


def test_no_credentials_one_line_serves_no_traceback(start, moto_server: MotoServer) -> None:
    aws = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")
    args = _s3_args(moto_server.endpoint)
    gw = start((*args, *FAST_UPLOADS), env=NO_AWS_ENV, drop=aws)
    line = _start_line(gw)
    assert " ERROR " in line
    assert f"tier 2 {args[1]} at {moto_server.endpoint}: no AWS credentials" in line
    assert "AWS_ACCESS_KEY_ID" in line and "Traceback" not in gw.log_text()

    _round_trip(gw.bootstrap)
    # uploads keep failing (backoff 0.2 s, 0.4 s, ...): several retries, no traceback
    wait_until(lambda: http(gw, "/tier")[1]["upload_errors"] >= 4, timeout=20, interval=0.2)
    text = gw.log_text()
    assert "Traceback" not in text
    assert "NoCredentialsError" not in text
    # said once: the uploads' own first line would repeat the start-up line (their summary
    # comes a minute later)
    said = [line for line in _tier2_lines(gw) if "no AWS credentials" in line]
    assert said == [line], said


@pytest.fixture(scope="module")
def iam_moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MotoServer, dict]]:
    """A moto server that checks IAM policies after its first three requests, and a key
    allowed every S3 action but CreateBucket."""
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="3")
    server = MotoServer(tmp_path_factory.mktemp("moto-iam"), env=env)
    server.start()
    try:
        iam = boto3.client(
            "iam",
            endpoint_url=server.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        iam.create_user(UserName="streamgate")
        policy = {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
                {"Effect": "Deny", "Action": "s3:CreateBucket", "Resource": "*"},
            ],
        }
        iam.put_user_policy(
            UserName="streamgate", PolicyName="no-create", PolicyDocument=json.dumps(policy)
        )
        key = iam.create_access_key(UserName="streamgate")["AccessKey"]
        iam.close()
        creds = {
            "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        yield server, creds
    finally:
        server.stop()


def test_missing_bucket_one_line_names_it(start, iam_moto) -> None:
    server, creds = iam_moto
    bucket = f"sg-missing-{uuid.uuid4().hex[:10]}"
    gw = start(_s3_args(server.endpoint, bucket), env=creds)
    line = _start_line(gw)
    assert (
        f"bucket '{bucket}' does not exist and could not be created "
        "(access denied: the key may not create buckets)"
    ) in line, line
    assert "Traceback" not in gw.log_text()


def test_unknown_access_key_one_line(start, iam_moto) -> None:
    server, _creds = iam_moto
    env = {"AWS_ACCESS_KEY_ID": "AKIANOTKNOWN", "AWS_SECRET_ACCESS_KEY": "x"}
    gw = start(_s3_args(server.endpoint), env=env)
    line = _start_line(gw)
    assert "the endpoint does not know the AWS access key id" in line, line


def test_endpoint_not_answering_one_line(start, moto_server: MotoServer) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nobody listens there
    gw = start(_s3_args(endpoint), env=moto_server.env())
    line = _start_line(gw)
    assert f"at {endpoint}: endpoint does not answer" in line, line
    assert "Traceback" not in gw.log_text()
    http(gw, "/tier")  # serving


def test_endpoint_back_later_uploads_say_so_once(start, outage_proxy, moto_server) -> None:
    outage_proxy.down()
    gw = start((*_s3_args(outage_proxy.endpoint), *FAST_UPLOADS), env=moto_server.env())
    line = _start_line(gw)
    assert "endpoint does not answer" in line, line
    _round_trip(gw.bootstrap)  # served from tier 1 while uploads fail
    wait_until(lambda: http(gw, "/tier")[1]["upload_errors"] >= 2, timeout=20, interval=0.1)
    outage_proxy.up()
    back = wait_until(
        lambda: [ln for ln in _tier2_lines(gw) if "uploads work again after" in ln] or None,
        timeout=30,
    )
    assert len(back) == 1 and " INFO " in back[0], back
    assert http(gw, "/tier")[1]["chunks_uploaded"] >= 1
    text = gw.log_text()
    assert "Traceback" not in text
    # the start-up line said it: the failing uploads add no line of their own (a summary
    # would come after a minute)
    assert [ln for ln in _tier2_lines(gw) if "endpoint does not answer" in ln] == [line]


def test_working_s3_says_no_warning(start, moto_server: MotoServer) -> None:
    gw = start((*_s3_args(moto_server.endpoint), *FAST_UPLOADS), env=moto_server.env())
    lines = wait_until(
        lambda: [line for line in _tier2_lines(gw) if "reachable and writable" in line] or None,
        timeout=15,
    )
    assert " INFO " in lines[0]
    _round_trip(gw.bootstrap)
    wait_until(lambda: http(gw, "/tier")[1]["chunks_uploaded"] >= 1, timeout=20)
    lines = gw.log_text().splitlines()
    noisy = [line for line in lines if " WARNING " in line or " ERROR " in line]
    assert not noisy, noisy


def test_folder_that_cannot_be_created_stops_the_start(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    data = tmp_path / "data"
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--data-dir", str(data)]
        + ["--listen", f"127.0.0.1:{free_port()}", "--tier2", str(blocker / "tier2")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    err = result.stderr.strip().splitlines()
    assert err and err[-1].startswith(f"streamgate serve: tier 2 folder {blocker / 'tier2'}: ")
    assert "Traceback" not in result.stderr
