"""Run the matrix: every (row, column) cell in its own process with a timeout, in parallel."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from compat.matrix.cell import MARKER
from compat.matrix.model import FAIL, NA, CellContext, CellResult
from compat.matrix.registry import missing_reason
from compat.matrix.rows import Row

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Target:
    name: str
    bootstrap: str
    restart: Callable[[], object] | None = None  # None: not ours to restart


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text)


def create_topics(bootstrap: str, topics: dict[str, int], timeout: float = 60.0) -> None:
    """The runner's own set-up (confluent-kafka's admin), so a cell only tests its feature."""
    from confluent_kafka.admin import AdminClient, NewTopic

    if not topics:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(t, num_partitions=n, replication_factor=1) for t, n in topics.items()],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    for topic, fut in futures.items():
        try:
            fut.result(timeout=timeout)
        except Exception as exc:
            raise RuntimeError(f"set-up: creating topic {topic} failed: {exc}") from exc
    # Kafka answers CreateTopics before every partition has a leader; a client that does not
    # retry (the verifiable producer: retries=0) would fail on NOT_LEADER_OR_FOLLOWER
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(timeout=timeout)
        waiting = [
            t
            for t, n in topics.items()
            if t not in md.topics
            or len(md.topics[t].partitions) != n
            or any(p.leader < 0 for p in md.topics[t].partitions.values())
        ]
        if not waiting:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"set-up: topics without leaders after {timeout:.0f}s: {waiting[:3]}"
            )
        time.sleep(0.2)
    wait_partitions_serve(bootstrap, topics, timeout)


def wait_partitions_serve(bootstrap: str, topics: dict[str, int], timeout: float) -> None:
    """Every new partition answers ListOffsets: Kafka's metadata can name a leader a moment
    before the leader serves it, and an acks=0 record sent then is lost without an error."""
    from kafka import KafkaConsumer, TopicPartition

    tps = [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
    deadline = time.monotonic() + timeout
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=15_000)
    try:
        while True:
            try:
                consumer.end_offsets(tps)
                return
            except Exception as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"set-up: partitions not served: {exc}") from exc
                time.sleep(0.5)
    finally:
        consumer.close()


def wait_ready(bootstrap: str, timeout: float) -> None:
    """After a restart: wait until the group coordinator answers an OffsetFetch. Kafka answers
    NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS while it reloads its offsets topic; the
    restart row tests what survived, not how fast a broker settles. (kafka-python here:
    confluent-kafka's list_consumer_group_offsets crashed the process during that window.)"""
    from kafka import KafkaAdminClient

    deadline = time.monotonic() + timeout
    while True:
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
            try:
                admin.list_group_offsets({"compat-ready-probe": None})
            finally:
                admin.close()
            return
        except Exception as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"not ready {timeout:.0f}s after the restart: {exc}") from exc
            time.sleep(0.5)


def run_cell(column: str, row_id: str, ctx: CellContext, timeout: float) -> tuple[str, str]:
    data = asdict(ctx)
    data["work_dir"] = str(ctx.work_dir)
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{REPO_ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "compat.matrix.cell", column, row_id, json.dumps(data)],
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        text=True,
        errors="replace",
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the cell and any tool it started
        out, _ = proc.communicate()
        return FAIL, f"timeout after {timeout:.0f}s; output: {_tail(out)}"
    for line in reversed(out.splitlines()):
        if line.startswith(MARKER):
            answer = json.loads(line[len(MARKER) :])
            return answer["status"], answer["detail"]
    return FAIL, f"cell process exited {proc.returncode} without an answer: {_tail(out)}"


def _tail(text: str, chars: int = 600) -> str:
    text = text.strip()
    return text if len(text) <= chars else "..." + text[-chars:]


def run_target(
    target: Target,
    rows: Sequence[Row],
    columns: Sequence[str],
    *,
    records: int,
    jobs: int,
    cell_timeout: float,
    work_dir: Path,
    on_result: Callable[[CellResult], None] | None = None,
) -> list[CellResult]:
    run_id = uuid.uuid4().hex[:6]
    results: list[CellResult] = []
    contexts: dict[tuple[str, str], CellContext] = {}
    missing = {c: missing_reason(c) for c in columns}
    for row in rows:
        for column in columns:
            name = f"compat-{run_id}-{row.id}-{_slug(column)}"
            cell_dir = work_dir / target.name / row.id / column
            cell_dir.mkdir(parents=True, exist_ok=True)
            contexts[(row.id, column)] = CellContext(
                bootstrap=target.bootstrap,
                topic=name,
                partitions=row.partitions,
                group=f"{name}-g",
                records=records,
                work_dir=cell_dir,
                timeout=cell_timeout,
            )

    def done(row_id: str, column: str, status: str, detail: str, seconds: float) -> None:
        result = CellResult(target.name, row_id, column, status, detail, round(seconds, 2))
        results.append(result)
        if on_result:
            on_result(result)

    try:
        # a group coordinator that answers (Kafka creates its offsets topic on first use)
        wait_ready(target.bootstrap, min(60.0, cell_timeout))
        create_topics(
            target.bootstrap,
            timeout=min(60.0, cell_timeout),
            topics={
                ctx.topic: ctx.partitions
                for (row_id, column), ctx in contexts.items()
                if ctx.partitions > 0 and missing[column] is None
            },
        )
    except Exception as exc:  # every cell fails with the set-up error: never skipped
        for row_id, column in contexts:
            done(row_id, column, FAIL, str(exc), 0.0)
        return results

    def one(key: tuple[str, str], phase: str = "") -> tuple[str, str, float]:
        row_id, column = key
        started = time.monotonic()
        ctx = contexts[key]
        ctx.phase = phase
        status, detail = run_cell(column, row_id, ctx, cell_timeout)
        return status, detail, time.monotonic() - started

    plain = [k for k in contexts if not _row(rows, k[0]).phased]
    phased = [k for k in contexts if _row(rows, k[0]).phased]
    for key in list(contexts):
        if missing[key[1]] is not None:
            done(key[0], key[1], NA, f"client unavailable: {missing[key[1]]}", 0.0)
    plain = [k for k in plain if missing[k[1]] is None]
    phased = [k for k in phased if missing[k[1]] is None]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for key, (status, detail, secs) in zip(plain, pool.map(one, plain), strict=True):
            done(key[0], key[1], status, detail, secs)
        if phased:
            before = list(pool.map(lambda k: one(k, "before"), phased))
            restart_error = ""
            if target.restart is None:
                restart_error = "target not started by the runner: cannot restart it"
            else:
                try:
                    target.restart()
                    wait_ready(target.bootstrap, cell_timeout)
                except Exception as exc:
                    restart_error = f"restart failed: {exc}"
            ok = [k for k, b in zip(phased, before, strict=True) if b[0] != FAIL]
            after = dict(zip(ok, pool.map(lambda k: one(k, "after"), ok), strict=True))
            for key, (status, detail, secs) in zip(phased, before, strict=True):
                if status == FAIL:
                    done(key[0], key[1], FAIL, f"before restart: {detail}", secs)
                elif restart_error:
                    done(key[0], key[1], NA, restart_error, secs)
                else:
                    a_status, a_detail, a_secs = after[key]
                    done(
                        key[0],
                        key[1],
                        a_status,
                        f"{detail}; after restart: {a_detail}",
                        secs + a_secs,
                    )
    return results


def _row(rows: Sequence[Row], row_id: str) -> Row:
    return next(r for r in rows if r.id == row_id)
