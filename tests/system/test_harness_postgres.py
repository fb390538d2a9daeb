"""harness.postgres starts a real PostgreSQL in a temp folder that psycopg can query."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from harness.postgres import PostgresServer, unavailable_reason

pytestmark = pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"PostgreSQL: {unavailable_reason()}"
)


def test_postgres_starts_answers_and_keeps_data_across_restart(tmp_path: Path) -> None:
    with PostgresServer(tmp_path / "pg") as pg:
        with psycopg.connect(pg.dsn) as conn:
            assert conn.execute("SELECT 40 + 2").fetchone() == (42,)
            conn.execute("CREATE TABLE t (k text PRIMARY KEY, v int)")
            conn.execute("INSERT INTO t VALUES ('a', 1)")
        # the socket is in the server's own folder, not /var/run/postgresql
        assert list(pg.socket_dir.glob(f".s.PGSQL.{pg.port}"))
        assert pg.stop() == 0
        pg.start()
        with psycopg.connect(pg.dsn) as conn:
            assert conn.execute("SELECT v FROM t WHERE k = 'a'").fetchone() == (1,)
    assert not pg.is_alive()
    assert not pg.data_dir.exists() or pg.server_dir == tmp_path / "pg"
