"""CPU time and memory of processes from /proc: a server's, this process's, the machine's.

A benchmark reads these around each phase; `others` (what the rest of the machine used
meanwhile) tells whether other work disturbed the figures.
"""

from __future__ import annotations

import contextlib
import os
import resource
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


def thread_cpu_seconds(pid: int | None = None) -> dict[str, float]:
    """CPU seconds of each thread of a process (this one by default), summed by thread name
    (`comm`: librdkafka names its threads `rdk:broker1`, `rdk:main`...)."""
    base = Path(f"/proc/{pid or os.getpid()}/task")
    by_name: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for task in base.iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (task / "stat").read_text()
                name = stat[stat.index("(") + 1 : stat.rindex(")")]
                fields = stat[stat.rindex(")") + 2 :].split()
                seconds = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
                by_name[name] = by_name.get(name, 0.0) + seconds
    return by_name


@dataclass(frozen=True, slots=True)
class CpuUsage:
    client: float  # this process, all threads (librdkafka's included)
    server: float | None  # the measured server, when there is one
    machine: float | None
    wall: float = 0.0  # seconds between the meter's start and this read
    busiest_client_thread: tuple[str, float] | None = None  # (name, CPU seconds)

    def cores(self) -> dict[str, Any]:
        """The same as cores used (CPU seconds per wall second): which side was the limit.
        The client's busiest thread shows a single-threaded client library at its ceiling
        (near 1.0) even when the process as a whole is below it."""

        def per_wall(seconds: float | None) -> float | None:
            return None if seconds is None or not self.wall else round(seconds / self.wall, 2)

        busiest = self.busiest_client_thread
        return {
            "server_cores": per_wall(self.server),
            "client_cores": per_wall(self.client),
            "client_busiest_thread": None
            if busiest is None
            else {"name": busiest[0], "cores": per_wall(busiest[1])},
        }

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
    """CpuUsage from creation to each read(); `server_cpu` gives a server's CPU seconds.
    `with_children`: the client also counts the child processes this process ran and
    reaped meanwhile (Kafka's Java tools)."""

    def __init__(
        self, server_cpu: Callable[[], float | None] | None = None, with_children: bool = False
    ) -> None:
        self.server_cpu = server_cpu
        self.with_children = with_children
        self.started_at = time.perf_counter()
        self.threads = thread_cpu_seconds()
        self.start = self._sample()

    def _sample(self) -> tuple[float, float | None, float | None]:
        server = self.server_cpu() if self.server_cpu is not None else None
        client = time.process_time()
        if self.with_children:
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            client += children.ru_utime + children.ru_stime
        return client, server, machine_busy_seconds()

    def read(self) -> CpuUsage:
        client, server, machine = self._sample()
        now = thread_cpu_seconds()
        used = {name: now[name] - self.threads.get(name, 0.0) for name in now}
        busiest = max(used.items(), key=lambda item: item[1], default=None)
        return CpuUsage(
            client - self.start[0],
            _delta(server, self.start[1]),
            _delta(machine, self.start[2]),
            wall=time.perf_counter() - self.started_at,
            busiest_client_thread=busiest,
        )
