"""Kafka Connect (distributed mode) and MirrorMaker 2 from a Kafka distribution.

`ConnectWorker` runs `bin/connect-distributed.sh` with a generated worker properties file:
the given bootstrap servers, a group id, the three internal topics with replication factor
1, JSON converters, a REST listener on a free loopback port, and `plugin.path` holding the
distribution's `libs/connect-file-*.jar` (the FileStream connectors left Connect's default
classpath in Kafka 3.2). Its REST API is wrapped by `rest()`, `create_connector()`,
`status()` and `wait_running()`.

`MirrorMaker` runs `bin/connect-mirror-maker.sh` with a generated mm2.properties for two
clusters (a source and a target, by alias), one replication flow, replication factors 1 and
short intervals for the checkpoint and offset-sync tasks.

Both need Java 17 and a Kafka distribution: `harness.kafka.unavailable_reason()` says why
not when either is missing.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.kafka import KafkaError, kafka_home, tool_env
from harness.ports import free_port, port_accepts
from harness.process import ManagedProcess, ProcessError

CONNECT_START_TIMEOUT = 120.0


class ConnectError(ProcessError):
    pass


def _write_properties(path: Path, props: Mapping[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{key}={value}\n" for key, value in props.items()))


def file_connector_plugin_dir(home: Path, work_dir: Path) -> Path:
    """A plugin.path folder holding only the FileStream connectors' jar.

    Pointing plugin.path at the whole `libs/` would load every jar a second time in an
    isolated class loader, which is slow and logs warnings; a folder with one symlink
    is what Connect's docs suggest.
    """
    plugins = work_dir / "plugins" / "connect-file"
    plugins.mkdir(parents=True, exist_ok=True)
    jars = sorted((home / "libs").glob("connect-file-*.jar"))
    if not jars:
        raise ConnectError(f"no libs/connect-file-*.jar in {home}")
    for jar in jars:
        link = plugins / jar.name
        if not link.exists():
            link.symlink_to(jar)
    return plugins.parent


class ConnectWorker(ManagedProcess):
    """One Kafka Connect worker in distributed mode; restarts keep its port and config."""

    name = "connect"

    def __init__(
        self,
        work_dir: Path,
        bootstrap: str,
        *,
        group_id: str = "streamgate-connect",
        topic_prefix: str = "connect",
        overrides: Mapping[str, str] | None = None,
        heap: str = "-Xmx512M",
    ) -> None:
        home, why = kafka_home()
        if home is None:
            raise KafkaError(why)
        self.home = home
        self.work_dir = Path(work_dir)
        super().__init__(self.work_dir / "connect.log", cwd=self.work_dir)
        self.bootstrap = bootstrap
        self.group_id = group_id
        self.config_topic = f"{topic_prefix}-configs"
        self.offset_topic = f"{topic_prefix}-offsets"
        self.status_topic = f"{topic_prefix}-status"
        self.rest_port = free_port()
        self.overrides = dict(overrides or {})
        self.heap = heap
        self.config_path = self.work_dir / "worker.properties"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def internal_topics(self) -> tuple[str, str, str]:
        return (self.config_topic, self.offset_topic, self.status_topic)

    def properties(self) -> dict[str, str]:
        props = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group_id,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "false",
            "value.converter.schemas.enable": "false",
            "config.storage.topic": self.config_topic,
            "config.storage.replication.factor": "1",
            "offset.storage.topic": self.offset_topic,
            "offset.storage.replication.factor": "1",
            "offset.storage.partitions": "5",
            "status.storage.topic": self.status_topic,
            "status.storage.replication.factor": "1",
            "status.storage.partitions": "3",
            # source offsets are committed this often; a short interval keeps tests quick
            "offset.flush.interval.ms": "1000",
            "listeners": f"HTTP://127.0.0.1:{self.rest_port}",
            "rest.advertised.host.name": "127.0.0.1",
            "rest.advertised.port": str(self.rest_port),
            "plugin.path": str(file_connector_plugin_dir(self.home, self.work_dir)),
            "scheduled.rebalance.max.delay.ms": "1000",
        }
        props.update(self.overrides)
        return props

    def command(self) -> list[str]:
        return [str(self.home / "bin" / "connect-distributed.sh"), str(self.config_path)]

    def env(self) -> dict[str, str]:
        env = tool_env(self.heap)
        env["LOG_DIR"] = str(self.work_dir / "logs")
        return env

    def ready(self) -> bool:
        # the REST server listens (and answers 404) before the herder has started and its
        # resources are registered; GET /connectors answers once connectors can be managed
        if not port_accepts(self.rest_port):
            return False
        try:
            self.rest("GET", "/connectors", timeout=5.0)
        except (ConnectError, OSError):
            return False
        return True

    def start(self, timeout: float = CONNECT_START_TIMEOUT, ready=None) -> None:  # type: ignore[override]
        _write_properties(self.config_path, self.properties())
        try:
            super().start(timeout, ready)
        except ProcessError as exc:
            raise ConnectError(str(exc)) from None

    # -- REST API
    def rest(self, method: str, path: str, body: Any = None, timeout: float = 30.0) -> Any:
        """One REST call; the decoded JSON reply (None for an empty one). ConnectError on
        an HTTP error, with Connect's message."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise ConnectError(f"{method} {path}: HTTP {exc.code} {exc.read().decode()}") from None
        return json.loads(raw) if raw else None

    def create_connector(self, name: str, config: Mapping[str, str], timeout: float = 60.0) -> Any:
        """PUT the config (create or update); retried while the worker is rebalancing."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.rest("PUT", f"/connectors/{name}/config", dict(config))
            except ConnectError as exc:
                # 409: a rebalance is in progress; 500 with a timeout: the herder is busy
                if time.monotonic() > deadline or (
                    "HTTP 409" not in str(exc) and "HTTP 500" not in str(exc)
                ):
                    raise
                time.sleep(0.5)

    def status(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.rest("GET", f"/connectors/{name}/status")
        return result

    def wait_running(self, name: str, tasks: int = 1, timeout: float = 60.0) -> dict[str, Any]:
        """Wait until the connector and `tasks` tasks say RUNNING; the last status."""
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                last = self.status(name)
            except ConnectError as exc:
                last = {"error": str(exc)}
            states = [t.get("state") for t in last.get("tasks", [])]
            if (
                last.get("connector", {}).get("state") == "RUNNING"
                and len(states) >= tasks
                and all(s == "RUNNING" for s in states)
            ):
                return last
            if "FAILED" in states or last.get("connector", {}).get("state") == "FAILED":
                raise ConnectError(f"connector {name} failed: {json.dumps(last)}")
            time.sleep(0.3)
        raise ConnectError(f"connector {name} not RUNNING within {timeout}s: {json.dumps(last)}")


class MirrorMaker(ManagedProcess):
    """MirrorMaker 2 (`connect-mirror-maker.sh`) mirroring `source` into `target`.

    `clusters` maps alias -> bootstrap servers; `overrides` are extra mm2.properties lines
    (e.g. a `replication.policy.class`).
    """

    name = "mirrormaker"

    def __init__(
        self,
        work_dir: Path,
        clusters: Mapping[str, str],
        source: str,
        target: str,
        *,
        topics: str = ".*",
        groups: str = ".*",
        overrides: Mapping[str, str] | None = None,
        heap: str = "-Xmx512M",
    ) -> None:
        home, why = kafka_home()
        if home is None:
            raise KafkaError(why)
        if source not in clusters or target not in clusters:
            raise ConnectError(f"{source!r} and {target!r} must both be in {list(clusters)}")
        self.home = home
        self.work_dir = Path(work_dir)
        super().__init__(self.work_dir / "mirrormaker.log", cwd=self.work_dir)
        self.clusters = dict(clusters)
        self.source = source
        self.target = target
        self.topics = topics
        self.groups = groups
        self.overrides = dict(overrides or {})
        self.heap = heap
        self.config_path = self.work_dir / "mm2.properties"

    def properties(self) -> dict[str, str]:
        flow = f"{self.source}->{self.target}"
        props = {"clusters": ", ".join(self.clusters)}
        for alias, bootstrap in self.clusters.items():
            props[f"{alias}.bootstrap.servers"] = bootstrap
        props.update(
            {
                f"{flow}.enabled": "true",
                f"{flow}.topics": self.topics,
                f"{flow}.groups": self.groups,
                f"{self.target}->{self.source}.enabled": "false",
                # one node each side: every replication factor MM2 uses must be 1
                "replication.factor": "1",
                "checkpoints.topic.replication.factor": "1",
                "heartbeats.topic.replication.factor": "1",
                "offset-syncs.topic.replication.factor": "1",
                "offset.storage.replication.factor": "1",
                "status.storage.replication.factor": "1",
                "config.storage.replication.factor": "1",
                "emit.checkpoints.enabled": "true",
                "emit.checkpoints.interval.seconds": "1",
                "sync.group.offsets.enabled": "true",
                "sync.group.offsets.interval.seconds": "1",
                "refresh.topics.interval.seconds": "2",
                "refresh.groups.interval.seconds": "2",
                "emit.heartbeats.interval.seconds": "1",
                "sync.topic.configs.interval.seconds": "5",
                "offset.flush.interval.ms": "1000",
                # a dedicated MM2 node needs no REST API for one-node flows (KIP-710 is opt-in)
                "dedicated.mode.enable.internal.rest": "false",
            }
        )
        props.update(self.overrides)
        return props

    def command(self) -> list[str]:
        # --clusters: this node runs only the herder writing into the target (MM2's advice:
        # run it near the target); without it, it would also run one writing into the source
        return [
            str(self.home / "bin" / "connect-mirror-maker.sh"),
            str(self.config_path),
            "--clusters",
            self.target,
        ]

    def env(self) -> dict[str, str]:
        env = tool_env(self.heap)
        env["LOG_DIR"] = str(self.work_dir / "logs")
        return env

    def ready(self) -> bool:
        return b"Kafka MirrorMaker started" in self.log_since_start()

    def start(self, timeout: float = CONNECT_START_TIMEOUT, ready=None) -> None:  # type: ignore[override]
        _write_properties(self.config_path, self.properties())
        try:
            super().start(timeout, ready)
        except ProcessError as exc:
            raise ConnectError(str(exc)) from None


def log_problems(text: str, benign: tuple[re.Pattern[str], ...] = ()) -> list[str]:
    """WARN/WARNING and ERROR lines of a log (Java's log4j or Python's logging format),
    minus those matching a `benign` pattern."""
    lines = [line for line in text.splitlines() if _PROBLEM.search(line)]
    return [line for line in lines if not any(p.search(line) for p in benign)]


_PROBLEM = re.compile(r"(\] | )(WARN|WARNING|ERROR|CRITICAL) ")
