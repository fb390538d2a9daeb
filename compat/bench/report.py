"""`streamgate bench report`: the figures tables of docs/performance.md, generated from the
result files in compat/results/.

The page keeps its prose; only what lies between a pair of marker comments is rewritten:

    <!-- bench-report:results -->  ...  <!-- /bench-report:results -->
        every result file: what ran, its headline figures, commit, date, machine, quick
    <!-- bench-report:side-by-side -->  ...  <!-- /bench-report:side-by-side -->
        the medians of the latest side-by-side (kafka_vs_streamgate.json)

Each row names its results file and the commit it was measured at ("commit not recorded"
when the file does not say). Files in an older shape are read through
compat.bench.output.normalize; `--convert` rewrites them in the schema once.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from compat.bench.output import (
    SCHEMA,
    Report,
    dump_json,
    load_result,
    short_commit,
)
from compat.bench.scenarios import SCENARIOS
from compat.bench.workloads import REPO_ROOT

RESULTS_DIR = REPO_ROOT / "compat" / "results"
DOC = REPO_ROOT / "docs" / "performance.md"
SIDE_BY_SIDE = "kafka_vs_streamgate.json"
BLOCKS = ("results", "side-by-side")


def figure(figures: Any, path: str) -> Any:
    """The value at `path` ("a/b/0/c"); a list of numbers at the end gives its median."""
    value = figures
    for part in path.split("/"):
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and re.fullmatch(r"-?\d+", part):
            index = int(part)
            value = value[index] if -len(value) <= index < len(value) else None
        else:
            return None
    if isinstance(value, list) and value and all(isinstance(v, int | float) for v in value):
        return statistics.median(value)
    return value


def format_figure(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    if fmt == "row" and isinstance(value, list) and len(value) > 1:  # a table's row: its
        return f"{value[0]}: {value[1]}"  # label and first cell
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    try:
        return format(value, fmt)
    except ValueError:  # a float where the format wants an int
        return format(value, fmt.replace("d", ".0f"))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def workload_headlines(doc: Report, most: int = 4) -> str:
    """A workload file's first rows of the side-by-side table: streamgate's medians."""
    from compat.bench.kvs import median_of, rows_for  # the table's rows live with its runner

    figures = doc.get("figures") or {}
    drivers = {name: w.get("driver", "") for name, w in figures.get("workloads", {}).items()}
    results = figures.get("results", {})
    parts = []
    for label, workload, path, fmt, _higher in rows_for(drivers)[:most]:
        value = median_of(results, "streamgate", workload, path)
        if value is not None:
            label = label.removeprefix(f"{workload}: ")  # the file says which workload
            parts.append(f"{label} {format_figure(value, fmt.replace('.1f', ',.0f'))}")
    return "; ".join(parts) or "-"


def headline_text(doc: Report) -> str:
    if doc["kind"] == "workload":
        if doc["name"].startswith("kafka-vs"):
            return "medians: the side-by-side table"
        return workload_headlines(doc)
    scenario = SCENARIOS.get(doc["name"])
    if scenario is None:
        return "-"
    parts = [
        f"{label} {format_figure(figure(doc['figures'], path), fmt)}".strip()
        for label, path, fmt in scenario.headlines
    ]
    return "; ".join(parts) or "-"


def bench_results(folder: Path) -> list[tuple[Path, Report]]:
    """The result files of `streamgate bench` in `folder`, normalized; others are left out."""
    found = []
    for path in sorted(folder.glob("*.json")):
        try:
            doc = load_result(path)
        except (OSError, json.JSONDecodeError) as exc:
            print(f"{path}: unreadable ({exc}), left out", file=sys.stderr)
            continue
        if doc["kind"] == "scenario" and doc["name"] not in SCENARIOS:
            continue  # not a benchmark's (the compat matrix's scorecard)
        found.append((path, doc))
    return found


def results_table(results: list[tuple[Path, Report]], link_base: str) -> list[str]:
    lines = [
        "| results file | ran | figures | commit | date (UTC) | CPUs | quick |",
        "| --- | --- | --- | --- | --- | ---: | --- |",
    ]
    for path, doc in results:
        prov = doc["provenance"]
        ran = f"scenario `{doc['name']}`" if doc["kind"] == "scenario" else f"`{doc['name']}`"
        if not doc["ok"]:
            ran += " (FAILED)"
        date = str(prov.get("utc") or "not recorded")[:16].replace("T", " ")
        cpus = (prov.get("machine") or {}).get("cpus")
        commit = short_commit(prov)
        commit = commit if commit.startswith("commit not") else f"`{commit}`"
        lines.append(
            "| "
            + " | ".join(
                [
                    f"[{path.name}]({link_base}{path.name})",
                    ran,
                    _cell(headline_text(doc)),
                    commit,
                    date,
                    "-" if cpus is None else str(cpus),
                    "yes" if doc.get("quick") else "no",
                ]
            )
            + " |"
        )
    return lines


def side_by_side_table(path: Path, link_base: str) -> list[str]:
    if not path.is_file():
        return [f"(no {path.name} yet: `streamgate bench run kafka-vs-streamgate-all`)"]
    from compat.bench import kvs, workloads

    doc = load_result(path)
    figures = doc["figures"]
    results = figures.get("results", {})
    drivers = {
        name: w["driver"] for name, w in (figures.get("workloads") or {}).items() if "driver" in w
    }
    for name in results:  # an older file names its workloads only by their results
        if name not in drivers and workloads.path_of(name).is_file():
            spec = workloads.load(name)
            if isinstance(spec, workloads.Workload):
                drivers[name] = spec.driver
    headers, rows = kvs.table(results, kvs.rows_for(drivers))
    prov = doc["provenance"]
    machine = prov.get("machine") or {}
    return [
        f"From [{path.name}]({link_base}{path.name}): commit `{short_commit(prov)}`, "
        f"{str(prov.get('utc'))[:10]}, {machine.get('cpus')} CPUs, "
        f"{figures.get('runs')} run(s) per target (medians), command "
        f"`{prov.get('command')}`.",
        "",
        "| " + " | ".join(headers) + " |",
        "| " + " | ".join(["---"] + ["---:"] * (len(headers) - 1)) + " |",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def replace_block(text: str, block: str, lines: list[str]) -> str:
    start, end = f"<!-- bench-report:{block} -->", f"<!-- /bench-report:{block} -->"
    if start not in text or end not in text:
        raise ValueError(f"no {start} ... {end} in the page")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    body = "\n".join(
        [
            start,
            "<!-- generated by `streamgate bench report` from the result files: edit those -->",
            "",
            *lines,
            "",
            end,
        ]
    )
    return head + body + tail


def render(text: str, results_dir: Path, doc_path: Path) -> str:
    link_base = Path(os.path.relpath(results_dir.resolve(), doc_path.resolve().parent))
    link_base_text = link_base.as_posix() + "/"
    results = bench_results(results_dir)
    text = replace_block(text, "results", results_table(results, link_base_text))
    if f"<!-- bench-report:{BLOCKS[1]} -->" in text:
        text = replace_block(
            text, BLOCKS[1], side_by_side_table(results_dir / SIDE_BY_SIDE, link_base_text)
        )
    return text


def convert(results_dir: Path) -> list[Path]:
    """Rewrites every older bench result file of `results_dir` in the schema."""
    changed = []
    for path, doc in bench_results(results_dir):
        if json.loads(path.read_text()).get("schema") != SCHEMA:
            dump_json(path, doc)
            changed.append(path)
    return changed


def main(
    results_dir: Path | None = None,
    doc_path: Path | None = None,
    check: bool = False,
    convert_old: bool = False,
) -> int:
    results_dir = results_dir or RESULTS_DIR
    doc_path = doc_path or DOC
    if convert_old:
        for path in convert(results_dir):
            print(f"converted {path}", file=sys.stderr)
    before = doc_path.read_text()
    try:
        after = render(before, results_dir, doc_path)
    except ValueError as exc:
        print(f"{doc_path}: {exc}", file=sys.stderr)
        return 2
    if check:
        if after != before:
            print(f"{doc_path} is not current: run `streamgate bench report`", file=sys.stderr)
            return 1
        return 0
    if after != before:
        doc_path.write_text(after)
    print(f"{doc_path}: tables from {results_dir}", file=sys.stderr)
    return 0
