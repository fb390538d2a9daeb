"""Time a segment takes to move between nodes (docs/several-nodes.md, moving segments).

Two active nodes (`--multi-node true`, `STREAMGATE_PLACEMENT=creator`) on a real
PostgreSQL (harness/postgres.py) and one tier-2 folder. An idempotent confluent-kafka
producer (acks=all) writes continuously to every partition of one topic, whose one open
segment is handed back and forth between the nodes (`POST /streams/TOPIC/move`) every
`--interval` seconds. Per move:

* `uploaded_s`: from the request until the sealed segment's last bytes are durable and
  confirmed in tier 2 (the giving node's part);
* `committed_s`: until the hand-over is committed in PostgreSQL (producer states saved);
* `first_ack_s`: from the request until the first record of the moved partitions
  acknowledged after the commit, i.e. written by the new owner (it includes the new
  owner's sync period, 0.5 s, and the client's metadata refresh and retry backoff).

Run it with `streamgate bench run scenario:segment-move` (`--runs N`: N moves; `--quick`: 2).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from compat.benchlib.scenario import RunOptions, scenario_args, standalone  # noqa: E402
from harness.gateway import Gateway  # noqa: E402
from harness.postgres import PostgresServer  # noqa: E402

QUICK = ("--rounds", "2", "--interval", "1")
TOPIC = "move-bench"


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _post(url: str, body: dict[str, int]) -> Any:
    request = urllib.request.Request(url, json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def _open_segment(admin_url: str) -> tuple[int, int]:
    """(segment id, owner node) of the topic's one open segment, as a node sees it."""
    described = _get(f"{admin_url}/streams/{TOPIC}")
    (seg,) = [s for s in described["segments"] if s["state"] == "open"]
    return seg["segment_id"], seg["node"]


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 4),
        "max": round(ordered[-1], 4),
        "mean": round(statistics.fmean(ordered), 4),
    }


def measure(work: Path, rounds: int, interval: float, partitions: int, size: int) -> dict[str, Any]:
    pg = PostgresServer(work / "pg")
    pg.start()
    nodes: list[Gateway] = []
    try:
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE segmove")
        url = pg.url.rsplit("/", 1)[0] + "/segmove"
        for i in (1, 2):
            nodes.append(
                Gateway(
                    work / f"n{i}",
                    work / f"n{i}.log",
                    ["--metadata", url, "--node-id", str(i), "--multi-node", "true"]
                    + ["--tier2", str(work / "t2")],
                    metrics=True,
                    env={"STREAMGATE_PLACEMENT": "creator"},
                )
            )
            nodes[-1].start_fresh()
        admin = AdminClient({"bootstrap.servers": nodes[0].bootstrap})
        admin.create_topics([NewTopic(TOPIC, num_partitions=partitions)])[TOPIC].result(20)
        time.sleep(1.5)  # both nodes synced
        acks: list[tuple[float, int]] = []  # (time, partition)
        errors: list[str] = []
        lock = threading.Lock()
        stop = threading.Event()

        def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(str(err))
                return
            with lock:
                acks.append((time.monotonic(), msg.partition()))

        producer = Producer(
            {
                "bootstrap.servers": nodes[1].bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 2,
                "retry.backoff.ms": 20,
                "message.timeout.ms": 60000,
            }
        )

        def produce() -> None:
            n = 0
            payload = b"x" * size
            while not stop.is_set():
                producer.produce(TOPIC, payload, partition=n % partitions, on_delivery=on_delivery)
                n += 1
                producer.poll(0 if n % 50 else 0.002)

        thread = threading.Thread(target=produce)
        thread.start()
        moves = []
        try:
            time.sleep(interval)
            by_id = {i + 1: node for i, node in enumerate(nodes)}
            for _ in range(rounds):
                segment, owner = _open_segment(nodes[0].admin_url)
                target = 2 if owner == 1 else 1
                started = time.monotonic()
                answer = _post(
                    f"{by_id[owner].admin_url}/streams/{TOPIC}/move",
                    {"segment": segment, "to_node": target},
                )
                answered = time.monotonic() - started
                committed_at = started + answer["committed_s"]
                deadline = time.monotonic() + 30
                first_ack = None
                while first_ack is None and time.monotonic() < deadline:
                    with lock:
                        after = [t for t, _p in acks if t > committed_at]
                    first_ack = min(after) - started if after else None
                    time.sleep(0.01)
                moves.append(
                    {
                        "segment": segment,
                        "from_node": owner,
                        "to_node": target,
                        "uploaded_s": answer["uploaded_s"],
                        "committed_s": answer["committed_s"],
                        "request_s": round(answered, 4),
                        "first_ack_s": None if first_ack is None else round(first_ack, 4),
                    }
                )
                print("move", moves[-1], flush=True)
                time.sleep(interval)
        finally:
            stop.set()
            thread.join()
            producer.flush(60)
        acked = len(acks)
        first_acks = [m["first_ack_s"] for m in moves if m["first_ack_s"] is not None]
        return {
            "rounds": rounds,
            "partitions": partitions,
            "record_bytes": size,
            "records_acked": acked,
            "producer_errors": len(errors),
            "moves": moves,
            "uploaded_s": _quantiles([m["uploaded_s"] for m in moves]),
            "committed_s": _quantiles([m["committed_s"] for m in moves]),
            "first_ack_s": _quantiles(first_acks) if first_acks else None,
        }
    finally:
        for node in nodes:
            node.close()
        pg.close()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between moves")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--size", type=int, default=100)
    return parser


def run(options: RunOptions) -> dict[str, Any]:
    args = scenario_args(build_parser(), options, quick=QUICK, runs="--rounds")
    work = Path(tempfile.mkdtemp(prefix="bench-segmove-"))
    result = measure(work, args.rounds, args.interval, args.partitions, args.size)
    print(json.dumps({k: v for k, v in result.items() if k != "moves"}, indent=2))
    return result


def main(argv: list[str] | None = None) -> int:
    return standalone("segment-move", argv)


if __name__ == "__main__":
    sys.exit(main())
