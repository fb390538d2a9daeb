"""Tables over repeated runs: a cell is the median of the runs and their range.

A result is a nested dict; a figure is named by its dotted path ("produce.mib_per_s").
"""

from __future__ import annotations

import math
import statistics
from typing import Any

Report = dict[str, Any]


def median_range(values: list[float | None]) -> tuple[float, float, float] | None:
    nums = [
        float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))
    ]
    if not nums:
        return None
    return statistics.median(nums), min(nums), max(nums)


def get_path(result: Report, path: str) -> Any:
    value: Any = result
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def cell(results: list[Report], path: str, fmt: str) -> str:
    """ "median [min–max]" of a figure over runs ("-" when no run has it)."""
    agg = median_range([get_path(r, path) for r in results])
    if agg is None:
        return "-"
    med, lo, hi = agg
    if len(results) == 1 or lo == hi:
        return format(med, fmt)
    return f"{format(med, fmt)} [{format(lo, fmt)}–{format(hi, fmt)}]"


# A table row: its label, the paths of its figures (shown joined by " / ") and their
# format; a path may carry its own format as "path:format".
Metric = tuple[str, list[str], str]


def metric_cell(results: list[Report], path: str, fmt: str) -> str:
    """cell() for a path that may carry its own format ("read.mib:,.0f")."""
    path, _, own_fmt = path.partition(":")
    return cell(results, path, own_fmt or fmt)


def grouped(results: list[Report], scenario: str, key: str) -> dict[str, list[Report]]:
    """Results of a scenario by configuration ("folder default", "s3 tier2", ...)."""
    groups: dict[str, list[Report]] = {}
    for r in results:
        if r["scenario"] == scenario:
            groups.setdefault(f"{r['backend']} {r[key]}", []).append(r)
    return groups
