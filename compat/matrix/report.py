"""The matrix as a terminal table (rich), Markdown and JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compat.matrix.model import FAIL, NA, PASS, CellResult
from compat.matrix.rows import Row

SYMBOL = {PASS: "pass", FAIL: "FAIL", NA: "-"}


def index(results: Sequence[CellResult]) -> dict[tuple[str, str, str], CellResult]:
    return {(r.target, r.row, r.column): r for r in results}


def cell_text(
    idx: dict[tuple[str, str, str], CellResult], targets: Sequence[str], row: str, column: str
) -> str:
    parts = []
    for t in targets:
        r = idx.get((t, row, column))
        parts.append("?" if r is None else SYMBOL[r.status])
    return " / ".join(parts)


def differences(results: Sequence[CellResult], targets: Sequence[str]) -> list[dict[str, Any]]:
    """Cells whose status differs between the first two targets."""
    if len(targets) < 2:
        return []
    idx = index(results)
    out = []
    for r in results:
        if r.target != targets[0]:
            continue
        other = idx.get((targets[1], r.row, r.column))
        if other is not None and other.status != r.status:
            out.append(
                {
                    "row": r.row,
                    "column": r.column,
                    targets[0]: r.status,
                    targets[1]: other.status,
                    "detail": r.detail if r.status == FAIL else other.detail,
                }
            )
    return out


def totals(results: Sequence[CellResult], target: str) -> dict[str, int]:
    counts = {PASS: 0, FAIL: 0, NA: 0}
    for r in results:
        if r.target == target:
            counts[r.status] += 1
    return counts


def print_table(
    results: Sequence[CellResult],
    rows: Sequence[Row],
    columns: Sequence[str],
    targets: Sequence[str],
) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain text when rich is missing
        print(markdown(results, rows, columns, targets, {}))
        return
    idx = index(results)
    table = Table(title="compatibility matrix: " + " / ".join(targets))
    table.add_column("row")
    for c in columns:
        table.add_column(c)
    style = {PASS: "green", FAIL: "bold red", NA: "dim"}
    for row in rows:
        cells = []
        for c in columns:
            bits = []
            for t in targets:
                r = idx.get((t, row.id, c))
                status = r.status if r else NA
                bits.append(f"[{style[status]}]{SYMBOL[status]}[/]")
            cells.append(" / ".join(bits))
        table.add_row(row.id, *cells)
    console = Console()
    console.print(table)
    for t in targets:
        counts = totals(results, t)
        console.print(f"{t}: {counts[PASS]} pass, {counts[FAIL]} fail, {counts[NA]} n/a")


def markdown(
    results: Sequence[CellResult],
    rows: Sequence[Row],
    columns: Sequence[str],
    targets: Sequence[str],
    provenance: dict[str, Any],
) -> str:
    idx = index(results)
    lines = ["# Compatibility matrix", ""]
    if provenance:
        lines += [
            f"commit `{provenance.get('commit')}` (dirty: {provenance.get('dirty')}), "
            f"{provenance.get('utc')}, `{provenance.get('command')}`",
            "",
        ]
    lines += [
        "Each cell: "
        + " / ".join(f"**{t}**" for t in targets)
        + ". `pass`, `FAIL` (the error is listed below), `-` = the client has no API "
        "for it (or could not run here).",
        "",
    ]
    lines.append("| row | " + " | ".join(columns) + " |")
    lines.append("| --- | " + " | ".join("---" for _ in columns) + " |")
    for row in rows:
        lines.append(
            f"| {row.id} | "
            + " | ".join(cell_text(idx, targets, row.id, c) for c in columns)
            + " |"
        )
    lines.append("")
    for t in targets:
        counts = totals(results, t)
        lines.append(f"- {t}: {counts[PASS]} pass, {counts[FAIL]} fail, {counts[NA]} n/a")
    diffs = differences(results, targets)
    if diffs:
        lines += ["", f"## Differences ({targets[0]} vs {targets[1]})", ""]
        for d in diffs:
            lines.append(
                f"- {d['row']} / {d['column']}: {targets[0]} {d[targets[0]]}, "
                f"{targets[1]} {d[targets[1]]}: {_one_line(d['detail'])}"
            )
    lines += ["", "## Failures and n/a cells", ""]
    for r in sorted(results, key=lambda r: (r.target, r.row, r.column)):
        if r.status != PASS:
            lines.append(f"- {r.target} {r.row} / {r.column}: {r.status}: {_one_line(r.detail)}")
    lines += ["", "## Row definitions", ""]
    lines += [f"- `{row.id}`: {row.title}" for row in rows]
    return "\n".join(lines) + "\n"


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def write(
    out_dir: Path,
    stem: str,
    results: Sequence[CellResult],
    rows: Sequence[Row],
    columns: Sequence[str],
    targets: dict[str, str],
    provenance: dict[str, Any],
) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    names = list(targets)
    md_path = out_dir / f"{stem}.md"
    md_path.write_text(markdown(results, rows, columns, names, provenance))
    json_path = out_dir / f"{stem}.json"
    json_path.write_text(
        json.dumps(
            {
                "provenance": provenance,
                "targets": targets,
                "rows": [{"id": r.id, "title": r.title} for r in rows],
                "columns": list(columns),
                "totals": {t: totals(results, t) for t in names},
                "differences": differences(results, names),
                "cells": [r.to_json() for r in results],
            },
            indent=2,
        )
        + "\n"
    )
    return md_path, json_path
