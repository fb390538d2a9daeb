"""A local PostgreSQL for `serve --nodes N` (and the tests' harness/postgres.py).

Uses Debian's `postgresql` package (`/usr/lib/postgresql/<major>/bin`, or `POSTGRES_BIN`):
`initdb` once into a folder of ours, then `postgres -D` in the foreground as our child, on a
loopback port with its unix socket in that folder too, so nothing touches the system's
cluster. PostgreSQL refuses to run as root: when we are root it runs as the `postgres`
system user (Popen's `user=`, so signals reach the server itself, not a wrapper), which
must be able to enter the folder.
"""

from __future__ import annotations

import os
import pwd
import signal
import stat
import subprocess
import time
from pathlib import Path
from typing import IO, Any

POSTGRES_ROOT = Path("/usr/lib/postgresql")
SERVICE_USER = "postgres"
DB_USER = "streamgate"
DB_NAME = "streamgate"
READY_LINE = b"database system is ready to accept connections"
MISSING = "no PostgreSQL server binaries: apt-get install -y postgresql (or set POSTGRES_BIN)"


class EmbeddedPostgresError(RuntimeError):
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
    return None, MISSING


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


def run_as() -> dict[str, Any]:
    """Popen arguments that drop root to the postgres user (nothing when not root)."""
    return {"user": SERVICE_USER, "group": SERVICE_USER} if os.geteuid() == 0 else {}


def chown_tree(path: Path) -> None:
    """Root only: hand `path` and everything under it to the postgres user."""
    if os.geteuid() != 0:
        return
    user = pwd.getpwnam(SERVICE_USER)
    for root, dirs, files in os.walk(path):
        for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
            os.chown(name, user.pw_uid, user.pw_gid)


def check_reachable(path: Path) -> None:
    """Root only: the postgres user must be able to walk down to `path`; say how if not."""
    if os.geteuid() != 0:
        return
    uid = pwd.getpwnam(SERVICE_USER).pw_uid
    for parent in reversed(path.resolve().parents):
        info = parent.stat()
        if info.st_uid != uid and not info.st_mode & stat.S_IXOTH:
            raise EmbeddedPostgresError(
                f"PostgreSQL runs as the {SERVICE_USER!r} user (we are root), which cannot "
                f"enter {parent}: use a data dir it can reach (chmod o+x {parent}) or run "
                "streamgate as another user"
            )


def initdb(bin_dir: Path, data_dir: Path, cwd: Path) -> None:
    """Create a cluster whose superuser is DB_USER, trusted on loopback."""
    out = subprocess.run(
        [
            str(bin_dir / "initdb"),
            "-D",
            str(data_dir),
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
        cwd=cwd,
        **run_as(),
    )
    if out.returncode != 0:
        raise EmbeddedPostgresError(f"initdb failed ({out.returncode}): {out.stdout}{out.stderr}")


def server_argv(
    bin_dir: Path, data_dir: Path, port: int, socket_dir: Path, settings: dict[str, str]
) -> list[str]:
    argv = [str(bin_dir / "postgres"), "-D", str(data_dir), "-p", str(port)]
    argv += ["-k", str(socket_dir)]
    for key, value in settings.items():
        argv += ["-c", f"{key}={value}"]
    return argv


def default_settings() -> dict[str, str]:
    # fsync stays on: acknowledged metadata must survive a machine crash
    return {"listen_addresses": "127.0.0.1", "max_connections": "100"}


def ensure_database(bin_dir: Path, port: int) -> None:
    """Create DB_NAME unless it exists (the server must be accepting connections)."""

    def psql(sql: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(bin_dir / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", DB_USER]
            + ["-d", "postgres", "-v", "ON_ERROR_STOP=1", "-qAtc", sql],
            capture_output=True,
            text=True,
            timeout=60,
        )

    out = psql(f"SELECT 1 FROM pg_database WHERE datname = '{DB_NAME}'")
    if out.returncode != 0:
        raise EmbeddedPostgresError(f"psql failed: {out.stderr.strip()}")
    if out.stdout.strip() != "1":
        created = psql(f'CREATE DATABASE "{DB_NAME}"')
        if created.returncode != 0:
            raise EmbeddedPostgresError(f"CREATE DATABASE failed: {created.stderr.strip()}")


def url(port: int) -> str:
    return f"postgresql://{DB_USER}@127.0.0.1:{port}/{DB_NAME}"


class EmbeddedPostgres:
    """A cluster kept in `cluster_dir` (data/, socket/, postgres.log) across restarts."""

    def __init__(self, cluster_dir: Path, port: int) -> None:
        bin_dir, why = postgres_bin()
        if bin_dir is None:
            raise EmbeddedPostgresError(why)
        self.bin_dir = bin_dir
        self.cluster_dir = Path(cluster_dir).resolve()
        self.data_dir = self.cluster_dir / "data"
        self.socket_dir = self.cluster_dir / "socket"
        self.log_path = self.cluster_dir / "postgres.log"
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return url(self.port)

    def start(self, timeout: float = 60.0) -> None:
        """initdb on first use, start the server, wait until it answers, create the database."""
        why = unavailable_reason()
        if why:
            raise EmbeddedPostgresError(why)
        self.cluster_dir.mkdir(parents=True, exist_ok=True)
        check_reachable(self.cluster_dir)
        self.socket_dir.mkdir(exist_ok=True)
        if not (self.data_dir / "PG_VERSION").is_file():
            chown_tree(self.cluster_dir)
            initdb(self.bin_dir, self.data_dir, self.cluster_dir)
        chown_tree(self.socket_dir)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (kept open for the child)
        start = self._log.tell()
        argv = server_argv(
            self.bin_dir, self.data_dir, self.port, self.socket_dir, default_settings()
        )
        self.proc = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.cluster_dir,
            start_new_session=True,  # Ctrl-C reaches the supervisor, which stops us last
            **run_as(),
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise EmbeddedPostgresError(
                    f"PostgreSQL exited with status {self.proc.returncode}: "
                    f"{self._log_since(start)[-2000:]}"
                )
            if READY_LINE.decode() in self._log_since(start):
                try:
                    ensure_database(self.bin_dir, self.port)
                    return
                except EmbeddedPostgresError:
                    if time.monotonic() > deadline:
                        raise
            if time.monotonic() > deadline:
                self.stop()
                raise EmbeddedPostgresError(f"PostgreSQL not ready after {timeout:.0f} s")
            time.sleep(0.1)

    def _log_since(self, offset: int) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        """Fast shutdown (SIGINT: clients are disconnected, everything is flushed), then
        SIGKILL if it takes longer than `timeout`."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
