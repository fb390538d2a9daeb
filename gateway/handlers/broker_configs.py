"""The gateway's own settings, described as the configs of broker resource `node_id`.

Contract: settings taken from the command line or environment (`streamgate serve` options)
are STATIC_BROKER_CONFIG; fixed properties of streamgate are DEFAULT_CONFIG. The
broker-level defaults of topic configs (`log.retention.ms`, ...) are derived from
core.configs.topic_defs, so the two never disagree. Dynamic broker configs (core/configs/broker.py)
come first: the node's own (DYNAMIC_BROKER_CONFIG), then the cluster default
(DYNAMIC_DEFAULT_BROKER_CONFIG), then the entry's static or default value, Kafka's synonym
order. An entry is read-only unless Kafka (or streamgate, STREAMGATE_DYNAMIC) lets it change
dynamically.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.configs.broker import DEFAULT_RESOURCE, DYNAMIC_CONFIGS, is_dynamic
from core.configs.topic_defs import (
    TOPIC_CONFIGS,
    ConfigEntry,
    ConfigSource,
    ConfigType,
    Synonym,
)

from .context import GatewayContext

_STATIC = ConfigSource.STATIC_BROKER_CONFIG
_DEFAULT = ConfigSource.DEFAULT_CONFIG


def _entry(name: str, value: str, source: ConfigSource, kind: ConfigType, doc: str) -> ConfigEntry:
    return ConfigEntry(
        name, value, source, kind, doc, read_only=True, synonyms=(Synonym(name, value, source),)
    )


def _bool(value: bool) -> str:
    return "true" if value else "false"


def broker_configs(ctx: GatewayContext) -> list[ConfigEntry]:
    """Every broker config the gateway reports, in a stable order."""
    store = ctx.store.settings
    advertised = f"PLAINTEXT://{ctx.advertised_host}:{ctx.advertised_port}"
    bound = f"PLAINTEXT://{ctx.listener}"
    if ctx.listeners:  # --listeners: every listener by name
        bound = ",".join(f"{name}://{addr}" for name, addr, _ in ctx.listeners)
        advertised = ",".join(f"{name}://{addr}" for name, _, addr in ctx.listeners)
    entries = [
        _entry("node.id", str(ctx.node_id), _DEFAULT, ConfigType.INT, "This gateway's node id."),
        _entry("broker.id", str(ctx.node_id), _DEFAULT, ConfigType.INT, "Same as node.id."),
        _entry(
            "listeners",
            bound,
            _STATIC,
            ConfigType.STRING,
            "Address the gateway listens on (--listen).",
        ),
        _entry(
            "advertised.listeners",
            advertised,
            _STATIC,
            ConfigType.STRING,
            "Address given to clients (--advertised-listener).",
        ),
        _entry(
            "log.dirs",
            store.data_dir,
            _STATIC,
            ConfigType.STRING,
            "Folder holding the metadata and the stream segments (--data-dir).",
        ),
        _entry(
            "num.partitions",
            str(store.default_partitions),
            _STATIC,
            ConfigType.INT,
            "Partitions of auto-created topics (--default-partitions).",
        ),
        _entry(
            "auto.create.topics.enable",
            _bool(store.auto_create_topics),
            _STATIC,
            ConfigType.BOOLEAN,
            "Whether unknown topics are created on produce/metadata (--auto-create-topics).",
        ),
        _entry(
            "message.max.bytes",
            _static(ctx, "message.max.bytes", str(ctx.max_message_bytes)),
            _STATIC,
            ConfigType.INT,
            "Largest record batch accepted unless a topic sets max.message.bytes "
            "(--max-message-bytes).",
        ),
        _entry(
            "socket.request.max.bytes",
            str(ctx.max_request_bytes),
            _STATIC,
            ConfigType.INT,
            "Largest request accepted (--max-request-bytes).",
        ),
        _entry(
            "default.replication.factor",
            "1",
            _DEFAULT,
            ConfigType.INT,
            "One copy, fsync'd before acknowledgement; any replication factor is accepted.",
        ),
        _entry(
            "delete.topic.enable", "true", _DEFAULT, ConfigType.BOOLEAN, "Topics can be deleted."
        ),
    ]
    seen = {entry.name for entry in entries}
    dynamic = ctx.dynamic_configs
    for applied in sorted(dynamic.applied_names() if dynamic else ()):
        static = dynamic.static_value(applied) if dynamic else None
        if applied in seen or static is None:
            continue
        seen.add(applied)
        kind = DYNAMIC_CONFIGS[applied].type if applied in DYNAMIC_CONFIGS else ConfigType.STRING
        entries.append(_entry(applied, static, _STATIC, kind, _APPLIED_DOCS.get(applied, "")))
    for definition in TOPIC_CONFIGS.values():
        name = definition.broker_synonym
        if name is None or name in seen or definition.default is None:
            continue
        seen.add(name)
        doc = f"Default of the topic config {definition.name}."
        entries.append(_entry(name, definition.default, _DEFAULT, definition.type, doc))
    return entries


def static_broker_values(ctx: GatewayContext) -> dict[str, str]:
    """Broker configs set by the gateway's options: the defaults of some topic configs."""
    return {e.name: e.value or "" for e in broker_configs(ctx) if e.source == _STATIC}


def dynamic_topic_defaults(ctx: GatewayContext) -> dict[str, tuple[Synonym, ...]]:
    """The dynamic values of the broker configs that streamgate applies (for the synonyms
    of topic configs whose default they are, e.g. message.max.bytes)."""
    dynamic = ctx.dynamic_configs
    if dynamic is None:
        return {}
    return {name: tuple(dynamic.layers(name)) for name in dynamic.applied_names()}


_APPLIED_DOCS = {
    "group.initial.rebalance.delay.ms": "How long a new group waits for more members before "
    "its first rebalance (--group-initial-rebalance-delay-ms; dynamic in streamgate).",
    "log.retention.check.interval.ms": "How often retention.ms / retention.bytes are applied "
    "(--retention-check-interval-ms; dynamic in streamgate).",
    "log.cleaner.backoff.ms": "How often compacted topics are checked and cleaned "
    "(--compaction-interval-ms).",
}
_STORED_ONLY = "Dynamic broker config: stored and described only, streamgate does not use it."


def _static(ctx: GatewayContext, name: str, value: str) -> str:
    """The serve option's value of a config that a dynamic value may override."""
    dynamic = ctx.dynamic_configs
    static = dynamic.static_value(name) if dynamic else None
    return value if static is None else static


def described_broker_configs(
    ctx: GatewayContext, resource: str, keys: Iterable[str] | None
) -> list[ConfigEntry]:
    """DescribeConfigs of broker resource `resource` (this node's id, or "" for the
    cluster default, which lists only the dynamic defaults, as Kafka does)."""
    dynamic = ctx.dynamic_configs
    wanted = None if keys is None else set(keys)
    entries: list[ConfigEntry] = []
    if resource != DEFAULT_RESOURCE:
        for entry in broker_configs(ctx):
            if wanted is None or entry.name in wanted:
                entries.append(_layered(entry, dynamic.layers(entry.name) if dynamic else []))
    if dynamic is None:
        return entries
    listed = {entry.name for entry in entries}
    names = dict.fromkeys(dynamic.configs[DEFAULT_RESOURCE])
    if resource != DEFAULT_RESOURCE:
        names = dict.fromkeys([*dynamic.configs[dynamic.broker], *names])
    for name in names:
        if name in listed or (wanted is not None and name not in wanted):
            continue
        layers = dynamic.layers(name, resource)
        entries.append(_dynamic_only(name, layers, with_default=resource != DEFAULT_RESOURCE))
    return entries


def _layered(entry: ConfigEntry, layers: list[Synonym]) -> ConfigEntry:
    synonyms = (*layers, *entry.synonyms)
    top = synonyms[0] if synonyms else Synonym(entry.name, entry.value, entry.source)
    return ConfigEntry(
        entry.name,
        top.value,
        top.source,
        entry.type,
        entry.doc,
        read_only=not is_dynamic(entry.name),
        is_sensitive=entry.is_sensitive,
        synonyms=synonyms,
    )


def _dynamic_only(name: str, layers: list[Synonym], with_default: bool) -> ConfigEntry:
    """A dynamic config the gateway has no setting for: Kafka's description of it (a name
    Kafka does not know: null value, read-only, sensitive, type UNKNOWN)."""
    definition = DYNAMIC_CONFIGS.get(name)
    if definition is None or definition.type == ConfigType.PASSWORD:
        hidden = tuple(Synonym(s.name, None, s.source) for s in layers)
        return ConfigEntry(
            name,
            None,
            layers[0].source,
            definition.type if definition else ConfigType.UNKNOWN,
            _STORED_ONLY if definition else "",
            read_only=definition is None,
            is_sensitive=True,
            synonyms=hidden,
        )
    synonyms = list(layers)
    if with_default and definition.default is not None:
        synonyms.append(Synonym(name, definition.default, _DEFAULT))
    return ConfigEntry(
        name,
        layers[0].value,
        layers[0].source,
        definition.type,
        _STORED_ONLY,
        read_only=False,
        synonyms=tuple(synonyms),
    )
