"""A real PostgreSQL server in a temporary folder, for tests and benchmarks.

The "start a local PostgreSQL" steps (Debian's binaries, initdb, the server's command line,
the database) are the product's own, `cli/embedded_pg.py` (`serve --nodes N` uses them);
this module runs them as a ManagedProcess on a free loopback port. When we are root the
server runs as the `postgres` system user; as that user cannot enter
root's private temp folders (pytest's among them), the cluster then lives in a folder of
its own under the system temp dir, removed by `close()`. The log stays in `work_dir`.
`dsn` is a libpq connection string for psycopg and friends.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cli.embedded_pg import (
    DB_NAME,
    DB_USER,
    READY_LINE,
    EmbeddedPostgresError,
    chown_tree,
    ensure_database,
    initdb,
    postgres_bin,
    run_as,
    server_argv,
    unavailable_reason,
)
from harness.ports import free_port, port_accepts
from harness.process import ManagedProcess, ProcessError

START_TIMEOUT = 60.0
__all__ = ["DB_NAME", "DB_USER", "PostgresError", "PostgresServer", "postgres_bin"]
__all__ += ["unavailable_reason"]


class PostgresError(ProcessError):
    pass


class PostgresServer(ManagedProcess):
    """PostgreSQL in `work_dir` on a free loopback port; `.dsn` connects as a superuser.

    The server runs in the foreground (`postgres -D ...`) as this object's child, so the
    usual start / stop (SIGTERM = smart shutdown) / kill (SIGKILL) of ManagedProcess apply.
    """

    name = "postgres"

    def __init__(self, work_dir: Path, settings: dict[str, str] | None = None) -> None:
        bin_dir, why = postgres_bin()
        if bin_dir is None:
            raise PostgresError(why)
        self.bin_dir = bin_dir
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._own_dir = os.geteuid() == 0
        self.server_dir = (
            Path(tempfile.mkdtemp(prefix="streamgate-pg-")) if self._own_dir else self.work_dir
        )
        self.data_dir = self.server_dir / "data"
        self.socket_dir = self.server_dir / "socket"
        super().__init__(self.work_dir / "postgres.log", cwd=self.server_dir)
        self.port = free_port()
        # fsync stays on: tests that use this want the durability they would get in production
        self.settings = {
            "listen_addresses": "127.0.0.1",
            "max_connections": "50",
            **(settings or {}),
        }
        self._initialised = False

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={DB_USER} dbname={DB_NAME} connect_timeout=10"

    @property
    def url(self) -> str:
        return f"postgresql://{DB_USER}@127.0.0.1:{self.port}/{DB_NAME}"

    def popen_options(self) -> dict[str, Any]:
        return run_as()

    def _initdb(self) -> None:
        self.socket_dir.mkdir(exist_ok=True)
        chown_tree(self.server_dir)
        try:
            initdb(self.bin_dir, self.data_dir, self.server_dir)
        except EmbeddedPostgresError as exc:
            raise PostgresError(str(exc)) from None
        self._initialised = True

    def command(self) -> list[str]:
        return server_argv(self.bin_dir, self.data_dir, self.port, self.socket_dir, self.settings)

    def ready(self) -> bool:
        return port_accepts(self.port) and READY_LINE in self.log_since_start()

    def start(
        self, timeout: float = START_TIMEOUT, ready: Callable[[], bool] | None = None
    ) -> None:
        if not self._initialised:
            self._initdb()
        try:
            super().start(timeout, ready)
            ensure_database(self.bin_dir, self.port)  # so `dsn` works without further set-up
        except (ProcessError, EmbeddedPostgresError) as exc:
            raise PostgresError(str(exc)) from None

    def close(self) -> None:
        """Stop if running and remove the cluster's own temp folder; never raises."""
        super().close()
        if self._own_dir and not self.is_alive():
            shutil.rmtree(self.server_dir, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
