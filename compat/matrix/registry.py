"""Which client modules make up the columns (imported lazily: each needs its own library)."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from compat.matrix.model import CellContext

COLUMNS: dict[str, str] = {
    "kafka-python": "compat.matrix.clients.kafka_python",
    "confluent-kafka": "compat.matrix.clients.confluent",
    "aiokafka": "compat.matrix.clients.aiokafka_cells",
    "kcat": "compat.matrix.clients.kcat",
    "java": "compat.matrix.clients.java",
}

CellFn = Callable[[CellContext], str]


def cells_of(column: str) -> dict[str, CellFn]:
    if column not in COLUMNS:
        raise KeyError(f"unknown column {column!r}; columns: {', '.join(COLUMNS)}")
    module = importlib.import_module(COLUMNS[column])
    return module.CELLS  # type: ignore[no-any-return]


def missing_reason(column: str) -> str | None:
    """None when the column's client can run here, else why not (shown in every cell)."""
    module = importlib.import_module(COLUMNS[column].rsplit(".", 1)[0] + ".availability")
    return module.missing(column)  # type: ignore[no-any-return]
