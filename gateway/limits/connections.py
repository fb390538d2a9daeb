"""Kafka's max.connections.per.ip: open connections counted per client address."""

from __future__ import annotations

from collections import Counter


class ConnectionLimit:
    def __init__(self, per_ip: int) -> None:
        self.per_ip = per_ip
        self.open: Counter[str] = Counter()

    def acquire(self, host: str) -> bool:
        """Count a new connection from `host`; False (not counted) when over the limit."""
        if self.per_ip > 0 and self.open[host] >= self.per_ip:
            return False
        self.open[host] += 1
        return True

    def release(self, host: str) -> None:
        self.open[host] -= 1
        if self.open[host] <= 0:
            del self.open[host]
