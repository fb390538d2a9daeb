"""What a benchmark shows while it runs and when it is done.

`Display` gives each phase a progress bar (rich, on a terminal when rich is installed) or a
line a second (plain), or nothing; `print_table` prints a table of strings the same way.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

HAVE_RICH = importlib.util.find_spec("rich") is not None
PROGRESS_MODES = ("auto", "rich", "plain", "none")


Poll = Callable[[], tuple[float, str]]


class Display:
    """Progress bars (rich) or a line a second (plain) for each phase, and log lines."""

    def __init__(self, requested: str) -> None:
        if requested == "rich" and not HAVE_RICH:
            raise SystemExit("--progress rich: rich is not installed (pip install rich)")
        if requested == "auto":
            requested = "rich" if HAVE_RICH and sys.stderr.isatty() else "plain"
        self.mode = requested
        self._progress: Any = None
        if self.mode == "rich":
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                Progress,
                TaskProgressColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                TextColumn("{task.description:<30}"),
                BarColumn(bar_width=30),
                TaskProgressColumn(),
                TextColumn("{task.fields[status]}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
            )
            self._progress.start()

    def log(self, text: str) -> None:
        if self._progress is not None:
            self._progress.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def phase(self, label: str, total: float | None, poll: Poll) -> Iterator[None]:
        """Shows poll() -> (done, status) of total while the body runs (a watcher thread)."""
        if self.mode == "none":
            yield
            return
        started = time.monotonic()
        stop = threading.Event()
        task = None
        if self._progress is not None:
            task = self._progress.add_task(label, total=total, status="")

        def render() -> None:
            try:
                done, status = poll()
            except Exception as exc:  # a display problem must not end the run
                done, status = 0.0, f"({exc!r})"
            if task is not None:
                self._progress.update(task, completed=done, status=status)
            else:
                count = f"{done:,.0f}/{total:,.0f} " if total else ""
                print(
                    f"[{label}] {count}{status} ({time.monotonic() - started:.1f} s)",
                    file=sys.stderr,
                    flush=True,
                )

        def watch() -> None:
            while not stop.wait(0.25 if task is not None else 1.0):
                render()

        watcher = threading.Thread(target=watch, name=f"progress-{label}", daemon=True)
        watcher.start()
        try:
            yield
        finally:
            stop.set()
            watcher.join()
            render()
            if task is not None:
                if total is None:  # finish the pulsing bar of an open-ended wait
                    self._progress.update(task, total=1, completed=1)
                self._progress.stop_task(task)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def print_table(title: str, headers: list[str], rows: list[list[str]]) -> None:
    """The first column left-aligned, the others right-aligned."""
    if HAVE_RICH:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        table = Table(*map(escape, headers), title=escape(title) or None, title_justify="left")
        for column in table.columns[1:]:
            column.justify = "right"
        for row in rows:
            table.add_row(*map(escape, row))
        # Off a terminal rich assumes 80 columns and would squeeze the cells.
        Console(width=None if sys.stdout.isatty() else 200).print(table)
        return
    if title:
        print(title)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    for line in [headers, *rows]:
        print(
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(line, widths, strict=True))
            )
        )
    print()


def rate_poll(done: Callable[[], int], unit: str = "rec/s") -> Poll:
    """A Display.phase poll that shows done() and its rate since this call."""
    started = time.perf_counter()

    def poll() -> tuple[float, str]:
        count, elapsed = done(), time.perf_counter() - started
        return count, f"{count / elapsed:,.0f} {unit}" if elapsed > 0 else ""

    return poll
