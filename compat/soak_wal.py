"""Soak of `--wal object` takeover (a script, not a test): nodes die, nothing acknowledged is lost.

Starts `serve --nodes 3 --wal object --node-lease-s 1` (its own PostgreSQL, free loopback
ports, the tier-2 folder or its own moto S3 server with `--tier2 s3`). An idempotent acks=all
confluent-kafka producer writes uniquely numbered records to every partition while, each
cycle, a node that leads partitions meets one fault, in turn:

* `kill`: SIGKILL; the supervisor restarts it on the same disk;
* `kill-disk`: SIGKILL and its data folder removed (a dead machine and disk);
* `freeze`: SIGSTOP for 4 leases, then SIGCONT: the zombie must be fenced, exit and restart.

Per cycle it measures the takeover time: from the fault until every partition the node led
acknowledges a record sent after the fault (by a live node that took the segment over, or by
the node itself once back); p50/p99/max are over the kills (a frozen node stalls its clients'
requests until they time out, so its cycles are reported apart). At the end it reads every
partition from offset 0 and checks each acknowledged record: at its acknowledged offset,
exactly once, offsets dense. Run it with `streamgate bench run scenario:soak-wal` (`--runs N`:
N cycles; `--quick`: 6) or `make soak-wal`; a failed check fails the run (exit status 1).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from compat.benchlib.report import environment  # noqa: E402
from compat.benchlib.scenario import RunOptions, scenario_args, standalone  # noqa: E402
from compat.soak_tier2 import ID_DIGITS, Ledger, make_producer, produce_for, verify  # noqa: E402
from harness.moto import MotoServer  # noqa: E402
from harness.nodes_cluster import NodesCluster  # noqa: E402
from harness.postgres import unavailable_reason  # noqa: E402

QUICK = ("--cycles", "6")
FAULTS = ("kill", "kill-disk", "freeze")
LEASE_S = 1.0


@dataclass
class TimedLedger(Ledger):
    """A Ledger that also notes, per partition, the first acknowledgement of a record numbered
    at or above `mark` (one sent after the fault)."""

    mark: int = 1 << 62
    back: dict[int, float] = field(default_factory=dict)

    def on_delivery(self, err: Any, msg: Any) -> None:
        super().on_delivery(err, msg)
        if err is None and int(msg.value()[:ID_DIGITS]) >= self.mark:
            self.back.setdefault(msg.partition(), time.monotonic())

    def watch(self) -> None:
        with self.lock:
            self.back = {}
            self.mark = self.sent


class _Producing:
    """The producer's loop in a thread (delivery callbacks run there too)."""

    def __init__(self, bootstrap: str, topic: str, ledger: TimedLedger, rate: int) -> None:
        self.ledger = ledger
        self.producer = make_producer(bootstrap, ledger)
        self._stop = threading.Event()
        burst = max(1, round(rate * 0.005))
        pad = b"." * 90

        def loop() -> None:
            while not self._stop.is_set():
                produce_for(self.producer, ledger, topic, 0.25, burst, pad)

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def finish(self, timeout: float) -> int:
        """Stop producing, wait for the outstanding acknowledgements; the records left."""
        self._stop.set()
        self._thread.join()
        self.producer.flush(timeout)
        return len(self.producer)


def _leaders(admin: AdminClient, topic: str) -> dict[int, int]:
    meta = admin.list_topics(topic, timeout=10).topics[topic].partitions
    return {p: m.leader for p, m in meta.items()}


def _fault(cluster: NodesCluster, node: int, kind: str) -> int:
    pid = cluster.node_pid(node)
    if kind == "freeze":
        os.kill(pid, signal.SIGSTOP)
        return pid
    os.kill(pid, signal.SIGKILL)
    if kind == "kill-disk":
        shutil.rmtree(cluster.data_dir / f"node-{node}", ignore_errors=True)
    return pid


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def kill_cycles(
    cluster: NodesCluster, args: argparse.Namespace, faults: tuple[str, ...]
) -> dict[str, Any]:
    """The cycles on a started cluster, then the check of every acknowledged record."""
    began = time.monotonic()
    rng = random.Random(args.seed)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = f"soak-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, num_partitions=args.partitions)])[topic].result(60)
    ledger = TimedLedger()
    load = _Producing(cluster.bootstrap, topic, ledger, args.rate)
    cycles: list[dict[str, Any]] = []
    try:
        time.sleep(3.0)
        for cycle in range(args.cycles):
            kind = faults[cycle % len(faults)]
            leaders = _leaders(admin, topic)
            node = rng.choice(sorted(set(leaders.values())))
            theirs = sorted(p for p, n in leaders.items() if n == node)
            time.sleep(rng.uniform(0.0, 0.5))
            ledger.watch()
            faulted = time.monotonic()
            pid = _fault(cluster, node, kind)
            deadline = faulted + args.stall_timeout
            while time.monotonic() < deadline and not all(p in ledger.back for p in theirs):
                time.sleep(0.01)
                if kind == "freeze" and time.monotonic() > faulted + 4 * LEASE_S:
                    os.kill(pid, signal.SIGCONT)  # the zombie wakes up, fenced
                    kind = "freeze (resumed)"
            back = max((ledger.back.get(p, deadline) for p in theirs), default=faulted)
            if kind == "freeze":
                os.kill(pid, signal.SIGCONT)
            took = back - faulted
            cluster.wait_restarted(node, pid, timeout=args.stall_timeout)
            row = {
                "cycle": cycle + 1,
                "fault": faults[cycle % len(faults)],
                "node": node,
                "partitions": theirs,
                "seconds": round(took, 3),
                "acked": ledger.acked,
            }
            cycles.append(row)
            print(
                f"cycle {cycle + 1:>3}: {row['fault']:<9} node {node} (partitions {theirs}): "
                f"acknowledged again after {took:5.2f} s; {ledger.acked:,} of "
                f"{ledger.sent:,} acknowledged",
                flush=True,
            )
            time.sleep(args.settle)
    finally:
        left = load.finish(args.stall_timeout)
    verdict = verify(cluster.bootstrap, topic, args.partitions, ledger, args.stall_timeout)
    # A frozen node holds its clients' requests until they time out, and it is resumed after
    # 4 leases here: its cycles say how the zombie is fenced, not how fast a takeover is.
    times = [c["seconds"] for c in cycles if c["fault"] != "freeze"]
    frozen = [c["seconds"] for c in cycles if c["fault"] == "freeze"]
    failed = {
        "delivery failures": len(ledger.failures) + len(ledger.fatal) + left,
        "duplicates": verdict.duplicates,
        "missing": verdict.missing,
        "misplaced": verdict.misplaced,
        "offset gaps": verdict.gaps,
        "unknown records": verdict.unknown,
        "takeovers over 5 s": sum(t > 5.0 for t in times),
    }
    ok = verdict.verified == ledger.acked and not any(failed.values())
    for sample in verdict.samples + ledger.failures[:5] + ledger.fatal[:5]:
        print(f"  {sample}", flush=True)
    return {
        "ok": ok,
        "kills": len(times),
        "seconds_p50": quantile(times, 0.5),
        "seconds_p99": quantile(times, 0.99),
        "seconds_max": round(max(times), 3) if times else None,
        "seconds_mean": round(statistics.mean(times), 3) if times else None,
        "freezes": len(frozen),
        "freeze_seconds_max": round(max(frozen), 3) if frozen else None,
        "records_sent": ledger.sent,
        "records_acked": ledger.acked,
        "records_verified": verdict.verified,
        "failed": failed,
        "cycles": cycles,
        "wall_seconds": round(time.monotonic() - began, 1),
    }


def soak(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    reason = unavailable_reason()
    if reason:
        return {"ok": False, "skipped": f"PostgreSQL: {reason}"}
    moto: MotoServer | None = None
    extra = ["--node-lease-s", str(LEASE_S), "--wal", "object"]
    env: dict[str, str] = {}
    cluster: NodesCluster | None = None
    try:
        if args.tier2 == "s3":
            moto = MotoServer(workdir / "moto")
            moto.start()
            env.update(moto.env())
            bucket = f"soak-{uuid.uuid4().hex[:12]}"
            extra += ["--tier2", f"s3://{bucket}/soak", "--s3-endpoint", moto.endpoint]
        cluster = NodesCluster(workdir / "nodes", 3, extra, env=env)
        cluster.start()
        faults = tuple(args.faults.split(","))
        report = kill_cycles(cluster, args, faults)
        print("PASSED" if report["ok"] else f"FAILED: {report['failed']}", flush=True)
        return report
    except Exception:
        if cluster is not None:
            print(cluster.log_tail(), flush=True)
        raise
    finally:
        if cluster is not None:
            cluster.close()
        if moto is not None:
            moto.stop()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add(
        "--cycles",
        type=int,
        default=30,
        help="faults, one per cycle: with the three faults in turn, 30 cycles make 20 kills "
        "(default: %(default)s)",
    )
    add(
        "--faults",
        default=",".join(FAULTS),
        help="the faults taken in turn, from: " + ", ".join(FAULTS) + " (default: all)",
    )
    add("--tier2", choices=["folder", "s3"], default="folder", help="tier-2 store")
    add("--rate", type=int, default=2000, help="records/s produced (default: %(default)s)")
    add("--partitions", type=int, default=6, help="partitions (default: %(default)s)")
    add("--settle", type=float, default=2.0, help="seconds between cycles (default: %(default)s)")
    add("--seed", type=int, default=7, help="seed of the node choices (default: %(default)s)")
    add(
        "--stall-timeout",
        type=float,
        default=60.0,
        help="give up waiting for a takeover, a restart or the final read after this long",
    )
    return parser


def run(options: RunOptions) -> dict[str, Any]:
    args = scenario_args(build_parser(), options, quick=QUICK, runs="--cycles")
    bad = set(args.faults.split(",")) - set(FAULTS)
    if bad:
        raise SystemExit(f"--faults: unknown {', '.join(sorted(bad))}")
    workdir = Path(tempfile.mkdtemp(prefix="soak-wal-"))
    try:
        report = soak(args, workdir)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(workdir)
    return {
        "benchmark": "compat/soak_wal.py",
        "settings": {k: str(v) for k, v in vars(args).items()},
        "environment": environment(),
        **report,
    }


def main(argv: list[str] | None = None) -> int:
    return standalone("soak-wal", argv)


if __name__ == "__main__":
    sys.exit(main())
