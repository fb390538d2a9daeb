"""CPU time and memory of processes from /proc: a server's, this process's, the machine's.

A benchmark reads these around each phase; `others` (what the rest of the machine used
meanwhile) tells whether other work disturbed the figures.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def proc_status_kib(pid: int, field_name: str) -> int | None:
    """A `kB` line of /proc/PID/status, e.g. VmHWM (peak resident set size)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name == field_name:
                return int(rest.split()[0])
    return None


def proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process, from /proc/PID/stat."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # fields after the parenthesised command name; utime and stime are fields 14 and 15
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float | None:
    """CPU time all processes on this machine have used, from /proc/stat (idle excluded)."""
    try:
        first_line = Path("/proc/stat").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    # cpu user nice system idle iowait irq softirq steal ...
    ticks = [int(x) for x in first_line.split()[1:9]]
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / os.sysconf("SC_CLK_TCK")


def _delta(end: float | None, start: float | None) -> float | None:
    return None if end is None or start is None else end - start


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


@dataclass(frozen=True, slots=True)
class CpuUsage:
    client: float  # this process, all threads (librdkafka's included)
    server: float | None  # the measured server, when there is one
    machine: float | None

    def others(self) -> float | None:
        """What everything else on the machine used: a sign the figures are disturbed."""
        if self.machine is None:
            return None
        return max(0.0, self.machine - self.client - (self.server or 0.0))

    def to_json(self, server_name: str = "gateway") -> dict[str, Any]:
        return {
            server_name: _round(self.server, 2),
            "client": round(self.client, 2),
            "others": _round(self.others(), 2),
        }


class CpuMeter:
    """CpuUsage from creation to each read(); `server_cpu` gives a server's CPU seconds."""

    def __init__(self, server_cpu: Callable[[], float | None] | None = None) -> None:
        self.server_cpu = server_cpu
        self.start = self._sample()

    def _sample(self) -> tuple[float, float | None, float | None]:
        server = self.server_cpu() if self.server_cpu is not None else None
        return time.process_time(), server, machine_busy_seconds()

    def read(self) -> CpuUsage:
        client, server, machine = self._sample()
        return CpuUsage(
            client - self.start[0], _delta(server, self.start[1]), _delta(machine, self.start[2])
        )
