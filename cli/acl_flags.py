"""`serve` flags for the authorizer, client quotas and the per-address connection limit.

    --authorizer true                      ACLs enforced on every API (off by default)
    --super-users 'User:admin;User:bob'     Kafka's super.users
    --allow-everyone-if-no-acl-found true  Kafka's allow.everyone.if.no.acl.found
    --max-connections-per-ip N             Kafka's max.connections.per.ip (0: no limit)
Hidden: --quota-window-num / --quota-window-size-seconds (Kafka's quota.window.*).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

from core.acl.authorizer import AuthorizerSettings
from core.acl.quotas import QuotaSettings


@dataclass(slots=True)
class AclSettings:
    enabled: bool = False
    authorizer: AuthorizerSettings = field(default_factory=AuthorizerSettings)
    quotas: QuotaSettings = field(default_factory=QuotaSettings)
    max_connections_per_ip: int = 0


def _env(name: str, default: str) -> str:
    return os.environ.get(f"STREAMGATE_{name}", default)


def _bool(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def _principals(value: str) -> frozenset[str]:
    names = frozenset(p.strip() for p in value.split(";") if p.strip())
    for name in names:
        kind, sep, rest = name.partition(":")
        if not sep or not kind or not rest:
            raise argparse.ArgumentTypeError(f"expected Type:name principals, got {name!r}")
    return names


def _non_negative(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {value}")
    return number


def add_arguments(serve_cmd: argparse.ArgumentParser) -> None:
    serve_cmd.add_argument(
        "--authorizer",
        type=_bool,
        default=_bool(_env("AUTHORIZER", "false")),
        help="enforce ACLs (CreateAcls/DescribeAcls/DeleteAcls, kafka-acls.sh) on every API "
        "(STREAMGATE_AUTHORIZER, default false: everything allowed)",
    )
    serve_cmd.add_argument(
        "--super-users",
        type=_principals,
        default=_principals(_env("SUPER_USERS", "")),
        help="principals allowed everything, ';'-separated, e.g. 'User:admin;User:bob' "
        "(STREAMGATE_SUPER_USERS, Kafka's super.users)",
    )
    serve_cmd.add_argument(
        "--allow-everyone-if-no-acl-found",
        type=_bool,
        default=_bool(_env("ALLOW_EVERYONE_IF_NO_ACL_FOUND", "false")),
        help="allow access to resources that have no ACL at all "
        "(STREAMGATE_ALLOW_EVERYONE_IF_NO_ACL_FOUND, Kafka's allow.everyone.if.no.acl.found)",
    )
    serve_cmd.add_argument(
        "--max-connections-per-ip",
        type=_non_negative,
        default=_non_negative(_env("MAX_CONNECTIONS_PER_IP", "0")),
        help="open Kafka connections allowed per client address, 0 for no limit "
        "(STREAMGATE_MAX_CONNECTIONS_PER_IP, Kafka's max.connections.per.ip)",
    )
    serve_cmd.add_argument(
        "--quota-window-num",
        type=int,
        default=int(_env("QUOTA_WINDOW_NUM", "11")),
        help=argparse.SUPPRESS,
    )
    serve_cmd.add_argument(
        "--quota-window-size-seconds",
        type=float,
        default=float(_env("QUOTA_WINDOW_SIZE_SECONDS", "1")),
        help=argparse.SUPPRESS,
    )


def settings_from(args: argparse.Namespace) -> AclSettings:
    return AclSettings(
        enabled=args.authorizer,
        authorizer=AuthorizerSettings(args.super_users, args.allow_everyone_if_no_acl_found),
        quotas=QuotaSettings(max(1, args.quota_window_num), args.quota_window_size_seconds),
        max_connections_per_ip=args.max_connections_per_ip,
    )
