"""The bench result schema and `streamgate bench report`: a result carries its provenance
(quick or not), an older file is read with what it recorded and no more, the report rewrites
only what lies between its markers, each row naming its file and commit, and the committed
docs/performance.md is current with compat/results/."""

from __future__ import annotations

import json
from pathlib import Path

from compat.bench import report
from compat.bench.output import (
    NOT_RECORDED,
    SCHEMA,
    load_result,
    normalize,
    result_document,
    short_commit,
    write_result,
)
from compat.benchlib.scenario import RunOptions, scenario_argv

PROVENANCE = {
    "commit": "0123456789abcdef0123456789abcdef01234567",
    "dirty": False,
    "command": "streamgate bench run scenario:groups --quick",
    "machine": {"cpus": 2, "cpu_model": "a CPU"},
    "utc": "2026-11-26T20:00:00+00:00",
}

PAGE = """# Performance

Prose a person wrote.

<!-- bench-report:results -->
an old table
<!-- /bench-report:results -->

More prose.
"""


def groups_figures(p50: float) -> dict[str, object]:
    return {"results": {"rebalance_third_member_ms": {"p50": p50}, "commit_latency_ms": {}}}


def test_a_result_carries_schema_provenance_and_quick(tmp_path: Path) -> None:
    doc = result_document(
        name="groups",
        kind="scenario",
        figures=groups_figures(145.0),
        provenance=PROVENANCE,
        quick=True,
        options=RunOptions(out=tmp_path, quick=True).to_json(),
        ok=True,
        files=["b.png", "a.md"],
    )
    path = write_result(tmp_path / "groups", doc)
    back = json.loads(path.read_text())
    assert back["schema"] == SCHEMA and back["kind"] == "scenario" and back["ok"]
    assert back["provenance"]["commit"] == PROVENANCE["commit"]
    assert back["provenance"]["quick"] is True and back["quick"] is True
    assert back["files"] == ["a.md", "b.png"]
    assert load_result(path) == back  # already in the schema: read as it is
    page = path.with_suffix(".md").read_text()
    assert "`012345678`" in page and "Quick sizes" in page


def test_older_files_keep_what_they_recorded() -> None:
    with_prov = normalize({"provenance": PROVENANCE, "settings": {"records": 5}}, "acl")
    assert with_prov["schema"] == SCHEMA and with_prov["converted"]
    assert (with_prov["name"], with_prov["kind"]) == ("acl", "scenario")
    assert with_prov["provenance"]["commit"] == PROVENANCE["commit"]
    assert with_prov["figures"] == {"settings": {"records": 5}}

    tier2 = normalize(
        {"source": {"commit": "c5e73fc", "uncommitted_changes": False}, "finished_at": "2026-11"},
        "tier2-tail-linger5",
    )
    assert tier2["name"] == "tier2" and short_commit(tier2["provenance"]) == "c5e73fc"
    assert tier2["provenance"]["utc"] == "2026-11"

    bare = normalize({"ok": True, "figures": 1}, "segment_move")
    assert bare["name"] == "segment-move"
    assert short_commit(bare["provenance"]) == NOT_RECORDED
    assert normalize({}, "kafka_vs_streamgate")["kind"] == "workload"


def test_report_rewrites_its_block_only(tmp_path: Path) -> None:
    results, doc = tmp_path / "results", tmp_path / "docs" / "performance.md"
    doc.parent.mkdir()
    doc.write_text(PAGE)
    new = result_document(
        name="groups",
        kind="scenario",
        figures=groups_figures(145.5),
        provenance=PROVENANCE,
        quick=False,
        options={},
        ok=True,
    )
    write_result(results / "groups", new)
    (results / "segment_move.json").write_text(json.dumps({"uploaded_s": {"p50": 0.067}}))
    (results / "compat_matrix.json").write_text(json.dumps({"provenance": PROVENANCE}))

    assert report.main(results, doc, check=True) == 1  # the old table is not current
    assert report.main(results, doc) == 0
    text = doc.read_text()
    assert text.startswith("# Performance\n\nProse a person wrote.\n")
    assert text.endswith("<!-- /bench-report:results -->\n\nMore prose.\n")
    assert "an old table" not in text
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if "](" in line}
    groups_link = "[groups.json](../results/groups.json)"
    moved_link = "[segment_move.json](../results/segment_move.json)"
    assert set(rows) == {groups_link, moved_link}  # the compat matrix is no bench result
    groups = rows[groups_link]
    assert "`012345678`" in groups and "rebalance p50 ms 146" in groups
    assert "2026-11-26 20:00" in groups
    moved = rows[moved_link]
    assert NOT_RECORDED in moved and "uploaded p50 s 0.067" in moved
    assert report.main(results, doc, check=True) == 0

    assert report.main(results, doc, convert_old=True) == 0  # older files rewritten once
    converted = json.loads((results / "segment_move.json").read_text())
    assert converted["schema"] == SCHEMA and converted["figures"]["uploaded_s"]["p50"] == 0.067
    assert json.loads((results / "compat_matrix.json").read_text()) == {"provenance": PROVENANCE}
    assert doc.read_text() == text


def test_the_published_page_is_current() -> None:
    assert report.main(check=True) == 0, "run `streamgate bench report`"


def test_common_options_reach_a_scenario_one_way(tmp_path: Path) -> None:
    quick = ("--records", "10")
    plain = RunOptions(out=tmp_path)
    assert scenario_argv(plain, quick=quick, runs="--rounds", skip_kafka="--no-kafka") == []
    options = RunOptions(
        out=tmp_path, quick=True, runs=4, targets=("streamgate",), args=("--records", "7")
    )
    argv = scenario_argv(
        options, quick=quick, runs="--rounds", skip_kafka="--no-kafka", with_kafka="--kafka"
    )
    # the scenario's own arguments come last, so they win over the quick sizes
    assert argv == ["--records", "10", "--rounds", "4", "--no-kafka", "--records", "7"]
    both = RunOptions(out=tmp_path, targets=("streamgate", "kafka"))
    assert scenario_argv(both, skip_kafka="--no-kafka", with_kafka="--kafka") == ["--kafka"]
