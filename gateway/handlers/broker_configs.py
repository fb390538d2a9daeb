"""The gateway's own settings, described as the configs of broker resource `node_id`.

Contract: `broker_configs` lists read-only entries only. Settings taken from the command
line or environment (`streamgate serve` options) are STATIC_BROKER_CONFIG; fixed properties
of streamgate are DEFAULT_CONFIG. The broker-level defaults of topic configs
(`log.retention.ms`, ...) are derived from core.topic_config, so the two never disagree.
"""

from __future__ import annotations

from core.topic_config import (
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
            str(ctx.max_message_bytes),
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
