"""Topic configs: every config streamgate knows (every topic config of Kafka 3.x, and the
`streamgate.*` stream settings), with its type, default, documentation and value check.

A config's default is a fixed one from `TOPIC_CONFIGS` or, for configs whose default is a
gateway setting (`max.message.bytes` <- `message.max.bytes`), the static broker config named
by `broker_synonym`. Each check returns the value normalised or raises `ConfigError`
(INVALID_CONFIG) with a message naming the config; only values Kafka itself would refuse are
errors. Configs that have no effect here are stored and described (their documentation says
why); APPLIED_CONFIGS lists the rest. Also the DescribeConfigs / IncrementalAlterConfigs
types shared with the broker configs (`ConfigType`, `ConfigSource`, `AlterOp`, `Synonym`,
`ConfigEntry`). Validating, altering and describing a topic's configs is `topic.py`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from ..errors import ErrorCode

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


class ConfigType(IntEnum):
    """DescribeConfigs `config_type` (v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """DescribeConfigs `config_source` / synonym `source`."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    GROUP_CONFIG = 8  # a group's own config (KIP-848, KIP-932)


class AlterOp(IntEnum):
    """IncrementalAlterConfigs `config_operation`."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigError(ValueError):
    """A config name, value or operation was refused; `error_code` is the Kafka error."""

    def __init__(self, message: str, error_code: int = ErrorCode.INVALID_CONFIG) -> None:
        super().__init__(message)
        self.error_code = error_code


Check = Callable[[str, str], str]  # (name, raw value) -> normalised value, or ConfigError


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    name: str
    type: ConfigType
    default: str | None  # None: the default is the static broker config `broker_synonym`
    doc: str
    check: Check
    broker_synonym: str | None = None


@dataclass(frozen=True, slots=True)
class Synonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One described config: what DescribeConfigs and CreateTopics v5 report."""

    name: str
    value: str | None
    source: ConfigSource
    type: ConfigType
    doc: str
    read_only: bool = False
    is_sensitive: bool = False
    synonyms: tuple[Synonym, ...] = field(default_factory=tuple)


# --- value checks ------------------------------------------------------------------------


def _integer(minimum: int, maximum: int) -> Check:
    def check(name: str, raw: str) -> str:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
        if not minimum <= value <= maximum:
            raise ConfigError(f"{name} must be between {minimum} and {maximum}, got {value}")
        return str(value)

    return check


def _one_of(supported: tuple[str, ...], unsupported: Mapping[str, str] | None = None) -> Check:
    """A string from `supported`; Kafka values in `unsupported` are refused with a reason."""

    def check(name: str, raw: str) -> str:
        value = raw.strip()
        if value in supported:
            return value
        if unsupported and value in unsupported:
            raise ConfigError(f"{name}={value} is not supported: {unsupported[value]}")
        raise ConfigError(f"{name} must be one of {', '.join(supported)}, got {raw!r}")

    return check


def _list_of(supported: tuple[str, ...], unsupported: Mapping[str, str]) -> Check:
    """A comma-separated list of distinct items from `supported`; empty is allowed, as
    Kafka's ValidList allows it."""
    item_check = _one_of(supported, unsupported)

    def check(name: str, raw: str) -> str:
        items = split_list(raw)
        return ",".join(dict.fromkeys(item_check(name, item) for item in items))

    return check


def split_list(raw: str) -> list[str]:
    """The items of a LIST config value (comma-separated, blanks dropped)."""
    return [item.strip() for item in raw.split(",") if item.strip()]


SCALING_POLICIES = ("fixed", "data-rate", "event-rate")
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
LONG_MAX = str(INT64_MAX)


def _boolean(name: str, raw: str) -> str:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"{name} must be true or false, got {raw!r}")
    return value


def _ratio(name: str, raw: str) -> str:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{name} must be between 0 and 1, got {raw!r}")
    return raw.strip()


# Kafka 3.5.1's MetadataVersion values (IBP_0_8_0 ... IBP_3_5_IV2): release and sub-version.
_IBP_VERSIONS = str.split(
    "0.8.0 0.8.1 0.8.2 0.9.0 0.10.0-IV0 0.10.0-IV1 0.10.1-IV0 0.10.1-IV1 0.10.1-IV2 "
    "0.10.2-IV0 0.11.0-IV0 0.11.0-IV1 0.11.0-IV2 1.0-IV0 1.1-IV0 2.0-IV0 2.0-IV1 2.1-IV0 "
    "2.1-IV1 2.1-IV2 2.2-IV0 2.2-IV1 2.3-IV0 2.3-IV1 2.4-IV0 2.4-IV1 2.5-IV0 2.6-IV0 2.7-IV0 "
    "2.7-IV1 2.7-IV2 2.8-IV0 2.8-IV1 3.0-IV0 3.0-IV1 3.1-IV0 3.2-IV0 3.3-IV0 3.3-IV1 3.3-IV2 "
    "3.3-IV3 3.4-IV0 3.5-IV0 3.5-IV1 3.5-IV2"
)
# Kafka's lookup keys: every full version and every release ("0.10.0", "3.5") on its own.
_KNOWN_VERSIONS = frozenset(_IBP_VERSIONS) | {v.split("-")[0] for v in _IBP_VERSIONS}


def _message_format_version(name: str, raw: str) -> str:
    """Kafka's MetadataVersion.fromVersionString: the first 3 dot-separated parts of a 0.x
    version (2 otherwise) must name a version Kafka 3.5.1 knows; "0.10.0.0" is 0.10.0."""
    value = raw.strip()
    parts = value.split(".")
    key = ".".join(parts[: 3 if value.startswith("0.") else 2])
    if key not in _KNOWN_VERSIONS:
        raise ConfigError(
            f"Invalid value {raw} for configuration {name}: Version {value} is not a valid version"
        )
    return value


_THROTTLED = re.compile(r"^\d+:\d+$")


def _throttled_replicas(name: str, raw: str) -> str:
    """`*`, empty, or partition:broker pairs, as Kafka's ThrottledReplicaListValidator."""
    items = split_list(raw)
    if items == ["*"] or all(_THROTTLED.match(item) for item in items):
        return ",".join(items)
    raise ConfigError(f"{name} must be * or a list of partition:broker pairs, got {raw!r}")


# Applied: what streamgate does with a config. Stored only: why it has no effect here.
_STORED_ONLY_FLUSH = (
    "Stored only: every acknowledged batch is fsync'd before the reply (group commit), which "
    "is at least what any flush setting asks for."
)
_STORED_ONLY_FILES = (
    "Stored only: streamgate keeps a partition in segment logs and tier-2 chunks, not in "
    "Kafka's segment/index files, so Kafka's file layout settings have nothing to act on."
)
_STORED_ONLY_REPLICAS = (
    "Stored only: there is one node and no replication; durability comes from fsync and tier 2."
)
_STORED_ONLY_COMPACTION = (
    "Applied by log compaction of cleanup.policy=compact topics over their tier-2 data, with "
    "Kafka's meaning (delete.retention.ms counts from when a tombstone's chunk reached tier 2)."
)
_STORED_ONLY_TIERING = (
    "Stored only: streamgate's own tiering (--local-retain-bytes, tier 2 always on) decides "
    "what stays local."
)
_STORED_ONLY_TIMESTAMPS = "Stored only: record timestamps are not checked against the clock."
_STORED_ONLY_FORMAT = (
    "Stored only: deprecated in Kafka 3.0 and ignored by Kafka too; batches are always v2."
)


def _stored(
    name: str, kind: ConfigType, default: str, why: str, check: Check, broker: str | None
) -> TopicConfigDef:
    return TopicConfigDef(name, kind, default, why, check, broker)


_DEFS = (
    TopicConfigDef(
        "cleanup.policy",
        ConfigType.LIST,
        "delete",
        "What happens to old data: delete (by retention.ms / retention.bytes), compact (log "
        "compaction keeps the latest value of every key; records without a key are refused "
        "with INVALID_RECORD, as Kafka refuses them), both, or neither (empty: kept forever, "
        "as Kafka keeps it).",
        _list_of(("delete", "compact"), {}),
        "log.cleanup.policy",
    ),
    TopicConfigDef(
        "retention.ms",
        ConfigType.LONG,
        "-1",
        "How long data is kept, in milliseconds; -1 (the default) keeps it forever. "
        "Applied to data already in tier 2, chunk slice by slice: the log start offset moves "
        "past slices whose newest record is older.",
        _integer(-1, INT64_MAX),
        "log.retention.ms",
    ),
    TopicConfigDef(
        "retention.bytes",
        ConfigType.LONG,
        "-1",
        "Largest size a partition may grow to before its oldest tier-2 slices are deleted; "
        "-1 means no limit.",
        _integer(-1, INT64_MAX),
        "log.retention.bytes",
    ),
    TopicConfigDef(
        "max.message.bytes",
        ConfigType.INT,
        None,
        "Largest record batch a produce request may carry for this topic "
        "(default: the gateway's --max-message-bytes).",
        _integer(0, INT32_MAX),
        "message.max.bytes",
    ),
    TopicConfigDef(
        "message.timestamp.type",
        ConfigType.STRING,
        "CreateTime",
        "Which timestamp records carry: CreateTime (the producer's) or LogAppendTime (the "
        "batch is stamped with the gateway's clock when appended, like Kafka).",
        _one_of(("CreateTime", "LogAppendTime")),
        "log.message.timestamp.type",
    ),
    TopicConfigDef(
        "compression.type",
        ConfigType.STRING,
        "producer",
        "Codec of stored batches: producer keeps the producer's; uncompressed, gzip, snappy, "
        "lz4 or zstd recompresses a batch whose codec differs, as Kafka does.",
        _one_of(COMPRESSION_TYPES),
        "compression.type",
    ),
    _stored(
        "segment.bytes",
        ConfigType.INT,
        "1073741824",
        _STORED_ONLY_FILES,
        _integer(14, INT32_MAX),
        "log.segment.bytes",
    ),
    _stored(
        "segment.ms",
        ConfigType.LONG,
        "604800000",
        _STORED_ONLY_FILES,
        _integer(1, INT64_MAX),
        "log.roll.ms",
    ),
    _stored(
        "segment.jitter.ms",
        ConfigType.LONG,
        "0",
        _STORED_ONLY_FILES,
        _integer(0, INT64_MAX),
        "log.roll.jitter.ms",
    ),
    _stored(
        "segment.index.bytes",
        ConfigType.INT,
        "10485760",
        _STORED_ONLY_FILES,
        _integer(4, INT32_MAX),
        "log.index.size.max.bytes",
    ),
    _stored(
        "index.interval.bytes",
        ConfigType.INT,
        "4096",
        _STORED_ONLY_FILES,
        _integer(0, INT32_MAX),
        "log.index.interval.bytes",
    ),
    _stored(
        "file.delete.delay.ms",
        ConfigType.LONG,
        "60000",
        _STORED_ONLY_FILES,
        _integer(0, INT64_MAX),
        "log.segment.delete.delay.ms",
    ),
    _stored(
        "preallocate", ConfigType.BOOLEAN, "false", _STORED_ONLY_FILES, _boolean, "log.preallocate"
    ),
    _stored(
        "flush.messages",
        ConfigType.LONG,
        LONG_MAX,
        _STORED_ONLY_FLUSH,
        _integer(1, INT64_MAX),
        "log.flush.interval.messages",
    ),
    _stored(
        "flush.ms",
        ConfigType.LONG,
        LONG_MAX,
        _STORED_ONLY_FLUSH,
        _integer(0, INT64_MAX),
        "log.flush.interval.ms",
    ),
    _stored(
        "min.insync.replicas",
        ConfigType.INT,
        "1",
        _STORED_ONLY_REPLICAS,
        _integer(1, INT32_MAX),
        "min.insync.replicas",
    ),
    _stored(
        "unclean.leader.election.enable",
        ConfigType.BOOLEAN,
        "false",
        _STORED_ONLY_REPLICAS,
        _boolean,
        "unclean.leader.election.enable",
    ),
    _stored(
        "leader.replication.throttled.replicas",
        ConfigType.LIST,
        "",
        _STORED_ONLY_REPLICAS,
        _throttled_replicas,
        None,
    ),
    _stored(
        "follower.replication.throttled.replicas",
        ConfigType.LIST,
        "",
        _STORED_ONLY_REPLICAS,
        _throttled_replicas,
        None,
    ),
    _stored(
        "delete.retention.ms",
        ConfigType.LONG,
        "86400000",
        _STORED_ONLY_COMPACTION,
        _integer(0, INT64_MAX),
        "log.cleaner.delete.retention.ms",
    ),
    _stored(
        "min.compaction.lag.ms",
        ConfigType.LONG,
        "0",
        _STORED_ONLY_COMPACTION,
        _integer(0, INT64_MAX),
        "log.cleaner.min.compaction.lag.ms",
    ),
    _stored(
        "max.compaction.lag.ms",
        ConfigType.LONG,
        LONG_MAX,
        _STORED_ONLY_COMPACTION,
        _integer(1, INT64_MAX),
        "log.cleaner.max.compaction.lag.ms",
    ),
    _stored(
        "min.cleanable.dirty.ratio",
        ConfigType.DOUBLE,
        "0.5",
        _STORED_ONLY_COMPACTION,
        _ratio,
        "log.cleaner.min.cleanable.ratio",
    ),
    _stored(
        "local.retention.ms",
        ConfigType.LONG,
        "-2",
        _STORED_ONLY_TIERING,
        _integer(-2, INT64_MAX),
        "log.local.retention.ms",
    ),
    _stored(
        "local.retention.bytes",
        ConfigType.LONG,
        "-2",
        _STORED_ONLY_TIERING,
        _integer(-2, INT64_MAX),
        "log.local.retention.bytes",
    ),
    _stored(
        "remote.storage.enable", ConfigType.BOOLEAN, "false", _STORED_ONLY_TIERING, _boolean, None
    ),
    _stored(
        "remote.log.copy.disable", ConfigType.BOOLEAN, "false", _STORED_ONLY_TIERING, _boolean, None
    ),
    _stored(
        "remote.log.delete.on.disable",
        ConfigType.BOOLEAN,
        "false",
        _STORED_ONLY_TIERING,
        _boolean,
        None,
    ),
    _stored(
        "message.timestamp.difference.max.ms",
        ConfigType.LONG,
        LONG_MAX,
        _STORED_ONLY_TIMESTAMPS,
        _integer(0, INT64_MAX),
        "log.message.timestamp.difference.max.ms",
    ),
    _stored(
        "message.timestamp.before.max.ms",
        ConfigType.LONG,
        LONG_MAX,
        _STORED_ONLY_TIMESTAMPS,
        _integer(0, INT64_MAX),
        "log.message.timestamp.before.max.ms",
    ),
    _stored(
        "message.timestamp.after.max.ms",
        ConfigType.LONG,
        LONG_MAX,
        _STORED_ONLY_TIMESTAMPS,
        _integer(0, INT64_MAX),
        "log.message.timestamp.after.max.ms",
    ),
    _stored(
        "message.downconversion.enable",
        ConfigType.BOOLEAN,
        "true",
        "Stored only: Produce v0-2 and Fetch below v4 are not served, so there is nothing "
        "to down-convert.",
        _boolean,
        "log.message.downconversion.enable",
    ),
    _stored(
        "message.format.version",
        ConfigType.STRING,
        "3.0-IV1",
        _STORED_ONLY_FORMAT,
        _message_format_version,
        "log.message.format.version",
    ),
    TopicConfigDef(
        "streamgate.scaling.policy",
        ConfigType.STRING,
        "fixed",
        "How the stream's segments scale: fixed, data-rate (KiB/s per segment) or "
        "event-rate (events/s per segment).",
        _one_of(SCALING_POLICIES),
    ),
    TopicConfigDef(
        "streamgate.scaling.target.rate",
        ConfigType.LONG,
        "0",
        "Target rate per segment for data-rate (KiB/s) or event-rate (events/s) scaling; "
        "required (> 0) by those policies.",
        _integer(0, INT64_MAX),
    ),
    TopicConfigDef(
        "streamgate.scaling.scale.factor",
        ConfigType.INT,
        "2",
        "How many segments a hot segment is split into.",
        _integer(2, INT32_MAX),
    ),
    TopicConfigDef(
        "streamgate.scaling.min.segments",
        ConfigType.INT,
        "1",
        "The fewest open segments the stream scales down to (at most its partition count).",
        _integer(1, INT32_MAX),
    ),
)

# Configs streamgate acts on (the rest of Kafka's are stored and described only).
APPLIED_CONFIGS = frozenset(
    {
        "cleanup.policy",
        "retention.ms",
        "retention.bytes",
        "max.message.bytes",
        "delete.retention.ms",
        "min.compaction.lag.ms",
        "max.compaction.lag.ms",
        "min.cleanable.dirty.ratio",
        "message.timestamp.type",
        "compression.type",
    }
    | {d.name for d in _DEFS if d.name.startswith("streamgate.")}
)

TOPIC_CONFIGS: dict[str, TopicConfigDef] = {d.name: d for d in _DEFS}


def config_def(name: str) -> TopicConfigDef:
    """The definition of a known topic config; ConfigError for an unknown name."""
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise ConfigError(f"unknown topic config {name!r}")
    return definition
