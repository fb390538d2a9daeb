"""Shared fixtures: run the real gateway as a subprocess on a free loopback port.

``gateway`` is function scoped (fresh data dir, safe to restart or kill);
``shared_gateway`` is module scoped and meant for tests that only need a live
server and isolate themselves with unique topic names.

Extra command line arguments can be given with the ``gateway_args`` marker::

    @pytest.mark.gateway_args("--auto-create-topics", "false")
    def test_x(gateway): ...

and for ``shared_gateway`` with a module-level ``GATEWAY_ARGS = (...)`` tuple.
``{port}`` inside an argument is replaced by the server's port.

The server's stderr/stdout goes to ``server.log`` next to the data dir; when a
test that uses a gateway fails, the tail of that log is attached to the report.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import DEFAULT_PARTITIONS, free_port, unique_topic

pytest_plugins = ["s3fixtures"]

REPO_ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0
LOG_TAIL_CHARS = 8000


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "gateway_args(*args): extra command line arguments for the gateway fixture"
    )


def _port_accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class GatewayError(RuntimeError):
    pass


class Gateway:
    """A gateway server subprocess bound to a fixed port and data dir."""

    def __init__(self, data_dir: Path, log_path: Path, extra_args: tuple[str, ...] = ()):
        self.data_dir = Path(data_dir)
        self.log_path = Path(log_path)
        self.extra_args = tuple(extra_args)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.exit_codes: list[int] = []

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def host(self) -> str:
        return "127.0.0.1"

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "gateway",
            "serve",
            "--listen",
            self.bootstrap,
            "--data-dir",
            str(self.data_dir),
            "--default-partitions",
            str(DEFAULT_PARTITIONS),
            *(arg.replace("{port}", str(self.port)) for arg in self.extra_args),
        ]

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGATE_")}
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def is_alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def _log_bytes(self, start: int = 0) -> bytes:
        try:
            with self.log_path.open("rb") as f:
                f.seek(start)
                return f.read()
        except FileNotFoundError:
            return b""

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        text = self.log_text()
        return text if len(text) <= chars else "...\n" + text[-chars:]

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start the server and wait until it listens: the port accepts connections and the
        server has logged its "listening on" line (so a stray process on the port can't fool us).
        """
        if self.is_alive():
            raise GatewayError("gateway already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log_start = log.tell()
            log.write(f"\n===== starting: {' '.join(self.command())}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.command(),
                cwd=REPO_ROOT,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                raise GatewayError(
                    f"gateway exited with code {code} during startup; log:\n{self.log_tail()}"
                )
            if _port_accepts(self.port) and b"listening on" in self._log_bytes(log_start):
                return
            time.sleep(0.05)
        self._terminate_hard()
        raise GatewayError(
            f"gateway not ready on {self.bootstrap} within {timeout}s (port accepting and "
            f"'listening on' logged); log:\n{self.log_tail()}"
        )

    def start_fresh(self) -> None:
        """First start: if the randomly chosen port was grabbed meanwhile, retry on another."""
        for _attempt in range(3):
            try:
                self.start()
                return
            except GatewayError as exc:
                if "Address already in use" not in str(exc):
                    raise
                self.port = free_port()
        self.start()

    def _terminate_hard(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT)

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM and wait; returns the exit code. Falls back to SIGKILL on timeout."""
        if self.proc is None:
            raise GatewayError("gateway was never started")
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._terminate_hard()
                raise GatewayError(
                    f"gateway did not stop within {timeout}s of SIGTERM; log:\n{self.log_tail()}"
                ) from None
        code = self.proc.returncode
        self.exit_codes.append(code)
        return code

    def kill(self) -> None:
        """SIGKILL: simulate a crash."""
        if self.proc is None:
            raise GatewayError("gateway was never started")
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=STOP_TIMEOUT)
        self.exit_codes.append(self.proc.returncode)

    def restart(self) -> int:
        """Graceful stop (SIGTERM) and start again on the same port and data dir."""
        code = self.stop()
        self.start()
        return code

    def close(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(GatewayError):
            self.stop()


def _markers_args(request: pytest.FixtureRequest) -> tuple[str, ...]:
    args: list[str] = []
    for marker in request.node.iter_markers("gateway_args"):
        args.extend(str(a) for a in marker.args)
    return tuple(args)


@pytest.fixture
def gateway(request: pytest.FixtureRequest, tmp_path: Path):
    gw = Gateway(tmp_path / "data", tmp_path / "server.log", _markers_args(request))
    gw.start_fresh()
    yield gw
    gw.close()


@pytest.fixture(scope="module")
def shared_gateway(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """One server per test module; extra arguments come from a module-level GATEWAY_ARGS."""
    base = tmp_path_factory.mktemp("shared-gateway")
    args = tuple(getattr(request.module, "GATEWAY_ARGS", ()))
    gw = Gateway(base / "data", base / "server.log", args)
    gw.start_fresh()
    yield gw
    gw.close()


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A unique topic name derived from the test name."""
    return unique_topic(request.node.name)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.failed:
        funcargs = getattr(item, "funcargs", {})
        for name, value in funcargs.items():
            if isinstance(value, Gateway):
                if value.is_alive():
                    alive = "alive"
                else:
                    alive = f"dead (rc={value.proc.returncode if value.proc else None})"
                report.sections.append(
                    (f"gateway '{name}' log ({value.bootstrap}, {alive})", value.log_tail())
                )
    return report
