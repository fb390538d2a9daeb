"""The MQTT bridge (`python -m bridge mqtt ...`) as a subprocess, with its metrics scraped.

Always started with `--metrics-listen` on a free port: that port answers only once the
first MQTT connection succeeded, which is the readiness check.
"""

from __future__ import annotations

import os
import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from harness.ports import free_port, port_accepts
from harness.process import ManagedProcess

REPO_ROOT = Path(__file__).resolve().parent.parent


class MqttBridge(ManagedProcess):
    name = "bridge"

    def __init__(
        self,
        work_dir: Path,
        args: Sequence[str],
        *,
        name: str = "bridge",
        python: str = sys.executable,
    ) -> None:
        self.work_dir = Path(work_dir)
        super().__init__(self.work_dir / f"{name}.log", cwd=REPO_ROOT)
        self.name = name
        self.args = list(args)
        self.metrics_port = free_port()
        self.python = python

    def command(self) -> list[str]:
        return [
            self.python,
            "-m",
            "bridge",
            "mqtt",
            *self.args,
            "--metrics-listen",
            f"127.0.0.1:{self.metrics_port}",
            "--status",
            "off",
        ]

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONUNBUFFERED": "1"}

    def ready(self) -> bool:
        return port_accepts(self.metrics_port)

    def metrics(self) -> dict[str, float]:
        """`streamgate_bridge_*` values by name (without the prefix and `_total`)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("streamgate_bridge_"):
                name, value = line.split()
                name = name.removeprefix("streamgate_bridge_").removesuffix("_total")
                out[name] = float(value)
        return out
