"""Apache Kafka (KRaft, one node) from a Kafka distribution, and Kafka's own CLI tools.

The distribution comes from `KAFKA_HOME`, else `../shared/kafka/kafka_2.13-*` beside the
repository. Java 17 comes from `JAVA_HOME`, else Debian's openjdk-17 path, else `java` on
PATH. `kafka_home()` and `java_home()` return None with a reason when they are missing, so a
test can skip saying why and a benchmark can print it.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.ports import free_port, port_accepts
from harness.process import ManagedProcess, ProcessError

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_KAFKA = REPO_ROOT.parent / "shared" / "kafka"
DEBIAN_JAVA_17 = Path("/usr/lib/jvm/java-17-openjdk-amd64")


class KafkaError(ProcessError):
    pass


def kafka_home() -> tuple[Path | None, str]:
    """(path, "") when a Kafka distribution is found, else (None, why not)."""
    env = os.environ.get("KAFKA_HOME")
    if env:
        home = Path(env)
        if (home / "bin" / "kafka-server-start.sh").is_file():
            return home, ""
        return None, f"KAFKA_HOME={env} has no bin/kafka-server-start.sh"
    if SHARED_KAFKA.is_dir():
        for home in sorted(SHARED_KAFKA.glob("kafka_*")):
            if (home / "bin" / "kafka-server-start.sh").is_file():
                return home, ""
    return None, f"no Kafka distribution: set KAFKA_HOME or provide {SHARED_KAFKA}/kafka_2.13-*"


def java_home() -> tuple[Path | None, str]:
    """(JAVA_HOME, "") for a usable Java, else (None, why not)."""
    env = os.environ.get("JAVA_HOME")
    if env and (Path(env) / "bin" / "java").is_file():
        return Path(env), ""
    if (DEBIAN_JAVA_17 / "bin" / "java").is_file():
        return DEBIAN_JAVA_17, ""
    java = shutil.which("java")
    if java:
        return Path(java).resolve().parent.parent, ""
    return None, "no Java: apt-get install -y openjdk-17-jre-headless (or set JAVA_HOME)"


def unavailable_reason() -> str | None:
    """None when Kafka and Java are both there, else what is missing."""
    home, why = kafka_home()
    if home is None:
        return why
    java, why = java_home()
    return why if java is None else None


def tool_env(heap: str = "-Xmx512M") -> dict[str, str]:
    java, why = java_home()
    if java is None:
        raise KafkaError(why)
    env = dict(os.environ)
    env["JAVA_HOME"] = str(java)
    env["PATH"] = f"{java / 'bin'}:{env.get('PATH', '')}"
    env.setdefault("KAFKA_HEAP_OPTS", heap)
    # Kafka's scripts put a GC log and kafka logs under LOG_DIR; keep them out of the repo
    env.setdefault("LOG_DIR", str(Path(os.environ.get("TMPDIR", "/tmp")) / "streamgate-kafka-logs"))
    return env


def run_tool(
    tool: str,
    args: Sequence[str],
    *,
    timeout: float = 120.0,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run `bin/<tool>` (e.g. "kafka-topics.sh") of the Kafka distribution."""
    home, why = kafka_home()
    if home is None:
        raise KafkaError(why)
    merged = tool_env()
    merged.update(env or {})
    return subprocess.run(
        [str(home / "bin" / tool), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
        env=merged,
        check=check,
    )


# fsync after every message: streamgate's durability, for the side-by-side rows. The
# broker-wide name of the topic config `flush.messages`; a broker silently ignores
# `flush.messages` itself in server.properties.
FSYNC_EVERY_MESSAGE = {"log.flush.interval.messages": "1"}


class KafkaBroker(ManagedProcess):
    """A single-node KRaft broker (broker and controller) on free loopback ports.

    `overrides` are extra server.properties lines, e.g. FSYNC_EVERY_MESSAGE for the
    fsync-per-message durability row of a benchmark. An override the broker does not know
    fails the start (KafkaError) instead of leaving the broker on its defaults.
    """

    name = "kafka"

    def __init__(
        self, work_dir: Path, overrides: Mapping[str, str] | None = None, heap: str = "-Xmx1G"
    ) -> None:
        home, why = kafka_home()
        if home is None:
            raise KafkaError(why)
        self.home = home
        self.work_dir = Path(work_dir)
        super().__init__(self.work_dir / "kafka.log", cwd=self.work_dir)
        self.port = free_port()
        self.controller_port = free_port()
        self.overrides = dict(overrides or {})
        self.heap = heap
        self.config_path = self.work_dir / "server.properties"
        self._formatted = False

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def properties(self) -> dict[str, str]:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.work_dir / "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
        }
        props.update(self.overrides)
        return props

    def command(self) -> list[str]:
        return [str(self.home / "bin" / "kafka-server-start.sh"), str(self.config_path)]

    def env(self) -> dict[str, str]:
        env = tool_env(self.heap)
        env["LOG_DIR"] = str(self.work_dir / "logs")
        return env

    def ready(self) -> bool:
        return port_accepts(self.port) and b"Kafka Server started" in self.log_since_start()

    def _format(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            "".join(f"{key}={value}\n" for key, value in self.properties().items())
        )
        # a Kafka cluster id is a UUID in unpadded base64url
        cid = "-"
        while cid.startswith("-"):  # a leading "-" would read as an option to the tool
            cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        out = subprocess.run(
            [
                str(self.home / "bin" / "kafka-storage.sh"),
                "format",
                "-t",
                cid,
                "-c",
                str(self.config_path),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=self.env(),
        )
        if out.returncode != 0:
            raise KafkaError(f"kafka-storage.sh format failed: {out.stdout}{out.stderr}")
        self._formatted = True

    def start(self, timeout: float = 90.0, ready=None) -> None:  # type: ignore[override]
        if not self._formatted:
            self._format()
        try:
            super().start(timeout, ready)
        except ProcessError as exc:
            raise KafkaError(str(exc)) from None
        # The broker prints every config it knows ("KafkaConfig values:", one `\tname =
        # value` line each) and silently ignores the names it does not know.
        log = self.log_since_start()
        unknown = [key for key in self.overrides if f"\t{key} = ".encode() not in log]
        if unknown:
            self.stop()
            raise KafkaError(f"Kafka does not know the broker configs {unknown}")
