"""What a result records besides its figures: the client versions, the code the gateway ran
and what its log said (the runner adds the provenance: compat.bench.output)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
from typing import Any

import confluent_kafka

from harness.provenance import REPO_ROOT, provenance

MAX_SAMPLES = 10
LOG_LEVELS = ("WARNING", "ERROR", "CRITICAL", "Traceback")

Report = dict[str, Any]


def _version_string(version: str | tuple[str, int]) -> str:
    # older bindings return (string, int) like libversion(); newer ones just the string
    return version if isinstance(version, str) else version[0]


def environment() -> Report:
    """Client library versions and the load at the end (other work skews the figures)."""
    return {
        "python": platform.python_version(),
        "confluent_kafka": _version_string(confluent_kafka.version()),
        "librdkafka": confluent_kafka.libversion()[0],
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "loadavg_1m_5m_15m_at_end": [round(x, 2) for x in os.getloadavg()],
    }


def code_state() -> Report:
    """The commit and a hash of the gateway's code as it is on disk now: people edit and
    commit while a long run goes on, so each gateway run records what it started with."""
    digest = hashlib.sha1()
    for folder in ("core", "gateway"):
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            with contextlib.suppress(OSError):
                digest.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0")
                digest.update(path.read_bytes())
    return {"commit": provenance()["commit"], "code_sha1": digest.hexdigest()[:12]}


def log_problems(text: str) -> Report:
    """Counts (and the first few) WARNING / ERROR / CRITICAL / Traceback lines of a log."""
    counts = dict.fromkeys(LOG_LEVELS, 0)
    samples: list[str] = []
    for line in text.splitlines():
        for word in counts:
            if f" {word} " in line or line.startswith(word):
                counts[word] += 1
                if len(samples) < MAX_SAMPLES:
                    samples.append(line[:300])
                break
    return {"counts": counts, "samples": samples}
