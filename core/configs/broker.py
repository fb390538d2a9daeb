"""Dynamic broker configs, with Apache Kafka 3.5.1's rules (docs/clients-and-apis.md).

A dynamic broker config is set with AlterConfigs / IncrementalAlterConfigs on a broker
resource: the node's id (per broker) or "" (the cluster-wide default). Both sets are kept in
the metadata store (table `broker_configs`, resource -> name -> value) and loaded at start.
The effective value of a name is the per-broker one, else the cluster default, else the
gateway's static setting (its `streamgate serve` option).

Which names may be altered, and the answers for those that may not, were measured against a
single-node KRaft Kafka 3.5.1 (tests/system/test_configs_vs_kafka.py compares them):
- a config Kafka knows that is not dynamic (broker.id, log.dirs, ...): INVALID_REQUEST
  "Cannot update these configs dynamically: Set(...)";
- an SSL keystore/truststore config without a listener prefix: INVALID_REQUEST;
- a listener, SASL or SSL config on the cluster default: INVALID_REQUEST "Cannot update these
  configs at default cluster level, broker id must be specified: Set(...)";
- a value of the wrong type: INVALID_REQUEST "Invalid value V for configuration N: ...";
- a name Kafka does not know: accepted and stored; described with a null value, read-only
  and sensitive, as Kafka describes it.
Two names Kafka 3.5.1 refuses are accepted here because a `streamgate serve` option applies
them at once (STREAMGATE_DYNAMIC): group.initial.rebalance.delay.ms and
log.retention.check.interval.ms.

Contracts:
- `DynamicBrokerConfigs.replace` validates a resource's complete new set, persists it
  through the metadata worker before returning, then applies the effective values of the
  names with an applier; `validate_only` checks and writes nothing.
- Appliers (`register`) are called with the effective value, or the static one when no
  dynamic value is left; `apply_all` runs them at start, after `load`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import ErrorCode
from .topic_defs import (
    AlterOp,
    ConfigError,
    ConfigSource,
    ConfigType,
    Synonym,
    split_list,
)

DEFAULT_RESOURCE = ""  # the cluster-wide default of every broker


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Every broker config Kafka 3.5.1 knows (KafkaConfig) that it refuses to change dynamically.
NON_DYNAMIC = _words(
    """
    alter.config.policy.class.name alter.log.dirs.replication.quota.window.num
    alter.log.dirs.replication.quota.window.size.seconds auto.create.topics.enable
    auto.include.jmx.reporter auto.leader.rebalance.enable broker.heartbeat.interval.ms
    broker.id broker.id.generation.enable broker.rack broker.session.timeout.ms
    client.quota.callback.class connection.failed.authentication.delay.ms
    connections.max.idle.ms connections.max.reauth.ms control.plane.listener.name
    controlled.shutdown.enable controlled.shutdown.max.retries
    controlled.shutdown.retry.backoff.ms controller.listener.names
    controller.quorum.append.linger.ms controller.quorum.election.backoff.max.ms
    controller.quorum.election.timeout.ms controller.quorum.fetch.timeout.ms
    controller.quorum.request.timeout.ms controller.quorum.retry.backoff.ms
    controller.quorum.voters controller.quota.window.num
    controller.quota.window.size.seconds controller.socket.timeout.ms
    create.topic.policy.class.name default.replication.factor
    delegation.token.expiry.check.interval.ms delegation.token.expiry.time.ms
    delegation.token.master.key delegation.token.max.lifetime.ms delegation.token.secret.key
    delete.records.purgatory.purge.interval.requests delete.topic.enable
    early.start.listeners fetch.max.bytes fetch.purgatory.purge.interval.requests
    group.consumer.assignors group.consumer.heartbeat.interval.ms
    group.consumer.max.heartbeat.interval.ms group.consumer.max.session.timeout.ms
    group.consumer.max.size group.consumer.min.heartbeat.interval.ms
    group.consumer.min.session.timeout.ms group.consumer.session.timeout.ms
    group.coordinator.new.enable group.coordinator.threads group.initial.rebalance.delay.ms
    group.max.session.timeout.ms group.max.size group.min.session.timeout.ms
    initial.broker.registration.timeout.ms inter.broker.listener.name
    inter.broker.protocol.version kafka.metrics.polling.interval.secs
    kafka.metrics.reporters leader.imbalance.check.interval.seconds
    leader.imbalance.per.broker.percentage log.cleaner.enable log.dir log.dirs
    log.flush.offset.checkpoint.interval.ms log.flush.scheduler.interval.ms
    log.flush.start.offset.checkpoint.interval.ms log.message.format.version
    log.retention.check.interval.ms log.retention.hours log.retention.minutes log.roll.hours
    log.roll.jitter.hours max.incremental.fetch.session.cache.slots metadata.log.dir
    metadata.log.max.record.bytes.between.snapshots metadata.log.max.snapshot.interval.ms
    metadata.log.segment.bytes metadata.log.segment.min.bytes metadata.log.segment.ms
    metadata.max.idle.interval.ms metadata.max.retention.bytes metadata.max.retention.ms
    metrics.num.samples metrics.recording.level metrics.sample.window.ms node.id
    num.partitions num.replica.alter.log.dirs.threads offset.metadata.max.bytes
    offsets.commit.required.acks offsets.commit.timeout.ms offsets.load.buffer.size
    offsets.retention.check.interval.ms offsets.retention.minutes
    offsets.topic.compression.codec offsets.topic.num.partitions
    offsets.topic.replication.factor offsets.topic.segment.bytes
    password.encoder.cipher.algorithm password.encoder.iterations
    password.encoder.key.length password.encoder.keyfactory.algorithm
    password.encoder.old.secret password.encoder.secret process.roles
    producer.id.expiration.check.interval.ms producer.purgatory.purge.interval.requests
    queued.max.request.bytes queued.max.requests quota.window.num quota.window.size.seconds
    remote.log.index.file.cache.total.size.bytes remote.log.manager.task.interval.ms
    remote.log.manager.task.retry.backoff.max.ms remote.log.manager.task.retry.backoff.ms
    remote.log.manager.task.retry.jitter remote.log.manager.thread.pool.size
    remote.log.metadata.manager.class.name remote.log.metadata.manager.class.path
    remote.log.metadata.manager.impl.prefix remote.log.metadata.manager.listener.name
    remote.log.reader.max.pending.tasks remote.log.reader.threads
    remote.log.storage.manager.class.name remote.log.storage.manager.class.path
    remote.log.storage.manager.impl.prefix remote.log.storage.system.enable
    replica.fetch.backoff.ms replica.fetch.max.bytes replica.fetch.min.bytes
    replica.fetch.response.max.bytes replica.fetch.wait.max.ms
    replica.high.watermark.checkpoint.interval.ms replica.lag.time.max.ms
    replica.selector.class replica.socket.receive.buffer.bytes replica.socket.timeout.ms
    replication.quota.window.num replication.quota.window.size.seconds request.timeout.ms
    reserved.broker.max.id sasl.client.callback.handler.class
    sasl.login.callback.handler.class sasl.login.class sasl.login.connect.timeout.ms
    sasl.login.read.timeout.ms sasl.login.retry.backoff.max.ms sasl.login.retry.backoff.ms
    sasl.mechanism.controller.protocol sasl.oauthbearer.clock.skew.seconds
    sasl.oauthbearer.expected.audience sasl.oauthbearer.expected.issuer
    sasl.oauthbearer.jwks.endpoint.refresh.ms
    sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms
    sasl.oauthbearer.jwks.endpoint.retry.backoff.ms sasl.oauthbearer.jwks.endpoint.url
    sasl.oauthbearer.scope.claim.name sasl.oauthbearer.sub.claim.name
    sasl.oauthbearer.token.endpoint.url sasl.server.callback.handler.class
    sasl.server.max.receive.size security.inter.broker.protocol security.providers
    server.max.startup.time.ms socket.connection.setup.timeout.max.ms
    socket.connection.setup.timeout.ms socket.listen.backlog.size
    socket.receive.buffer.bytes socket.request.max.bytes socket.send.buffer.bytes
    ssl.principal.mapping.rules transaction.abort.timed.out.transaction.cleanup.interval.ms
    transaction.max.timeout.ms transaction.remove.expired.transaction.cleanup.interval.ms
    transaction.state.log.load.buffer.size transaction.state.log.min.isr
    transaction.state.log.num.partitions transaction.state.log.replication.factor
    transaction.state.log.segment.bytes transactional.id.expiration.ms
    unstable.api.versions.enable zookeeper.clientCnxnSocket zookeeper.connect
    zookeeper.connection.timeout.ms zookeeper.max.in.flight.requests
    zookeeper.metadata.migration.enable zookeeper.session.timeout.ms zookeeper.set.acl
    zookeeper.ssl.cipher.suites zookeeper.ssl.client.enable zookeeper.ssl.crl.enable
    zookeeper.ssl.enabled.protocols zookeeper.ssl.endpoint.identification.algorithm
    zookeeper.ssl.keystore.location zookeeper.ssl.keystore.password
    zookeeper.ssl.keystore.type zookeeper.ssl.ocsp.enable zookeeper.ssl.protocol
    zookeeper.ssl.truststore.location zookeeper.ssl.truststore.password
    zookeeper.ssl.truststore.type
    """
)

# Dynamic in streamgate although Kafka 3.5.1 refuses them: a serve option applies them.
STREAMGATE_DYNAMIC = frozenset(
    {"group.initial.rebalance.delay.ms", "log.retention.check.interval.ms"}
)

# Only per listener (listener.name.NAME.ssl.keystore.location ...), as in Kafka.
LISTENER_PREFIX_ONLY = _words(
    """
    ssl.key.password ssl.keystore.certificate.chain ssl.keystore.key ssl.keystore.location
    ssl.keystore.password ssl.keystore.type ssl.truststore.certificates
    ssl.truststore.location ssl.truststore.password ssl.truststore.type
    """
)

# Per broker only: refused on the cluster default (plus every listener.name.* config).
PER_BROKER_ONLY = _words(
    """
    advertised.listeners listener.security.protocol.map listeners sasl.enabled.mechanisms
    sasl.jaas.config sasl.kerberos.kinit.cmd sasl.kerberos.min.time.before.relogin
    sasl.kerberos.principal.to.local.rules sasl.kerberos.service.name
    sasl.kerberos.ticket.renew.jitter sasl.kerberos.ticket.renew.window.factor
    sasl.login.refresh.buffer.seconds sasl.login.refresh.min.period.seconds
    sasl.login.refresh.window.factor sasl.login.refresh.window.jitter
    sasl.mechanism.inter.broker.protocol ssl.cipher.suites ssl.client.auth
    ssl.enabled.protocols ssl.endpoint.identification.algorithm ssl.engine.factory.class
    ssl.keymanager.algorithm ssl.protocol ssl.provider ssl.secure.random.implementation
    ssl.trustmanager.algorithm
    """
)
LISTENER_PREFIX = "listener.name."

_INT, _LONG, _SHORT, _DOUBLE = ConfigType.INT, ConfigType.LONG, ConfigType.SHORT, ConfigType.DOUBLE
_BOOL, _STR, _LIST, _CLASS = (
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.LIST,
    ConfigType.CLASS,
)


@dataclass(frozen=True, slots=True)
class DynamicDef:
    """A dynamic broker config: its type, allowed values, lower bound and Kafka default."""

    type: ConfigType
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    default: str | None = None


_D = DynamicDef
# Kafka 3.5.1's dynamic broker configs (DynamicBrokerConfig.AllDynamicConfigs, as measured).
DYNAMIC_CONFIGS: dict[str, DynamicDef] = {
    "advertised.listeners": _D(_STR),
    "authorizer.class.name": _D(_STR, default=""),
    "background.threads": _D(_INT, minimum=1, default="10"),
    "compression.type": _D(
        _STR, ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"), default="producer"
    ),
    "listener.security.protocol.map": _D(_STR),
    "listeners": _D(_STR),
    "log.cleaner.backoff.ms": _D(_LONG, minimum=0, default="15000"),
    "log.cleaner.dedupe.buffer.size": _D(_LONG, default="134217728"),
    "log.cleaner.delete.retention.ms": _D(_LONG, minimum=0, default="86400000"),
    "log.cleaner.io.buffer.load.factor": _D(_DOUBLE, default="0.9"),
    "log.cleaner.io.buffer.size": _D(_INT, minimum=0, default="524288"),
    "log.cleaner.io.max.bytes.per.second": _D(_DOUBLE, default="1.7976931348623157E308"),
    "log.cleaner.max.compaction.lag.ms": _D(_LONG, minimum=1, default="9223372036854775807"),
    "log.cleaner.min.cleanable.ratio": _D(_DOUBLE, default="0.5"),
    "log.cleaner.min.compaction.lag.ms": _D(_LONG, minimum=0, default="0"),
    "log.cleaner.threads": _D(_INT, minimum=0, default="1"),
    "log.cleanup.policy": _D(_LIST, ("compact", "delete"), default="delete"),
    "log.flush.interval.messages": _D(_LONG, minimum=1),
    "log.flush.interval.ms": _D(_LONG),
    "log.index.interval.bytes": _D(_INT, minimum=0, default="4096"),
    "log.index.size.max.bytes": _D(_INT, minimum=4, default="10485760"),
    "log.message.downconversion.enable": _D(_BOOL, default="true"),
    "log.message.timestamp.difference.max.ms": _D(_LONG, minimum=0),
    "log.message.timestamp.type": _D(_STR, ("CreateTime", "LogAppendTime"), default="CreateTime"),
    "log.preallocate": _D(_BOOL, default="false"),
    "log.retention.bytes": _D(_LONG, default="-1"),
    "log.retention.ms": _D(_LONG),
    "log.roll.jitter.ms": _D(_LONG),
    "log.roll.ms": _D(_LONG),
    "log.segment.bytes": _D(_INT, minimum=14, default="1073741824"),
    "log.segment.delete.delay.ms": _D(_LONG, minimum=0, default="60000"),
    "max.connection.creation.rate": _D(_INT, minimum=0, default="2147483647"),
    "max.connections": _D(_INT, minimum=0, default="2147483647"),
    "max.connections.per.ip": _D(_INT, minimum=0, default="2147483647"),
    "max.connections.per.ip.overrides": _D(_STR, default=""),
    "message.max.bytes": _D(_INT, minimum=0, default="1048588"),
    "metric.reporters": _D(_LIST, default=""),
    "min.insync.replicas": _D(_INT, minimum=1, default="1"),
    "num.io.threads": _D(_INT, minimum=1, default="8"),
    "num.network.threads": _D(_INT, minimum=1, default="3"),
    "num.recovery.threads.per.data.dir": _D(_INT, minimum=1, default="1"),
    "num.replica.fetchers": _D(_INT, default="1"),
    "principal.builder.class": _D(_CLASS),
    "producer.id.expiration.ms": _D(_INT, minimum=1, default="86400000"),
    "sasl.enabled.mechanisms": _D(_LIST, default="GSSAPI"),
    "sasl.jaas.config": _D(ConfigType.PASSWORD),
    "sasl.kerberos.kinit.cmd": _D(_STR, default="/usr/bin/kinit"),
    "sasl.kerberos.min.time.before.relogin": _D(_LONG, default="60000"),
    "sasl.kerberos.principal.to.local.rules": _D(_LIST, default="DEFAULT"),
    "sasl.kerberos.service.name": _D(_STR),
    "sasl.kerberos.ticket.renew.jitter": _D(_DOUBLE, default="0.05"),
    "sasl.kerberos.ticket.renew.window.factor": _D(_DOUBLE, default="0.8"),
    "sasl.login.refresh.buffer.seconds": _D(_SHORT, default="300"),
    "sasl.login.refresh.min.period.seconds": _D(_SHORT, default="60"),
    "sasl.login.refresh.window.factor": _D(_DOUBLE, default="0.8"),
    "sasl.login.refresh.window.jitter": _D(_DOUBLE, default="0.05"),
    "sasl.mechanism.inter.broker.protocol": _D(_STR, default="GSSAPI"),
    "ssl.cipher.suites": _D(_LIST, default=""),
    "ssl.client.auth": _D(_STR, ("required", "requested", "none"), default="none"),
    "ssl.enabled.protocols": _D(_LIST, default="TLSv1.2,TLSv1.3"),
    "ssl.endpoint.identification.algorithm": _D(_STR, default="https"),
    "ssl.engine.factory.class": _D(_CLASS),
    "ssl.keymanager.algorithm": _D(_STR, default="SunX509"),
    "ssl.protocol": _D(_STR, default="TLSv1.3"),
    "ssl.provider": _D(_STR),
    "ssl.secure.random.implementation": _D(_STR),
    "ssl.trustmanager.algorithm": _D(_STR, default="PKIX"),
    "unclean.leader.election.enable": _D(_BOOL, default="false"),
    # streamgate's own dynamic ones (Kafka 3.5.1 refuses them)
    "group.initial.rebalance.delay.ms": _D(_INT, minimum=0, default="3000"),
    "log.retention.check.interval.ms": _D(_LONG, minimum=1, default="300000"),
}

_BOUNDS = {
    ConfigType.INT: (-(2**31), 2**31 - 1),
    ConfigType.LONG: (-(2**63), 2**63 - 1),
    ConfigType.SHORT: (-(2**15), 2**15 - 1),
}


def is_dynamic(name: str) -> bool:
    """Whether `name` is one of the dynamic broker configs (per broker or default)."""
    return name in DYNAMIC_CONFIGS or name.startswith(LISTENER_PREFIX)


def _kafka_set(names: Iterable[str], kind: str = "Set") -> str:
    """A Scala set as Kafka prints it in its messages."""
    return f"{kind}({', '.join(names)})"


def _check_value(name: str, value: str) -> str:
    """Kafka's ConfigDef parse of a dynamic config's value; INVALID_REQUEST when refused."""
    definition = DYNAMIC_CONFIGS.get(name)
    if definition is None:
        return value
    stripped = value.strip()

    def refuse(why: str) -> ConfigError:
        return ConfigError(
            f"Invalid value {value} for configuration {name}: {why}", ErrorCode.INVALID_REQUEST
        )

    kind = definition.type
    if kind in _BOUNDS:
        low, high = _BOUNDS[kind]
        try:
            number = int(stripped)
        except ValueError:
            raise refuse(f"Not a number of type {kind.name}") from None
        if not low <= number <= high:
            raise refuse(f"Not a number of type {kind.name}")
        if definition.minimum is not None and number < definition.minimum:
            raise refuse(f"Value must be at least {definition.minimum}")
        return stripped
    if kind == ConfigType.DOUBLE:
        try:
            float(stripped)
        except ValueError:
            raise refuse("Not a number of type DOUBLE") from None
        return stripped
    if kind == ConfigType.BOOLEAN:
        if stripped.lower() not in ("true", "false"):
            raise refuse("Expected value to be either true or false")
        return stripped.lower()
    if definition.choices:
        items = split_list(stripped) if kind == ConfigType.LIST else [stripped]
        for item in items:
            if item not in definition.choices:
                raise refuse(f"String must be one of: {', '.join(definition.choices)}")
    return ",".join(split_list(stripped)) if kind == ConfigType.LIST else stripped


def validate_broker_configs(resource: str, configs: Mapping[str, str]) -> dict[str, str]:
    """Check a broker resource's complete new set of dynamic configs, in Kafka's order
    (not dynamic, listener prefix, types, per broker only); return it normalised."""
    read_only = [name for name in configs if name in NON_DYNAMIC and name not in STREAMGATE_DYNAMIC]
    if read_only:
        raise ConfigError(
            f"Cannot update these configs dynamically: {_kafka_set(read_only)}",
            ErrorCode.INVALID_REQUEST,
        )
    unprefixed = [name for name in configs if name in LISTENER_PREFIX_ONLY]
    if unprefixed:
        raise ConfigError(
            "These security configs can be dynamically updated only per-listener using the "
            f"listener prefix: {_kafka_set(unprefixed, 'HashSet')}",
            ErrorCode.INVALID_REQUEST,
        )
    result = {name: _check_value(name, value) for name, value in configs.items()}
    if resource == DEFAULT_RESOURCE:
        per_broker = [n for n in configs if n in PER_BROKER_ONLY or n.startswith(LISTENER_PREFIX)]
        if per_broker:
            raise ConfigError(
                "Cannot update these configs at default cluster level, broker id must be "
                f"specified: {_kafka_set(per_broker)}",
                ErrorCode.INVALID_REQUEST,
            )
    return result


def _check_request(names: list[str], values: list[str | None], legacy: bool) -> None:
    if len(set(names)) != len(names):
        raise ConfigError("Error due to duplicate config keys", ErrorCode.INVALID_REQUEST)
    for name, value in zip(names, values, strict=True):
        if value is None and legacy:
            raise ConfigError(f"Null value not supported for : {name}", ErrorCode.INVALID_REQUEST)


def replaced_set(entries: Iterable[tuple[str, str | None]]) -> dict[str, str]:
    """AlterConfigs (legacy): the resource's new set is exactly the given configs."""
    pairs = list(entries)
    _check_request([n for n, _ in pairs], [v for _, v in pairs], legacy=True)
    return {name: value for name, value in pairs if value is not None}


def altered_set(
    current: Mapping[str, str], ops: Iterable[tuple[str, int, str | None]]
) -> dict[str, str]:
    """IncrementalAlterConfigs: SET / DELETE / APPEND / SUBTRACT on the resource's set.

    APPEND and SUBTRACT work on list configs only (INVALID_CONFIG otherwise, like Kafka),
    starting from Kafka's default when the name is not set.
    """
    triples = list(ops)
    _check_request([n for n, _, _ in triples], [v for _, _, v in triples], legacy=False)
    result = dict(current)
    for name, op, value in triples:
        if op == AlterOp.SET:
            if value is None:
                raise ConfigError(
                    f"Null value not supported for : {name}", ErrorCode.INVALID_REQUEST
                )
            result[name] = value
        elif op == AlterOp.DELETE:
            result.pop(name, None)
        elif op in (AlterOp.APPEND, AlterOp.SUBTRACT):
            definition = DYNAMIC_CONFIGS.get(name)
            if definition is None or definition.type != ConfigType.LIST:
                verb = "append" if op == AlterOp.APPEND else "subtract"
                raise ConfigError(f"Config value {verb} is not allowed for config key: {name}")
            items = split_list(result.get(name, definition.default or ""))
            given = split_list(value or "")
            if op == AlterOp.APPEND:
                items += [item for item in given if item not in items]
            else:
                items = [item for item in items if item not in given]
            result[name] = ",".join(items)
        else:
            raise ConfigError(
                f"unknown config operation {op} for {name}", ErrorCode.INVALID_REQUEST
            )
    return result


# --- the node's dynamic configs ------------------------------------------------------------


class BrokerConfigStore(Protocol):
    def load_broker_configs(self) -> dict[str, dict[str, str]]: ...
    def save_broker_configs(self, resource: str, configs: dict[str, str]) -> None: ...


Offload = Callable[..., Awaitable[Any]]


@dataclass(slots=True)
class _Applier:
    static: str  # the serve option's value, in effect when no dynamic value is set
    apply: Callable[[str], None]


class DynamicBrokerConfigs:
    """This node's dynamic broker configs and the cluster default, with their effects."""

    def __init__(self, node_id: int, store: BrokerConfigStore | None, offload: Offload) -> None:
        self.node_id = node_id
        self._store = store
        self._offload = offload
        self.configs: dict[str, dict[str, str]] = {self.broker: {}, DEFAULT_RESOURCE: {}}
        self._appliers: dict[str, _Applier] = {}

    @property
    def broker(self) -> str:
        return str(self.node_id)

    def load(self) -> None:
        """Read this node's and the cluster default's configs (at start, before serving)."""
        if self._store is None:
            return
        stored = self._store.load_broker_configs()
        for resource in (self.broker, DEFAULT_RESOURCE):
            self.configs[resource] = dict(stored.get(resource, {}))

    def register(self, name: str, static: str, apply: Callable[[str], None]) -> None:
        """`apply(value)` makes `name`'s effective value take effect; `static` is the
        value from the gateway's options."""
        self._appliers[name] = _Applier(static, apply)

    def static_value(self, name: str) -> str | None:
        applier = self._appliers.get(name)
        return None if applier is None else applier.static

    def applied_names(self) -> frozenset[str]:
        return frozenset(self._appliers)

    def effective(self, name: str) -> str | None:
        """The per-broker value, else the cluster default, else the static one."""
        for resource in (self.broker, DEFAULT_RESOURCE):
            if name in self.configs[resource]:
                return self.configs[resource][name]
        return self.static_value(name)

    def layers(self, name: str, resource: str | None = None) -> list[Synonym]:
        """The dynamic synonyms of `name`, in Kafka's order (per broker, cluster default)."""
        out = []
        if resource != DEFAULT_RESOURCE and name in self.configs[self.broker]:
            value = self.configs[self.broker][name]
            out.append(Synonym(name, value, ConfigSource.DYNAMIC_BROKER_CONFIG))
        if name in self.configs[DEFAULT_RESOURCE]:
            value = self.configs[DEFAULT_RESOURCE][name]
            out.append(Synonym(name, value, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
        return out

    def apply_all(self) -> None:
        for name in self._appliers:
            self._apply(name)

    def _apply(self, name: str) -> None:
        value = self.effective(name)
        if value is not None:
            self._appliers[name].apply(value)

    async def replace(self, resource: str, configs: Mapping[str, str], validate_only: bool) -> None:
        """Make `configs` the resource's whole set (validated, persisted, applied)."""
        checked = validate_broker_configs(resource, configs)
        if validate_only:
            return
        if self._store is not None:
            await self._offload(self._store.save_broker_configs, resource, dict(checked))
        before = self.configs[resource]
        self.configs[resource] = checked
        for name in set(before) | set(checked):
            if name in self._appliers:
                self._apply(name)
