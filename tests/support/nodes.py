"""Fixtures for the several-nodes tests: one real PostgreSQL per module, a fresh database
per test (so every test starts from an empty schema that streamgate migrates itself)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from harness.gateway import Gateway
from harness.postgres import PostgresServer, unavailable_reason

requires_postgres = pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"PostgreSQL: {unavailable_reason()}"
)
_numbers = itertools.count()


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    pg = PostgresServer(tmp_path_factory.mktemp("pg"))
    pg.start()
    try:
        yield pg
    finally:
        pg.close()


@pytest.fixture
def pg_url(postgres: PostgresServer) -> str:
    """A new, empty database on the module's server; its postgresql:// URL."""
    name = f"sg_{next(_numbers)}"
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return postgres.url.rsplit("/", 1)[0] + "/" + name


def gateway_args(
    url: str, node_id: int = 1, lease_s: float = 3.0, multi_node: bool | None = False
) -> list[str]:
    """serve's node flags. multi_node=False is the one-active-node mode the single-node tests
    assume; None leaves the flag out (the default with --metadata: several active nodes)."""
    args = ["--metadata", url, "--node-id", str(node_id), "--node-lease-s", str(lease_s)]
    if multi_node is not None:
        args += ["--multi-node", "true" if multi_node else "false"]
    return args


def log_of(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


@contextmanager
def running(nodes: list[Gateway]) -> Iterator[list[Gateway]]:
    """Starts every node fresh, in order; closes them all on the way out."""
    try:
        for node in nodes:
            node.start_fresh()
        yield nodes
    finally:
        for node in nodes:
            node.close()
