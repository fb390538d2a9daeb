"""The one writer of `streamgate bench` results, and their one schema.

Every result file (a workload run, a scenario run) is a JSON document:

    {"schema": "streamgate-bench/1",
     "name": "groups",               # the scenario or workload
     "kind": "scenario" | "workload",
     "ok": true,
     "quick": false,
     "provenance": {"commit", "dirty", "command", "machine": {"cpus", ...}, "utc", "quick"},
     "options": {...},               # what the runner was asked: runs, targets, args...
     "files": [...],                 # other files of the run, beside this one
     "figures": {...}}               # what was measured, in the scenario's own shape

beside a Markdown page (and a PNG where there is a plot). `normalize` reads the older shapes
(a script's own JSON, provenance at the top or none) into this one, keeping what they recorded.
Only the standard library is imported here.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

Report = dict[str, Any]
SCHEMA = "streamgate-bench/1"
NOT_RECORDED = "commit not recorded"

_NUMBER_LIST = re.compile(
    r"\[\s*((?:-?[0-9][0-9.eE+-]*|null)(?:,\s*(?:-?[0-9][0-9.eE+-]*|null))*)\s*\]"
)


def dump_json(path: Path, body: Report) -> Path:
    """Writes `body` indented, a list of plain numbers on one line, atomically (a temporary
    file renamed); returns the absolute path."""
    text = json.dumps(body, indent=2)
    text = _NUMBER_LIST.sub(
        lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text
    )
    path = path if path.is_absolute() else Path.cwd() / path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text + "\n")
    tmp.replace(path)
    return path


def result_document(
    *,
    name: str,
    kind: str,
    figures: Report,
    provenance: Report,
    quick: bool,
    options: Report,
    ok: bool,
    files: list[str] | None = None,
) -> Report:
    """A result in the schema; `provenance` is harness.provenance's, taken at the start."""
    return {
        "schema": SCHEMA,
        "name": name,
        "kind": kind,
        "ok": ok,
        "quick": quick,
        "provenance": {**provenance, "quick": quick},
        "options": options,
        "files": sorted(files or []),
        "figures": figures,
    }


def write_all(
    out: Path,
    report: Report,
    markdown: str,
    plot: Callable[[Path], None] | None = None,
) -> Path:
    """Writes `out`.json, `out`.md and (with `plot`) `out`.png; returns the JSON's path."""
    path = dump_json(out.with_suffix(".json"), report)
    path.with_suffix(".md").write_text(markdown)
    if plot is not None:
        try:
            plot(path.with_suffix(".png"))
        except ImportError as exc:  # matplotlib is in the bench extra
            print(f"no PNG: {exc} (pip install -e '.[bench]')", file=sys.stderr)
    return path


def short_commit(provenance: Report) -> str:
    commit = provenance.get("commit")
    if not commit:
        return NOT_RECORDED
    return str(commit)[:9] + ("+dirty" if provenance.get("dirty") else "")


def provenance_markdown(title: str, report: Report, body: list[str]) -> str:
    """A Markdown page: a title, where the figures come from, then `body`'s lines."""
    prov = report.get("provenance", {})
    machine = prov.get("machine") or {}
    quick = " Quick sizes (a smoke test, not figures to publish)." if prov.get("quick") else ""
    return "\n".join(
        [
            f"# {title}",
            "",
            f"Commit `{short_commit(prov)}`, {prov.get('utc')}, on {machine.get('cpus')} CPUs "
            f"({machine.get('cpu_model')}).{quick}",
            f"Command: `{prov.get('command')}`",
            "",
            *body,
            "",
        ]
    )


def scenario_markdown(doc: Report) -> str:
    """The page beside a scenario's result: its provenance and its figures."""
    body = [f"Scenario `{doc['name']}`: {'ok' if doc['ok'] else 'FAILED'}."]
    if doc.get("files"):
        body += ["", "Files:", "", *(f"- `{f}`" for f in doc["files"])]
    body += ["", "```json", json.dumps(doc["figures"], indent=2)[:20_000], "```"]
    return provenance_markdown(f"bench scenario {doc['name']}", doc, body)


def write_result(out: Path, doc: Report, markdown: str | None = None) -> Path:
    """Writes a result document as `out`.json and its page as `out`.md."""
    return write_all(out, doc, markdown if markdown is not None else scenario_markdown(doc))


# --------------------------------------------------------------------------- older files

# Old result files by their file name's stem: (kind, scenario or workload name).
LEGACY_NAMES: dict[str, tuple[str, str]] = {
    "kafka_vs_streamgate": ("workload", "kafka-vs-streamgate-all"),
    "segment_move": ("scenario", "segment-move"),
}


def _legacy_name(stem: str) -> tuple[str, str]:
    if stem in LEGACY_NAMES:
        return LEGACY_NAMES[stem]
    from compat.bench.scenarios import SCENARIOS

    for name in sorted(SCENARIOS, key=len, reverse=True):  # "soak-tier2" before "tier2"
        if stem == name or stem.startswith(name + "-"):
            return "scenario", name
    return "scenario", stem


def _legacy_provenance(doc: Report) -> Report:
    """What an old file recorded of its origin, no more: a missing commit stays missing."""
    prov = dict(doc.get("provenance") or {})
    source = doc.get("source") or {}  # the tier-2 scripts' own record
    if not prov and isinstance(source, dict):
        prov = {
            "commit": source.get("commit"),
            "dirty": source.get("uncommitted_changes"),
            "command": None,
            "machine": {"cpus": (doc.get("environment") or {}).get("cpus")},
            "utc": doc.get("finished_at") or doc.get("started_at"),
        }
    prov.setdefault("commit", None)
    return prov


def _legacy_figures(kind: str, doc: Report) -> Report:
    figures = {k: v for k, v in doc.items() if k != "provenance"}
    if kind == "workload":  # the partitions runs named their 10-partition phase "p10" then
        for runs in (figures.get("results") or {}).get("partitions", {}).values():
            for run in runs:
                if "narrow" not in run and "p10" in run:
                    run["narrow"] = run["p10"]
    return figures


def normalize(doc: Report, stem: str) -> Report:
    """`doc` in the schema: as it is when it already is, else an old file's body as the
    figures, under the provenance it recorded (`converted` says it was converted)."""
    if doc.get("schema") == SCHEMA:
        return doc
    kind, name = _legacy_name(stem)
    prov = _legacy_provenance(doc)
    figures = _legacy_figures(kind, doc)
    quick = bool(doc.get("quick", False))
    converted = result_document(
        name=name,
        kind=kind,
        figures=figures,
        provenance=prov,
        quick=quick,
        options={"converted": "from the file's earlier shape; the command says how it ran"},
        ok=bool(doc.get("ok", True)),
    )
    converted["converted"] = True
    return converted


def load_result(path: Path) -> Report:
    return normalize(json.loads(path.read_text()), path.stem)
