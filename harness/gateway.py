"""The streamgate gateway as a subprocess (`python -m gateway serve`) on a free loopback port."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.ports import free_port, port_accepts
from harness.process import ManagedProcess, ProcessError

REPO_ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 30.0


class GatewayError(ProcessError):
    pass


class Gateway(ManagedProcess):
    """A gateway bound to a fixed port and data dir; restarts keep both.

    `extra_args` are appended to the command line; `{port}` inside one is replaced by the
    server's port. `metrics=True` also serves the admin HTTP API on a free port
    (`admin_url`). STREAMGATE_* variables of the calling environment are not inherited, so
    a developer's settings never leak into a test; `env` adds variables (S3 credentials...).
    """

    name = "gateway"

    def __init__(
        self,
        data_dir: Path,
        log_path: Path,
        extra_args: Sequence[str] = (),
        *,
        default_partitions: int | None = 3,
        metrics: bool = False,
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
    ) -> None:
        super().__init__(log_path, cwd=REPO_ROOT)
        self.data_dir = Path(data_dir)
        self.extra_args = tuple(extra_args)
        self.default_partitions = default_partitions
        self.port = free_port()
        self.metrics_port = free_port() if metrics else None
        self.extra_env = dict(env or {})
        self.python = python

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def admin_url(self) -> str:
        if self.metrics_port is None:
            raise GatewayError("gateway started without metrics=True")
        return f"http://127.0.0.1:{self.metrics_port}"

    def command(self) -> list[str]:
        cmd = [
            self.python,
            "-m",
            "gateway",
            "serve",
            "--listen",
            self.bootstrap,
            "--data-dir",
            str(self.data_dir),
        ]
        if self.default_partitions is not None:
            cmd += ["--default-partitions", str(self.default_partitions)]
        if self.metrics_port is not None:
            cmd += ["--metrics-listen", f"127.0.0.1:{self.metrics_port}"]
        cmd += [arg.replace("{port}", str(self.port)) for arg in self.extra_args]
        return cmd

    def env(self) -> dict[str, str]:
        # ...except the switch to the pure-Python hot path, so that a whole test run can
        # be repeated in that mode (docs/performance.md)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("STREAMGATE_") or k == "STREAMGATE_PURE_PYTHON"
        }
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.extra_env)
        return env

    def quiet(self) -> bool:
        """True when a --log-level above INFO hides the "listening on" line."""
        args = list(self.extra_args)
        levels = [value.partition("=")[2] for value in args if value.startswith("--log-level=")]
        levels += [args[i + 1] for i, value in enumerate(args[:-1]) if value == "--log-level"]
        return bool(levels) and levels[-1].upper() in ("WARNING", "ERROR", "CRITICAL")

    def ready(self) -> bool:
        # the port accepting is not enough: a stray process could hold it; a quiet gateway
        # says nothing, so then the port (and the process being alive) must do
        if not port_accepts(self.port):
            return False
        return self.quiet() or b"listening on" in self.log_since_start()

    def start(self, timeout: float = START_TIMEOUT, ready=None) -> None:  # type: ignore[override]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            super().start(timeout, ready)
        except ProcessError as exc:
            raise GatewayError(str(exc)) from None

    def start_fresh(self) -> None:
        """First start: if the randomly chosen port was taken meanwhile, retry on another."""
        for _attempt in range(3):
            try:
                self.start()
                return
            except GatewayError as exc:
                if "Address already in use" not in str(exc):
                    raise
                self.port = free_port()
                if self.metrics_port is not None:
                    self.metrics_port = free_port()
        self.start()

    def stop(self, timeout: float = 15.0) -> int:
        try:
            return super().stop(timeout)
        except ProcessError as exc:
            raise GatewayError(str(exc)) from None

    def kill(self) -> None:
        try:
            super().kill()
        except ProcessError as exc:
            raise GatewayError(str(exc)) from None

    def restart(self) -> int:
        """Graceful stop (SIGTERM) and start again on the same port and data dir."""
        code = self.stop()
        self.start()
        return code
