"""A server subprocess with a log file, a readiness check, SIGTERM/SIGKILL and a log tail."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harness.procstats import proc_cpu_seconds, proc_status_kib

STOP_TIMEOUT = 15.0
LOG_TAIL_CHARS = 8000


class ProcessError(RuntimeError):
    pass


class ManagedProcess:
    """Subclasses give `command()`, `ready()` and a `name`; this class runs the process."""

    name = "process"

    def __init__(self, log_path: Path, cwd: Path | None = None) -> None:
        self.log_path = Path(log_path)
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.exit_codes: list[int] = []
        self._log_start = 0

    # -- what a subclass gives
    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> Mapping[str, str]:
        return dict(os.environ)

    def spawn_env(self) -> Mapping[str, str]:
        """The environment the process starts with: env() unless a subclass says otherwise."""
        return self.env()

    def popen_options(self) -> dict[str, Any]:
        """Extra subprocess.Popen arguments (e.g. `user=` to drop root)."""
        return {}

    def ready(self) -> bool:
        raise NotImplementedError

    # -- state and logs
    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def is_alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def peak_rss_kib(self) -> int | None:
        """VmHWM of the running process (None once it has exited)."""
        return None if self.proc is None else proc_status_kib(self.proc.pid, "VmHWM")

    def cpu_seconds(self) -> float | None:
        """User + system CPU seconds of the running process (None once it has exited)."""
        return None if self.proc is None else proc_cpu_seconds(self.proc.pid)

    @property
    def exit_code(self) -> int | None:
        """The exit code once the process has ended, else None."""
        return None if self.proc is None else self.proc.poll()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_since_start(self) -> bytes:
        """What the log holds since the current process was started."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(self._log_start)
                return f.read()
        except FileNotFoundError:
            return b""

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        text = self.log_text()
        return text if len(text) <= chars else "...\n" + text[-chars:]

    # -- life cycle
    def start(self, timeout: float = 30.0, ready: Callable[[], bool] | None = None) -> None:
        """Start and wait until `ready()` (or the given check) is true."""
        if self.is_alive():
            raise ProcessError(f"{self.name} already running")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._log_start = log.tell()
            log.write(f"\n===== starting: {' '.join(self.command())}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.command(),
                cwd=self.cwd,
                env=dict(self.spawn_env()),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                **self.popen_options(),
            )
        check = ready or self.ready
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                raise ProcessError(
                    f"{self.name} exited with code {code} during startup; log:\n{self.log_tail()}"
                )
            if check():
                return
            time.sleep(0.05)
        self._kill_hard()
        raise ProcessError(f"{self.name} not ready within {timeout}s; log:\n{self.log_tail()}")

    def _kill_hard(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT)

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM and wait; returns the exit code. SIGKILL (and an error) after `timeout`."""
        if self.proc is None:
            raise ProcessError(f"{self.name} was never started")
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._kill_hard()
                raise ProcessError(
                    f"{self.name} did not stop within {timeout}s of SIGTERM; "
                    f"log:\n{self.log_tail()}"
                ) from None
        code = self.proc.returncode
        self.exit_codes.append(code)
        return code

    def kill(self) -> None:
        """SIGKILL: simulate a crash."""
        if self.proc is None:
            raise ProcessError(f"{self.name} was never started")
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=STOP_TIMEOUT)
        self.exit_codes.append(self.proc.returncode)

    def close(self) -> None:
        """Stop if running; never raises."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessError, subprocess.TimeoutExpired):
            self.stop()
        self._kill_hard()
