"""The probes' side-by-side runner: trees alternate with a rotating order, and the summary
takes each figure's median, leaving out runs that had no value for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compat.benchlib.trees import print_summary, run_alternating


def test_trees_alternate_and_the_summary_takes_medians(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    calls: list[str] = []

    def run_once(tree: Path) -> dict[str, float | None]:
        calls.append(tree.name)
        n = len(calls)
        return {"p50_ms": float(n), "cpu": None if n == 1 else 2.0 * n}

    results = run_alternating([a, b], 3, run_once)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert [r["p50_ms"] for r in results[str(a)]] == [1.0, 4.0, 5.0]
    capsys.readouterr()
    print_summary(results, ("p50_ms", "cpu"))
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary[str(a)] == {"p50_ms": 4.0, "cpu": 9.0}  # run 1's missing value left out
    assert summary[str(b)] == {"p50_ms": 3.0, "cpu": 6.0}
