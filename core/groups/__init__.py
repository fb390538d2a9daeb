"""Consumer groups: the classic group coordinator and committed offsets."""

from .coordinator import GroupCoordinator, GroupSettings, JoinRequest, SyncRequest
from .offsets import OffsetStore
from .state import Group, GroupState, JoinResult, Member, SyncResult

__all__ = [
    "Group",
    "GroupCoordinator",
    "GroupSettings",
    "GroupState",
    "JoinRequest",
    "JoinResult",
    "Member",
    "OffsetStore",
    "SyncRequest",
    "SyncResult",
]
