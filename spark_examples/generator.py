"""Feed the IoT pipeline: JSON readings from many devices at a configurable rate, keyed by
device (so each device's readings stay in order on one partition), with a rich progress bar.

    python -m spark_examples.generator --bootstrap 127.0.0.1:9092 --topic readings \\
        --devices 500 --rate 2000 --duration 60

Event time advances with the rounds (one reading per device a round, `--devices / --rate`
seconds a round), starting now; `--rate 0` sends as fast as the gateway takes them (event
time still advances as if paced). `--end-marker` finally sends one reading of device
`_end` a minute of event time later, so a watermark passes every window and a streaming job
emits them all.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Iterator

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from spark_examples.readings import Reading, readings

END_DEVICE = "_end"


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=10).topics:
        return
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    except KafkaException as exc:  # created meanwhile by someone else
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise


def end_marker(last_ts: int) -> Reading:
    return Reading(END_DEVICE, last_ts + 60_000, 0.0, 0.0)


def paced(items: Iterator[Reading], rate: float) -> Iterator[Reading]:
    if rate <= 0:
        yield from items
        return
    start = time.monotonic()
    for i, item in enumerate(items):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield item


def run(
    bootstrap: str,
    topic: str,
    devices: int,
    rate: float,
    count: int,
    start_ms: int,
    *,
    partitions: int = 6,
    with_end_marker: bool = False,
    progress: bool = True,
    seed: int = 12,
    interval_ms: int | None = None,
) -> int:
    """Produce `count` readings (idempotent, acks=all); returns how many were delivered.
    `interval_ms`: event time per round (default: real time at `rate`, else 1 s)."""
    ensure_topic(bootstrap, topic, partitions)
    if interval_ms is None:
        interval_ms = max(1, int(devices / rate * 1000)) if rate > 0 else 1000
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 10,
            "compression.type": "lz4",
        }
    )
    delivered = 0
    errors: list[str] = []

    def done(err: object, _msg: object) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            errors.append(str(err))

    def send(r: Reading) -> None:
        while True:
            try:
                producer.produce(
                    topic, key=r.key(), value=r.value(), timestamp=r.ts, on_delivery=done
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)

    source = itertools.islice(readings(devices, start_ms, interval_ms, seed), count)
    last_ts = start_ms
    if progress:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:>8,.0f} readings/s"),
            TimeElapsedColumn(),
        )
        with Progress(*columns) as bar:
            task = bar.add_task(f"{topic} ({devices} devices)", total=count, rate=0.0)
            t0 = time.monotonic()
            for i, r in enumerate(paced(source, rate), 1):
                send(r)
                last_ts = r.ts
                if i % 500 == 0 or i == count:
                    bar.update(task, completed=i, rate=i / max(time.monotonic() - t0, 1e-6))
    else:
        for r in paced(source, rate):
            send(r)
            last_ts = r.ts
    if with_end_marker:
        send(end_marker(last_ts))
    if producer.flush(120):
        raise RuntimeError("readings still undelivered after 120 s")
    if errors:
        raise RuntimeError(f"{len(errors)} readings failed: {errors[:3]}")
    return delivered


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="readings")
    ap.add_argument("--partitions", type=int, default=6, help="when the topic is created")
    ap.add_argument("--devices", type=int, default=500)
    ap.add_argument(
        "--rate", type=float, default=2000.0, help="readings per second (0: as fast as possible)"
    )
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--duration", type=float, help="seconds of readings (at --rate)")
    group.add_argument("--count", type=int, help="number of readings")
    ap.add_argument("--start-ms", type=int, help="event time of the first round (default now)")
    ap.add_argument(
        "--event-interval-ms", type=int, help="event time per round (default: real time at --rate)"
    )
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument(
        "--end-marker",
        action="store_true",
        help="finish with a reading 60 s later in event time (flushes windows)",
    )
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    if args.devices < 1 or args.rate < 0:
        ap.error("--devices must be >= 1 and --rate >= 0")
    if args.count is not None:
        count = args.count
    elif args.duration is not None:
        if args.rate <= 0:
            ap.error("--duration needs a --rate > 0")
        count = int(args.duration * args.rate)
    else:
        count = int(60 * args.rate) if args.rate > 0 else 100_000
    start_ms = args.start_ms if args.start_ms is not None else int(time.time() * 1000)
    n = run(
        args.bootstrap,
        args.topic,
        args.devices,
        args.rate,
        count,
        start_ms,
        partitions=args.partitions,
        with_end_marker=args.end_marker,
        progress=not args.quiet,
        seed=args.seed,
    )
    print(f"delivered {n} readings to {args.topic}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
