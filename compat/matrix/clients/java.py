"""Java cells: Kafka's own tools (the Java client underneath) from ../shared/kafka or KAFKA_HOME.

The verifiable producer/consumer (what Kafka's system tests use) print one JSON event a line;
`_exactly_once` checks every acknowledged record was consumed once and nothing else was.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

from compat.matrix.clients.common import expect_split, wait_for
from compat.matrix.model import CellContext, expect
from harness.kafka import kafka_home, tool_env

ASSIGNORS = {
    "range": "org.apache.kafka.clients.consumer.RangeAssignor",
    "roundrobin": "org.apache.kafka.clients.consumer.RoundRobinAssignor",
    "cooperative-sticky": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
}


def _bin(tool: str) -> str:
    home, why = kafka_home()
    expect(home is not None, why)
    assert home is not None
    return str(home / "bin" / tool)


def _env() -> dict[str, str]:
    env = tool_env("-Xmx256M")
    # one JIT thread and no tiered compilation beyond C1: tools start faster on busy CPUs
    env.setdefault("KAFKA_JVM_PERFORMANCE_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    return env


def _tool(
    ctx: CellContext,
    tool: str,
    args: list[str],
    data: str | None = None,
    timeout: float | None = None,
    ok_codes: tuple[int, ...] = (0,),
    merged: bool = False,
) -> str:
    out = subprocess.run(
        [_bin(tool), *args],
        input=data,
        capture_output=True,
        text=True,
        env=_env(),
        timeout=timeout or ctx.timeout * 0.6,
    )
    expect(
        out.returncode in ok_codes,
        f"{tool} {' '.join(args[:6])} exited {out.returncode}: {_errors(out.stdout + out.stderr)}",
    )
    return out.stdout + out.stderr if merged else out.stdout


def _errors(text: str) -> str:
    lines = [ln for ln in text.splitlines() if "ERROR" in ln or "Exception" in ln]
    return (" | ".join(lines[:3]) or text.strip()[-400:])[:600]


def _events(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def _props(ctx: CellContext, name: str, props: dict[str, str]) -> str:
    path = ctx.work_dir / f"{name}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


def _vproduce(
    ctx: CellContext,
    n: int,
    acks: str = "-1",
    props: dict[str, str] | None = None,
    topic: str | None = None,
    prefix: int | None = None,
) -> list[dict[str, Any]]:
    args = [
        "--bootstrap-server",
        ctx.bootstrap,
        "--topic",
        topic or ctx.topic,
        "--max-messages",
        str(n),
        "--acks",
        acks,
    ]
    if props:
        args += ["--producer.config", _props(ctx, "producer", props)]
    if prefix is not None:
        args += ["--value-prefix", str(prefix)]
    events = _events(_tool(ctx, "kafka-verifiable-producer.sh", args))
    errors = [e for e in events if e["name"] == "producer_send_error"]
    expect(not errors, f"{len(errors)} send errors, first: {errors[0] if errors else ''}")
    acked = [e for e in events if e["name"] == "producer_send_success"]
    expect(len(acked) == n, f"{len(acked)} of {n} acknowledged")
    return acked


def _vconsume(
    ctx: CellContext, n: int, *extra: str, group: str | None = None, timeout: float | None = None
) -> list[dict[str, Any]]:
    args = [
        "--bootstrap-server",
        ctx.bootstrap,
        "--topic",
        ctx.topic,
        "--group-id",
        group or ctx.group,
        "--max-messages",
        str(n),
        "--verbose",
        "--reset-policy",
        "earliest",
        *extra,
    ]
    return _events(_tool(ctx, "kafka-verifiable-consumer.sh", args, timeout=timeout))


def _exactly_once(
    acked: list[dict[str, Any]], events: list[dict[str, Any]], by_offset: bool = True
) -> str:
    """Every acked record consumed exactly once, nothing else consumed."""

    def ident(e: dict[str, Any]) -> tuple[Any, ...]:
        return (e["partition"], e["offset"], e["value"]) if by_offset else (e["value"],)

    want = Counter(ident(e) for e in acked)
    got = Counter(ident(e) for e in events if e["name"] == "record_data")
    missing = want - got
    extra = got - want
    dup = sum(c - 1 for c in got.values() if c > 1)
    expect(
        not missing, f"{sum(missing.values())} acked records not consumed, e.g. {list(missing)[:3]}"
    )
    expect(not dup, f"{dup} records consumed twice")
    expect(not extra, f"{sum(extra.values())} unexpected records consumed")
    return f"{len(acked)} acked, each consumed exactly once"


def _verified(acks: str = "-1", props: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    def cell(ctx: CellContext) -> str:
        acked = _vproduce(ctx, ctx.records, acks, props)
        events = _vconsume(ctx, ctx.records)
        # acks=0 gets no offsets back (-1): compare values only
        return _exactly_once(acked, events, by_offset=acks != "0")

    return cell


def _console_produce(
    ctx: CellContext, lines: list[str], *props: str, topic: str | None = None
) -> None:
    args = ["--bootstrap-server", ctx.bootstrap, "--topic", topic or ctx.topic]
    for p in props:
        args += ["--property", p]
    _tool(ctx, "kafka-console-producer.sh", args, data="\n".join(lines) + "\n")


def _console_consume(ctx: CellContext, n: int, *extra: str, topic: str | None = None) -> list[str]:
    args = [
        "--bootstrap-server",
        ctx.bootstrap,
        "--topic",
        topic or ctx.topic,
        "--max-messages",
        str(n),
        "--timeout-ms",
        str(int(ctx.timeout * 300)),
        *extra,
    ]
    out = _tool(ctx, "kafka-console-consumer.sh", args)
    return [line for line in out.splitlines() if line]


def _values(ctx: CellContext, start: int, n: int) -> list[str]:
    return [ctx.value(i).decode() for i in range(start, n)]


def keys_headers(ctx: CellContext) -> str:
    lines = [
        f"h-index:{i},h-const:compat\t{ctx.key(i).decode()}\t{ctx.value(i).decode()}"
        for i in range(ctx.records)
    ]
    _console_produce(ctx, lines, "parse.key=true", "parse.headers=true")
    got = _console_consume(
        ctx,
        ctx.records,
        "--from-beginning",
        "--property",
        "print.key=true",
        "--property",
        "print.headers=true",
    )
    expect(
        sorted(got) == sorted(lines),
        f"{len(set(lines) - set(got))} records differ, e.g. {sorted(set(got) - set(lines))[:1]}",
    )
    return f"{ctx.records} keys and header pairs"


def large_message(ctx: CellContext) -> str:
    size = 900_000
    lines = [ctx.value(i).decode().ljust(size, "x") for i in range(3)]
    _console_produce(ctx, lines)
    got = _console_consume(ctx, 3, "--from-beginning")
    expect(sorted(got) == sorted(lines), f"read back {[len(g) for g in got]} bytes")
    return f"3 x {size} bytes"


def auto_create(ctx: CellContext) -> str:
    lines = _values(ctx, 0, 3)
    _console_produce(ctx, lines)
    got = _console_consume(ctx, 3, "--from-beginning")
    expect(sorted(got) == lines, f"read back {got}")
    return "created on first produce"


def consume_assign(ctx: CellContext) -> str:
    acked = _vproduce(ctx, ctx.records)
    busiest = _busiest(acked)
    part = sorted((e["offset"], e["value"]) for e in acked if e["partition"] == busiest)
    expect(len(part) >= 2, f"only {len(part)} records landed on partition {busiest}")
    start = part[len(part) // 2][0]
    want = [v for o, v in part if o >= start]
    got = _console_consume(ctx, len(want), "--partition", str(busiest), "--offset", str(start))
    expect(got == want, f"partition {busiest} from {start}: {got[:3]}..., want {want[:3]}...")
    return f"partition {busiest} from offset {start}"


def _busiest(acked: list[dict[str, Any]]) -> int:
    """The partition most records went to (the sticky partitioner fills one at a time)."""
    return Counter(e["partition"] for e in acked).most_common(1)[0][0]


def consume_subscribe(ctx: CellContext) -> str:
    lines = _values(ctx, 0, ctx.records)
    _console_produce(ctx, lines)
    got = _console_consume(ctx, ctx.records, "--group", ctx.group, "--from-beginning")
    expect(sorted(got) == lines, f"{len(got)} of {len(lines)} read back")
    return f"{ctx.records} records via group {ctx.group}"


def list_offsets_time(ctx: CellContext) -> str:
    half = ctx.records // 2
    # one key for all: every record lands on the same partition
    _console_produce(ctx, [f"same\t{v}" for v in _values(ctx, 0, half)], "parse.key=true")
    time.sleep(1.0)
    t_mid = int(time.time() * 1000)
    time.sleep(1.0)
    _console_produce(ctx, [f"same\t{v}" for v in _values(ctx, half, ctx.records)], "parse.key=true")
    out = _tool(
        ctx,
        "kafka-get-offsets.sh",
        ["--bootstrap-server", ctx.bootstrap, "--topic", ctx.topic, "--time", str(t_mid)],
    )
    got = {
        int(p): int(o) for p, o in re.findall(rf"^{re.escape(ctx.topic)}:(\d+):(-?\d+)", out, re.M)
    }
    found = {p: o for p, o in got.items() if o >= 0}
    expect(
        list(found.values()) == [half],
        f"offsets for the middle time {got}, want one partition at {half}",
    )
    return f"mid time -> {found}"


def _member(
    ctx: CellContext, i: int, strategy: str, static: bool, log: Path
) -> subprocess.Popen[bytes]:
    args = [
        _bin("kafka-verifiable-consumer.sh"),
        "--bootstrap-server",
        ctx.bootstrap,
        "--topic",
        ctx.topic,
        "--group-id",
        ctx.group,
        "--assignment-strategy",
        ASSIGNORS[strategy],
    ]
    if static:
        args += ["--group-instance-id", f"member-{i}"]
    return subprocess.Popen(
        args, stdout=log.open("w"), stderr=subprocess.STDOUT, env=_env(), start_new_session=True
    )


def _current(log: Path) -> set[int]:
    """Replay the consumer's partitions_assigned / partitions_revoked events."""
    now: set[int] = set()
    for e in _events(log.read_text(errors="replace")):
        parts = {p["partition"] for p in e.get("partitions", [])}
        if e["name"] == "partitions_assigned":
            now |= parts
        elif e["name"] == "partitions_revoked":
            now -= parts
    return now


def _stop(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def _group_split(strategy: str, static: bool = False):  # type: ignore[no-untyped-def]
    def cell(ctx: CellContext) -> str:
        logs = [ctx.work_dir / "member-0.log", ctx.work_dir / "member-1.log"]
        procs: list[subprocess.Popen[bytes]] = []

        def split() -> list[set[int]] | None:
            s = [_current(log) for log in logs]
            if all(s) and not (s[0] & s[1]) and len(s[0] | s[1]) == ctx.partitions:
                return s
            return None

        try:
            procs.append(_member(ctx, 0, strategy, static, logs[0]))
            wait_for(lambda: _current(logs[0]), ctx.timeout / 2, "the first assignment")
            procs.append(_member(ctx, 1, strategy, static, logs[1]))
            sets = wait_for(split, ctx.timeout / 2, "a complete, disjoint assignment")
            detail = expect_split(sets, ctx.partitions, strategy)
            if static:
                _stop(procs[0])  # SIGKILL: a static member keeps its place for the session
                logs[0] = ctx.work_dir / "member-0.again.log"
                procs[0] = _member(ctx, 0, strategy, static, logs[0])
                again = wait_for(split, ctx.timeout / 2, "the static member's assignment")
                expect(again == sets, f"assignment changed: {sets} -> {again}")
                detail += "; rejoined with the same partitions"
            return detail
        finally:
            for p in procs:
                _stop(p)

    return cell


def _group_offsets(ctx: CellContext) -> dict[int, int]:
    out = _tool(
        ctx,
        "kafka-consumer-groups.sh",
        ["--bootstrap-server", ctx.bootstrap, "--describe", "--group", ctx.group],
    )
    offsets = {}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 4 and cols[1] == ctx.topic and cols[2].isdigit():
            offsets[int(cols[2])] = int(cols[3]) if cols[3].isdigit() else -1
    return offsets


def committed_offsets(ctx: CellContext) -> str:
    acked = _vproduce(ctx, ctx.records)
    events = _vconsume(ctx, ctx.records)
    _exactly_once(acked, events)
    offsets = _group_offsets(ctx)
    expect(sum(offsets.values()) == ctx.records, f"committed {offsets}, want {ctx.records} total")
    _tool(
        ctx,
        "kafka-consumer-groups.sh",
        [
            "--bootstrap-server",
            ctx.bootstrap,
            "--group",
            ctx.group,
            "--reset-offsets",
            "--to-earliest",
            "--topic",
            ctx.topic,
            "--execute",
        ],
    )
    reset = _group_offsets(ctx)
    expect(set(reset.values()) == {0}, f"after --reset-offsets --to-earliest: {reset}")
    again = _vconsume(ctx, ctx.records)
    _exactly_once(acked, again)
    return f"committed {sum(offsets.values())}; reset to earliest; re-read all"


def _topics(ctx: CellContext, *args: str) -> str:
    return _tool(ctx, "kafka-topics.sh", ["--bootstrap-server", ctx.bootstrap, *args])


def admin_topics(ctx: CellContext) -> str:
    _topics(ctx, "--create", "--topic", ctx.topic, "--partitions", "2", "--replication-factor", "1")
    # Kafka's brokers learn of a new topic asynchronously: list again until it shows
    wait_for(lambda: ctx.topic in _topics(ctx, "--list").split(), 10, "the created topic listed")
    desc = _topics(ctx, "--describe", "--topic", ctx.topic)
    expect("PartitionCount: 2" in desc, f"describe: {desc[:300]!r}")
    _topics(ctx, "--delete", "--topic", ctx.topic)
    wait_for(lambda: ctx.topic not in _topics(ctx, "--list").split(), 30, "the topic to go")
    return "create, list, describe, delete"


def admin_partitions(ctx: CellContext) -> str:
    _topics(ctx, "--alter", "--topic", ctx.topic, "--partitions", "5")
    desc = _topics(ctx, "--describe", "--topic", ctx.topic)
    expect("PartitionCount: 5" in desc, f"describe: {desc[:300]!r}")
    return f"{ctx.partitions} -> 5"


def admin_configs(ctx: CellContext) -> str:
    base = [
        "--bootstrap-server",
        ctx.bootstrap,
        "--entity-type",
        "topics",
        "--entity-name",
        ctx.topic,
    ]
    _tool(ctx, "kafka-configs.sh", [*base, "--alter", "--add-config", "retention.ms=123456789"])
    # Kafka's brokers apply a config change asynchronously: describe again until it shows
    desc = ""

    def described() -> bool:
        nonlocal desc
        desc = _tool(ctx, "kafka-configs.sh", [*base, "--describe"])
        return "retention.ms=123456789" in desc

    with contextlib.suppress(AssertionError):
        wait_for(described, 10, "the altered retention.ms")
    expect("retention.ms=123456789" in desc, f"describe: {desc[:300]!r}")
    every = _tool(ctx, "kafka-configs.sh", [*base, "--describe", "--all"])
    expect("max.message.bytes=" in every, f"describe --all: {every[:300]!r}")
    return "alter --add-config, describe, describe --all"


def admin_groups(ctx: CellContext) -> str:
    _console_produce(ctx, _values(ctx, 0, 3))
    _console_consume(ctx, 3, "--group", ctx.group, "--from-beginning")
    base = ["--bootstrap-server", ctx.bootstrap]
    listed = _tool(ctx, "kafka-consumer-groups.sh", [*base, "--list"])
    expect(ctx.group in listed.split(), "group not listed")
    state = _tool(
        ctx, "kafka-consumer-groups.sh", [*base, "--describe", "--state", "--group", ctx.group]
    )
    expect("Empty" in state, f"state: {state.strip()[-200:]!r}")
    _tool(ctx, "kafka-consumer-groups.sh", [*base, "--delete", "--group", ctx.group])
    listed = _tool(ctx, "kafka-consumer-groups.sh", [*base, "--list"])
    expect(ctx.group not in listed.split(), "deleted group still listed")
    return "list, describe --state (Empty), delete"


def admin_records(ctx: CellContext) -> str:
    acked = _vproduce(ctx, ctx.records)
    part = _busiest(acked)
    count = sum(1 for e in acked if e["partition"] == part)
    expect(count >= 2, f"only {count} records on partition {part}")
    mid = count // 2
    spec = ctx.work_dir / "delete.json"
    spec.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": ctx.topic, "partition": part, "offset": mid}]}
        )
    )
    out = _tool(
        ctx,
        "kafka-delete-records.sh",
        ["--bootstrap-server", ctx.bootstrap, "--offset-json-file", str(spec)],
    )
    expect(f"low_watermark: {mid}" in out, f"delete-records: {out.strip()!r}")
    offsets = _tool(
        ctx,
        "kafka-get-offsets.sh",
        [
            "--bootstrap-server",
            ctx.bootstrap,
            "--topic",
            ctx.topic,
            "--partitions",
            str(part),
            "--time",
            "-2",
        ],
    )
    expect(f"{ctx.topic}:{part}:{mid}" in offsets, f"earliest: {offsets.strip()!r}")
    return f"log start {mid} (kafka-delete-records, kafka-get-offsets --time -2)"


def many_partitions(ctx: CellContext) -> str:
    n = 2 * ctx.partitions
    # a key per record spreads them (null keys stick to one partition per batch)
    lines = [f"{ctx.key(i).decode()}\t{ctx.value(i).decode()}" for i in range(n)]
    _console_produce(ctx, lines, "parse.key=true")
    out = _tool(
        ctx, "kafka-get-offsets.sh", ["--bootstrap-server", ctx.bootstrap, "--topic", ctx.topic]
    )
    ends = {
        int(p): int(o) for p, o in re.findall(rf"^{re.escape(ctx.topic)}:(\d+):(\d+)", out, re.M)
    }
    expect(len(ends) == ctx.partitions, f"{len(ends)} partitions listed")
    expect(sum(ends.values()) == n, f"{sum(ends.values())} records, want {n}")
    got = _console_consume(ctx, n, "--from-beginning")
    expect(sorted(got) == sorted(_values(ctx, 0, n)), f"{len(got)} of {n} read back")
    return f"{ctx.partitions} partitions, {n} records over {sum(1 for v in ends.values() if v)}"


def restart(ctx: CellContext) -> str:
    state = ctx.work_dir / "acked.json"
    mid = ctx.records // 2
    if ctx.phase == "before":
        acked = _vproduce(ctx, ctx.records)
        events = _vconsume(ctx, mid)
        consumed = [e for e in events if e["name"] == "record_data"]
        state.write_text(json.dumps({"acked": acked, "consumed": consumed}))
        return f"{ctx.records} acked, {len(consumed)} consumed and committed"
    saved = json.loads(state.read_text())
    rest = _vconsume(ctx, ctx.records - len(saved["consumed"]))
    both = saved["consumed"] + [e for e in rest if e["name"] == "record_data"]
    return _exactly_once(saved["acked"], both) + " across the restart"


def transactions(ctx: CellContext) -> str:
    _tool(
        ctx,
        "kafka-producer-perf-test.sh",
        [
            "--topic",
            ctx.topic,
            "--num-records",
            "10",
            "--record-size",
            "50",
            "--throughput",
            "-1",
            "--transactional-id",
            f"{ctx.topic}-tx",
            "--transaction-duration-ms",
            "100",
            "--producer-props",
            f"bootstrap.servers={ctx.bootstrap}",
            "max.block.ms=20000",
        ],
    )
    got = _console_consume(ctx, 10, "--from-beginning", "--isolation-level", "read_committed")
    expect(len(got) == 10, f"{len(got)} of 10 committed records read")
    return "10 records in committed transactions read back"


def compacted_topic(ctx: CellContext) -> str:
    _topics(
        ctx,
        "--create",
        "--topic",
        ctx.topic,
        "--partitions",
        "1",
        "--replication-factor",
        "1",
        "--config",
        "cleanup.policy=compact",
    )
    lines = [f"{ctx.key(i).decode()}\t{v}" for i, v in enumerate(_values(ctx, 0, ctx.records))]
    _console_produce(ctx, lines, "parse.key=true")
    got = _console_consume(ctx, ctx.records, "--from-beginning")
    expect(sorted(got) == _values(ctx, 0, ctx.records), f"{len(got)} read back")
    return "compacted topic created and read back"


def topic_ids(ctx: CellContext) -> str:
    desc = _topics(ctx, "--describe", "--topic", ctx.topic)
    match = re.search(r"TopicId:\s*(\S+)", desc)
    # kafka-topics leaves the TopicId out when the id is zero
    expect(match, f"no TopicId (a zero id) in {desc[:160]!r}")
    assert match is not None
    expect(match.group(1) != "AAAAAAAAAAAAAAAAAAAAAA", f"topic id {match.group(1)} (zero)")
    return f"topic id {match.group(1)}"


def oversize_refused(ctx: CellContext) -> str:
    _topics(
        ctx,
        "--create",
        "--topic",
        ctx.topic,
        "--partitions",
        "1",
        "--replication-factor",
        "1",
        "--config",
        "max.message.bytes=10000",
    )
    out = _tool(
        ctx,
        "kafka-producer-perf-test.sh",
        [
            "--topic",
            ctx.topic,
            "--num-records",
            "1",
            "--record-size",
            "20000",
            "--throughput",
            "-1",
            "--producer-props",
            f"bootstrap.servers={ctx.bootstrap}",
            "retries=0",
        ],
        ok_codes=(0, 1),
        merged=True,
    )
    expect(
        "RecordTooLargeException" in out or "too large" in out.lower(),
        f"not refused: {out.strip()[-300:]!r}",
    )
    return "refused: RecordTooLargeException"


CELLS = {
    "produce-gzip": _verified(props={"compression.type": "gzip"}),
    "produce-snappy": _verified(props={"compression.type": "snappy"}),
    "produce-lz4": _verified(props={"compression.type": "lz4"}),
    "produce-zstd": _verified(props={"compression.type": "zstd"}),
    "produce-acks0": _verified(acks="0", props={"enable.idempotence": "false"}),
    "produce-acks1": _verified(acks="1", props={"enable.idempotence": "false"}),
    # the verifiable producer defaults to retries=0, which idempotence refuses
    "idempotence": _verified(props={"enable.idempotence": "true", "retries": "2147483647"}),
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
    "admin-topics": admin_topics,
    "admin-partitions": admin_partitions,
    "admin-configs": admin_configs,
    "admin-groups": admin_groups,
    "admin-records": admin_records,
    "many-partitions": many_partitions,
    "compacted-topic": compacted_topic,
    "topic-ids": topic_ids,
    "oversize-refused": oversize_refused,
    "restart": restart,
    "transactions": transactions,
}
