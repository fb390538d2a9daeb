"""Cost of the authorizer, and how closely a producer quota holds a producer.

* produce: a confluent-kafka producer sends small records flat out, authorizer off vs on
  (with `--acls` bindings in the store, the producer allowed by a prefixed ACL); records/s.
* metadata: AdminClient.list_topics() over `--topics` topics, off vs on (every topic is
  checked for DESCRIBE); calls/s.
* quota: a producer with client id under `producer_byte_rate` Q sends 10 x Q bytes flat out;
  its measured rate and the throttle times librdkafka reported (short quota windows:
  3 x 1 s, so the burst allowance is 2 x Q).

Each managed gateway is a fresh `streamgate serve` (STREAMGATE_TEST_PRINCIPAL_FROM_CLIENT_ID=1
maps client ids to principals, as in the tests). Run it with `streamgate bench run scenario:acl`
(`--quick`: a few thousand records, one round, one quota).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from compat.benchlib.scenario import RunOptions, scenario_args, standalone  # noqa: E402
from harness.gateway import Gateway  # noqa: E402

QUICK = ("--records", "5000", "--topics", "20", "--acls", "50", "--metadata-calls", "10")
QUICK += ("--rounds", "1", "--quotas", "400000")
ENV = {"STREAMGATE_TEST_PRINCIPAL_FROM_CLIENT_ID": "1"}
TIMEOUT = 60


def gateway(base: Path, authorizer: bool, *extra: str) -> Gateway:
    args = ["--authorizer", "true", "--super-users", "User:admin"] if authorizer else []
    return Gateway(base / "data", base / "log", [*args, *extra], default_partitions=1, env=ENV)


def setup(gw: Gateway, topics: int, acls: int) -> None:
    admin = AdminClient({"bootstrap.servers": gw.bootstrap, "client.id": "admin"})
    names = [f"bench-{i}" for i in range(topics)]
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(TIMEOUT)
    if acls == 0:
        return  # no authorizer: the ACL APIs answer SECURITY_DISABLED
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            "bench-",
            ResourcePatternType.PREFIXED,
            "User:app",
            "*",
            AclOperation.ALL,
            AclPermissionType.ALLOW,
        ),
        AclBinding(
            ResourceType.BROKER,
            "kafka-cluster",
            ResourcePatternType.LITERAL,
            "User:app",
            "*",
            AclOperation.IDEMPOTENT_WRITE,
            AclPermissionType.ALLOW,
        ),
    ]
    bindings += [  # other users' ACLs the authorizer has to look through
        AclBinding(
            ResourceType.TOPIC,
            f"bench-{i % max(topics, 1)}",
            ResourcePatternType.LITERAL,
            f"User:u{i}",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
        for i in range(max(0, acls - len(bindings)))
    ]
    for start in range(0, len(bindings), 200):
        for future in admin.create_acls(bindings[start : start + 200]).values():
            future.result(TIMEOUT)


def produce_rate(gw: Gateway, records: int) -> float:
    failed: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": gw.bootstrap,
            "client.id": "app",
            "linger.ms": 5,
            "acks": 1,
            "on_delivery": lambda err, msg: err and failed.append(err),
        }
    )
    value = b"x" * 100
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(f"bench-{i % 4}", value)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(TIMEOUT)
    elapsed = time.perf_counter() - start
    if failed:
        raise RuntimeError(f"{len(failed)} records failed, e.g. {failed[0]}")
    return records / elapsed


def metadata_rate(gw: Gateway, calls: int) -> float:
    admin = AdminClient({"bootstrap.servers": gw.bootstrap, "client.id": "app"})
    admin.list_topics(timeout=TIMEOUT)
    start = time.perf_counter()
    for _ in range(calls):
        admin.list_topics(timeout=TIMEOUT)
    return calls / (time.perf_counter() - start)


def set_quota(bootstrap: str, client_id: str, quota: int) -> None:
    """AlterClientQuotas v1 over a raw socket (librdkafka's AdminClient has no call for it)."""
    import io
    import socket
    import struct

    from kio.index import load_request_schema
    from kio.serial import entity_writer

    from kafkawire.codec import build_entity

    cls = load_request_schema(49, 1)
    body = build_entity(
        cls,
        {
            "entries": [
                {
                    "entity": [{"entity_type": "client-id", "entity_name": client_id}],
                    "ops": [{"key": "producer_byte_rate", "value": float(quota), "remove": False}],
                }
            ],
            "validate_only": False,
        },
    )
    out = io.BytesIO()
    entity_writer(cls)(out, body)
    name = b"admin"
    header = struct.pack(">hhih", 49, 1, 1, len(name)) + name + b"\x00"
    payload = header + out.getvalue()
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
        sock.recv(size, socket.MSG_WAITALL)


def quota_run(gw: Gateway, quota: int) -> dict[str, Any]:
    set_quota(gw.bootstrap, f"q{quota}", quota)
    throttles: list[float] = []
    producer = Producer(
        {
            "bootstrap.servers": gw.bootstrap,
            "client.id": f"q{quota}",
            "linger.ms": 5,
            "batch.size": 16384,  # requests of ~16 KB: the quota bites per request
            "throttle_cb": lambda e: throttles.append(e.throttle_time * 1000),
        }
    )
    value = os.urandom(10_000)
    count = 10 * quota // len(value)
    start = time.perf_counter()
    for _ in range(count):
        producer.produce("bench-0", value)
        producer.poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - start
    return {
        "quota_bytes_per_s": quota,
        "bytes": count * len(value),
        "seconds": round(elapsed, 2),
        "measured_bytes_per_s": round(count * len(value) / elapsed),
        "throttle_reports": len(throttles),
        "max_throttle_ms": round(max(throttles, default=0)),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--topics", type=int, default=300)
    parser.add_argument("--acls", type=int, default=1000)
    parser.add_argument("--metadata-calls", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quotas", default="100000,400000")
    return parser


def run(options: RunOptions) -> dict[str, Any]:
    args = scenario_args(build_parser(), options, quick=QUICK, runs="--rounds")
    results: dict[str, Any] = {"settings": vars(args)}
    for label, on in (("authorizer_off", False), ("authorizer_on", True)):
        with tempfile.TemporaryDirectory() as tmp:
            gw = gateway(Path(tmp), on)
            gw.start_fresh()
            try:
                setup(gw, args.topics, args.acls if on else 0)
                produce = [produce_rate(gw, args.records) for _ in range(args.rounds)]
                metadata = [metadata_rate(gw, args.metadata_calls) for _ in range(args.rounds)]
            finally:
                gw.close()
        results[label] = {
            "produce_records_per_s": [round(r) for r in produce],
            "produce_median": round(statistics.median(produce)),
            "metadata_calls_per_s": [round(r, 1) for r in metadata],
            "metadata_median": round(statistics.median(metadata), 1),
        }
        print(label, results[label], flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        gw = gateway(
            Path(tmp), False, "--quota-window-num", "3", "--quota-window-size-seconds", "1"
        )
        gw.start_fresh()
        try:
            setup(gw, 1, 0)
            results["quota"] = [quota_run(gw, int(q)) for q in args.quotas.split(",")]
        finally:
            gw.close()
    print("quota", results["quota"])
    return results


def main(argv: list[str] | None = None) -> int:
    return standalone("acl", argv)


if __name__ == "__main__":
    sys.exit(main())
