"""Run one cell in this process and print its outcome as the last line (the runner's child).

`python -m compat.matrix.cell COLUMN ROW CONTEXT_JSON`
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

from compat.matrix.model import FAIL, NA, PASS, CellContext, CellFailure, ClientLacks

MARKER = "@@compat-cell@@ "


def run(column: str, row_id: str, ctx: CellContext) -> tuple[str, str]:
    from compat.matrix.registry import cells_of

    cells = cells_of(column)
    fn = cells.get(row_id)
    if fn is None:
        return NA, f"{column} has no API for this"
    try:
        return PASS, fn(ctx) or "ok"
    except ClientLacks as exc:
        return NA, str(exc)
    except CellFailure as exc:
        return FAIL, str(exc)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # any client error (asyncio's CancelledError too) is the answer
        tb = traceback.extract_tb(exc.__traceback__)
        where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
        return FAIL, f"{type(exc).__name__}: {exc}{where}"


def main() -> int:
    column, row_id, raw = sys.argv[1:4]
    data = json.loads(raw)
    data["work_dir"] = Path(data["work_dir"])
    status, detail = run(column, row_id, CellContext(**data))
    sys.stdout.flush()
    print(MARKER + json.dumps({"status": status, "detail": detail}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
