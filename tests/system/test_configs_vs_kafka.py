"""Dynamic broker configs and the topic config values Kafka 3.5.1 accepts, side by side.

Every comparison runs the same calls against streamgate and, when `../shared/kafka` and Java
are there, against a single-node Apache Kafka 3.5.1 (one broker for the module); the Kafka
half is skipped with the reason after the streamgate half ran. Broker resource "1" is altered
with kafka-python's KafkaAdminClient (a real client); the cluster default (resource "") with
raw IncrementalAlterConfigs / AlterConfigs requests, because neither Python client can name
it. Kafka applies a dynamic config asynchronously (through its metadata log), so its
descriptions are polled until they settle.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType
from kafka import KafkaAdminClient
from kafka.admin import AlterConfigOp, ConfigResourceType, NewTopic
from kafka.admin import ConfigResource as KpConfigResource
from kio.schema.alter_configs.v2.request import AlterableConfig as LegacyConfig
from kio.schema.alter_configs.v2.request import AlterConfigsRequest
from kio.schema.alter_configs.v2.request import AlterConfigsResource as LegacyResource
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.static.primitive import i8
from support.client import RawClient, unique_topic, wait_until
from support.kafka import need_kafka

from harness.kafka import KafkaBroker

TIMEOUT = 30.0
BROKER, TOPIC = 4, 2
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
INVALID_REQUEST, INVALID_CONFIG = 42, 40
DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 2, 3, 4, 5
RELOGIN = "sasl.kerberos.min.time.before.relogin"  # dynamic per broker in Kafka 3.5.1


def both(gateway: Any, kafka: KafkaBroker | None) -> dict[str, str]:
    out = {"streamgate": gateway.bootstrap}
    if kafka is not None:
        out["kafka"] = kafka.bootstrap
    return out


# --- raw requests -----------------------------------------------------------------------


def incremental(
    bootstrap: str,
    name: str,
    ops: list[tuple[str, int, str | None]],
    rtype: int = BROKER,
    validate_only: bool = False,
) -> tuple[int, str | None]:
    configs = tuple(AlterableConfig(name=n, config_operation=i8(op), value=v) for n, op, v in ops)
    request = IncrementalAlterConfigsRequest(
        resources=(
            AlterConfigsResource(resource_type=i8(rtype), resource_name=name, configs=configs),
        ),
        validate_only=validate_only,
    )
    with RawClient(bootstrap) as raw:
        (response,) = raw.request(request).responses
    return int(response.error_code), response.error_message or None


def legacy_alter(
    bootstrap: str, name: str, configs: dict[str, str | None], rtype: int = BROKER
) -> tuple[int, str | None]:
    entries = tuple(LegacyConfig(name=n, value=v) for n, v in configs.items())
    request = AlterConfigsRequest(
        resources=(LegacyResource(resource_type=i8(rtype), resource_name=name, configs=entries),),
        validate_only=False,
    )
    with RawClient(bootstrap) as raw:
        (response,) = raw.request(request).responses
    return int(response.error_code), response.error_message or None


def describe(
    bootstrap: str, name: str, keys: tuple[str, ...] | None, rtype: int = BROKER
) -> tuple[int, str | None, dict[str, tuple[Any, ...]]]:
    """(error, message, {name: (value, source, read_only, sensitive, dynamic synonyms)}):
    the synonyms from the dynamic layers only (the static layer is the gateway's own)."""
    request = DescribeConfigsRequest(
        resources=(
            DescribeConfigsResource(
                resource_type=i8(rtype), resource_name=name, configuration_keys=keys
            ),
        ),
        include_synonyms=True,
        include_documentation=False,
    )
    with RawClient(bootstrap) as raw:
        (result,) = raw.request(request).results
    configs = {
        c.name: (
            c.value,
            int(c.config_source),
            c.read_only,
            c.is_sensitive,
            [(s.value, int(s.source)) for s in c.synonyms if s.source in (2, 3)],
        )
        for c in result.configs
    }
    return int(result.error_code), result.error_message or None, configs


def settled(label: str, read: Any, expected: Any = None) -> Any:
    """Kafka applies broker configs through its metadata log: poll its answer until it
    equals `expected` (streamgate's), at most 15 s; streamgate's is read once."""
    if label != "kafka" or expected is None:
        return read()
    got: list[Any] = []

    def same() -> bool:
        got[:] = [read()]
        return bool(got[0] == expected)

    with contextlib.suppress(TimeoutError):
        wait_until(same, timeout=15.0, interval=0.25)
    return got[0]


def kp_admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)


def reset_broker_configs(bootstrap: str) -> None:
    """Back to no dynamic broker config (Kafka's broker is shared by the module)."""
    for resource in ("1", ""):
        assert legacy_alter(bootstrap, resource, {}) == (0, None)


# --- dynamic broker configs ---------------------------------------------------------------


def test_dynamic_broker_configs_per_broker_and_cluster_default(gateway, kafka):
    keys = (RELOGIN, "message.max.bytes", "log.cleaner.threads", "foo.bar", "foo.baz")
    seen: dict[str, Any] = {}
    for label, bootstrap in both(gateway, kafka).items():
        admin = kp_admin(bootstrap)
        per_broker = KpConfigResource(
            ConfigResourceType.BROKER,
            "1",
            configs={
                RELOGIN: (AlterConfigOp.SET, "61000"),
                "message.max.bytes": (AlterConfigOp.SET, "2000000"),
                "foo.bar": (AlterConfigOp.SET, "x"),  # a name Kafka does not know
            },
        )
        result = admin.alter_configs([per_broker], raise_on_unknown=False, incremental=True)
        answers = [result["broker"]["1"]]
        answers.append(
            incremental(
                bootstrap,
                "",
                [
                    ("message.max.bytes", SET, "3000000"),
                    ("log.cleaner.threads", SET, "2"),
                    ("foo.baz", SET, "y"),
                ],
            )
        )
        answers.append(incremental(bootstrap, "", [(RELOGIN, SET, "62000")]))  # per broker only
        expected = seen.get("streamgate", {}).get("broker")
        broker = settled(label, lambda b=bootstrap: describe(b, "1", keys), expected)
        expected = seen.get("streamgate", {}).get("default")
        default = settled(label, lambda b=bootstrap: describe(b, "", None), expected)
        # a real client's view: confluent-kafka's DescribeConfigs of broker 1
        client = AdminClient({"bootstrap.servers": bootstrap})
        futures = client.describe_configs([ConfigResource(ResourceType.BROKER, "1")])
        confluent = next(iter(futures.values())).result(TIMEOUT)
        sources = {n: confluent[n].source for n in (RELOGIN, "message.max.bytes") if n in confluent}
        admin.close()
        seen[label] = {"answers": answers, "broker": broker, "default": default, "src": sources}
        if label == "kafka":
            reset_broker_configs(bootstrap)

    got = seen["streamgate"]
    assert got["answers"] == [
        "OK",
        (0, None),
        (
            INVALID_REQUEST,
            "Cannot update these configs at default cluster level, broker id must be "
            f"specified: Set({RELOGIN})",
        ),
    ]
    assert got["broker"] == (
        0,
        None,
        {
            "message.max.bytes": (
                "2000000",
                DYNAMIC_BROKER,
                False,
                False,
                [("2000000", DYNAMIC_BROKER), ("3000000", DYNAMIC_DEFAULT)],
            ),
            "log.cleaner.threads": ("2", DYNAMIC_DEFAULT, False, False, [("2", DYNAMIC_DEFAULT)]),
            RELOGIN: ("61000", DYNAMIC_BROKER, False, False, [("61000", DYNAMIC_BROKER)]),
            "foo.bar": (None, DYNAMIC_BROKER, True, True, [(None, DYNAMIC_BROKER)]),
            "foo.baz": (None, DYNAMIC_DEFAULT, True, True, [(None, DYNAMIC_DEFAULT)]),
        },
    )
    assert got["default"] == (
        0,
        None,
        {
            "message.max.bytes": ("3000000", DYNAMIC_DEFAULT, False, False, [("3000000", 3)]),
            "log.cleaner.threads": ("2", DYNAMIC_DEFAULT, False, False, [("2", 3)]),
            "foo.baz": (None, DYNAMIC_DEFAULT, True, True, [(None, 3)]),
        },
    )
    assert got["src"] == {
        RELOGIN: ConfigSource.DYNAMIC_BROKER_CONFIG.value,
        "message.max.bytes": ConfigSource.DYNAMIC_BROKER_CONFIG.value,
    }
    need_kafka(kafka)
    assert seen["kafka"] == got


def dynamic_view(bootstrap: str, name: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """The entries whose value comes from a dynamic layer (the static and default layers are
    each broker's own)."""
    _, _, configs = describe(bootstrap, name, keys)
    return {n: v for n, v in configs.items() if v[1] in (DYNAMIC_BROKER, DYNAMIC_DEFAULT)}


def test_alter_configs_replaces_a_broker_resource_and_delete_reverts(gateway, kafka):
    """Legacy AlterConfigs replaces the resource's whole set; DELETE returns to the static
    value; APPEND / SUBTRACT work on list configs, starting from Kafka's default."""
    seen: dict[str, Any] = {}
    keys = ("message.max.bytes", "log.retention.ms", "log.cleanup.policy")
    for label, bootstrap in both(gateway, kafka).items():
        steps: list[Any] = []
        steps.append(incremental(bootstrap, "1", [("message.max.bytes", SET, "2000000")]))
        steps.append(legacy_alter(bootstrap, "1", {"log.retention.ms": "5000"}))
        steps.append(incremental(bootstrap, "1", [("log.cleanup.policy", APPEND, "compact")]))
        expected = seen.get("streamgate", {}).get("after")
        after = settled(label, lambda b=bootstrap: dynamic_view(b, "1", keys), expected)
        steps.append(incremental(bootstrap, "1", [("log.retention.ms", DELETE, None)]))
        steps.append(incremental(bootstrap, "1", [("log.cleanup.policy", SUBTRACT, "delete")]))
        expected = seen.get("streamgate", {}).get("deleted")
        deleted = settled(label, lambda b=bootstrap: dynamic_view(b, "1", keys), expected)
        seen[label] = {"steps": steps, "after": after, "deleted": deleted}
        if label == "kafka":
            reset_broker_configs(bootstrap)
    got = seen["streamgate"]
    assert got["steps"] == [(0, None)] * 5
    assert got["after"] == {
        "log.retention.ms": ("5000", DYNAMIC_BROKER, False, False, [("5000", DYNAMIC_BROKER)]),
        "log.cleanup.policy": (
            "delete,compact",
            DYNAMIC_BROKER,
            False,
            False,
            [("delete,compact", DYNAMIC_BROKER)],
        ),
    }
    assert got["deleted"] == {
        "log.cleanup.policy": ("compact", DYNAMIC_BROKER, False, False, [("compact", 2)])
    }
    need_kafka(kafka)
    assert seen["kafka"] == got


READ_ONLY_CALLS: list[tuple[str, list[tuple[str, int, str | None]]]] = [
    ("1", [("broker.id", SET, "2")]),
    ("", [("broker.id", SET, "2")]),
    ("1", [("node.id", SET, "2")]),
    ("1", [("log.dirs", SET, "/elsewhere")]),
    ("1", [("process.roles", SET, "broker")]),
    ("1", [("num.partitions", SET, "3")]),
    ("1", [("broker.id", SET, "2"), ("log.dirs", SET, "/x")]),
    ("", [("listeners", SET, "PLAINTEXT://127.0.0.1:1")]),
    ("", [("advertised.listeners", SET, "PLAINTEXT://127.0.0.1:1")]),
    ("1", [("ssl.keystore.location", SET, "/k.jks")]),
    ("1", [("message.max.bytes", SET, "abc")]),
    ("1", [("message.max.bytes", SET, "-1")]),
    ("1", [("log.cleanup.policy", SET, "shred")]),
    ("1", [("unclean.leader.election.enable", SET, "maybe")]),
    ("1", [(RELOGIN, APPEND, "1")]),
    ("1", [(RELOGIN, SET, None)]),
    ("1", [(RELOGIN, SET, "1"), (RELOGIN, SET, "2")]),
    ("1", [("broker.id", DELETE, None)]),  # deleting what is not set: fine
    ("2", [(RELOGIN, SET, "61000")]),
    ("abc", [(RELOGIN, SET, "61000")]),
]


def test_read_only_and_invalid_broker_configs_are_refused_like_kafka(gateway, kafka):
    seen = {}
    for label, bootstrap in both(gateway, kafka).items():
        answers = [
            incremental(bootstrap, name, ops, validate_only=True) for name, ops in READ_ONLY_CALLS
        ]
        answers.append(describe(bootstrap, "2", (RELOGIN,))[:2])
        answers.append(describe(bootstrap, "abc", (RELOGIN,))[:2])
        seen[label] = answers
    got = seen["streamgate"]
    assert got[0] == (INVALID_REQUEST, "Cannot update these configs dynamically: Set(broker.id)")
    assert got[6] == (
        INVALID_REQUEST,
        "Cannot update these configs dynamically: Set(broker.id, log.dirs)",
    )
    assert got[14][0] == INVALID_CONFIG  # APPEND on a config that is not a list
    assert got[17] == (0, None)
    need_kafka(kafka)
    for call, ours, theirs in zip(
        READ_ONLY_CALLS + ["d2", "dabc"], got, seen["kafka"], strict=True
    ):
        assert ours == theirs, call


def test_streamgate_dynamic_extensions_kafka_refuses(gateway, kafka):
    """group.initial.rebalance.delay.ms and log.retention.check.interval.ms: read-only in
    Kafka 3.5.1, dynamic in streamgate (a serve option applies them at once)."""
    names = ("group.initial.rebalance.delay.ms", "log.retention.check.interval.ms")
    seen = {}
    for label, bootstrap in both(gateway, kafka).items():
        seen[label] = [
            incremental(bootstrap, "1", [(name, SET, "1000")], validate_only=True) for name in names
        ]
    assert seen["streamgate"] == [(0, None), (0, None)]
    need_kafka(kafka)
    assert seen["kafka"] == [
        (INVALID_REQUEST, f"Cannot update these configs dynamically: Set({name})") for name in names
    ]


# --- topic configs --------------------------------------------------------------------------

FORMAT_VERSIONS = [
    "0.10.0.0", "0.8.0", "0.8", "0.7.0", "0.10.0-IV0", "0.10.0-IV1", "0.10.0-IV2", "0.10",
    "1.0", "1.0.0", "1.0-IV0", "1.1.1", "2.8", "3.0-IV1", "3.5-IV2", "3.5", "3.5.1",
    "3.5-IV3", "3.6", "3.6-IV0", "4.0", "junk", "", " 3.0 ", "0.11.0.2",
]  # fmt: skip


def _create(bootstrap: str, topic: str) -> None:
    admin = kp_admin(bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    wait_until(lambda: describe(bootstrap, topic, ("cleanup.policy",), TOPIC)[0] == 0)


def test_message_format_version_values_like_kafka(gateway, kafka):
    seen = {}
    for label, bootstrap in both(gateway, kafka).items():
        topic = unique_topic("mfv")
        _create(bootstrap, topic)
        answers = [
            incremental(bootstrap, topic, [("message.format.version", SET, v)], TOPIC, True)
            for v in FORMAT_VERSIONS
        ]
        answers.append(legacy_alter(bootstrap, topic, {"message.format.version": "0.10.0.0"}, 2))
        answers.append(
            settled(
                label,
                lambda b=bootstrap, t=topic: describe(b, t, ("message.format.version",), TOPIC),
                seen.get("streamgate", [None])[-1],
            )
        )
        seen[label] = answers
    got = seen["streamgate"]
    assert got[0] == (0, None)  # 0.10.0.0: Kafka reads it as 0.10.0
    assert got[FORMAT_VERSIONS.index("3.6")] == (
        INVALID_CONFIG,
        "Invalid value 3.6 for configuration message.format.version: "
        "Version 3.6 is not a valid version",
    )
    assert got[-1][2]["message.format.version"][:2] == ("0.10.0.0", 1)
    need_kafka(kafka)
    for value, ours, theirs in zip(
        [*FORMAT_VERSIONS, "legacy", "describe"], got, seen["kafka"], strict=True
    ):
        assert ours == theirs, value


def test_cleanup_policy_subtract_to_empty_like_kafka(gateway, kafka):
    """SUBTRACT delete from cleanup.policy=delete leaves '' (neither delete nor compact:
    kept forever); a record without a key is still accepted (not compacted)."""
    seen = {}
    for label, bootstrap in both(gateway, kafka).items():
        topic = unique_topic("cp")
        _create(bootstrap, topic)
        answer = incremental(bootstrap, topic, [("cleanup.policy", SUBTRACT, "delete")], TOPIC)
        described = settled(
            label,
            lambda b=bootstrap, t=topic: describe(b, t, ("cleanup.policy",), TOPIC),
            seen.get("streamgate", [None, None])[1],
        )
        errors = _produce_unkeyed(bootstrap, topic)
        set_empty = incremental(bootstrap, topic, [("cleanup.policy", SET, "")], TOPIC, True)
        seen[label] = [answer, described, errors, set_empty]
    got = seen["streamgate"]
    assert got[0] == (0, None)
    assert got[1][2]["cleanup.policy"][:2] == ("", 1)
    assert got[2] == [None]
    assert got[3] == (0, None)
    need_kafka(kafka)
    assert seen["kafka"] == got


def _produce_unkeyed(bootstrap: str, topic: str) -> list[Any]:
    producer = Producer({"bootstrap.servers": bootstrap})
    errors: list[Any] = []
    producer.produce(topic, b"no key", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(TIMEOUT)
    return errors


# --- streamgate only: persistence and effects ----------------------------------------------


def _produce_size(bootstrap: str, topic: str, size: int) -> Any:
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 10_000_000})
    results: list[Any] = []
    producer.produce(topic, b"k", b"v" * size, on_delivery=lambda err, _m: results.append(err))
    producer.flush(TIMEOUT)
    return results[0]


def test_dynamic_broker_configs_survive_a_restart_and_apply(gateway):
    topic = unique_topic("mmb")
    _create(gateway.bootstrap, topic)
    assert _produce_size(gateway.bootstrap, topic, 300_000) is None
    assert incremental(gateway.bootstrap, "", [("message.max.bytes", SET, "200000")]) == (0, None)
    assert incremental(gateway.bootstrap, "1", [(RELOGIN, SET, "61000")]) == (0, None)
    error = _produce_size(gateway.bootstrap, topic, 300_000)  # at once: the cluster default
    assert error is not None and error.name() == "MSG_SIZE_TOO_LARGE"
    size = describe(gateway.bootstrap, topic, ("max.message.bytes",), TOPIC)[2]
    assert size["max.message.bytes"][:2] == ("200000", DYNAMIC_DEFAULT)

    gateway.restart()
    _, _, configs = describe(gateway.bootstrap, "1", ("message.max.bytes", RELOGIN))
    assert configs["message.max.bytes"][:2] == ("200000", DYNAMIC_DEFAULT)
    assert configs[RELOGIN][:2] == ("61000", DYNAMIC_BROKER)
    error = _produce_size(gateway.bootstrap, topic, 300_000)
    assert error is not None and error.name() == "MSG_SIZE_TOO_LARGE"
    # a per-broker value wins over the cluster default; DELETE returns to the static one
    assert incremental(gateway.bootstrap, "1", [("message.max.bytes", SET, "400000")]) == (0, None)
    assert _produce_size(gateway.bootstrap, topic, 300_000) is None
    assert incremental(gateway.bootstrap, "1", [("message.max.bytes", DELETE, None)]) == (0, None)
    assert incremental(gateway.bootstrap, "", [("message.max.bytes", DELETE, None)]) == (0, None)
    _, _, configs = describe(gateway.bootstrap, "1", ("message.max.bytes",))
    assert configs["message.max.bytes"][1] == STATIC
    assert _produce_size(gateway.bootstrap, topic, 300_000) is None


def _join_seconds(bootstrap: str) -> float:
    """How long the first JoinGroup (v3) of a new group's only member takes."""
    from kio.schema.join_group.v3.request import JoinGroupRequest, JoinGroupRequestProtocol
    from kio.schema.types import GroupId
    from kio.static.primitive import i32Timedelta

    request = JoinGroupRequest(
        group_id=GroupId(unique_topic("g")),
        session_timeout=i32Timedelta.parse(__import__("datetime").timedelta(seconds=10)),
        rebalance_timeout=i32Timedelta.parse(__import__("datetime").timedelta(seconds=10)),
        member_id="",
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),),
    )
    with RawClient(bootstrap, timeout=30.0) as raw:
        started = time.monotonic()
        response = raw.request(request)
        assert response.error_code == 0
        return time.monotonic() - started


def test_dynamic_initial_rebalance_delay_takes_effect_without_restart(gateway):
    """3 s set dynamically delays the next new group's first rebalance (the serve option's
    default is 300 ms); deleting it returns to the option's value."""
    assert _join_seconds(gateway.bootstrap) < 2.0
    name = "group.initial.rebalance.delay.ms"
    assert incremental(gateway.bootstrap, "1", [(name, SET, "3000")]) == (0, None)
    _, _, configs = describe(gateway.bootstrap, "1", (name,))
    assert configs[name][:3] == ("3000", DYNAMIC_BROKER, False)
    assert _join_seconds(gateway.bootstrap) >= 2.9
    assert incremental(gateway.bootstrap, "1", [(name, DELETE, None)]) == (0, None)
    assert _join_seconds(gateway.bootstrap) < 2.0
