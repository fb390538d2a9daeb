"""One place that finds Spark's Kafka connector and builds a local SparkSession.

Where the connector comes from, first match wins:
1. `STREAMGATE_SPARK_JARS`: a folder of jars or a comma-separated list of jar paths;
2. `../shared/spark-connector/` beside the repository (Spark 4.0's jars);
3. Spark's own `--packages` resolution (`spark.jars.packages`), only when the user says the
   machine can reach Maven with `STREAMGATE_SPARK_PACKAGES=1` (nothing here probes the
   network: tests must never send traffic beyond loopback).
`find_connector()` returns how (or why not), so tests can skip with the reason and the
example jobs can print it.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_CONNECTOR = REPO_ROOT.parent / "shared" / "spark-connector"
# the connector must match Spark's minor version: these are the versions tested together
TESTED_PYSPARK = "4.0.1"
CONNECTOR_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.1"
DEBIAN_JAVA_17 = Path("/usr/lib/jvm/java-17-openjdk-amd64")


@dataclass(frozen=True)
class Connector:
    """Either `jars` (local files) or `packages` (Maven coordinates), or `reason` why none."""

    jars: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    source: str = ""
    reason: str = ""

    @property
    def found(self) -> bool:
        return bool(self.jars or self.packages)


def _jars_in(spec: str) -> tuple[list[str], str]:
    path = Path(spec)
    if path.is_dir():
        jars = sorted(str(p) for p in path.glob("*.jar"))
        return jars, "" if jars else f"{spec} holds no .jar"
    jars = [j.strip() for j in spec.split(",") if j.strip()]
    missing = [j for j in jars if not Path(j).is_file()]
    if missing:
        return [], f"missing jar(s): {', '.join(missing)}"
    return jars, "" if jars else "empty list"


def find_connector() -> Connector:
    reasons = []
    env = os.environ.get("STREAMGATE_SPARK_JARS")
    if env:
        jars, why = _jars_in(env)
        if jars:
            return Connector(jars=tuple(jars), source=f"STREAMGATE_SPARK_JARS={env}")
        reasons.append(f"STREAMGATE_SPARK_JARS: {why}")
    if SHARED_CONNECTOR.is_dir():
        jars, why = _jars_in(str(SHARED_CONNECTOR))
        if jars:
            return Connector(jars=tuple(jars), source=str(SHARED_CONNECTOR))
        reasons.append(f"{SHARED_CONNECTOR}: {why}")
    else:
        reasons.append(f"no {SHARED_CONNECTOR}")
    if os.environ.get("STREAMGATE_SPARK_PACKAGES") == "1":
        return Connector(packages=(CONNECTOR_PACKAGE,), source=f"--packages {CONNECTOR_PACKAGE}")
    reasons.append("STREAMGATE_SPARK_PACKAGES=1 not set, so no --packages resolution")
    return Connector(reason="Spark's Kafka connector not found: " + "; ".join(reasons))


def unavailable_reason() -> str | None:
    """None when pyspark, Java and the connector are all there, else what is missing."""
    try:
        import pyspark
    except ImportError:
        return "pyspark not installed: pip install -e '.[spark]'"
    if not pyspark.__version__.startswith(TESTED_PYSPARK.rsplit(".", 1)[0] + "."):
        return f"pyspark {pyspark.__version__}: the connector needs pyspark {TESTED_PYSPARK}"
    if _java_home() is None:
        return "no Java: apt-get install -y openjdk-17-jre-headless (or set JAVA_HOME)"
    connector = find_connector()
    return None if connector.found else connector.reason


def _java_home() -> str | None:
    env = os.environ.get("JAVA_HOME")
    if env and (Path(env) / "bin" / "java").is_file():
        return env
    if (DEBIAN_JAVA_17 / "bin" / "java").is_file():
        return str(DEBIAN_JAVA_17)
    java = shutil.which("java")
    return str(Path(java).resolve().parent.parent) if java else None


def prepare_environment() -> None:
    """What a local session needs: loopback, this interpreter for workers, Java 17."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    java = _java_home()
    if java and "JAVA_HOME" not in os.environ:
        os.environ["JAVA_HOME"] = java


def build_session(
    app_name: str = "streamgate",
    master: str = "local[2]",
    conf: dict[str, str] | None = None,
) -> SparkSession:
    """A SparkSession with the Kafka connector on its classpath; RuntimeError when none."""
    connector = find_connector()
    if not connector.found:
        raise RuntimeError(connector.reason)
    prepare_environment()
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", os.environ.get("STREAMGATE_SPARK_DRIVER_MEMORY", "1g"))
        .config("spark.sql.session.timeZone", "UTC")
    )
    if connector.jars:
        builder = builder.config("spark.jars", ",".join(connector.jars))
    else:
        builder = builder.config("spark.jars.packages", ",".join(connector.packages))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(os.environ.get("STREAMGATE_SPARK_LOG_LEVEL", "WARN"))
    return session
