"""Client quotas, Kafka's way: byte-rate limits per user and client id (and their defaults),
measured over a sliding window of samples, answered with a throttle time.

An entity is a set of (type, name) pairs, `name` None meaning the type's default, e.g.
{("user", "alice")} or {("user", None), ("client-id", "app")}.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

USER = "user"
CLIENT_ID = "client-id"
ENTITY_TYPES = (USER, CLIENT_ID)
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
# Accepted and stored; only the byte rates are enforced.
QUOTA_KEYS = (
    PRODUCER_BYTE_RATE,
    CONSUMER_BYTE_RATE,
    "request_percentage",
    "controller_mutation_rate",
)

Entity = tuple[tuple[str, str | None], ...]  # sorted by type


def make_entity(parts: dict[str, str | None]) -> Entity:
    return tuple(sorted(parts.items()))


class InvalidQuota(ValueError):
    pass


class QuotaStore(Protocol):
    def load_client_quotas(self) -> dict[Entity, dict[str, float]]: ...
    def alter_client_quotas(
        self, changes: list[tuple[Entity, dict[str, float | None]]]
    ) -> None: ...


@dataclass(slots=True)
class QuotaSettings:
    # Kafka's quota.window.num and quota.window.size.seconds.
    samples: int = 11
    window_s: float = 1.0


class _Rate:
    """Bytes per second over the last `samples` windows (Kafka's SampledStat Rate)."""

    __slots__ = ("starts", "totals", "settings")

    def __init__(self, settings: QuotaSettings) -> None:
        self.settings = settings
        self.starts: list[float] = []
        self.totals: list[float] = []

    def record(self, amount: float, now: float) -> None:
        window = self.settings.window_s
        if not self.starts or now >= self.starts[-1] + window:
            self.starts.append(now)
            self.totals.append(0.0)
        self.totals[-1] += amount
        horizon = now - self.settings.samples * window
        while self.starts and self.starts[0] + window <= horizon:
            self.starts.pop(0)
            self.totals.pop(0)

    def throttle_s(self, quota: float, now: float) -> float:
        """Kafka's formula: (observed - quota) / quota * window length, capped."""
        s = self.settings
        elapsed = max(now - self.starts[0], (s.samples - 1) * s.window_s) if self.starts else 0
        if elapsed <= 0:
            return 0.0
        rate = sum(self.totals) / elapsed
        if rate <= quota:
            return 0.0
        return min((rate - quota) / quota * elapsed, s.samples * s.window_s)


@dataclass(slots=True)
class ClientQuotas:
    settings: QuotaSettings = field(default_factory=QuotaSettings)
    store: QuotaStore | None = None
    offload: Callable[..., Awaitable[Any]] | None = None
    _quotas: dict[Entity, dict[str, float]] = field(default_factory=dict)
    _rates: dict[tuple[str, Entity], _Rate] = field(default_factory=dict)

    def load(self) -> None:
        if self.store is not None:
            self._quotas = self.store.load_client_quotas()

    @property
    def quotas(self) -> dict[Entity, dict[str, float]]:
        return self._quotas

    def resolve(self, key: str, user: str, client_id: str) -> tuple[Entity, float] | None:
        """The quota that applies to (user, client id), in Kafka's precedence order."""
        order: list[dict[str, str | None]] = [
            {USER: user, CLIENT_ID: client_id},
            {USER: user, CLIENT_ID: None},
            {USER: user},
            {USER: None, CLIENT_ID: client_id},
            {USER: None, CLIENT_ID: None},
            {USER: None},
            {CLIENT_ID: client_id},
            {CLIENT_ID: None},
        ]
        for parts in order:
            entity = make_entity(parts)
            value = self._quotas.get(entity, {}).get(key)
            if value is not None:
                return entity, value
        return None

    def record(self, key: str, user: str, client_id: str, amount: int) -> int:
        """Count `amount` bytes against the applicable quota; the throttle time in ms."""
        found = self.resolve(key, user, client_id)
        if found is None:
            return 0
        entity, quota = found
        # The quota's own entity with its defaults filled in is what is metered, like Kafka
        # (a default applies to each user / client id separately).
        metered = tuple(
            (kind, name if name is not None else (user if kind == USER else client_id))
            for kind, name in entity
        )
        rate = self._rates.get((key, metered))
        if rate is None:
            rate = self._rates[(key, metered)] = _Rate(self.settings)
        now = time.monotonic()
        rate.record(amount, now)
        return int(rate.throttle_s(quota, now) * 1000)

    async def alter(
        self, changes: list[tuple[Entity, dict[str, float | None]]], validate_only: bool
    ) -> None:
        for entity, ops in changes:
            validate(entity, ops)
        if validate_only:
            return
        if self.store is not None:
            if self.offload is None:
                self.store.alter_client_quotas(changes)
            else:
                await self.offload(self.store.alter_client_quotas, changes)
        for entity, ops in changes:
            current = self._quotas.setdefault(entity, {})
            for key, value in ops.items():
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = value
            if not current:
                del self._quotas[entity]


def validate(entity: Entity, ops: dict[str, float | None]) -> None:
    if not entity:
        raise InvalidQuota("the entity has no component")
    kinds = [kind for kind, _ in entity]
    if len(set(kinds)) != len(kinds):
        raise InvalidQuota("an entity type appears twice")
    for kind in kinds:
        if kind not in ENTITY_TYPES:
            raise InvalidQuota(f"unsupported entity type {kind!r} (user and client-id are)")
    for key, value in ops.items():
        if key not in QUOTA_KEYS:
            raise InvalidQuota(f"unknown quota key {key!r}")
        if value is not None and value <= 0:
            raise InvalidQuota(f"quota {key} must be positive, got {value}")
