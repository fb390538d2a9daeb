"""The APIs and versions streamgate implements, and where each turns flexible.

Only what is listed here is advertised in ApiVersions; a request for anything else closes
the connection, as Kafka brokers do.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    CREATE_PARTITIONS = 37
    SASL_AUTHENTICATE = 36
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


@dataclass(frozen=True, slots=True)
class ApiSupport:
    advertised_min: int
    max_version: int
    first_flexible: int
    # Versions below this are advertised (old librdkafka matches exact version ranges) but
    # answered by closing the connection; modern clients never pick them.
    accepted_min: int | None = None

    @property
    def min_version(self) -> int:
        return self.advertised_min if self.accepted_min is None else self.accepted_min

    def accepts(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def is_flexible(self, version: int) -> bool:
        return version >= self.first_flexible


SUPPORTED_APIS: dict[int, ApiSupport] = {
    ApiKey.PRODUCE: ApiSupport(0, 12, 9, accepted_min=3),  # v11: TRANSACTION_ABORTABLE
    ApiKey.FETCH: ApiSupport(4, 18, 12),  # v13+: topic ids
    ApiKey.LIST_OFFSETS: ApiSupport(1, 10, 6),  # v9: latest tiered, v10: timeout
    ApiKey.METADATA: ApiSupport(0, 13, 9),  # v13: top-level error code
    ApiKey.OFFSET_COMMIT: ApiSupport(2, 9, 8),  # v9: member epochs of consumer groups
    ApiKey.OFFSET_FETCH: ApiSupport(1, 9, 6),  # v8: several groups, v9: member epochs
    ApiKey.FIND_COORDINATOR: ApiSupport(0, 5, 3),  # v4: several keys
    ApiKey.JOIN_GROUP: ApiSupport(0, 9, 6),  # v8: reason, v9: skip_assignment (never set)
    ApiKey.HEARTBEAT: ApiSupport(0, 4, 4),
    ApiKey.LEAVE_GROUP: ApiSupport(0, 5, 4),  # v5: reason
    ApiKey.SYNC_GROUP: ApiSupport(0, 5, 4),
    ApiKey.DESCRIBE_GROUPS: ApiSupport(0, 6, 5),  # v6: GROUP_ID_NOT_FOUND
    ApiKey.LIST_GROUPS: ApiSupport(0, 5, 3),  # v5: group types
    ApiKey.API_VERSIONS: ApiSupport(0, 4, 3),
    ApiKey.CREATE_TOPICS: ApiSupport(2, 7, 5),  # v7: topic id
    ApiKey.DELETE_TOPICS: ApiSupport(1, 6, 4),  # v6: by topic id
    ApiKey.DELETE_RECORDS: ApiSupport(0, 2, 2),
    ApiKey.INIT_PRODUCER_ID: ApiSupport(0, 5, 2),
    ApiKey.DELETE_GROUPS: ApiSupport(0, 2, 2),
    ApiKey.OFFSET_DELETE: ApiSupport(0, 0, 99),  # never flexible
    ApiKey.DESCRIBE_CONFIGS: ApiSupport(1, 4, 4),
    ApiKey.ALTER_CONFIGS: ApiSupport(0, 2, 2),
    ApiKey.CREATE_PARTITIONS: ApiSupport(0, 3, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: ApiSupport(0, 1, 1),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: ApiSupport(0, 0, 0),  # the Java admin's describeTopics
    ApiKey.DESCRIBE_CLUSTER: ApiSupport(0, 2, 0),  # v2: fenced brokers (none here)
    # Admin APIs answered by gateway/handlers/replicas.py (one node, one log dir).
    ApiKey.ALTER_REPLICA_LOG_DIRS: ApiSupport(1, 2, 2),
    ApiKey.DESCRIBE_LOG_DIRS: ApiSupport(1, 4, 2),
    ApiKey.ELECT_LEADERS: ApiSupport(0, 2, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: ApiSupport(0, 0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: ApiSupport(0, 0, 0),
    # SECURITY_DISABLED without --authorizer, as Kafka without one (gateway/handlers/acls.py).
    ApiKey.DESCRIBE_ACLS: ApiSupport(1, 3, 2),
    ApiKey.CREATE_ACLS: ApiSupport(1, 3, 2),
    ApiKey.DELETE_ACLS: ApiSupport(1, 3, 2),
    # Transactions (gateway/handlers/txn.py, core/txn): KIP-890 part 1 (v4+ may answer
    # TRANSACTION_ABORTABLE) and transaction.version 2 (EndTxn v5 bumps the epoch,
    # TxnOffsetCommit v5 and Produce v12 add to the transaction implicitly).
    ApiKey.ADD_PARTITIONS_TO_TXN: ApiSupport(0, 5, 3),  # v4+: batched, verify-only
    ApiKey.ADD_OFFSETS_TO_TXN: ApiSupport(0, 4, 3),
    ApiKey.END_TXN: ApiSupport(0, 5, 3),
    ApiKey.TXN_OFFSET_COMMIT: ApiSupport(0, 5, 3),
    ApiKey.DESCRIBE_TRANSACTIONS: ApiSupport(0, 0, 0),
    ApiKey.LIST_TRANSACTIONS: ApiSupport(0, 2, 0),  # v1: duration filter, v2: id pattern
    # Client quotas (gateway/handlers/quotas.py), enforced on Produce/Fetch (gateway/limits).
    ApiKey.DESCRIBE_CLIENT_QUOTAS: ApiSupport(0, 1, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: ApiSupport(0, 1, 1),
    # SASL (gateway/security/sasl.py) and SCRAM credentials (gateway/handlers/security.py).
    ApiKey.SASL_HANDSHAKE: ApiSupport(0, 1, 99),  # never flexible
    ApiKey.SASL_AUTHENTICATE: ApiSupport(0, 2, 2),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: ApiSupport(0, 0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: ApiSupport(0, 0, 0),
    # The next-generation consumer group protocol (gateway/handlers/consumer_groups.py).
    ApiKey.CONSUMER_GROUP_HEARTBEAT: ApiSupport(0, 1, 0),
    ApiKey.CONSUMER_GROUP_DESCRIBE: ApiSupport(0, 1, 0),
    # Share groups (gateway/handlers/share.py, core/sharegroups): Kafka 4.1's versions.
    ApiKey.SHARE_GROUP_HEARTBEAT: ApiSupport(1, 1, 0),
    ApiKey.SHARE_GROUP_DESCRIBE: ApiSupport(1, 1, 0),
    ApiKey.SHARE_FETCH: ApiSupport(1, 1, 0),
    ApiKey.SHARE_ACKNOWLEDGE: ApiSupport(1, 1, 0),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: ApiSupport(0, 1, 0),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: ApiSupport(0, 0, 0),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: ApiSupport(0, 0, 0),
}

# Feature flags ApiVersions v3+ reports (KIP-584): name -> (min, max) supported, and the
# level in force. group.version 1: the consumer group protocol (ConsumerGroupHeartbeat);
# share.version 1: share groups (KIP-932); transaction.version 2: transactions v2 (KIP-890
# part 2; one node only, see gateway/handlers/admin.py). A range starting at 0 is reported
# from v4 only: clients before KIP-1022 (Java 3.x) refuse it.
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {
    "group.version": (0, 1),
    "share.version": (1, 1),
    "transaction.version": (0, 2),
}
FINALIZED_FEATURES: dict[str, int] = {
    "group.version": 1,
    "share.version": 1,
    "transaction.version": 2,
}
# Not finalized on several nodes: a partition's leader there cannot add it to a transaction
# another node coordinates, so clients keep transactions v1.
SINGLE_NODE_FEATURES = frozenset({"transaction.version"})
