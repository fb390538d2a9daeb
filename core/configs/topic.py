"""Topic configuration: the configs streamgate knows, their types, defaults and validation.

A topic stores only the configs that were set on it (`TopicRecord.configs`, name -> string
value, always in the normalised form `validate_topic_configs` returns). Everything else has a
default: a fixed one from `TOPIC_CONFIGS`, or, for configs whose default is a gateway setting
(`max.message.bytes` <- `message.max.bytes`), the value the caller passes as a static broker
config.

Contracts:
- `validate_topic_configs` accepts a complete set of a topic's configs and returns it
  normalised, or raises `ConfigError` (INVALID_CONFIG, or INVALID_REQUEST for a null value)
  with a message naming the config. Every topic config of Kafka 3.x is known; only unknown
  names and values Kafka itself would refuse are errors. Configs that have no effect here
  are stored and described (their documentation says why); APPLIED_CONFIGS lists the rest.
- `apply_alter_ops` applies IncrementalAlterConfigs operations to a copy and validates the
  result; the input is never modified.
- `describe_topic_configs` lists every known config with its effective value and source.
- The `streamgate.*` namespace holds stream settings (scaling policy); they are stored,
  validated and described here, and acted on by core/scaling.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
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


# --- validation --------------------------------------------------------------------------


def validate_topic_configs(configs: Mapping[str, str | None], partitions: int) -> dict[str, str]:
    """Check a topic's complete set of configs; return it normalised (sorted by name).

    `partitions` is the topic's partition count (min.segments may not exceed it).
    Raises ConfigError naming the first bad config.
    """
    result: dict[str, str] = {}
    for name in sorted(configs):
        raw = configs[name]
        definition = config_def(name)
        if raw is None:
            raise ConfigError(f"null value for topic config {name}", ErrorCode.INVALID_REQUEST)
        result[name] = definition.check(name, raw)
    _check_scaling(result, partitions)
    return result


def _check_scaling(configs: Mapping[str, str], partitions: int) -> None:
    policy = configs.get("streamgate.scaling.policy", "fixed")
    if policy != "fixed" and int(configs.get("streamgate.scaling.target.rate", "0")) <= 0:
        raise ConfigError(
            f"streamgate.scaling.policy={policy} needs streamgate.scaling.target.rate > 0"
        )
    min_segments = int(configs.get("streamgate.scaling.min.segments", "1"))
    if min_segments > partitions:
        raise ConfigError(
            f"streamgate.scaling.min.segments={min_segments} exceeds the topic's "
            f"{partitions} partitions (a segment owns at least one partition)"
        )


def apply_alter_ops(
    configs: Mapping[str, str],
    ops: Iterable[tuple[str, int, str | None]],
    partitions: int,
) -> dict[str, str]:
    """Apply IncrementalAlterConfigs (name, operation, value) triples and validate the result.

    SET replaces a value, DELETE returns a config to its default, APPEND / SUBTRACT add or
    remove items of LIST configs (starting from the effective value, default included).
    Duplicate names or unknown operations are INVALID_REQUEST; anything else INVALID_CONFIG.
    """
    result = dict(configs)
    seen: set[str] = set()
    for name, op, value in ops:
        if name in seen:
            raise ConfigError(f"duplicate config {name} in one request", ErrorCode.INVALID_REQUEST)
        seen.add(name)
        definition = config_def(name)
        if op == AlterOp.SET:
            if value is None:
                raise ConfigError(f"SET {name} needs a value")
            result[name] = value
        elif op == AlterOp.DELETE:
            result.pop(name, None)
        elif op in (AlterOp.APPEND, AlterOp.SUBTRACT):
            if definition.type != ConfigType.LIST:
                raise ConfigError(f"{AlterOp(op).name} is only allowed on list configs, not {name}")
            current = split_list(result.get(name, definition.default or ""))
            items = split_list(value or "")
            if op == AlterOp.APPEND:
                current += [item for item in items if item not in current]
            else:
                current = [item for item in current if item not in items]
            result[name] = ",".join(current)
        else:
            raise ConfigError(
                f"unknown config operation {op} for {name}", ErrorCode.INVALID_REQUEST
            )
    return validate_topic_configs(result, partitions)


# --- description -------------------------------------------------------------------------


def describe_topic_configs(
    configs: Mapping[str, str],
    static_broker_configs: Mapping[str, str],
    names: Iterable[str] | None = None,
    dynamic_broker_configs: Mapping[str, Sequence[Synonym]] | None = None,
) -> list[ConfigEntry]:
    """Every known topic config (or those in `names`, unknown ones skipped), with its source.

    A config set on the topic is TOPIC_CONFIG; otherwise its broker synonym's dynamic value
    (`dynamic_broker_configs`: per broker, then cluster default) if it has one, else its
    value in `static_broker_configs` (STATIC_BROKER_CONFIG), else its fixed default
    (DEFAULT_CONFIG). Synonyms list the topic value, then the broker-level values.
    """
    wanted = TOPIC_CONFIGS.keys() if names is None else [n for n in names if n in TOPIC_CONFIGS]
    entries = []
    for name in wanted:
        definition = TOPIC_CONFIGS[name]
        synonyms: list[Synonym] = []
        if name in configs:
            synonyms.append(Synonym(name, configs[name], ConfigSource.TOPIC_CONFIG))
        broker = definition.broker_synonym
        if broker is not None and dynamic_broker_configs:
            synonyms.extend(dynamic_broker_configs.get(broker, ()))
        if broker is not None and broker in static_broker_configs:
            synonyms.append(
                Synonym(broker, static_broker_configs[broker], ConfigSource.STATIC_BROKER_CONFIG)
            )
        elif definition.default is not None:
            synonyms.append(
                Synonym(broker or name, definition.default, ConfigSource.DEFAULT_CONFIG)
            )
        effective = synonyms[0] if synonyms else Synonym(name, None, ConfigSource.DEFAULT_CONFIG)
        entries.append(
            ConfigEntry(
                name,
                effective.value,
                effective.source,
                definition.type,
                definition.doc,
                synonyms=tuple(synonyms),
            )
        )
    return entries


def max_message_bytes(configs: Mapping[str, str], default: int) -> int:
    """The topic's max.message.bytes, or `default` (the gateway's) when unset or unreadable."""
    raw = configs.get("max.message.bytes")
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        return default
