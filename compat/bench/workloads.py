"""Workload files: the declarative half of `streamgate bench run` (workloads/*.toml).

A workload file names the function that drives it (`driver`) and its parameters; a
`[quick]` table overrides some of them for `--quick` (a smoke test). A suite file has
`workloads = [...]` instead of a driver: its workloads run together, into one report.
Only the standard library is imported here (`tomllib`).
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
WORKLOADS_DIR = REPO_ROOT / "workloads"
DRIVERS = (
    "perf-producer",
    "perf-consumer",
    "confluent",
    "small-producers",
    "rated",
    "partitions",
    "many",
    "many-raw",
    "scale-out",
)
MEASURES = ("throughput", "latency", "time")
TARGETS = (
    "kafka",
    "kafka-flush1",
    "streamgate",
    "streamgate-2n",
    "streamgate-wal-object",  # --wal object on the tier-2 folder
    "streamgate-wal-s3",  # --wal object on a moto S3 server the bench starts
)
# streamgate's variants: each runs where a workload names streamgate
STREAMGATE_VARIANTS = ("streamgate-2n", "streamgate-wal-object", "streamgate-wal-s3")


@dataclass(frozen=True, slots=True)
class Workload:
    """One workload's parameters. `partitions` is a list for the `partitions` driver (each
    count produced into in turn) and the partitions per topic for `many`."""

    name: str
    driver: str
    description: str = ""
    measure: str = "throughput"
    targets: tuple[str, ...] = ("kafka", "streamgate")
    clients: int = 1
    record_size: int = 1024
    rate: float = 0.0  # records/s; 0: as fast as possible
    partitions: int | tuple[int, ...] = 8
    topics: int = 1
    records: int = 0  # 0: `duration_s` decides (rate x duration)
    duration_s: float = 0.0
    acks: str = "all"
    linger_ms: float = 5.0
    batch_size: int | None = None
    tail_consumer: bool = False
    consume: bool = False  # read everything back after producing
    after: str | None = None  # a workload whose topic this one reads (perf-consumer)
    nodes: tuple[int, ...] = (1,)  # scale-out: node processes, each count in turn


@dataclass(frozen=True, slots=True)
class Suite:
    name: str
    description: str
    workloads: tuple[str, ...]


WORKLOAD_KEYS = frozenset(f.name for f in dataclasses.fields(Workload)) - {"name"}
SUITE_KEYS = frozenset({"description", "workloads"})
Spec = Workload | Suite


class WorkloadError(ValueError):
    pass


def path_of(name: str, folder: Path = WORKLOADS_DIR) -> Path:
    return folder / f"{name}.toml"


def names(folder: Path = WORKLOADS_DIR) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.toml"))


def _check(name: str, data: dict[str, Any], known: frozenset[str]) -> None:
    unknown = set(data) - known
    if unknown:
        raise WorkloadError(f"{name}: unknown keys {sorted(unknown)} (known: {sorted(known)})")


def parse(name: str, data: dict[str, Any], quick: bool = False) -> Spec:
    """A workload (or suite) from a file's parsed TOML; `quick` applies its `[quick]` table."""
    if "workloads" in data:
        _check(name, data, SUITE_KEYS)
        return Suite(name, data.get("description", ""), tuple(data["workloads"]))
    overrides = data.get("quick", {})
    body = {k: v for k, v in data.items() if k != "quick"}
    _check(name, body, WORKLOAD_KEYS)
    _check(f"{name} [quick]", overrides, WORKLOAD_KEYS)
    if quick:
        body.update(overrides)
    if "driver" not in body:
        raise WorkloadError(f"{name}: no `driver` (one of {', '.join(DRIVERS)})")
    if body["driver"] not in DRIVERS:
        raise WorkloadError(f"{name}: driver {body['driver']!r} not one of {DRIVERS}")
    if body.get("measure", "throughput") not in MEASURES:
        raise WorkloadError(f"{name}: measure {body['measure']!r} not one of {MEASURES}")
    bad = set(body.get("targets", ())) - set(TARGETS)
    if bad:
        raise WorkloadError(f"{name}: unknown targets {sorted(bad)} (known: {TARGETS})")
    for key in ("targets", "partitions", "nodes"):
        if isinstance(body.get(key), list):
            body[key] = tuple(body[key])
    return Workload(name=name, **body)


def load(name: str, quick: bool = False, folder: Path = WORKLOADS_DIR) -> Spec:
    path = path_of(name, folder)
    if not path.is_file():
        raise WorkloadError(f"no workload {name!r}: {path} (known: {', '.join(names(folder))})")
    with path.open("rb") as f:
        return parse(name, tomllib.load(f), quick)


def expand(name: str, quick: bool = False, folder: Path = WORKLOADS_DIR) -> list[Workload]:
    """The workloads a name stands for: itself, or a suite's members in order."""
    spec = load(name, quick, folder)
    if isinstance(spec, Workload):
        return [spec]
    found: list[Workload] = []
    for member in spec.workloads:
        found += expand(member, quick, folder)
    return found


def records_of(w: Workload) -> int:
    """How many records a workload produces: `records`, else rate x duration."""
    if w.records:
        return w.records
    if w.rate and w.duration_s:
        return int(w.rate * w.duration_s)
    raise WorkloadError(f"{w.name}: neither `records` nor `rate` and `duration_s`")


def description(name: str, folder: Path = WORKLOADS_DIR) -> str:
    try:
        return load(name, folder=folder).description
    except (WorkloadError, tomllib.TOMLDecodeError) as exc:
        return f"(unreadable: {exc})"
