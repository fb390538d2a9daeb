"""A stream (one topic): state in `stream.py`, one module per concern beside it."""

from .append import PendingProduce
from .stats import SegmentStats
from .stream import Stream, TierLink

__all__ = ["PendingProduce", "SegmentStats", "Stream", "TierLink"]
