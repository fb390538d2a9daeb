"""The authorizer on every API: each ACL-guarded request tried by an allowed principal
(User:alice, with ACLs on her resources) and by a denied one (User:mallory, no ACL), raw
requests through one real gateway started with --authorizer."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from support.acl import ADMIN, PrincipalClient, acl_gateway
from support.client import Rec, build_record_batch

TOPIC = "acl-t"
DOOMED = "acl-del"  # deleted by the allowed principal
GROUP = "acl-g"
TXN = "acl-tx"
ALICE, MALLORY = "alice", "mallory"

TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED = 29, 30, 31, 53
# Kafka's codes: resource types, pattern LITERAL/PREFIXED, operation ALL, permission ALLOW.
R_TOPIC, R_GROUP, R_CLUSTER, R_TXN = 2, 3, 4, 5
LITERAL, PREFIXED, ALL, ALLOW = 3, 4, 2, 3


def _acl(rtype: int, name: str, pattern: int = LITERAL, user: str = ALICE) -> dict[str, Any]:
    return {
        "resource_type": rtype,
        "resource_name": name,
        "resource_pattern_type": pattern,
        "principal": f"User:{user}",
        "host": "*",
        "operation": ALL,
        "permission_type": ALLOW,
    }


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    gateway = acl_gateway(tmp_path_factory.mktemp("acl"))
    gateway.start_fresh()
    with PrincipalClient(gateway.bootstrap, ADMIN) as admin:
        created = admin.call(
            19,
            7,
            {
                "topics": [
                    {"name": name, "num_partitions": 2, "replication_factor": 1}
                    for name in (TOPIC, DOOMED)
                ],
                "timeout": 10_000,
            },
        )
        assert [int(t.error_code) for t in created.topics] == [0, 0]
        acls = [
            _acl(R_TOPIC, "acl-", PREFIXED),
            _acl(R_GROUP, GROUP),
            _acl(R_GROUP, "acl-g2"),
            _acl(R_TXN, TXN),
            _acl(R_CLUSTER, "kafka-cluster"),
        ]
        result = admin.call(30, 3, {"creations": acls})
        assert [int(r.error_code) for r in result.results] == [0] * len(acls)
    yield gateway
    gateway.close()


def _batch() -> bytes:
    return build_record_batch([Rec(b"k", b"v")])


def _partition_codes(topics: Any, partitions: str = "partitions") -> set[int]:
    return {int(p.error_code) for t in topics for p in getattr(t, partitions)}


@dataclass(frozen=True)
class Case:
    name: str
    api_key: int
    version: int
    body: Callable[[], dict[str, Any]]
    codes: Callable[[Any], set[int]]
    denied: int
    allowed: frozenset[int] = frozenset({0})  # codes an allowed principal may get


def _ok_unless(denied: int) -> frozenset[int]:
    """For requests whose allowed outcome is some other error (one node, no transactions...)."""
    return frozenset(set(range(-1, 120)) - {denied, TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED})


CASES = [
    Case(
        "produce",
        0,
        9,
        lambda: {
            "acks": -1,
            "timeout": 5000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": _batch()}]}],
        },
        lambda r: _partition_codes(r.responses, "partition_responses"),
        TOPIC_DENIED,
    ),
    Case(
        "fetch",
        1,
        12,
        lambda: {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "topics": [
                {
                    "topic": TOPIC,
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
        },
        lambda r: {int(p.error_code) for t in r.responses for p in t.partitions},
        TOPIC_DENIED,
    ),
    Case(
        "list_offsets",
        2,
        7,
        lambda: {
            "replica_id": -1,
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
        lambda r: _partition_codes(r.topics),
        TOPIC_DENIED,
    ),
    Case(
        "metadata",
        3,
        12,
        lambda: {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False},
        lambda r: {int(t.error_code) for t in r.topics},
        TOPIC_DENIED,
    ),
    Case(
        "metadata_auto_create",
        3,
        12,
        lambda: {"topics": [{"name": "acl-auto"}], "allow_auto_topic_creation": True},
        lambda r: {int(t.error_code) for t in r.topics},
        TOPIC_DENIED,
    ),
    Case(
        "offset_commit",
        8,
        8,
        lambda: {
            "group_id": GROUP,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 0}]}
            ],
        },
        lambda r: _partition_codes(r.topics),
        GROUP_DENIED,
    ),
    Case(
        "offset_fetch",
        9,
        7,
        lambda: {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0]}]},
        lambda r: {int(r.error_code)} | _partition_codes(r.topics),
        GROUP_DENIED,
    ),
    Case(
        "offset_fetch_v9_groups",
        9,
        9,
        lambda: {
            "groups": [{"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]
        },
        lambda r: (
            {int(g.error_code) for g in r.groups}
            | {int(p.error_code) for g in r.groups for t in g.topics for p in t.partitions}
        ),
        GROUP_DENIED,
    ),
    Case(
        "consumer_group_heartbeat",
        68,
        1,
        lambda: {
            "group_id": GROUP,
            "member_id": "acl-member",
            "member_epoch": -1,  # a leave: the classic cases keep the group to themselves
            "topic_partitions": None,
        },
        lambda r: {int(r.error_code)},
        GROUP_DENIED,
        frozenset({25}),  # UNKNOWN_MEMBER_ID
    ),
    Case(
        "consumer_group_describe",
        69,
        1,
        lambda: {"group_ids": [GROUP], "include_authorized_operations": False},
        lambda r: {int(g.error_code) for g in r.groups},
        GROUP_DENIED,
        frozenset({0, 69}),  # GROUP_ID_NOT_FOUND when the group is not a consumer group
    ),
    Case(
        "find_coordinator",
        10,
        3,
        lambda: {"key": GROUP, "key_type": 0},
        lambda r: {int(r.error_code)},
        GROUP_DENIED,
    ),
    Case(
        "find_coordinator_v4_keys",
        10,
        4,
        lambda: {"coordinator_keys": [GROUP], "key_type": 0},
        lambda r: {int(c.error_code) for c in r.coordinators},
        GROUP_DENIED,
    ),
    Case(
        "join_group",
        11,
        7,
        lambda: {
            "group_id": GROUP,
            "session_timeout": 10_000,
            "rebalance_timeout": 10_000,
            "member_id": "",
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        },
        lambda r: {int(r.error_code)},
        GROUP_DENIED,
        frozenset({79}),
    ),  # MEMBER_ID_REQUIRED
    Case(
        "heartbeat",
        12,
        4,
        lambda: {"group_id": GROUP, "generation_id": 1, "member_id": "m"},
        lambda r: {int(r.error_code)},
        GROUP_DENIED,
        _ok_unless(GROUP_DENIED),
    ),
    Case(
        "leave_group",
        13,
        4,
        lambda: {"group_id": GROUP, "members": [{"member_id": "m"}]},
        lambda r: {int(r.error_code)},
        GROUP_DENIED,
        _ok_unless(GROUP_DENIED),
    ),
    Case(
        "sync_group",
        14,
        5,
        lambda: {
            "group_id": GROUP,
            "generation_id": 1,
            "member_id": "m",
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [],
        },
        lambda r: {int(r.error_code)},
        GROUP_DENIED,
        _ok_unless(GROUP_DENIED),
    ),
    Case(
        "describe_groups",
        15,
        5,
        lambda: {"groups": [GROUP]},
        lambda r: {int(g.error_code) for g in r.groups},
        GROUP_DENIED,
    ),
    Case(
        "create_topics",
        19,
        7,
        lambda: {
            "topics": [{"name": "acl-new", "num_partitions": 1, "replication_factor": 1}],
            "timeout": 5000,
            "validate_only": True,
        },
        lambda r: {int(t.error_code) for t in r.topics},
        TOPIC_DENIED,
    ),
    Case(
        "delete_topics",
        20,
        6,
        lambda: {"topics": [{"name": DOOMED}], "timeout": 5000},
        lambda r: {int(t.error_code) for t in r.responses},
        TOPIC_DENIED,
    ),
    Case(
        "delete_records",
        21,
        2,
        lambda: {
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 1, "offset": 0}]}],
            "timeout": 5000,
        },
        lambda r: _partition_codes(r.topics),
        TOPIC_DENIED,
    ),
    Case(
        "init_producer_id",
        22,
        4,
        lambda: {
            "transactional_id": None,
            "transaction_timeout": 60_000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
        lambda r: {int(r.error_code)},
        CLUSTER_DENIED,
    ),
    Case(
        "init_producer_id_txn",
        22,
        4,
        lambda: {
            "transactional_id": TXN,
            "transaction_timeout": 60_000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
        lambda r: {int(r.error_code)},
        TXN_DENIED,
        _ok_unless(TXN_DENIED),
    ),
    Case(
        "describe_acls",
        29,
        3,
        lambda: {
            "resource_type_filter": 1,
            "pattern_type_filter": 1,
            "operation": 1,
            "permission_type": 1,
        },
        lambda r: {int(r.error_code)},
        CLUSTER_DENIED,
    ),
    Case(
        "create_acls",
        30,
        3,
        lambda: {"creations": [_acl(R_TOPIC, "acl-extra", user="carol")]},
        lambda r: {int(x.error_code) for x in r.results},
        CLUSTER_DENIED,
    ),
    Case(
        "delete_acls",
        31,
        3,
        lambda: {
            "filters": [
                {
                    "resource_type_filter": R_TOPIC,
                    "resource_name_filter": "nothing-here",
                    "pattern_type_filter": LITERAL,
                    "operation": 1,
                    "permission_type": 1,
                }
            ]
        },
        lambda r: {int(x.error_code) for x in r.filter_results},
        CLUSTER_DENIED,
    ),
    Case(
        "describe_configs_topic",
        32,
        4,
        lambda: {
            "resources": [{"resource_type": 2, "resource_name": TOPIC, "configuration_keys": None}]
        },
        lambda r: {int(x.error_code) for x in r.results},
        TOPIC_DENIED,
    ),
    Case(
        "describe_configs_broker",
        32,
        4,
        lambda: {
            "resources": [{"resource_type": 4, "resource_name": "1", "configuration_keys": None}]
        },
        lambda r: {int(x.error_code) for x in r.results},
        CLUSTER_DENIED,
    ),
    Case(
        "describe_configs_group",
        32,
        4,
        lambda: {
            "resources": [{"resource_type": 32, "resource_name": GROUP, "configuration_keys": None}]
        },
        lambda r: {int(x.error_code) for x in r.results},
        GROUP_DENIED,
    ),
    Case(
        "incremental_alter_configs_group",
        44,
        1,
        lambda: {
            "resources": [
                {
                    "resource_type": 32,
                    "resource_name": GROUP,
                    "configs": [
                        {
                            "name": "consumer.heartbeat.interval.ms",
                            "config_operation": 0,
                            "value": "6000",
                        }
                    ],
                }
            ],
            "validate_only": True,
        },
        lambda r: {int(x.error_code) for x in r.responses},
        GROUP_DENIED,
    ),
    Case(
        "alter_configs",
        33,
        2,
        lambda: {
            "resources": [{"resource_type": 2, "resource_name": TOPIC, "configs": []}],
            "validate_only": True,
        },
        lambda r: {int(x.error_code) for x in r.responses},
        TOPIC_DENIED,
    ),
    Case(
        "alter_replica_log_dirs",
        34,
        2,
        lambda: {"dirs": [{"path": "/nowhere", "topics": [{"name": TOPIC, "partitions": [0]}]}]},
        lambda r: _partition_codes(r.results),
        CLUSTER_DENIED,
        _ok_unless(CLUSTER_DENIED),
    ),
    Case(
        "describe_log_dirs",
        35,
        4,
        lambda: {"topics": None},
        lambda r: {int(r.error_code)},
        CLUSTER_DENIED,
    ),
    Case(
        "create_partitions",
        37,
        3,
        lambda: {
            "topics": [{"name": TOPIC, "count": 3, "assignments": None}],
            "timeout": 5000,
            "validate_only": True,
        },
        lambda r: {int(x.error_code) for x in r.results},
        TOPIC_DENIED,
    ),
    Case(
        "delete_groups",
        42,
        2,
        lambda: {"groups_names": ["acl-g2"]},
        lambda r: {int(x.error_code) for x in r.results},
        GROUP_DENIED,
        frozenset({69}),
    ),  # GROUP_ID_NOT_FOUND
    Case(
        "elect_leaders",
        43,
        2,
        lambda: {"election_type": 0, "topic_partitions": None, "timeout": 5000},
        lambda r: {int(r.error_code)},
        CLUSTER_DENIED,
    ),
    Case(
        "incremental_alter_configs",
        44,
        1,
        lambda: {
            "resources": [{"resource_type": 2, "resource_name": TOPIC, "configs": []}],
            "validate_only": True,
        },
        lambda r: {int(x.error_code) for x in r.responses},
        TOPIC_DENIED,
    ),
    Case(
        "alter_partition_reassignments",
        45,
        0,
        lambda: {"timeout": 5000, "topics": []},
        lambda r: {int(r.error_code)},
        CLUSTER_DENIED,
    ),
    Case(
        "list_partition_reassignments",
        46,
        0,
        lambda: {"timeout": 5000, "topics": None},
        lambda r: {int(r.error_code)},
        CLUSTER_DENIED,
    ),
    Case(
        "offset_delete",
        47,
        0,
        lambda: {
            "group_id": GROUP,
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}],
        },
        lambda r: {int(r.error_code)},
        GROUP_DENIED,
        _ok_unless(GROUP_DENIED),
    ),
    Case(
        "describe_client_quotas",
        48,
        1,
        lambda: {"components": [], "strict": False},
        lambda r: {int(r.error_code)},
        CLUSTER_DENIED,
    ),
    Case(
        "alter_client_quotas",
        49,
        1,
        lambda: {
            "entries": [
                {
                    "entity": [{"entity_type": "user", "entity_name": "someone"}],
                    "ops": [{"key": "producer_byte_rate", "value": 1000.0, "remove": False}],
                }
            ],
            "validate_only": True,
        },
        lambda r: {int(x.error_code) for x in r.entries},
        CLUSTER_DENIED,
    ),
    Case(
        "describe_cluster",
        60,
        1,
        lambda: {"include_cluster_authorized_operations": True},
        lambda r: {int(r.error_code)},
        CLUSTER_DENIED,
    ),
    Case(
        "describe_user_scram_credentials",
        50,
        0,
        lambda: {"users": None},
        lambda r: {int(r.error_code)},
        CLUSTER_DENIED,
    ),
    Case(
        "alter_user_scram_credentials",
        51,
        0,
        lambda: {"deletions": [{"name": "nobody", "mechanism": 1}], "upsertions": []},
        lambda r: {int(x.error_code) for x in r.results},
        CLUSTER_DENIED,
        _ok_unless(CLUSTER_DENIED),
    ),
    Case(
        "add_partitions_to_txn",
        24,
        3,
        lambda: {
            "v3_and_below_transactional_id": TXN,
            "v3_and_below_producer_id": 0,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}],
        },
        lambda r: {
            int(p.partition_error_code)
            for t in r.results_by_topic_v3_and_below
            for p in t.results_by_partition
        },
        TXN_DENIED,
        _ok_unless(TXN_DENIED),
    ),
    Case(
        "add_offsets_to_txn",
        25,
        3,
        lambda: {"transactional_id": TXN, "producer_id": 0, "producer_epoch": 0, "group_id": GROUP},
        lambda r: {int(r.error_code)},
        TXN_DENIED,
        _ok_unless(TXN_DENIED),
    ),
    Case(
        "end_txn",
        26,
        3,
        lambda: {
            "transactional_id": TXN,
            "producer_id": 0,
            "producer_epoch": 0,
            "committed": False,
        },
        lambda r: {int(r.error_code)},
        TXN_DENIED,
        _ok_unless(TXN_DENIED),
    ),
    Case(
        "txn_offset_commit",
        28,
        3,
        lambda: {
            "transactional_id": TXN,
            "group_id": GROUP,
            "producer_id": 0,
            "producer_epoch": 0,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": TOPIC,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 0,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        },
        lambda r: _partition_codes(r.topics),
        TXN_DENIED,
        _ok_unless(TXN_DENIED),
    ),
    Case(
        "describe_transactions",
        65,
        0,
        lambda: {"transactional_ids": [TXN]},
        lambda r: {int(t.error_code) for t in r.transaction_states},
        TXN_DENIED,
        _ok_unless(TXN_DENIED),
    ),
    # share groups: GROUP resources
    Case(
        "share_group_heartbeat",
        76,
        1,
        lambda: {
            "group_id": GROUP,
            "member_id": "acl-member",
            "member_epoch": 0,
            "subscribed_topic_names": [TOPIC],
        },
        lambda r: {int(r.error_code)},
        GROUP_DENIED,
        _ok_unless(GROUP_DENIED),
    ),
    Case(
        "share_group_describe",
        77,
        1,
        lambda: {"group_ids": [GROUP], "include_authorized_operations": False},
        lambda r: {int(g.error_code) for g in r.groups},
        GROUP_DENIED,
        _ok_unless(GROUP_DENIED),
    ),
    Case(
        "share_fetch",
        78,
        1,
        lambda: {
            "group_id": GROUP,
            "member_id": "acl-member",
            "share_session_epoch": 0,
            "max_wait": 0,
            "min_bytes": 0,
            "max_records": 10,
            "batch_size": 10,
            "topics": [],
            "forgotten_topics_data": [],
        },
        lambda r: {int(r.error_code)},
        GROUP_DENIED,
    ),
    Case(
        "share_acknowledge",
        79,
        1,
        lambda: {
            "group_id": GROUP,
            "member_id": "acl-member",
            "share_session_epoch": 0,
            "topics": [],
        },
        lambda r: {int(r.error_code)},
        GROUP_DENIED,
    ),
    Case(
        "describe_share_group_offsets",
        90,
        1,
        lambda: {"groups": [{"group_id": GROUP, "topics": None}]},
        lambda r: {int(g.error_code) for g in r.groups},
        GROUP_DENIED,
    ),
    Case(
        "alter_share_group_offsets",
        91,
        0,
        lambda: {"group_id": GROUP, "topics": []},
        lambda r: {int(r.error_code)},
        GROUP_DENIED,
        _ok_unless(GROUP_DENIED),
    ),
    Case(
        "delete_share_group_offsets",
        92,
        0,
        lambda: {"group_id": GROUP, "topics": []},
        lambda r: {int(r.error_code)},
        GROUP_DENIED,
        _ok_unless(GROUP_DENIED),
    ),
    Case(
        "describe_topic_partitions",
        75,
        0,
        lambda: {"topics": [{"name": TOPIC}], "response_partition_limit": 10},
        lambda r: {int(t.error_code) for t in r.topics},
        TOPIC_DENIED,
    ),
    Case(
        "add_partitions_to_txn_batched",  # v4+: the brokers' form, CLUSTER_ACTION
        24,
        4,
        lambda: {
            "transactions": [
                {
                    "transactional_id": TXN,
                    "producer_id": -1,
                    "producer_epoch": -1,
                    "verify_only": True,
                    "topics": [{"name": TOPIC, "partitions": [0]}],
                }
            ]
        },
        lambda r: {int(r.error_code)},
        CLUSTER_DENIED,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_allowed_and_denied(gw: Any, case: Case) -> None:
    # The denied principal first: nothing it asks for may happen (e.g. the topic deletion).
    with PrincipalClient(gw.bootstrap, MALLORY) as mallory:
        denied = case.codes(mallory.call(case.api_key, case.version, case.body()))
    assert denied == {case.denied}, f"{case.name} as {MALLORY}: {denied}"
    with PrincipalClient(gw.bootstrap, ALICE) as alice:
        allowed = case.codes(alice.call(case.api_key, case.version, case.body()))
    assert allowed and allowed <= case.allowed, f"{case.name} as {ALICE}: {allowed}"


def test_every_guarded_api_has_a_case() -> None:
    from gateway.authorization.guard import GUARDS, UNGUARDED

    # ListGroups: test_list_groups_filtered; ListTransactions: test_list_transactions_filtered
    tried = {c.api_key for c in CASES} | {16, 66}
    # ApiVersions and the SASL exchange (18, 17, 36) come before any principal exists
    assert set(GUARDS) | (UNGUARDED - {18, 17, 36}) <= tried


def test_mixed_request_split_per_topic(gw: Any) -> None:
    """One Produce with an allowed and a denied topic: each answered on its own."""
    with PrincipalClient(gw.bootstrap, ADMIN) as admin:
        admin.call(
            19,
            7,
            {
                "topics": [{"name": "other", "num_partitions": 1, "replication_factor": 1}],
                "timeout": 5000,
            },
        )
    with PrincipalClient(gw.bootstrap, ALICE) as alice:
        response = alice.call(
            0,
            9,
            {
                "acks": -1,
                "timeout": 5000,
                "topic_data": [
                    {"name": "other", "partition_data": [{"index": 0, "records": _batch()}]},
                    {"name": TOPIC, "partition_data": [{"index": 1, "records": _batch()}]},
                ],
            },
        )
    codes = {t.name: [int(p.error_code) for p in t.partition_responses] for t in response.responses}
    assert [t.name for t in response.responses] == ["other", TOPIC]
    assert codes == {"other": [TOPIC_DENIED], TOPIC: [0]}


def test_metadata_lists_only_describable_topics(gw: Any) -> None:
    with PrincipalClient(gw.bootstrap, MALLORY) as mallory:
        assert mallory.call(3, 12, {"topics": None}).topics == ()
    with PrincipalClient(gw.bootstrap, ALICE) as alice:
        names = {t.name for t in alice.call(3, 12, {"topics": None}).topics}
    assert TOPIC in names and "other" not in names
    with PrincipalClient(gw.bootstrap, ADMIN) as admin:
        assert {TOPIC, "other"} <= {t.name for t in admin.call(3, 12, {"topics": None}).topics}


def test_metadata_authorized_operations(gw: Any) -> None:
    """KIP-430: bit `op` set per allowed operation (READ=3 ... ALTER_CONFIGS=11)."""
    with PrincipalClient(gw.bootstrap, ADMIN) as admin:
        admin.call(
            30, 3, {"creations": [{**_acl(R_TOPIC, "other", user="reader"), "operation": 3}]}
        )  # READ only
    with PrincipalClient(gw.bootstrap, "reader") as reader:
        response = reader.call(
            3,
            10,
            {
                "topics": [{"name": "other"}],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": True,
                "include_topic_authorized_operations": True,
            },
        )
    (topic,) = response.topics
    assert int(topic.error_code) == 0
    assert topic.topic_authorized_operations == (1 << 3) | (1 << 8)  # READ, DESCRIBE implied
    assert response.cluster_authorized_operations == 0


def test_list_groups_filtered(gw: Any) -> None:
    with PrincipalClient(gw.bootstrap, ALICE) as alice:  # creates acl-g (JoinGroup as member)
        first = alice.call(
            11,
            7,
            {
                "group_id": GROUP,
                "session_timeout": 10_000,
                "rebalance_timeout": 10_000,
                "member_id": "",
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}],
            },
        )
        alice.call(
            11,
            7,
            {
                "group_id": GROUP,
                "session_timeout": 10_000,
                "rebalance_timeout": 10_000,
                "member_id": first.member_id,
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}],
            },
        )
    with PrincipalClient(gw.bootstrap, ADMIN) as admin:
        assert GROUP in {g.group_id for g in admin.call(16, 4, {}).groups}
    with PrincipalClient(gw.bootstrap, MALLORY) as mallory:
        assert mallory.call(16, 4, {}).groups == ()


def test_topic_id_of_a_denied_topic(gw: Any) -> None:
    """DeleteTopics v6 by id: a topic the principal may not delete stays."""
    with PrincipalClient(gw.bootstrap, ADMIN) as admin:
        (meta,) = admin.call(3, 12, {"topics": [{"name": TOPIC}]}).topics
    with PrincipalClient(gw.bootstrap, MALLORY) as mallory:
        response = mallory.call(
            20, 6, {"topics": [{"name": None, "topic_id": meta.topic_id}], "timeout": 5000}
        )
    assert [int(t.error_code) for t in response.responses] == [TOPIC_DENIED]
    assert isinstance(meta.topic_id, uuid.UUID)


def test_produce_auto_create_needs_create(gw: Any) -> None:
    """WRITE alone does not create a topic by producing to it (CREATE does)."""
    with PrincipalClient(gw.bootstrap, ADMIN) as admin:
        admin.call(
            30, 3, {"creations": [{**_acl(R_TOPIC, "w-", PREFIXED, user="writer"), "operation": 4}]}
        )  # WRITE
    with PrincipalClient(gw.bootstrap, "writer") as writer:
        response = writer.call(
            0,
            9,
            {
                "acks": -1,
                "timeout": 5000,
                "topic_data": [
                    {"name": "w-new", "partition_data": [{"index": 0, "records": _batch()}]}
                ],
            },
        )
    assert _partition_codes(response.responses, "partition_responses") == {3}
    with PrincipalClient(gw.bootstrap, ADMIN) as admin:
        (meta,) = admin.call(
            3, 12, {"topics": [{"name": "w-new"}], "allow_auto_topic_creation": False}
        ).topics
    assert int(meta.error_code) == 3  # not created


def test_describe_groups_authorized_operations(gw: Any) -> None:
    with PrincipalClient(gw.bootstrap, ALICE) as alice:
        (group,) = alice.call(
            15, 5, {"groups": [GROUP], "include_authorized_operations": True}
        ).groups
    assert int(group.error_code) == 0
    assert group.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)  # READ DELETE DESCRIBE


def test_list_transactions_filtered(gw: Any) -> None:
    """ListTransactions lists only the transactional ids the principal may describe."""
    with PrincipalClient(gw.bootstrap, ALICE) as alice:
        init = alice.call(
            22,
            4,
            {
                "transactional_id": TXN,
                "transaction_timeout": 60_000,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
        assert int(init.error_code) == 0
        listed = alice.call(66, 0, {"state_filters": [], "producer_id_filters": []})
        assert TXN in {t.transactional_id for t in listed.transaction_states}
    with PrincipalClient(gw.bootstrap, MALLORY) as mallory:
        listed = mallory.call(66, 0, {"state_filters": [], "producer_id_filters": []})
        assert int(listed.error_code) == 0
        assert TXN not in {t.transactional_id for t in listed.transaction_states}
