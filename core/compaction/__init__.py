"""Log compaction of `cleanup.policy=compact` topics over tier-2 chunks.

`plan` decides what is due, `records` filters stored batches, `compactor` runs it in the
background and swaps chunks atomically. Transactional and control batches are kept as
they are (and their keys ignored) until transactions define which of them committed.
"""

from .compactor import CompactionSettings, CompactionStats, Compactor

__all__ = ["CompactionSettings", "CompactionStats", "Compactor"]
