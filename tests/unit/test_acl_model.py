"""Kafka's authorization rules, in memory (core/acl): matching, deny wins, implied
operations, super users, allow-if-no-ACL, filters for describe/delete, validation."""

from __future__ import annotations

import pytest
import trio

from core.acl.authorizer import Authorizer, AuthorizerSettings
from core.acl.model import (
    AclBinding,
    AclFilter,
    InvalidAcl,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY


def acl(
    name: str,
    op: Operation,
    perm: Permission = ALLOW,
    pattern: PatternType = LIT,
    principal: str = "User:alice",
    host: str = "*",
    rtype: ResourceType = T,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def authorizer(*acls: AclBinding, supers: tuple[str, ...] = (), allow: bool = False) -> Authorizer:
    az = Authorizer(AuthorizerSettings(frozenset(supers), allow))
    trio.run(az.create, list(acls))
    return az


def can(
    az: Authorizer,
    op: Operation,
    name: str,
    who: str = "User:alice",
    host: str = "10.0.0.1",
    rtype: ResourceType = T,
) -> bool:
    return az.authorize(who, host, op, rtype, name)


def test_literal_prefixed_and_wildcard() -> None:
    az = authorizer(
        acl("orders", Operation.READ),
        acl("log-", Operation.WRITE, pattern=PRE),
        acl("*", Operation.DESCRIBE, principal="User:bob"),
    )
    assert can(az, Operation.READ, "orders")
    assert not can(az, Operation.READ, "orders2")
    assert can(az, Operation.WRITE, "log-a") and not can(az, Operation.WRITE, "lo")
    assert can(az, Operation.DESCRIBE, "anything", who="User:bob")
    assert not can(az, Operation.READ, "anything", who="User:bob")


def test_deny_wins_and_all() -> None:
    az = authorizer(acl("t", Operation.ALL), acl("t", Operation.WRITE, DENY))
    assert can(az, Operation.READ, "t") and not can(az, Operation.WRITE, "t")
    az = authorizer(acl("t", Operation.READ), acl("t", Operation.ALL, DENY, principal="User:*"))
    assert not can(az, Operation.READ, "t")


def test_implied_operations() -> None:
    for op in (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER):
        assert can(authorizer(acl("t", op)), Operation.DESCRIBE, "t")
    az = authorizer(acl("t", Operation.ALTER_CONFIGS))
    assert can(az, Operation.DESCRIBE_CONFIGS, "t") and not can(az, Operation.READ, "t")
    # A DENY of READ does not deny DESCRIBE (Kafka denies only the operation or ALL).
    az = authorizer(acl("t", Operation.DESCRIBE), acl("t", Operation.READ, DENY))
    assert can(az, Operation.DESCRIBE, "t") and not can(az, Operation.READ, "t")


def test_hosts() -> None:
    az = authorizer(acl("t", Operation.READ, host="10.0.0.1"))
    assert can(az, Operation.READ, "t", host="10.0.0.1")
    assert not can(az, Operation.READ, "t", host="10.0.0.2")


def test_super_users_and_no_acl_found() -> None:
    az = authorizer(acl("t", Operation.READ, principal="User:bob"), supers=("User:root",))
    assert can(az, Operation.DELETE, "t", who="User:root")
    assert not can(az, Operation.READ, "free")  # no ACL at all, default: denied
    az = authorizer(acl("t", Operation.READ, principal="User:bob"), allow=True)
    assert can(az, Operation.READ, "free")  # no ACL on "free": everyone
    assert not can(az, Operation.READ, "t")  # "t" has ACLs, none for alice


def test_authorized_operations_bits() -> None:
    az = authorizer(acl("g", Operation.READ, rtype=G))
    bits = az.authorized_operations("User:alice", "h", G, "g")
    assert bits == (1 << Operation.READ) | (1 << Operation.DESCRIBE)


def test_idempotent_write_by_topic_write() -> None:
    az = authorizer(acl("x-", Operation.WRITE, pattern=PRE))
    assert az.may_any("User:alice", "h", Operation.WRITE, T)
    assert not az.may_any("User:bob", "h", Operation.WRITE, T)


def _filter(**kw: object) -> AclFilter:
    base: dict[str, object] = dict(
        resource_type=ResourceType.ANY,
        resource_name=None,
        pattern_type=PatternType.ANY,
        principal=None,
        host=None,
        operation=Operation.ANY,
        permission=Permission.ANY,
    )
    base.update(kw)
    return AclFilter(**base)  # type: ignore[arg-type]


def test_filters() -> None:
    lit, pre, wild = (
        acl("orders", Operation.READ),
        acl("ord", Operation.READ, pattern=PRE),
        acl("*", Operation.READ),
    )
    az = authorizer(lit, pre, wild, acl("g", Operation.READ, rtype=G))
    assert len(az.matching(_filter())) == 4
    assert az.matching(_filter(resource_type=T, resource_name="orders")) == [lit]
    match = az.matching(
        _filter(resource_type=T, resource_name="orders", pattern_type=PatternType.MATCH)
    )
    assert set(match) == {lit, pre, wild}
    assert az.matching(_filter(resource_type=T, pattern_type=PRE)) == [pre]
    assert az.matching(_filter(operation=Operation.WRITE)) == []
    removed = trio.run(az.delete, [_filter(resource_type=G), _filter(resource_name="orders")])
    assert [len(r) for r in removed] == [1, 1]
    assert set(az.acls) == {pre, wild}


@pytest.mark.parametrize(
    "binding",
    [
        AclBinding(ResourceType.ANY, "t", LIT, "User:a", "*", Operation.READ, ALLOW),
        AclBinding(T, "t", PatternType.MATCH, "User:a", "*", Operation.READ, ALLOW),
        AclBinding(T, "t", LIT, "alice", "*", Operation.READ, ALLOW),
        AclBinding(T, "t", LIT, "User:a", "*", Operation.ANY, ALLOW),
        AclBinding(T, "t", LIT, "User:a", "*", Operation.READ, Permission.ANY),
        AclBinding(C, "other", LIT, "User:a", "*", Operation.ALTER, ALLOW),
        AclBinding(G, "g", LIT, "User:a", "*", Operation.WRITE, ALLOW),
        AclBinding(T, "", LIT, "User:a", "*", Operation.READ, ALLOW),
    ],
)
def test_invalid_bindings(binding: AclBinding) -> None:
    with pytest.raises(InvalidAcl):
        binding.validate()
