"""A real S3 API server for tier-2 tests and benchmarks: moto in server mode.

`MotoServer` runs `python -m moto.server` on a free loopback port; `env()` gives the AWS
variables a client (an in-process boto3 client or a gateway subprocess) needs to talk to it.
Moto keeps everything in memory: a restart loses all data.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from harness.ports import free_port
from harness.process import ManagedProcess, ProcessError

MOTO_START_TIMEOUT = 60.0
MOTO_STOP_TIMEOUT = 10.0

AWS_TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}

# loopback only: never let an HTTP(S)_PROXY of the environment see these requests
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class MotoServerError(ProcessError):
    pass


def http_answers(url: str) -> bool:
    """True once anything answers HTTP at `url` (any status counts)."""
    try:
        with _HTTP.open(url, timeout=1.0) as resp:
            resp.read()
        return True
    except urllib.error.HTTPError:
        return True
    except (OSError, urllib.error.URLError):
        return False


class MotoServer(ManagedProcess):
    """`python -m moto.server` on `127.0.0.1:<free port>`, logging to `log_dir`."""

    name = "moto server"

    def __init__(self, log_dir: Path | str, env: Mapping[str, str] | None = None) -> None:
        self.log_dir = Path(log_dir)
        super().__init__(self.log_dir / "moto-server.log")
        base = dict(os.environ if env is None else env)
        base.update(AWS_TEST_ENV)
        base["PYTHONUNBUFFERED"] = "1"
        self._proc_env = base
        self.port = 0
        self.startup_seconds: float | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @staticmethod
    def env() -> dict[str, str]:  # type: ignore[override]
        """The AWS variables a client of this server needs (credentials and region)."""
        return dict(AWS_TEST_ENV)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]

    def spawn_env(self) -> Mapping[str, str]:
        return self._proc_env

    def ready(self) -> bool:
        return http_answers(self.endpoint + "/moto-api/")

    def start(
        self, timeout: float = MOTO_START_TIMEOUT, ready: Callable[[], bool] | None = None
    ) -> None:
        """Start on a free port; retried on another port if that one was taken meanwhile."""
        last_error = ""
        for _attempt in range(3):
            self.port = free_port()
            began = time.monotonic()
            try:
                super().start(timeout, ready)
            except ProcessError as exc:
                last_error = str(exc)
                if "Address already in use" in last_error:
                    continue
                raise MotoServerError(last_error) from None
            self.startup_seconds = time.monotonic() - began
            # should the caller die without stop(), don't leave the server running
            atexit.register(self.stop)
            return
        raise MotoServerError(last_error)

    def stop(self, timeout: float = MOTO_STOP_TIMEOUT) -> int:
        """SIGTERM, then SIGKILL if it has not exited within `timeout`; never raises."""
        atexit.unregister(self.stop)
        if self.proc is None:
            return 0
        try:
            return super().stop(timeout)
        except ProcessError:
            return -9

    def __enter__(self) -> MotoServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
