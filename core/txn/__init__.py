"""Kafka transactions over the stream store: the coordinator (`coordinator.py`) and its
states (`state.py`). The per partition side (open transactions, last stable offset, the
aborted-transactions index) is `core/partition_txns.py`."""

from .coordinator import TransactionCoordinator
from .state import STATES

__all__ = ["STATES", "TransactionCoordinator"]
