"""Whether a column's client is installed, without importing the heavy ones needlessly."""

from __future__ import annotations

import importlib.util
import shutil

_MODULES = {"kafka-python": "kafka", "confluent-kafka": "confluent_kafka", "aiokafka": "aiokafka"}


def missing(column: str) -> str | None:
    if column in _MODULES:
        if importlib.util.find_spec(_MODULES[column]) is None:
            return f"{column} is not installed: pip install -e '.[compat]'"
        return None
    if column == "kcat":
        return None if shutil.which("kcat") else "kcat is not on PATH: apt-get install -y kcat"
    if column == "java":
        from harness.kafka import unavailable_reason

        return unavailable_reason()
    return f"unknown column {column}"
