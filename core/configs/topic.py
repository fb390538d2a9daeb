"""Topic configuration: validating, altering and describing a topic's configs against the
definitions of `topic_defs.py`.

A topic stores only the configs that were set on it (`TopicRecord.configs`, name -> string
value, always in the normalised form `validate_topic_configs` returns). Everything else has a
default: a fixed one from `TOPIC_CONFIGS`, or, for configs whose default is a gateway setting
(`max.message.bytes` <- `message.max.bytes`), the value the caller passes as a static broker
config.

Contracts:
- `validate_topic_configs` accepts a complete set of a topic's configs and returns it
  normalised, or raises `ConfigError` (INVALID_CONFIG, or INVALID_REQUEST for a null value)
  with a message naming the config. Every topic config of Kafka 3.x is known; only unknown
  names and values Kafka itself would refuse are errors.
- `apply_alter_ops` applies IncrementalAlterConfigs operations to a copy and validates the
  result; the input is never modified.
- `describe_topic_configs` lists every known config with its effective value and source.
- The `streamgate.*` namespace holds stream settings (scaling policy); they are stored,
  validated and described here, and acted on by core/scaling.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..errors import ErrorCode
from .topic_defs import (
    TOPIC_CONFIGS,
    AlterOp,
    ConfigEntry,
    ConfigError,
    ConfigSource,
    ConfigType,
    Synonym,
    config_def,
    split_list,
)

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
