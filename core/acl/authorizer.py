"""The authorizer: Kafka's decision rules over the ACLs held in memory.

Decisions are in-memory and synchronous (they run on every request); changes are committed
to the metadata store first (through the metadata worker thread), then applied in memory.
Rules, as Kafka's StandardAuthorizer: super users may do anything; a resource with no ACL at
all is allowed only with `allow_everyone_if_no_acl_found`; a matching DENY wins over any
ALLOW; DESCRIBE is implied by READ/WRITE/DELETE/ALTER, DESCRIBE_CONFIGS by ALTER_CONFIGS.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .model import (
    IMPLIED_BY,
    SUPPORTED_OPERATIONS,
    WILDCARD,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

WILDCARD_PRINCIPAL = "User:*"


class AclStore(Protocol):
    def load_acls(self) -> list[AclBinding]: ...
    def add_acls(self, acls: list[AclBinding]) -> None: ...
    def delete_acls(self, acls: list[AclBinding]) -> None: ...


Offload = Callable[..., Awaitable[Any]]


@dataclass(slots=True)
class AuthorizerSettings:
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False


@dataclass(slots=True)
class Authorizer:
    settings: AuthorizerSettings
    store: AclStore | None = None
    offload: Offload | None = None
    _acls: set[AclBinding] = field(default_factory=set)
    # Indexes, so a decision looks only at bindings that can match: by resource type; literal
    # ones by (type, name) (the wildcard is the name "*"); prefixed ones by type.
    _by_type: dict[ResourceType, list[AclBinding]] = field(default_factory=dict)
    _literal: dict[tuple[ResourceType, str], list[AclBinding]] = field(default_factory=dict)
    _prefixed: dict[ResourceType, list[AclBinding]] = field(default_factory=dict)

    def load(self) -> None:
        if self.store is not None:
            self._acls = set(self.store.load_acls())
        self._reindex()

    def _reindex(self) -> None:
        by_type: dict[ResourceType, list[AclBinding]] = {}
        literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        prefixed: dict[ResourceType, list[AclBinding]] = {}
        for acl in self._acls:
            by_type.setdefault(acl.resource_type, []).append(acl)
            if acl.pattern_type == PatternType.PREFIXED:
                prefixed.setdefault(acl.resource_type, []).append(acl)
            else:
                literal.setdefault((acl.resource_type, acl.resource_name), []).append(acl)
        self._by_type, self._literal, self._prefixed = by_type, literal, prefixed

    def _matching(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        found = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found += self._literal.get((resource_type, WILDCARD), ())
        found += (
            a for a in self._prefixed.get(resource_type, ()) if name.startswith(a.resource_name)
        )
        return found

    @property
    def acls(self) -> frozenset[AclBinding]:
        return frozenset(self._acls)

    # --- decisions -------------------------------------------------------------------------

    def authorize(
        self,
        principal: str,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if principal in self.settings.super_users:
            return True
        matching = self._matching(resource_type, name)
        if not matching:
            return self.settings.allow_everyone_if_no_acl_found
        applicable = [a for a in matching if _applies_to(a, principal, host)]
        for acl in applicable:
            if acl.permission == Permission.DENY and acl.operation in (operation, Operation.ALL):
                return False
        allowed_by = IMPLIED_BY.get(operation, frozenset({operation})) | {Operation.ALL}
        return any(
            a.permission == Permission.ALLOW and a.operation in allowed_by for a in applicable
        )

    def authorized_operations(
        self, principal: str, host: str, resource_type: ResourceType, name: str
    ) -> int:
        """KIP-430's bit field: bit `op` set for every operation the principal may perform."""
        bits = 0
        for op in SUPPORTED_OPERATIONS[resource_type]:
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits

    def may_any(self, principal: str, host: str, operation: Operation, rtype: ResourceType) -> bool:
        """Kafka's authorizeByResourceType, simplified: some ALLOW for the principal on some
        resource of the type, not overridden by a DENY of everything (a wildcard literal or
        an empty prefix). Used for idempotent producers without IDEMPOTENT_WRITE (KIP-679)."""
        if principal in self.settings.super_users:
            return True
        relevant = [
            a
            for a in self._by_type.get(rtype, ())
            if _applies_to(a, principal, host) and a.operation in (operation, Operation.ALL)
        ]
        for acl in relevant:
            everything = acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD
            everything = everything or (
                acl.pattern_type == PatternType.PREFIXED and acl.resource_name == ""
            )
            if acl.permission == Permission.DENY and everything:
                return False
        if any(a.permission == Permission.ALLOW for a in relevant):
            return True
        return self.settings.allow_everyone_if_no_acl_found and not self._by_type.get(rtype)

    # --- changes ---------------------------------------------------------------------------

    def matching(self, acl_filter: AclFilter) -> list[AclBinding]:
        return sorted(
            (a for a in self._acls if acl_filter.matches(a)),
            key=lambda a: (a.resource_type, a.resource_name, a.pattern_type, a.principal),
        )

    async def create(self, acls: Iterable[AclBinding]) -> None:
        new = [a for a in dict.fromkeys(acls) if a not in self._acls]
        if new:
            await self._commit("add_acls", new)
            self._acls.update(new)
            self._reindex()

    async def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """Delete what each filter matches; per filter, the bindings it removed."""
        per_filter = [self.matching(f) for f in filters]
        doomed = list(dict.fromkeys(a for found in per_filter for a in found))
        if doomed:
            await self._commit("delete_acls", doomed)
            self._acls.difference_update(doomed)
            self._reindex()
        return per_filter

    async def _commit(self, method: str, acls: list[AclBinding]) -> None:
        if self.store is None:
            return
        fn = getattr(self.store, method)
        if self.offload is None:
            fn(acls)
        else:
            await self.offload(fn, acls)


def _applies_to(acl: AclBinding, principal: str, host: str) -> bool:
    return acl.principal in (principal, WILDCARD_PRINCIPAL) and acl.host in (host, WILDCARD)
