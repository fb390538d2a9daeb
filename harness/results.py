"""Where result files go by default: a folder OUTSIDE the source tree.

`$STREAMGATE_RESULTS/<name>-<timestamp>/` when that variable is set, else
`./bench-results/<name>-<timestamp>/` under the current directory (ignored by git). The
committed figures in compat/results/ are the published ones: a run writes there only when
asked (`--out compat/results/...`).
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

ENV = "STREAMGATE_RESULTS"
DEFAULT_BASE = "bench-results"


def results_base() -> Path:
    base = os.environ.get(ENV)
    return Path(base) if base else Path.cwd() / DEFAULT_BASE


def results_dir(name: str, when: datetime.datetime | None = None) -> Path:
    """The folder for one run called `name` (not created: the writer creates it)."""
    stamp = (when or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
    return results_base() / f"{name}-{stamp}"
