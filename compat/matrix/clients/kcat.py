"""kcat cells: the kcat binary (librdkafka) as a subprocess."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from compat.matrix.clients.common import (
    LARGE_RECORDS,
    LARGE_VALUE_BYTES,
    expect_split,
    expect_values,
    in_order_per_partition,
    wait_for,
)
from compat.matrix.model import CellContext, ClientLacks, expect

FORMAT = "%p\t%o\t%k\t%s\t%h\n"


def _kcat(
    ctx: CellContext, args: list[str], data: str | None = None, timeout: float | None = None
) -> str:
    out = subprocess.run(
        ["kcat", "-b", ctx.bootstrap, *args],
        input=data,
        capture_output=True,
        text=True,
        timeout=timeout or ctx.timeout / 2,
    )
    expect(
        out.returncode == 0,
        f"kcat {' '.join(args[:4])}... exited {out.returncode}: {out.stderr.strip()[-400:]}",
    )
    return out.stdout


def _lines(ctx: CellContext, start: int, n: int, value_size: int = 0) -> str:
    rows = []
    for i in range(start, start + n):
        value = ctx.value(i).decode()
        if value_size:
            value += "x" * (value_size - len(value))
        rows.append(f"{ctx.key(i).decode()}:{value}")
    return "\n".join(rows) + "\n"


def _produce(
    ctx: CellContext,
    n: int,
    *opts: str,
    start: int = 0,
    partition: int | None = None,
    value_size: int = 0,
    topic: str | None = None,
) -> None:
    args = ["-P", "-t", topic or ctx.topic, "-K:", *opts]
    if partition is not None:
        args += ["-p", str(partition)]
    _kcat(ctx, args, _lines(ctx, start, n, value_size))


def _read(
    ctx: CellContext,
    *opts: str,
    partition: int | None = None,
    offset: str = "beginning",
    topic: str | None = None,
) -> list[list[str]]:
    args = ["-C", "-t", topic or ctx.topic, "-o", offset, "-e", "-f", FORMAT, *opts]
    if partition is not None:
        args += ["-p", str(partition)]
    out = _kcat(ctx, args)
    return [line.split("\t") for line in out.splitlines() if line]


def _roundtrip(*opts: str):  # type: ignore[no-untyped-def]
    def cell(ctx: CellContext) -> str:
        _produce(ctx, ctx.records, *opts)
        # kcat returns once the records are sent; with acks=0 nothing says they are
        # already readable, so `-e` (stop at the end) is retried for a few seconds.
        deadline = time.monotonic() + 10.0
        recs = _read(ctx)
        while len(recs) < ctx.records and time.monotonic() < deadline:
            time.sleep(0.2)
            recs = _read(ctx)
        expect_values(ctx, (r[3].encode() for r in recs), ctx.records)
        return f"{ctx.records} records"

    return cell


def idempotence(ctx: CellContext) -> str:
    _produce(ctx, ctx.records, "-X", "enable.idempotence=true")
    recs = _read(ctx)
    expect_values(ctx, (r[3].encode() for r in recs), ctx.records)
    expect(in_order_per_partition((int(r[0]), r[3].encode()) for r in recs), "out of order")
    return f"{ctx.records} records in order"


def keys_headers(ctx: CellContext) -> str:
    _produce(ctx, ctx.records, "-H", "h-const=compat", "-H", "h-two=2")
    recs = _read(ctx)
    expect_values(ctx, (r[3].encode() for r in recs), ctx.records)
    for r in recs:
        i = int(r[3].rsplit("-v", 1)[1])
        expect(r[2] == ctx.key(i).decode(), f"key {r[2]!r} for record {i}")
        expect(r[4] == "h-const=compat,h-two=2", f"headers {r[4]!r}")
    return f"{ctx.records} keys and header pairs (kcat: the same headers on every record)"


def large_message(ctx: CellContext) -> str:
    _produce(ctx, LARGE_RECORDS, value_size=LARGE_VALUE_BYTES)
    recs = _read(ctx)
    expect(len(recs) == LARGE_RECORDS, f"{len(recs)} of {LARGE_RECORDS} read back")
    expect(all(len(r[3]) == LARGE_VALUE_BYTES for r in recs), "a value lost bytes")
    return f"{LARGE_RECORDS} x {LARGE_VALUE_BYTES} bytes"


def auto_create(ctx: CellContext) -> str:
    _produce(ctx, 3)
    expect_values(ctx, (r[3].encode() for r in _read(ctx)), 3)
    return "created on first produce"


def consume_assign(ctx: CellContext) -> str:
    _produce(ctx, ctx.records, partition=0)
    start = ctx.records // 2
    recs = _read(ctx, partition=0, offset=str(start))
    expect(recs and int(recs[0][1]) == start, "did not start at the given offset")
    expect_values(ctx, (r[3].encode() for r in recs), ctx.records, start)
    return f"partition 0 from offset {start}"


def _group_read(ctx: CellContext, count: int, *opts: str) -> list[list[str]]:
    out = _kcat(
        ctx,
        [
            "-G",
            ctx.group,
            "-c",
            str(count),
            "-f",
            FORMAT,
            "-X",
            "auto.offset.reset=earliest",
            *opts,
            ctx.topic,
        ],
    )
    return [line.split("\t") for line in out.splitlines() if line]


def consume_subscribe(ctx: CellContext) -> str:
    _produce(ctx, ctx.records)
    recs = _group_read(ctx, ctx.records)
    expect_values(ctx, (r[3].encode() for r in recs), ctx.records)
    return f"{ctx.records} records via group {ctx.group}"


def list_offsets_time(ctx: CellContext) -> str:
    half = ctx.records // 2
    _produce(ctx, half, partition=0)
    time.sleep(1.0)
    t_mid = int(time.time() * 1000)
    time.sleep(1.0)
    _produce(ctx, ctx.records - half, partition=0, start=half)
    out = _kcat(ctx, ["-Q", "-t", f"{ctx.topic}:0:{t_mid}"])
    match = re.search(r"\[0\]\s+offset\s+(-?\d+)", out)
    expect(match, f"no offset in {out!r}")
    assert match is not None
    expect(int(match.group(1)) == half, f"offset for the middle time {match.group(1)}, want {half}")
    return f"mid time -> {half}"


_PART = re.compile(r"\[(\d+)\]")


def _assignment(log: Path) -> set[int]:
    """Replay kcat's rebalance lines: eager assigned/revoked, incremental assign/revoke."""
    current: set[int] = set()
    for line in log.read_text(errors="replace").splitlines():
        if "rebalanced" not in line:
            continue
        parts = {int(p) for p in _PART.findall(line.rsplit("):", 1)[-1])}
        if "incremental assignment" in line:
            current |= parts
        elif "incremental revoke" in line:
            current -= parts
        elif "assigned:" in line:
            current = parts
        elif "revoked:" in line:
            current = set()
    return current


def _group_split(strategy: str, static: bool = False):  # type: ignore[no-untyped-def]
    def cell(ctx: CellContext) -> str:
        procs: list[subprocess.Popen[bytes]] = []
        logs = [ctx.work_dir / f"member-{i}.log" for i in range(2)]

        def start(i: int, suffix: str = "") -> subprocess.Popen[bytes]:
            log = logs[i].with_suffix(f"{suffix}.log") if suffix else logs[i]
            logs[i] = log
            extra = ["-X", f"group.instance.id=member-{i}"] if static else []
            return subprocess.Popen(
                [
                    "kcat",
                    "-b",
                    ctx.bootstrap,
                    "-G",
                    ctx.group,
                    "-X",
                    f"partition.assignment.strategy={strategy}",
                    "-X",
                    "session.timeout.ms=30000",
                    *extra,
                    ctx.topic,
                ],
                stdout=subprocess.DEVNULL,
                stderr=log.open("w"),
            )

        def split() -> list[set[int]] | None:
            s = [_assignment(log) for log in logs]
            if all(s) and not (s[0] & s[1]) and len(s[0] | s[1]) == ctx.partitions:
                return s
            return None

        try:
            procs.append(start(0))
            wait_for(lambda: _assignment(logs[0]), ctx.timeout / 3, "the first assignment")
            procs.append(start(1))
            sets = wait_for(split, ctx.timeout / 2, "a complete, disjoint assignment")
            detail = expect_split(sets, ctx.partitions, strategy)
            if static:
                procs[0].kill()  # a static member that vanishes keeps its place
                procs[0].wait()
                procs[0] = start(0, ".again")
                again = wait_for(split, ctx.timeout / 2, "the static member's assignment")
                expect(again == sets, f"assignment changed: {sets} -> {again}")
                detail += "; rejoined with the same partitions"
            return detail
        finally:
            for p in procs:
                p.kill()
                p.wait()

    return cell


def committed_offsets(ctx: CellContext) -> str:
    _produce(ctx, ctx.records, partition=0)
    mid = ctx.records // 2
    first = _group_read(ctx, mid)  # kcat commits what it consumed when it exits
    expect_values(ctx, (r[3].encode() for r in first), mid)
    rest = _group_read(ctx, ctx.records - mid)
    expect(rest and int(rest[0][1]) == mid, "did not resume at the committed offset")
    expect_values(ctx, (r[3].encode() for r in rest), ctx.records, mid)
    return f"resumed at {mid}"


def many_partitions(ctx: CellContext) -> str:
    meta = _kcat(ctx, ["-L", "-t", ctx.topic])
    expect(f"with {ctx.partitions} partitions" in meta, f"metadata: {meta[:200]!r}")
    n = 2 * ctx.partitions
    _produce(ctx, n)
    recs = _read(ctx)
    expect_values(ctx, (r[3].encode() for r in recs), n)
    used = {r[0] for r in recs}
    return f"{ctx.partitions} partitions, {n} keyed records over {len(used)} of them"


def restart(ctx: CellContext) -> str:
    mid = ctx.records // 2
    if ctx.phase == "before":
        _produce(ctx, ctx.records, "-X", "acks=all", partition=0)
        _group_read(ctx, mid)
        return f"{ctx.records} produced, {mid} consumed and committed"
    expect_values(ctx, (r[3].encode() for r in _read(ctx, partition=0)), ctx.records)
    rest = _group_read(ctx, ctx.records - mid)
    expect(rest and int(rest[0][1]) == mid, "did not resume at the committed offset")
    return "records and commit intact"


def _lacks(what: str):  # type: ignore[no-untyped-def]
    def cell(ctx: CellContext) -> str:
        raise ClientLacks(f"kcat has no {what}")

    return cell


CELLS = {
    "produce-gzip": _roundtrip("-z", "gzip", "-X", "acks=all"),
    "produce-snappy": _roundtrip("-z", "snappy", "-X", "acks=all"),
    "produce-lz4": _roundtrip("-z", "lz4", "-X", "acks=all"),
    "produce-zstd": _roundtrip("-z", "zstd", "-X", "acks=all"),
    "produce-acks0": _roundtrip("-X", "acks=0"),
    "produce-acks1": _roundtrip("-X", "acks=1"),
    "idempotence": idempotence,
    "keys-headers": keys_headers,
    "large-message": large_message,
    "auto-create": auto_create,
    "consume-assign": consume_assign,
    "consume-subscribe": consume_subscribe,
    "list-offsets-time": list_offsets_time,
    "group-range": _group_split("range"),
    "group-roundrobin": _group_split("roundrobin"),
    "group-coop-sticky": _group_split("cooperative-sticky"),
    "static-members": _group_split("range", static=True),
    "committed-offsets": committed_offsets,
    "admin-topics": _lacks("admin API for topics"),
    "admin-partitions": _lacks("admin API for partitions"),
    "admin-configs": _lacks("admin API for configs"),
    "admin-groups": _lacks("admin API for groups"),
    "admin-records": _lacks("delete-records API"),
    "many-partitions": many_partitions,
    "compacted-topic": _lacks("admin API to create a topic with configs"),
    "topic-ids": _lacks("topic id in its metadata output"),
    "oversize-refused": _lacks("admin API to create a topic with configs"),
    "restart": restart,
    "transactions": _lacks("transactional producer mode"),
}
