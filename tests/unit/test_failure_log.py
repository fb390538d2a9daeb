"""FailureLog: the first failure of a kind at once, then a count at most every interval,
and one line when the work runs again."""

from __future__ import annotations

import logging

import pytest

from core.failure_log import FailureLog


def test_repeated_failures_become_a_few_lines(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    failures = FailureLog("node 1: ", logging.getLogger("t"), every_s=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="t"):
        for _ in range(50):  # 5 s of failures every 0.1 s
            failures.failed("cluster sync", OSError("connection\n  refused"))
            now[0] += 0.1
        assert [r.getMessage() for r in caplog.records] == [
            "node 1: cluster sync failed 1 times, retrying: connection refused"
        ]
        now[0] += 6.0
        failures.failed("cluster sync", OSError("connection refused"))
        failures.failed("lease renewal", TimeoutError())  # another kind: said at once
        failures.succeeded("cluster sync")
        failures.succeeded("cluster sync")  # said once
        failures.failed("cluster sync", OSError("again"))  # a new episode: said at once
    assert [r.getMessage() for r in caplog.records][1:] == [
        "node 1: cluster sync failed 51 times, retrying: connection refused",
        "node 1: lease renewal failed 1 times, retrying: TimeoutError",
        "node 1: cluster sync works again",
        "node 1: cluster sync failed 52 times, retrying: again",
    ]
    assert failures.counts == {"cluster sync: OSError": 52, "lease renewal: TimeoutError": 1}
