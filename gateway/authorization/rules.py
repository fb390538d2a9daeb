"""Every API's authorization rule, as a row of a table (Kafka's checks, per KafkaApis).

A rule says which permissions a request needs and where a refusal is answered:
- `whole`: checks on the request as a whole, in order (the transactional id, the group, the
  cluster). The first one denied answers the request without calling the handler: every
  error code of the response gets its error, and, when `whole_items`, every item of
  `items` too;
- `each`: the check on each item of the request collection `items.request`. The handler is
  called with the allowed items only; the denied ones are answered in place, in request
  order, each item with its error. `unless`: a permission on the cluster that allows every
  item at once (CreateTopics' CREATE, ListGroups' DESCRIBE);
- where the request has no such collection (a listing: ListGroups, ListTransactions,
  OffsetFetch of every topic), the handler's answer in `items.response` is cut to the items
  `each` allows.

A check's error follows its resource type (TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_
AUTHORIZATION_FAILED), its message is the rule's `message` where the response has an
`error_message`. Responses are built from Kafka's schema (`kafkawire.error_response`).

Not rows (guard.py): Produce (the transactional id, and CREATE for auto-creation),
InitProducerId (KIP-679's idempotent producer), AddPartitionsToTxn (all or nothing);
DescribeGroups and DescribeCluster are rows, with KIP-430's operations added after.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.acl.model import CLUSTER_NAME, Operation, ResourceType
from core.errors import ErrorCode
from gateway.handlers.context import GatewayContext
from kafkawire.apis import ApiKey
from kafkawire.error_response import Items

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
CLUSTER = ResourceType.CLUSTER
TXN = ResourceType.TRANSACTIONAL_ID

DENIED = {
    TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    TXN: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}
AUTHORIZATION_FAILED = "Authorization failed."
CLUSTER_AUTHORIZATION_FAILED = "Cluster authorization failed."

# How a request (or a request item) names the resource checked: an attribute ("name"),
# the item itself (""), or a function of the item; None: nothing to check here.
Name = str | Callable[[GatewayContext, Any], str | None]
# The resource type, or a function of the request (or item) giving it; None: not checked.
Resource = ResourceType | Callable[[Any], ResourceType | None]


@dataclass(frozen=True)
class Check:
    op: Operation
    resource: Resource
    name: Name = "name"


@dataclass(frozen=True)
class Rule:
    whole: tuple[Check, ...] = ()
    each: Check | None = None
    items: Items | None = None
    unless: Operation | None = None  # on the cluster: allows every item
    whole_items: bool = True  # a `whole` refusal answers every item too
    message: str | None = None


def on_cluster(op: Operation, items: Items | None = None) -> Rule:
    """A cluster API: `op` on the cluster, refused with Kafka's cluster message."""
    return Rule(
        whole=(Check(op, CLUSTER, lambda _ctx, _body: CLUSTER_NAME),),
        items=items,
        message=CLUSTER_AUTHORIZATION_FAILED,
    )


# Config resource types (DescribeConfigs, AlterConfigs): a topic is a topic, a broker or
# its loggers are the cluster; the handler refuses other types.
_CONFIG_RESOURCES = {2: TOPIC, 4: CLUSTER, 8: CLUSTER, 32: GROUP}


def _config_resource(resource: Any) -> ResourceType | None:
    return _CONFIG_RESOURCES.get(resource.resource_type)


def _config_name(_ctx: GatewayContext, resource: Any) -> str:
    return CLUSTER_NAME if resource.resource_type not in (2, 32) else str(resource.resource_name)


def _coordinator_resource(body: Any) -> ResourceType:
    return TXN if getattr(body, "key_type", 0) == 1 else GROUP


def _topic_by_name_or_id(ctx: GatewayContext, item: Any) -> str | None:
    """DeleteTopics: v1-5 name topics, v6 by name or id (unknown ids: the handler answers)."""
    if isinstance(item, str) or item.name is not None:
        return str(item if isinstance(item, str) else item.name)
    topic = ctx.store.topic_by_id(item.topic_id) if item.topic_id is not None else None
    return None if topic is None else topic.name


_PARTITIONS = Items(("partitions",), "partitions")
_TOPICS = Items(("topics",), "topics", nested=_PARTITIONS)
TXN_WRITE = Check(Operation.WRITE, TXN, "transactional_id")
TOPIC_WRITE = Check(Operation.WRITE, TOPIC)

RULES: dict[int, Rule] = {
    ApiKey.LIST_OFFSETS: Rule(each=Check(Operation.DESCRIBE, TOPIC), items=_TOPICS),
    ApiKey.OFFSET_COMMIT: Rule(
        whole=(Check(Operation.READ, GROUP, "group_id"),),
        each=Check(Operation.READ, TOPIC),
        items=_TOPICS,
    ),
    ApiKey.OFFSET_FETCH: Rule(
        whole=(Check(Operation.DESCRIBE, GROUP, "group_id"),),
        each=Check(Operation.DESCRIBE, TOPIC),
        items=Items(
            ("topics",),
            "topics",
            # Kafka's OffsetFetch answers "no metadata" as "", not null
            nested=Items(("partition_indexes",), "partitions", values={"metadata": ""}),
        ),
    ),
    ApiKey.FIND_COORDINATOR: Rule(whole=(Check(Operation.DESCRIBE, _coordinator_resource, "key"),)),
    ApiKey.JOIN_GROUP: Rule(whole=(Check(Operation.READ, GROUP, "group_id"),)),
    ApiKey.HEARTBEAT: Rule(whole=(Check(Operation.READ, GROUP, "group_id"),)),
    ApiKey.LEAVE_GROUP: Rule(whole=(Check(Operation.READ, GROUP, "group_id"),)),
    ApiKey.SYNC_GROUP: Rule(whole=(Check(Operation.READ, GROUP, "group_id"),)),
    ApiKey.DESCRIBE_GROUPS: Rule(
        each=Check(Operation.DESCRIBE, GROUP, ""), items=Items(("groups",), "groups")
    ),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: Rule(whole=(Check(Operation.READ, GROUP, "group_id"),)),
    ApiKey.CONSUMER_GROUP_DESCRIBE: Rule(
        each=Check(Operation.DESCRIBE, GROUP, ""), items=Items(("group_ids",), "groups")
    ),
    ApiKey.LIST_GROUPS: Rule(
        each=Check(Operation.DESCRIBE, GROUP, "group_id"),
        items=Items((), "groups"),
        unless=Operation.DESCRIBE,
    ),
    ApiKey.CREATE_TOPICS: Rule(
        each=Check(Operation.CREATE, TOPIC),
        items=Items(("topics",), "topics"),
        unless=Operation.CREATE,
        message=AUTHORIZATION_FAILED,
    ),
    ApiKey.DELETE_TOPICS: Rule(
        each=Check(Operation.DELETE, TOPIC, _topic_by_name_or_id),
        items=Items(("topic_names", "topics"), "responses"),  # v1-5, v6
        message=AUTHORIZATION_FAILED,
    ),
    ApiKey.DELETE_RECORDS: Rule(each=Check(Operation.DELETE, TOPIC), items=_TOPICS),
    ApiKey.ADD_OFFSETS_TO_TXN: Rule(whole=(TXN_WRITE, Check(Operation.READ, GROUP, "group_id"))),
    ApiKey.END_TXN: Rule(whole=(TXN_WRITE,)),
    ApiKey.TXN_OFFSET_COMMIT: Rule(
        whole=(TXN_WRITE, Check(Operation.READ, GROUP, "group_id")),
        each=Check(Operation.READ, TOPIC),
        items=_TOPICS,
    ),
    # Share groups are GROUP resources; ShareFetch checks READ on each topic it serves.
    ApiKey.SHARE_GROUP_HEARTBEAT: Rule(whole=(Check(Operation.READ, GROUP, "group_id"),)),
    ApiKey.SHARE_GROUP_DESCRIBE: Rule(
        each=Check(Operation.DESCRIBE, GROUP, ""), items=Items(("group_ids",), "groups")
    ),
    ApiKey.SHARE_FETCH: Rule(whole=(Check(Operation.READ, GROUP, "group_id"),)),
    ApiKey.SHARE_ACKNOWLEDGE: Rule(whole=(Check(Operation.READ, GROUP, "group_id"),)),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: Rule(
        each=Check(Operation.DESCRIBE, GROUP, "group_id"), items=Items(("groups",), "groups")
    ),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: Rule(whole=(Check(Operation.READ, GROUP, "group_id"),)),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: Rule(whole=(Check(Operation.DELETE, GROUP, "group_id"),)),
    ApiKey.DESCRIBE_TRANSACTIONS: Rule(
        each=Check(Operation.DESCRIBE, TXN, ""),
        items=Items(("transactional_ids",), "transaction_states"),
    ),
    ApiKey.LIST_TRANSACTIONS: Rule(
        each=Check(Operation.DESCRIBE, TXN, "transactional_id"),
        items=Items((), "transaction_states"),
    ),
    ApiKey.DESCRIBE_CONFIGS: Rule(
        each=Check(Operation.DESCRIBE_CONFIGS, _config_resource, _config_name),
        items=Items(("resources",), "results"),
        message=AUTHORIZATION_FAILED,
    ),
    ApiKey.ALTER_CONFIGS: Rule(
        each=Check(Operation.ALTER_CONFIGS, _config_resource, _config_name),
        items=Items(("resources",), "responses"),
        message=AUTHORIZATION_FAILED,
    ),
    ApiKey.CREATE_PARTITIONS: Rule(
        each=Check(Operation.ALTER, TOPIC),
        items=Items(("topics",), "results"),
        message=AUTHORIZATION_FAILED,
    ),
    ApiKey.DELETE_GROUPS: Rule(
        each=Check(Operation.DELETE, GROUP, ""), items=Items(("groups_names",), "results")
    ),
    ApiKey.OFFSET_DELETE: Rule(
        whole=(Check(Operation.DELETE, GROUP, "group_id"),),
        each=Check(Operation.READ, TOPIC),
        items=_TOPICS,
        whole_items=False,  # Kafka answers a denied group with the top-level error alone
    ),
    ApiKey.DESCRIBE_CLUSTER: on_cluster(Operation.DESCRIBE),
    # SCRAM credentials are cluster resources in Kafka: DESCRIBE and ALTER on the cluster.
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: on_cluster(Operation.DESCRIBE),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: on_cluster(
        Operation.ALTER, Items(("deletions", "upsertions"), "results", keys={"user": "name"})
    ),
    ApiKey.ALTER_REPLICA_LOG_DIRS: on_cluster(
        Operation.ALTER,
        Items(("dirs.topics",), "results", nested=_PARTITIONS, keys={"topic_name": "name"}),
    ),
    ApiKey.DESCRIBE_LOG_DIRS: on_cluster(Operation.DESCRIBE),
    ApiKey.ELECT_LEADERS: on_cluster(Operation.ALTER),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: on_cluster(Operation.ALTER),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: on_cluster(Operation.DESCRIBE),
    ApiKey.DESCRIBE_ACLS: on_cluster(Operation.DESCRIBE),
    ApiKey.CREATE_ACLS: on_cluster(Operation.ALTER, Items(("creations",), "results")),
    ApiKey.DELETE_ACLS: on_cluster(Operation.ALTER, Items(("filters",), "filter_results")),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: on_cluster(Operation.DESCRIBE_CONFIGS),
    ApiKey.ALTER_CLIENT_QUOTAS: on_cluster(
        Operation.ALTER_CONFIGS,
        Items(("entries",), "entries", nested=Items(("entity",), "entity")),
    ),
}
RULES[ApiKey.INCREMENTAL_ALTER_CONFIGS] = RULES[ApiKey.ALTER_CONFIGS]
