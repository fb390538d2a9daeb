"""Requests per second of the admin HTTP endpoint for `GET /streams/TOPIC`.

Starts a gateway (`--metrics-listen`) with one 8-partition topic that has seen some
records, then `--clients` threads each send `GET /streams/TOPIC` over one keep-alive
connection (`http.client`, which reconnects by itself when a server closes after each
answer) for `--seconds`. Prints one JSON line: requests, seconds, requests/s, errors.

    PYTHONPATH=$PWD .venv/bin/python compat/bench_admin.py --seconds 5 --clients 4

`--repo DIR` runs the gateway of another checkout (to compare with an older admin server).
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

TOPIC = "admin-bench"


def _client(port: int, stop: float, counts: list[int], errors: list[str]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    done = 0
    while time.monotonic() < stop:
        try:
            conn.request("GET", f"/streams/{TOPIC}")
            response = conn.getresponse()
            body = response.read()
            if response.status != 200 or not body.startswith(b"{"):
                errors.append(f"status {response.status}")
            done += 1
        except (OSError, http.client.HTTPException) as exc:
            errors.append(repr(exc))
            conn.close()
    conn.close()
    counts.append(done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    sys.path.insert(0, str(args.repo))
    from confluent_kafka import Producer

    from harness.gateway import Gateway

    with tempfile.TemporaryDirectory(prefix="console-bench-") as tmp:
        gateway = Gateway(Path(tmp) / "data", Path(tmp) / "gateway.log", metrics=True)
        gateway.default_partitions = 8
        gateway.start()
        try:
            producer = Producer({"bootstrap.servers": gateway.bootstrap})
            for i in range(2000):
                producer.produce(TOPIC, key=str(i).encode(), value=b"x" * 100)
            producer.flush(30)
            assert gateway.metrics_port is not None
            counts: list[int] = []
            errors: list[str] = []
            stop = time.monotonic() + args.seconds
            threads = [
                threading.Thread(target=_client, args=(gateway.metrics_port, stop, counts, errors))
                for _ in range(args.clients)
            ]
            started = time.monotonic()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.monotonic() - started
        finally:
            gateway.stop()
    total = sum(counts)
    print(
        json.dumps(
            {
                "repo": str(args.repo),
                "clients": args.clients,
                "requests": total,
                "seconds": round(elapsed, 2),
                "requests_per_s": round(total / elapsed, 1),
                "errors": len(errors),
                "first_error": errors[0] if errors else None,
            }
        )
    )


if __name__ == "__main__":
    main()
