"""Topic configuration: the configs streamgate knows, their types, defaults and validation.

A topic stores only the configs that were set on it (`TopicRecord.configs`, name -> string
value, always in the normalised form `validate_topic_configs` returns). Everything else has a
default: a fixed one from `TOPIC_CONFIGS`, or, for configs whose default is a gateway setting
(`max.message.bytes` <- `message.max.bytes`), the value the caller passes as a static broker
config.

Contracts:
- `validate_topic_configs` accepts a complete set of a topic's configs and returns it
  normalised, or raises `ConfigError` (INVALID_CONFIG, or INVALID_REQUEST for a null value)
  with a message naming the config. Unknown names are errors; so are values Kafka would
  accept but streamgate cannot honour (`cleanup.policy=compact`, ...).
- `apply_alter_ops` applies IncrementalAlterConfigs operations to a copy and validates the
  result; the input is never modified.
- `describe_topic_configs` lists every known config with its effective value and source.
- The `streamgate.*` namespace holds stream settings (scaling policy); they are stored,
  validated and described here, and acted on by core/scaling.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from .errors import ErrorCode

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
    """A non-empty comma-separated list of distinct items from `supported`."""
    item_check = _one_of(supported, unsupported)

    def check(name: str, raw: str) -> str:
        items = split_list(raw)
        if not items:
            raise ConfigError(f"{name} must not be empty")
        return ",".join(dict.fromkeys(item_check(name, item) for item in items))

    return check


def split_list(raw: str) -> list[str]:
    """The items of a LIST config value (comma-separated, blanks dropped)."""
    return [item.strip() for item in raw.split(",") if item.strip()]


_NO_COMPACTION = "streamgate keeps or deletes whole streams; it does not compact logs"
_NO_RECOMPRESSION = "batches are stored as the producer compressed them (compression.type=producer)"
_NO_APPEND_TIME = "records keep the producer's timestamp (CreateTime)"

SCALING_POLICIES = ("fixed", "data-rate", "event-rate")

_DEFS = (
    TopicConfigDef(
        "cleanup.policy",
        ConfigType.LIST,
        "delete",
        "What happens to old data: delete (by retention). compact is not supported.",
        _list_of(("delete",), {"compact": _NO_COMPACTION}),
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
        "Which timestamp records carry: CreateTime (the producer's). "
        "LogAppendTime is not supported yet.",
        _one_of(("CreateTime",), {"LogAppendTime": _NO_APPEND_TIME}),
        "log.message.timestamp.type",
    ),
    TopicConfigDef(
        "segment.bytes",
        ConfigType.INT,
        "1073741824",
        "Accepted for compatibility; stream segments are not rolled by size.",
        _integer(14, INT32_MAX),
        "log.segment.bytes",
    ),
    TopicConfigDef(
        "segment.ms",
        ConfigType.LONG,
        "604800000",
        "Accepted for compatibility; stream segments are not rolled by time.",
        _integer(1, INT64_MAX),
        "log.roll.ms",
    ),
    TopicConfigDef(
        "compression.type",
        ConfigType.STRING,
        "producer",
        "Compression of stored batches: producer (kept as the producer sent them).",
        _one_of(
            ("producer",),
            {c: _NO_RECOMPRESSION for c in ("uncompressed", "gzip", "snappy", "lz4", "zstd")},
        ),
        "compression.type",
    ),
    TopicConfigDef(
        "min.insync.replicas",
        ConfigType.INT,
        "1",
        "Accepted for compatibility; an acknowledged write is fsync'd, there are no replicas.",
        _integer(1, INT32_MAX),
        "min.insync.replicas",
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
) -> list[ConfigEntry]:
    """Every known topic config (or those in `names`, unknown ones skipped), with its source.

    A config set on the topic is TOPIC_CONFIG; otherwise its broker synonym's value if that
    is in `static_broker_configs` (STATIC_BROKER_CONFIG), else its fixed default
    (DEFAULT_CONFIG). Synonyms list the topic value, then the broker-level value.
    """
    wanted = TOPIC_CONFIGS.keys() if names is None else [n for n in names if n in TOPIC_CONFIGS]
    entries = []
    for name in wanted:
        definition = TOPIC_CONFIGS[name]
        synonyms: list[Synonym] = []
        if name in configs:
            synonyms.append(Synonym(name, configs[name], ConfigSource.TOPIC_CONFIG))
        broker = definition.broker_synonym
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
