"""Per-segment counters (metrics, the admin API and the scaler read them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class SegmentStats:
    """Counters of one segment since this process opened it."""

    created: float  # time.monotonic() when opened or created
    bytes_in: int = 0
    records_in: int = 0
    bytes_out: int = 0
