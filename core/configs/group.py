"""Per-group configs (the GROUP config resource, type 32, of Kafka 4's KIP-848 and KIP-932).

IncrementalAlterConfigs sets them on one group id (the group need not exist yet);
DescribeConfigs reports each with its value: the group's own (source GROUP_CONFIG) or the
gateway's setting (DEFAULT_CONFIG). The coordinators read the effective value each time
they need it, so a change applies from the next heartbeat, fetch or lock. Values are
checked against Kafka 4.1's default bounds (group.consumer.min/max.session.timeout.ms and
the like): out of bounds or of the wrong type is INVALID_CONFIG, an unknown name too.

They are kept in the metadata store's `broker_configs` table under the resource
"group:<id>" (no broker resource is named so: those are node ids or ""), loaded at start;
with several nodes each node reloads them every second (`refresh_every`), so a change made
through one node reaches the coordinator of the group on another.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from ..api import StoreError
from ..errors import ErrorCode
from .topic_defs import AlterOp, ConfigEntry, ConfigError, ConfigSource, ConfigType

RESOURCE_PREFIX = "group:"
CONSUMER_SESSION_TIMEOUT = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
SHARE_SESSION_TIMEOUT = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL = "share.heartbeat.interval.ms"
SHARE_RECORD_LOCK_DURATION = "share.record.lock.duration.ms"
SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    name: str
    type: ConfigType
    doc: str
    low: int = 0  # INT bounds, inclusive
    high: int = 0
    choices: tuple[str, ...] = ()  # STRING values allowed


DEFINITIONS: dict[str, GroupConfigDef] = {
    d.name: d
    for d in (
        GroupConfigDef(
            CONSUMER_SESSION_TIMEOUT,
            ConfigType.INT,
            "The timeout to detect client failures when using the consumer group protocol.",
            45_000,
            60_000,
        ),
        GroupConfigDef(
            CONSUMER_HEARTBEAT_INTERVAL,
            ConfigType.INT,
            "The heartbeat interval given to the members of a consumer group.",
            5_000,
            15_000,
        ),
        GroupConfigDef(
            SHARE_SESSION_TIMEOUT,
            ConfigType.INT,
            "The timeout to detect client failures when using the share group protocol.",
            45_000,
            60_000,
        ),
        GroupConfigDef(
            SHARE_HEARTBEAT_INTERVAL,
            ConfigType.INT,
            "The heartbeat interval given to the members of a share group.",
            5_000,
            15_000,
        ),
        GroupConfigDef(
            SHARE_RECORD_LOCK_DURATION,
            ConfigType.INT,
            "The record acquisition lock duration in milliseconds for share groups.",
            15_000,
            60_000,
        ),
        GroupConfigDef(
            SHARE_AUTO_OFFSET_RESET,
            ConfigType.STRING,
            "Where a share group starts reading a partition it has no position in.",
            choices=("earliest", "latest"),
        ),
    )
}


def check_value(name: str, value: str | None) -> str:
    """The normalised value of `name`, or ConfigError (INVALID_CONFIG)."""
    definition = DEFINITIONS.get(name)
    if definition is None:
        raise ConfigError(f"Unknown group config name: {name}")
    if value is None:
        raise ConfigError(f"Null value not supported for group config: {name}")
    if definition.type == ConfigType.INT:
        try:
            number = int(value.strip())
        except ValueError:
            raise ConfigError(
                f"Invalid value {value} for configuration {name}: Not a number of type INT"
            ) from None
        if not definition.low <= number <= definition.high:
            raise ConfigError(
                f"Invalid value {value} for configuration {name}: Value must be between "
                f"{definition.low} and {definition.high}"
            )
        return str(number)
    if value not in definition.choices:
        raise ConfigError(
            f"Invalid value {value} for configuration {name}: String must be one of: "
            + ", ".join(definition.choices)
        )
    return value


def altered(
    current: Mapping[str, str], ops: Iterable[tuple[str, int, str | None]]
) -> dict[str, str]:
    """A group's configs after IncrementalAlterConfigs operations (SET, DELETE; no list
    configs, so APPEND / SUBTRACT are refused), each value checked."""
    result = dict(current)
    for name, op, value in ops:
        if op == AlterOp.SET:
            result[name] = check_value(name, value)
        elif op == AlterOp.DELETE:
            if name not in DEFINITIONS:
                raise ConfigError(f"Unknown group config name: {name}")
            result.pop(name, None)
        elif op in (AlterOp.APPEND, AlterOp.SUBTRACT):
            verb = "append" if op == AlterOp.APPEND else "subtract"
            raise ConfigError(f"Config value {verb} is not allowed for config key: {name}")
        else:
            raise ConfigError(
                f"unknown config operation {op} for {name}", ErrorCode.INVALID_REQUEST
            )
    heartbeat = result.get(CONSUMER_HEARTBEAT_INTERVAL)
    session = result.get(CONSUMER_SESSION_TIMEOUT)
    if heartbeat is not None and session is not None and int(heartbeat) >= int(session):
        raise ConfigError(
            f"{CONSUMER_HEARTBEAT_INTERVAL} must be less than {CONSUMER_SESSION_TIMEOUT}"
        )
    return result


class GroupConfigStore(Protocol):
    def load_broker_configs(self) -> dict[str, dict[str, str]]: ...
    def save_broker_configs(self, resource: str, configs: dict[str, str]) -> None: ...


Offload = Callable[..., Awaitable[Any]]


class GroupConfigs:
    """Every group's own configs, and the gateway's values that apply otherwise."""

    def __init__(
        self, store: GroupConfigStore | None, offload: Offload, defaults: Mapping[str, str]
    ) -> None:
        """`defaults`: the value of each name (every one of DEFINITIONS) for a group
        without its own: the gateway's group settings."""
        self._store = store
        self._offload = offload
        self.defaults = dict(defaults)
        self.overrides: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        """Read every group's configs (at start, before serving)."""
        if self._store is not None:
            self.overrides = _groups(self._store.load_broker_configs())

    async def refresh_every(self, seconds: float) -> None:
        """Several nodes: reload every group's configs each `seconds` (others alter them)."""
        while self._store is not None:
            await trio.sleep(seconds)
            try:
                self.overrides = _groups(await self._offload(self._store.load_broker_configs))
            except StoreError:  # the database is away: the next round
                continue

    def value(self, group_id: str, name: str) -> str:
        own = self.overrides.get(group_id)
        if own is not None and name in own:
            return own[name]
        return self.defaults[name]

    def int_value(self, group_id: str, name: str) -> int:
        return int(self.value(group_id, name))

    def describe(self, group_id: str, keys: Iterable[str] | None) -> list[ConfigEntry]:
        own = self.overrides.get(group_id, {})
        names = DEFINITIONS if keys is None else [k for k in keys if k in DEFINITIONS]
        return [
            ConfigEntry(
                name,
                own.get(name, self.defaults[name]),
                ConfigSource.GROUP_CONFIG if name in own else ConfigSource.DEFAULT_CONFIG,
                DEFINITIONS[name].type,
                DEFINITIONS[name].doc,
            )
            for name in names
        ]

    async def alter(
        self, group_id: str, ops: Iterable[tuple[str, int, str | None]], validate_only: bool
    ) -> None:
        """Apply IncrementalAlterConfigs operations to the group's configs: validated
        whole, persisted before they apply; ConfigError and nothing changed otherwise."""
        new = altered(self.overrides.get(group_id, {}), ops)
        if validate_only:
            return
        if self._store is not None:
            await self._offload(self._store.save_broker_configs, RESOURCE_PREFIX + group_id, new)
        if new:
            self.overrides[group_id] = new
        else:
            self.overrides.pop(group_id, None)


def _groups(stored: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    """The group resources among the stored ones, by group id."""
    return {
        resource[len(RESOURCE_PREFIX) :]: dict(configs)
        for resource, configs in stored.items()
        if resource.startswith(RESOURCE_PREFIX)
    }
