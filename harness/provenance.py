"""What every result file records: the commit, whether the tree was dirty, the command, the
machine and when."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
COMMIT_ENV = "STREAMGATE_SOURCE_COMMIT"


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except (OSError, ValueError):
        pass
    return None


def provenance(argv: list[str] | None = None) -> dict[str, Any]:
    """A dict to store under "provenance" in every result file."""
    # a copy of the tree sent to another machine names its commit: a .git copied beside it
    # may be older than the tree, so git there would name the wrong one
    sent = os.environ.get(COMMIT_ENV)
    status = None if sent else _git("status", "--porcelain", "--untracked-files=no")
    return {
        "commit": sent or _git("rev-parse", "HEAD"),
        "dirty": None if status is None else bool(status),
        "command": " ".join(argv if argv is not None else [Path(sys.argv[0]).name, *sys.argv[1:]]),
        "machine": {
            "cpus": os.cpu_count(),
            "cpu_model": _cpu_model(),
            "memory_gib": _memory_gib(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
