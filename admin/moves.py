"""POST /streams/TOPIC/move {"segment": id, "to_node": n, "parts": 1}: hand an open
segment over to another node (parts=1), or split it with the last successor there.

Asynchronous: the giving node waits until the sealed data is in tier 2 (admin/app.py gives
the request a longer deadline). The answer includes the timings.
"""

from __future__ import annotations

import json
from typing import Any

from core.api import TopicError
from core.scaling.plan import ScaleError
from core.store import StreamStore

MOVE_TIMEOUT_S = 90.0  # the admin request's own deadline (the move's is 60 s)


def is_move(method: str, parts: list[str]) -> bool:
    return method == "POST" and len(parts) == 3 and parts[0] == "streams" and parts[2] == "move"


async def move_segment(store: StreamStore, name: str, body: bytes) -> tuple[str, dict[str, Any]]:
    """(HTTP status line, JSON answer)."""
    try:
        request = json.loads(body or b"null")
    except ValueError:
        return "400 Bad Request", {"error": "body is not JSON"}
    usage = 'expected {"segment": id, "to_node": n, "parts": 1}'
    if not isinstance(request, dict):
        return "400 Bad Request", {"error": usage}
    segment, to_node, parts = (
        request.get("segment"),
        request.get("to_node"),
        request.get("parts", 1),
    )
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (segment, to_node, parts)):
        return "400 Bad Request", {"error": f"{usage}: integers"}
    assert isinstance(segment, int) and isinstance(to_node, int) and isinstance(parts, int)
    try:
        result, timings = await store.move(name, segment, to_node, parts)
    except TopicError as exc:
        return "404 Not Found", {"error": str(exc)}
    except ScaleError as exc:
        return "400 Bad Request", {"error": str(exc)}
    return "200 OK", {
        "kind": result.kind,
        "epoch": result.epoch,
        "sealed": result.sealed,
        "successors": [
            {
                "segment_id": s.segment_id,
                "first_partition": s.first_partition,
                "last_partition": s.last_partition,
            }
            for s in result.successors
        ],
        "to_node": to_node,
        "uploaded_s": round(timings.uploaded_s, 4),
        "committed_s": round(timings.committed_s, 4),
    }
