"""`streamgate bench`: every workload file parses and names known keys, every scenario
names a script with a main, and a small workload runs end to end against a real gateway,
writing its report (JSON with provenance, Markdown) where --out says."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from compat.bench import workloads
from compat.bench.output import SCHEMA
from compat.bench.scenarios import SCENARIOS

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", workloads.names())
def test_workload_file_parses_and_names_known_keys(name: str) -> None:
    data = tomllib.loads(workloads.path_of(name).read_text())
    if "workloads" in data:
        assert set(data) <= workloads.SUITE_KEYS
        assert all(workloads.path_of(m).is_file() for m in data["workloads"]), data
    else:
        assert set(data) - {"quick"} <= workloads.WORKLOAD_KEYS, name
        assert set(data.get("quick", {})) <= workloads.WORKLOAD_KEYS, name
        assert data.get("description"), f"{name}: say what it measures"
    for quick in (False, True):
        for w in workloads.expand(name, quick=quick):
            assert w.driver in workloads.DRIVERS
            if w.driver in ("confluent", "small-producers", "rated", "partitions"):
                assert workloads.records_of(w) > 0


def test_every_driver_has_a_runner() -> None:
    from compat.bench.kvs import CANONICAL, RUNNERS

    assert set(RUNNERS) == set(workloads.DRIVERS) == set(CANONICAL)


def test_unknown_keys_are_refused() -> None:
    with pytest.raises(workloads.WorkloadError, match="unknown keys"):
        workloads.parse("x", {"driver": "rated", "recordsize": 10})
    with pytest.raises(workloads.WorkloadError, match="unknown targets"):
        workloads.parse("x", {"driver": "rated", "targets": ["redpanda"]})


def test_scenarios_follow_the_contract() -> None:
    """Every scenario has run(options) for the runner, main(argv) on its own, and --quick
    sizes; none writes its own result file."""
    for name, scenario in SCENARIOS.items():
        spec = importlib.util.find_spec(scenario.module)
        assert spec is not None and spec.origin, name
        source = Path(spec.origin).read_text()
        assert "\ndef run(options: RunOptions)" in source, name
        assert "\ndef main(argv" in source and f'standalone("{name}"' in source, name
        assert "\nQUICK = (" in source and "quick=QUICK" in source, name
        assert "write_report(" not in source and "--output" not in source, name


def test_bench_list() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gateway", "bench", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=REPO_ROOT,
    ).stdout
    assert "rate-2k" in out and "kafka-vs-streamgate-all" in out and "tier2" in out


def test_bench_run_quick_on_streamgate(tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway",
            "bench",
            "run",
            "rate-2k",
            "--quick",
            "--runs",
            "1",
            "--targets",
            "streamgate",
            "--progress",
            "none",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "rate-2k.json").read_text())
    assert report["schema"] == SCHEMA and report["kind"] == "workload" and report["quick"]
    assert report["provenance"]["commit"] and report["provenance"]["machine"]
    assert report["figures"]["workloads"]["rate-2k"]["rate"] == 2000
    (run,) = report["figures"]["results"]["rate-2k"]["streamgate"]
    assert run["ok"] and run["consumed"] >= run["produce"]["records_delivered"] == 2000, run
    md = (out / "rate-2k.md").read_text()
    assert md.startswith("# Apache Kafka 3.5.1 beside streamgate") and "Commit `" in md
    assert "2k/s end-to-end p50 ms" in md
    assert not (tmp_path / "bench-results").exists()  # --out, nothing elsewhere


@pytest.mark.parametrize(
    ("argv", "expected", "left"),
    [
        (["--runs", "5", "small-16", "--quick"], {"runs": 5, "quick": True}, []),
        (["small-16", "--targets", "streamgate"], {"runs": None, "targets": ["streamgate"]}, []),
        (
            ["scenario:groups", "--out", "/x", "--", "--rounds", "1"],
            {"out": Path("/x")},
            ["--rounds", "1"],
        ),
        (["scenario:groups", "--rounds", "1"], {"out": None}, ["--rounds", "1"]),
        (["scenario:txn", "--quick", "--", "--records", "9"], {"quick": True}, ["--records", "9"]),
    ],
)
def test_run_arguments_before_and_after_the_workload(
    argv: list[str], expected: dict[str, object], left: list[str]
) -> None:
    from cli.main import build_parser
    from compat.bench.cli import _reparse

    args = build_parser().parse_args(["bench", "run", *argv])
    assert _reparse(args) == left
    assert {k: getattr(args, k) for k in expected} == expected
