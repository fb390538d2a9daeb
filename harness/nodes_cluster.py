"""`streamgate serve --nodes N` as a subprocess: the supervisor, its embedded PostgreSQL and
N nodes on consecutive free loopback ports (`bootstraps`, `bootstrap` lists them all).

When we are root, PostgreSQL runs as the `postgres` user, which cannot enter root's
private temp folders (pytest's among them): the cluster's data dir is then a folder of its
own under the system temp dir (mode 755), removed by `close()`; the log stays where asked.
STREAMGATE_* variables of the calling environment are not inherited.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from harness.ports import port_accepts
from harness.process import ManagedProcess, ProcessError

REPO_ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 90.0
STOP_TIMEOUT = 45.0  # the supervisor's grace for the nodes, then PostgreSQL's shutdown


def consecutive_free_ports(count: int, attempts: int = 200) -> int:
    """The first of `count` consecutive loopback ports that are all free right now."""
    for _ in range(attempts):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = int(probe.getsockname()[1])
        if base + count > 65535:
            continue
        held = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise ProcessError(f"no {count} consecutive free ports found")


class NodesCluster(ManagedProcess):
    """`serve --nodes N --listen 127.0.0.1:BASE --data-dir DIR [extra_args]`; `nodes_flag`
    replaces N on the command line (`auto`) while `nodes` stays the count to wait for."""

    name = "serve --nodes"

    def __init__(
        self,
        work_dir: Path,
        nodes: int = 3,
        extra_args: Sequence[str] = (),
        *,
        default_partitions: int = 3,
        env: Mapping[str, str] | None = None,
        nodes_flag: str | None = None,
    ) -> None:
        work_dir = Path(work_dir)
        work_dir.mkdir(parents=True, exist_ok=True)
        super().__init__(work_dir / "supervisor.log", cwd=REPO_ROOT)
        self._own_dir = os.geteuid() == 0
        if self._own_dir:
            self.data_dir = Path(tempfile.mkdtemp(prefix="streamgate-nodes-"))
            self.data_dir.chmod(0o755)
        else:
            self.data_dir = work_dir / "data"
        self.nodes = nodes
        self.base_port = consecutive_free_ports(nodes)
        self.extra_args = tuple(extra_args)
        self.default_partitions = default_partitions
        self.extra_env = dict(env or {})
        self.nodes_flag = nodes_flag or str(nodes)  # e.g. "auto", expected to mean `nodes`

    @property
    def ports(self) -> list[int]:
        return [self.base_port + i for i in range(self.nodes)]

    @property
    def bootstraps(self) -> list[str]:
        return [f"127.0.0.1:{port}" for port in self.ports]

    @property
    def bootstrap(self) -> str:
        return ",".join(self.bootstraps)

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "cli",
            "serve",
            "--nodes",
            self.nodes_flag,
            "--listen",
            f"127.0.0.1:{self.base_port}",
            "--data-dir",
            str(self.data_dir),
            "--default-partitions",
            str(self.default_partitions),
            "--multi-node",  # with --nodes 1: still the supervisor and PostgreSQL
            "true",
            *self.extra_args,
        ]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGATE_")}
        env.update(self.extra_env)
        return env

    def ready(self) -> bool:
        log = self.log_since_start()
        return all(f"node {i}: serving".encode() in log for i in range(1, self.nodes + 1)) and all(
            port_accepts(port) for port in self.ports
        )

    def start(
        self, timeout: float = START_TIMEOUT, ready: Callable[[], bool] | None = None
    ) -> None:
        super().start(timeout, ready)

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM to the supervisor, which stops the nodes, then PostgreSQL."""
        return super().stop(timeout)

    def node_pid(self, node_id: int) -> int:
        """The pid of node `node_id`'s current process (from the supervisor's log)."""
        found = re.findall(
            rf"node {node_id}: started \(pid (\d+),".encode(), self.log_since_start()
        )
        if not found:
            raise ProcessError(f"node {node_id} has not started; log:\n{self.log_tail()}")
        return int(found[-1])

    def kill_node(self, node_id: int) -> int:
        """SIGKILL one node (the supervisor restarts it); returns the killed pid."""
        pid = self.node_pid(node_id)
        os.kill(pid, signal.SIGKILL)
        return pid

    def wait_restarted(self, node_id: int, old_pid: int, timeout: float = 60.0) -> None:
        """Until node `node_id` runs as a new process that serves again."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.node_pid(node_id) != old_pid:
                log = self.log_since_start()
                tail = log[log.rfind(f"node {node_id}: started (pid".encode()) :]
                if f"node {node_id}: serving".encode() in tail:
                    return
            time.sleep(0.1)
        raise ProcessError(f"node {node_id} not restarted in {timeout}s; log:\n{self.log_tail()}")

    def close(self) -> None:
        with contextlib.suppress(ProcessError):
            if self.is_alive():
                self.stop()
        super().close()
        if self._own_dir and not self.is_alive():
            shutil.rmtree(self.data_dir, ignore_errors=True)
