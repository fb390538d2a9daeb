"""Kafka transactions over the stream store: the coordinator (`coordinator.py`) and its
states (`state.py`), and the per partition side (`partition_state.py`: open transactions,
last stable offset, the aborted-transactions index) that each `core.partition.Partition`
keeps. The coordinator reaches the store through the `TxnStore` protocol, so this package
sits below the stream."""

from .coordinator import TransactionCoordinator
from .state import STATES

__all__ = ["STATES", "TransactionCoordinator"]
