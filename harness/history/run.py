"""One bounded run: a gateway, the workers, a split and a merge, SIGKILL restarts, and
the final reads."""

from __future__ import annotations

import json
import random
import shutil
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from harness.gateway import REPO_ROOT

from .checker import check
from .model import (
    OK,
    CommittedRead,
    HighWatermarkRead,
    History,
    LogStartRead,
    Recorder,
    RecordRead,
    TopicRead,
    Violation,
)
from .requests import (
    EARLIEST,
    LATEST,
    RunConfig,
    _code,
    _Raw,
    _records_of,
    create_topics_request,
    fetch_request,
    list_offsets_request,
    metadata_request,
    offset_fetch_request,
)
from .workers import (
    ConsumerWorker,
    ProberWorker,
    ProducerWorker,
    _finish_committed,
    _finish_topic_read,
    _Worker,
)

_T = TypeVar("_T")


def _http(admin_url: str, path: str, payload: Any = None) -> tuple[int, Any]:
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(
        admin_url + path, data=data, method="GET" if data is None else "POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _retry(what: str, action: Callable[[], _T], deadline: float) -> _T:
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            return action()
        except Exception as exc:  # the gateway restarting, a connection refused
            last = exc
            time.sleep(0.3)
    raise RuntimeError(f"{what} kept failing: {last}")


class Chaos:
    """Split, merge and SIGKILL restarts at planned times."""

    def __init__(
        self, recorder: Recorder, gateway: Any, topic: str, config: RunConfig, rng: random.Random
    ) -> None:
        self.recorder, self.gateway, self.topic = recorder, gateway, topic
        self.config = config
        cycles = max(1, int(config.seconds // 120))  # a split and a merge every ~2 minutes
        plan: list[tuple[float, str]] = []
        for k in range(cycles):
            plan.append(((k + 0.2) / cycles * config.seconds, "split"))
            plan.append(((k + 0.5) / cycles * config.seconds, "merge"))
        for i in range(config.kills):
            at = (i + 0.7) / config.kills * 0.9 * config.seconds + rng.uniform(-1.0, 1.0)
            plan.append((max(1.0, at), "kill"))
        self.plan = sorted(plan)
        self.done: Counter[str] = Counter()

    def open_segments(self) -> list[int]:
        status, body = _http(self.gateway.admin_url, f"/streams/{self.topic}")
        if status != 200:
            raise RuntimeError(f"describe {self.topic}: {status} {body}")
        return sorted(s["segment_id"] for s in body["segments"] if s["state"] == "open")

    def scale(self, request: dict[str, Any]) -> None:
        status, body = _http(self.gateway.admin_url, f"/streams/{self.topic}/scale", request)
        if status != 200:
            raise RuntimeError(f"scale {request}: {status} {body}")
        self.recorder.note(
            "split" if "split" in request else "merge", f"{request} -> epoch {body.get('epoch')}"
        )

    def do(self, action: str) -> None:
        deadline = time.monotonic() + 30
        if action == "split":
            segments = _retry("describe", self.open_segments, deadline)
            _retry("split", lambda: self.scale({"split": segments[0], "parts": 2}), deadline)
        elif action == "merge":
            segments = _retry("describe", self.open_segments, deadline)
            if len(segments) < 2:
                raise RuntimeError(f"nothing to merge: open segments {segments}")
            _retry("merge", lambda: self.scale({"merge": segments[:2]}), deadline)
        else:
            self.recorder.bump_epoch()
            self.recorder.note("kill", f"pid {self.gateway.pid}")
            self.gateway.kill()
            self.gateway.start()
            self.recorder.note("restarted", f"pid {self.gateway.pid}")
        self.done[action] += 1

    def run(self, started: float, stop: threading.Event) -> None:
        for at, action in self.plan:
            if stop.wait(max(0.0, started + at - time.monotonic())):
                return
            self.do(action)


def _make_gateway(config: RunConfig, workdir: Path) -> Any:
    from harness.gateway import Gateway

    repo = (config.repo or REPO_ROOT).resolve()
    env = {"PYTHONPATH": str(repo)}
    gateway = Gateway(
        workdir / "data",
        workdir / "server.log",
        ("--log-level", "WARNING"),
        default_partitions=1,
        metrics=True,
        env=env,
    )
    gateway.cwd = repo
    return gateway


def _wait_admin(gateway: Any, deadline: float) -> None:
    def ok() -> None:
        status, _ = _http(gateway.admin_url, "/streams")
        if status != 200:
            raise RuntimeError(f"admin HTTP {status}")

    _retry("admin HTTP", ok, deadline)


def _create_topics(recorder: Recorder, bootstrap: str, topics: dict[str, int]) -> None:
    def create() -> None:
        raw = _Raw(recorder, bootstrap, "setup")
        try:
            (answer,) = raw.pipeline([create_topics_request(topics, None)])
        finally:
            raw.close()
        for t in answer.topics:
            if _code(t.error_code) not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS
                raise RuntimeError(f"create {t.name}: error {_code(t.error_code)}")

    _retry("create topics", create, time.monotonic() + 30)


def final_reads(
    recorder: Recorder,
    bootstrap: str,
    partitions: dict[str, int],
    groups: dict[str, tuple[str, int]],
    created: Sequence[str],
) -> None:
    """From a fresh connection: log starts, high watermarks and every record of every
    partition, the groups' committed offsets, and the created topics."""
    deadline = time.monotonic() + 120

    def read_all() -> None:
        raw = _Raw(recorder, bootstrap, "final")
        try:
            for topic, count in partitions.items():
                for p in range(count):
                    _final_partition(recorder, raw, topic, p)
            for group, (topic, count) in groups.items():
                reads = [CommittedRead(group=group, topic=topic, partition=p) for p in range(count)]
                for r in reads:
                    r.client = raw.client
                    recorder.begin(r, raw.conn)
                (answer,) = raw.pipeline([offset_fetch_request(group, topic, range(count))])
                for r in reads:
                    _finish_committed(recorder, r, answer)
            for name in created:
                read = TopicRead(topic=name)
                (answer,) = raw.pipeline([metadata_request(name, read)])
                _finish_topic_read(recorder, read, answer)
        finally:
            raw.close()

    # a failed attempt leaves unknown (or partial final) reads behind: drop them and retry
    mark = len(recorder.history.ops)

    def attempt() -> None:
        del recorder.history.ops[mark:]
        read_all()

    _retry("final reads", attempt, deadline)


def _final_partition(recorder: Recorder, raw: _Raw, topic: str, partition: int) -> None:
    start = LogStartRead(topic=topic, partition=partition, final=True)
    end = HighWatermarkRead(topic=topic, partition=partition, final=True)
    answers = raw.pipeline(
        [
            list_offsets_request(topic, partition, EARLIEST, start),
            list_offsets_request(topic, partition, LATEST, end),
        ]
    )
    reads: tuple[LogStartRead | HighWatermarkRead, ...] = (start, end)
    for read, answer in zip(reads, answers, strict=True):
        part = answer.topics[0].partitions[0]
        if _code(part.error_code) != 0:
            raise RuntimeError(f"ListOffsets {topic}/{partition}: {_code(part.error_code)}")
        read.offset = part.offset
        recorder.finish(read, OK)
    offset = start.offset
    while offset < end.offset:
        (answer,) = raw.pipeline([fetch_request(topic, partition, offset, None)])
        fetched = answer.responses[0].partitions[0]
        if _code(fetched.error_code) != 0:
            raise RuntimeError(f"Fetch {topic}/{partition}@{offset}: {_code(fetched.error_code)}")
        records = [r for r in _records_of(fetched.records, offset) if r[0] < end.offset]
        if not records:
            raise RuntimeError(f"Fetch {topic}/{partition}@{offset}: nothing below {end.offset}")
        for rec_offset, key, value in records:
            rec = recorder.begin(
                RecordRead(
                    client=raw.client,
                    topic=topic,
                    partition=partition,
                    offset=rec_offset,
                    key=key,
                    value=value,
                    final=True,
                ),
                raw.conn,
            )
            recorder.finish(rec, OK)
        offset = records[-1][0] + 1


@dataclass
class RunResult:
    history: History
    violations: list[Violation]
    counts: dict[str, int]
    seconds: float


def run_workload(config: RunConfig) -> RunResult:
    """Start a gateway, run the workload for `config.seconds`, read everything back, check."""
    began = time.monotonic()
    rng = random.Random(config.seed)
    own_dir = config.workdir is None
    workdir = Path(config.workdir or tempfile.mkdtemp(prefix="sg-history-"))
    workdir.mkdir(parents=True, exist_ok=True)
    recorder = Recorder()
    tag = f"h{config.seed}-{rng.randrange(1 << 30):x}"
    topic, probe_topic = f"{tag}-main", f"{tag}-probe"
    group, probe_group = f"{tag}-group", f"{tag}-probe-group"
    recorder.history.meta = {
        "seed": config.seed,
        "seconds": config.seconds,
        "kills": config.kills,
        "topic": topic,
        "probe_topic": probe_topic,
        "group": group,
        "repo": str((config.repo or REPO_ROOT).resolve()),
    }
    gateway = _make_gateway(config, workdir)
    stop = threading.Event()
    workers: list[_Worker] = []
    try:
        gateway.start_fresh()
        recorder.history.meta["gateway"] = {"cwd": str(gateway.cwd), "command": gateway.command()}
        _wait_admin(gateway, time.monotonic() + 30)
        bootstrap = gateway.bootstrap
        _create_topics(recorder, bootstrap, {topic: config.partitions, probe_topic: 1})
        for i in range(config.producers):
            keys = [f"p{i}-k{j}" for j in range(config.keys_per_producer)]
            workers.append(
                ProducerWorker(
                    recorder, stop, bootstrap, topic, f"producer{i}", keys, config.produce_pause_s
                )
            )
        workers.append(
            ConsumerWorker(
                recorder, stop, bootstrap, topic, group, "consumer0", config.async_commits_per_cycle
            )
        )
        prober = ProberWorker(
            recorder,
            stop,
            bootstrap,
            topic,
            probe_topic,
            probe_group,
            group,
            config.partitions,
            random.Random(rng.random()),
            config.create_topics,
        )
        workers.append(prober)
        for w in workers:
            w.start()
        chaos = Chaos(recorder, gateway, topic, config, rng)
        started = time.monotonic()
        chaos.run(started, stop)
        stop.wait(max(0.0, started + config.seconds - time.monotonic()))
        stop.set()
        for w in workers:
            w.join(90)
            if w.is_alive():
                raise RuntimeError(f"{w.name} did not finish")
            if w.failure is not None:
                raise RuntimeError(f"{w.name} failed: {w.failure!r}") from w.failure
        final_reads(
            recorder,
            gateway.bootstrap,
            {topic: config.partitions, probe_topic: 1},
            {group: (topic, config.partitions), probe_group: (probe_topic, 1)},
            prober.created,
        )
        counts: dict[str, int] = Counter()
        for w in workers:
            for k, v in w.counts.items():
                counts[f"{w.name.rstrip('0123456789')}.{k}"] += v
        counts.update({f"chaos.{k}": v for k, v in chaos.done.items()})
    except BaseException:
        stop.set()
        sys.stderr.write(gateway.log_tail(4000) + "\n")
        raise
    finally:
        stop.set()
        gateway.close()
        if own_dir:
            shutil.rmtree(workdir, ignore_errors=True)
    history = recorder.history
    history.meta["counts"] = dict(counts)
    violations = check(history)
    return RunResult(history, violations, dict(counts), time.monotonic() - began)
