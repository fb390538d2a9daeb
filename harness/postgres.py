"""A real PostgreSQL server in a temporary folder, for tests and benchmarks.

Uses Debian's `postgresql` package (`/usr/lib/postgresql/<major>/bin/initdb`, `pg_ctl`; the
Makefile installs it when missing): `initdb` into `work_dir/data`, then `pg_ctl start` on a
free loopback port with the unix socket in `work_dir` as well, so nothing touches the
system's cluster. PostgreSQL refuses to run as root: when we are root the server runs as the
`postgres` system user (created by the package; Popen's `user=`, so SIGTERM and SIGKILL
reach the server itself, not a wrapper); as that user cannot enter
root's private temp folders (pytest's among them), the cluster then lives in a folder of
its own under the system temp dir, removed by `close()`. The log stays in `work_dir`.
`dsn` is a libpq connection string for psycopg and friends.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.ports import free_port, port_accepts
from harness.process import ManagedProcess, ProcessError

POSTGRES_ROOT = Path("/usr/lib/postgresql")
SERVICE_USER = "postgres"
START_TIMEOUT = 60.0
DB_USER = "streamgate"
DB_NAME = "streamgate"


class PostgresError(ProcessError):
    pass


def postgres_bin() -> tuple[Path | None, str]:
    """(the bin folder of the newest installed PostgreSQL, "") or (None, why not)."""
    env = os.environ.get("POSTGRES_BIN")
    if env:
        path = Path(env)
        if (path / "initdb").is_file():
            return path, ""
        return None, f"POSTGRES_BIN={env} has no initdb"
    majors = sorted(
        (p for p in POSTGRES_ROOT.glob("*") if (p / "bin" / "initdb").is_file()),
        key=lambda p: int(p.name) if p.name.isdigit() else 0,
    )
    if majors:
        return majors[-1] / "bin", ""
    return None, "no PostgreSQL: apt-get install -y postgresql (or set POSTGRES_BIN)"


def unavailable_reason() -> str | None:
    """None when a PostgreSQL server can be started here, else why not."""
    path, why = postgres_bin()
    if path is None:
        return why
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVICE_USER)
        except KeyError:
            return f"running as root and there is no {SERVICE_USER!r} user to run PostgreSQL"
    return None


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
        return {"user": SERVICE_USER, "group": SERVICE_USER} if os.geteuid() == 0 else {}

    def _chown(self) -> None:
        if os.geteuid() != 0:
            return
        user = pwd.getpwnam(SERVICE_USER)
        for root, dirs, files in os.walk(self.server_dir):
            for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                os.chown(name, user.pw_uid, user.pw_gid)

    def _initdb(self) -> None:
        self.socket_dir.mkdir(exist_ok=True)
        self._chown()
        out = subprocess.run(
            [
                str(self.bin_dir / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                DB_USER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
                "--no-instructions",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.server_dir,
            **self.popen_options(),
        )
        if out.returncode != 0:
            raise PostgresError(f"initdb failed ({out.returncode}): {out.stdout}{out.stderr}")
        self._initialised = True

    def command(self) -> list[str]:
        argv = [
            str(self.bin_dir / "postgres"),
            "-D",
            str(self.data_dir),
            "-p",
            str(self.port),
            "-k",
            str(self.socket_dir),
        ]
        for key, value in self.settings.items():
            argv += ["-c", f"{key}={value}"]
        return argv

    def ready(self) -> bool:
        return (
            port_accepts(self.port)
            and b"database system is ready to accept connections" in self.log_since_start()
        )

    def start(
        self, timeout: float = START_TIMEOUT, ready: Callable[[], bool] | None = None
    ) -> None:
        if not self._initialised:
            self._initdb()
        try:
            super().start(timeout, ready)
        except ProcessError as exc:
            raise PostgresError(str(exc)) from None
        # createdb: the superuser's own database, so `dsn` works without further set-up
        out = subprocess.run(
            [
                str(self.bin_dir / "psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                DB_USER,
                "-d",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-qAtc",
                f"SELECT 1 FROM pg_database WHERE datname = '{DB_NAME}'",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if out.returncode != 0:
            raise PostgresError(f"psql failed: {out.stderr}")
        if out.stdout.strip() != "1":
            subprocess.run(
                [
                    str(self.bin_dir / "createdb"),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "-U",
                    DB_USER,
                    DB_NAME,
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )

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
