"""The one report writer of `streamgate bench`: JSON with provenance
(compat.benchlib.report.write_report), Markdown, and a PNG when a plot is given and
matplotlib is there (the bench extra). Every path is the output path without its suffix."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compat.benchlib.report import write_report

Report = dict[str, Any]


def write_all(
    out: Path,
    report: Report,
    markdown: str,
    plot: Callable[[Path], None] | None = None,
) -> Path:
    """Writes `out`.json, `out`.md and (with `plot`) `out`.png; returns the JSON's path."""
    path = write_report(out.with_suffix(".json"), report)
    path.with_suffix(".md").write_text(markdown)
    if plot is not None:
        try:
            plot(path.with_suffix(".png"))
        except ImportError as exc:  # matplotlib is in the bench extra
            print(f"no PNG: {exc} (pip install -e '.[bench]')", file=sys.stderr)
    return path


def provenance_markdown(title: str, report: Report, body: list[str]) -> str:
    """A Markdown page: a title, where the figures come from, then `body`'s lines."""
    prov = report.get("provenance", {})
    return "\n".join(
        [
            f"# {title}",
            "",
            f"Commit `{prov.get('commit')}` (dirty: {prov.get('dirty')}), "
            f"on {prov.get('machine', {}).get('cpu_model')}.",
            f"Command: `{prov.get('command')}`",
            "",
            *body,
            "",
        ]
    )
