"""compat/bench_kafka_vs_streamgate.py --quick runs end to end and writes its three files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from compat.bench.output import SCHEMA
from harness.kafka import unavailable_reason

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.beside_kafka
def test_kafka_vs_streamgate_quick(tmp_path: Path) -> None:
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"the side-by-side needs Apache Kafka: {reason}")
    out = tmp_path / "kvs"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "compat" / "bench_kafka_vs_streamgate.py"),
            "--quick",
            "--runs",
            "1",
            "--progress",
            "none",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.with_suffix(".json").is_file(), proc.stdout + proc.stderr
    assert out.with_suffix(".md").read_text().startswith("# Apache Kafka 3.5.1 beside streamgate")
    assert out.with_suffix(".png").stat().st_size > 1000
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["schema"] == SCHEMA and report["provenance"]["commit"]
    assert report["quick"] and report["provenance"]["quick"]
    results = report["figures"]["results"]
    assert set(results) >= {"perf-producer", "rate-2k", "many-raw"}
    (raw,) = results["many-raw"]["streamgate"]
    assert raw["ok"] and raw["delivered"] == raw["records"], raw  # pipelined, all answered
    # which side was the limit: CPU of server and client, per run and per partitions phase
    (wide,) = results["partitions"]["streamgate"]
    assert wide["cpu"]["server_cores"] > 0 and wide["cpu"]["client_cores"] > 0, wide
    assert wide["wide"]["cpu"]["server_cores"] is not None, wide


def test_scenario_quick_through_the_runner(tmp_path: Path) -> None:
    """`streamgate bench run scenario:txn --quick`: the runner hands the scenario its options
    (quick sizes, targets), the scenario measures a real gateway and Kafka, and the runner
    writes the result in the one schema, with provenance."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"the txn scenario compares with Apache Kafka: {reason}")
    out = tmp_path / "txn"
    command = ["bench", "run", "scenario:txn", "--quick", "--targets", "streamgate,kafka"]
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", *command, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["txn.json", "txn.md"]
    report = json.loads((out / "txn.json").read_text())
    assert report["schema"] == SCHEMA and (report["name"], report["kind"]) == ("txn", "scenario")
    assert report["ok"] and report["quick"]
    prov = report["provenance"]
    assert prov["commit"] and prov["machine"]["cpus"] and prov["utc"] and prov["quick"] is True
    assert " ".join(command) in prov["command"]
    assert report["options"]["targets"] == ["streamgate", "kafka"]
    figures = report["figures"]
    assert figures["settings"]["records"] == "2000"  # the quick size reached it
    for server in ("streamgate", "kafka"):
        assert figures[server]["txn_every_100"]["records"] == 2000, figures[server]
    assert "skipped" in figures["kafka_fsync_every_message"]  # not among --targets
    assert (out / "txn.md").read_text().startswith("# bench scenario txn")
