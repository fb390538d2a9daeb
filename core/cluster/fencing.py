"""Process-wide fencing for a node that holds its segments under a lease.

One process is one node. With PostgreSQL metadata (`core/nodes/membership.py`) the node's lease task
calls `Fence.renewed` after each successful renewal; an append is acknowledged only while
`Fence.valid()`, i.e. before the local deadline `renewal start + lease - margin` — measured
on the monotonic clock, which keeps counting while the process is frozen (SIGSTOP), so a
node that wakes up after its lease expired (and another node may have claimed its segments)
refuses to acknowledge instead of believing it still leads. Single-process mode never arms
the fence: `valid()` is always true.
"""

from __future__ import annotations

import time


class Fence:
    def __init__(self) -> None:
        self._armed = False
        self._deadline = 0.0
        self.lost = False  # set for good once the database says another incarnation won

    def renewed(self, started_at: float, lease_s: float, margin_s: float) -> None:
        """A renewal that began at monotonic time `started_at` succeeded."""
        self._armed = True
        self._deadline = max(self._deadline, started_at + lease_s - margin_s)

    def lose(self) -> None:
        self._armed = True
        self.lost = True

    def valid(self) -> bool:
        return not self._armed or (not self.lost and time.monotonic() < self._deadline)


FENCE = Fence()
