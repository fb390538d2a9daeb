"""Transaction states (Kafka's names, as DescribeTransactions and ListTransactions show
them) and limits."""

from __future__ import annotations

EMPTY = "Empty"
ONGOING = "Ongoing"
PREPARE_COMMIT = "PrepareCommit"
PREPARE_ABORT = "PrepareAbort"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"
STATES = (EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT)

MAX_EPOCH = 2**15 - 1  # producer epochs are int16
# Kafka's transaction.max.timeout.ms default: longer transaction timeouts are refused.
MAX_TIMEOUT_MS = 900_000
