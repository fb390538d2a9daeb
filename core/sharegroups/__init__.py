"""Share groups (Kafka's queues): members read the same partitions and acknowledge
records one by one; see docs/share-groups.md."""

from .coordinator import AckBatch, ShareCoordinator, ShareSettings
from .errors import ShareError
from .group import ShareGroup, ShareMember
from .partition import RecordState, SharePartition

__all__ = [
    "AckBatch",
    "RecordState",
    "ShareCoordinator",
    "ShareError",
    "ShareGroup",
    "ShareMember",
    "SharePartition",
    "ShareSettings",
]
