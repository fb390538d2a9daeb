"""What every handler can reach: the store and the gateway's own identity."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from core.store import StreamStore

NODE_ID = 1
ZERO_UUID = uuid.UUID(int=0)


@dataclass(slots=True)
class GatewayContext:
    store: StreamStore
    advertised_host: str
    advertised_port: int
    node_id: int = NODE_ID
    max_message_bytes: int = 8 * 1024 * 1024
