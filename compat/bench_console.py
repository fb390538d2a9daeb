"""The console with many topics: page weight, time to first render, and the gateway's produce
throughput with the console open and polling, against without.

Starts a gateway (`--metrics-listen`), creates `--topics` topics of `--partitions` each
with confluent-kafka's AdminClient, then in headless Chromium (/usr/bin/chromium through
Playwright) opens the topics view: the bytes transferred until the table shows, and the
time from navigation to the first table row (best of `--loads`). Then a confluent-kafka
producer sends for `--seconds` with no browser, then with the browser on the topics view
(polling its page of 100 topics every 2 s), twice each, alternated. Prints one JSON line.

    PYTHONPATH=$PWD .venv/bin/python compat/bench_console.py --topics 1000 --partitions 10
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from harness.gateway import Gateway  # noqa: E402


def _create_topics(bootstrap: str, count: int, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"t{i:04d}" for i in range(count)]
    for start in range(0, count, 100):
        batch = [NewTopic(n, partitions, 1) for n in names[start : start + 100]]
        for future in admin.create_topics(batch, operation_timeout=60).values():
            future.result(timeout=120)


def _produce(bootstrap: str, seconds: float) -> float:
    """Records/s acknowledged by one producer writing 100-byte records to topic t0000."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    acked = [0]

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is None:
            acked[0] += 1

    stop = time.monotonic() + seconds
    started = time.monotonic()
    while time.monotonic() < stop:
        try:
            producer.produce("t0000", b"x" * 100, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.flush(30)
    return acked[0] / (time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--loads", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    result: dict[str, Any] = {"topics": args.topics, "partitions": args.partitions}
    with tempfile.TemporaryDirectory(prefix="console-bench-") as tmp:
        gateway = Gateway(Path(tmp) / "data", Path(tmp) / "gateway.log", metrics=True)
        gateway.start()
        try:
            started = time.monotonic()
            _create_topics(gateway.bootstrap, args.topics, args.partitions)
            result["create_topics_s"] = round(time.monotonic() - started, 1)
            base = gateway.admin_url
            started = time.monotonic()
            with urllib.request.urlopen(f"{base}/api/topics?limit=100", timeout=30) as response:
                page = response.read()
            result["api_topics_page_ms"] = round((time.monotonic() - started) * 1000, 1)
            result["api_topics_page_bytes"] = len(page)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path="/usr/bin/chromium")
                renders, weights = [], []
                for _ in range(args.loads):
                    context = browser.new_context()  # a cold cache each time
                    page_ = context.new_page()
                    sizes: list[int] = []
                    page_.on("response", lambda r, sizes=sizes: sizes.append(len(r.body())))
                    started = time.monotonic()
                    page_.goto(f"{base}/#/topics")
                    page_.wait_for_selector("#topics tbody tr[data-topic]")
                    renders.append(time.monotonic() - started)
                    weights.append(sum(sizes))
                    context.close()
                result["first_render_ms_best"] = round(min(renders) * 1000)
                result["first_render_ms_all"] = [round(r * 1000) for r in renders]
                result["page_weight_bytes"] = min(weights)
                # alternated, so warm-up and drift do not favour one side
                without, with_console = [], []
                for _ in range(2):
                    without.append(round(_produce(gateway.bootstrap, args.seconds)))
                    page_ = browser.new_page()
                    page_.goto(f"{base}/#/topics")
                    page_.wait_for_selector("#topics tbody tr[data-topic]")
                    with_console.append(round(_produce(gateway.bootstrap, args.seconds)))
                    page_.close()
                result["produce_records_per_s_without_console"] = without
                result["produce_records_per_s_with_console"] = with_console
                browser.close()
        finally:
            gateway.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
