"""`streamgate users add|delete|list`: SCRAM users in a data dir's metadata store.

The bootstrap path for the first SASL user (after that, kafka-configs.sh works over the
wire). The password is read from stdin (a prompt on a terminal), salted here, and only the
SCRAM form (salt, iterations, stored key, server key) is written: the same credential serves
SCRAM-SHA-256/512 logins and SASL/PLAIN. Safe while the gateway runs (SQLite locking; the
gateway reads credentials at each login). With `--metadata postgresql://...` the users go
to the cluster's shared database instead, as `serve --metadata` reads them.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys

from core.credentials import (
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    CredentialKey,
    CredentialStore,
    UserCredential,
    new_credential,
)
from core.metadata import SQLiteCredentialStore


def register(commands: argparse._SubParsersAction) -> None:
    users = commands.add_parser("users", help="manage SASL/SCRAM users of a data dir")
    sub = users.add_subparsers(dest="users_command", required=True)
    data_dir = os.environ.get("STREAMGATE_DATA_DIR", "./data")
    metadata = os.environ.get("STREAMGATE_METADATA")
    metadata_help = "postgresql:// URL of a cluster's metadata (as serve --metadata)"

    add = sub.add_parser("add", help="add or replace a user (password read from stdin)")
    add.add_argument("name")
    add.add_argument(
        "--mechanism",
        action="append",
        choices=tuple(MECHANISMS),
        help="SCRAM mechanism(s) to store (default: both)",
    )
    add.add_argument("--iterations", type=int, default=MIN_ITERATIONS)
    add.add_argument("--data-dir", default=data_dir)
    add.add_argument("--metadata", default=metadata, help=metadata_help)
    add.set_defaults(run=_add)

    delete = sub.add_parser("delete", help="remove a user's credentials")
    delete.add_argument("name")
    delete.add_argument("--data-dir", default=data_dir)
    delete.add_argument("--metadata", default=metadata, help=metadata_help)
    delete.set_defaults(run=_delete)

    listing = sub.add_parser("list", help="users and their mechanisms (never secrets)")
    listing.add_argument("--data-dir", default=data_dir)
    listing.add_argument("--metadata", default=metadata, help=metadata_help)
    listing.set_defaults(run=_list)


def _open(data_dir: str, metadata: str | None = None) -> CredentialStore:
    if metadata:
        from core.metadata.postgres import PostgresCredentialStore  # psycopg only when asked

        return PostgresCredentialStore(metadata)
    os.makedirs(data_dir, exist_ok=True)
    return SQLiteCredentialStore(os.path.join(data_dir, "metadata.db"))


def _read_password() -> str:
    if sys.stdin.isatty():
        first = getpass.getpass("password: ")
        if getpass.getpass("again: ") != first:
            raise SystemExit("passwords differ")
        return first
    return sys.stdin.readline().rstrip("\r\n")


def _add(args: argparse.Namespace) -> int:
    if not args.name:
        raise SystemExit("a user name is required")
    if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
        raise SystemExit(f"--iterations must be within {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    password = _read_password()
    if not password:
        raise SystemExit("empty password (give it on stdin)")
    mechanisms = args.mechanism or list(MECHANISMS)
    store = _open(args.data_dir, args.metadata)
    try:
        store.apply(
            [
                UserCredential(args.name, m, new_credential(m, password, args.iterations))
                for m in mechanisms
            ],
            [],
        )
    finally:
        store.close()
    print(f"user {args.name}: {', '.join(mechanisms)}")
    return 0


def _delete(args: argparse.Namespace) -> int:
    store = _open(args.data_dir, args.metadata)
    try:
        missing = store.apply([], [CredentialKey(args.name, m) for m in MECHANISMS])
    finally:
        store.close()
    if len(missing) == len(MECHANISMS):
        print(f"no user {args.name}", file=sys.stderr)
        return 1
    return 0


def _list(args: argparse.Namespace) -> int:
    store = _open(args.data_dir, args.metadata)
    try:
        for user, infos in store.describe(None).items():
            print(user, " ".join(f"{i.mechanism}(iterations={i.iterations})" for i in infos))
    finally:
        store.close()
    return 0
