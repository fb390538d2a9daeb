"""`streamgate bridge mqtt ...` (also `python -m bridge mqtt ...`).

`register(subparsers)` adds the `bridge` command to any argparse parser; `run(args)` runs it.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any


def _add_mqtt_parser(kinds: Any) -> None:
    p = kinds.add_parser(
        "mqtt",
        help="MQTT messages into streamgate topics (and back with --reverse)",
        description="Subscribe to an MQTT broker and produce every message to streamgate "
        "(acks=all, idempotent); spool to disk while streamgate is unreachable.",
    )
    p.add_argument("--config", help="TOML file with the same settings (flags win)")
    p.add_argument("--mqtt", help="broker URL: mqtt://HOST[:1883] or mqtts://HOST[:8883]")
    p.add_argument("--gateway", help="streamgate bootstrap HOST:PORT (a list works too)")
    p.add_argument(
        "--map",
        action="append",
        metavar="FILTER=TOPIC",
        help="e.g. 'plant/+/sensors/#=sensors'; repeat for more",
    )
    p.add_argument(
        "--key-level",
        type=int,
        help="record key = this MQTT topic level (1-based); default the whole topic",
    )
    p.add_argument(
        "--reverse",
        action="append",
        metavar="TOPIC=MQTT_TOPIC",
        help="publish records of a streamgate topic to MQTT ({key} = record key)",
    )
    p.add_argument("--reverse-group", help="consumer group of --reverse")
    p.add_argument("--reverse-qos", type=int, help="QoS of --reverse publications (default 1)")
    p.add_argument("--mqtt-version", help="3.1.1 or 5 (default 5)")
    p.add_argument("--qos", type=int, help="subscription QoS (default 1)")
    p.add_argument("--client-id", help="MQTT client id, fixed for the persistent session")
    p.add_argument("--session-expiry-s", type=int, help="MQTT 5 session expiry (default 7 d)")
    p.add_argument("--keepalive-s", type=int, help="MQTT keepalive (default 30)")
    p.add_argument(
        "--receive-maximum",
        type=int,
        help="MQTT 5: unacked messages the broker may send at once (default 1000)",
    )
    p.add_argument("--username")
    p.add_argument("--password")
    p.add_argument("--ca", help="CA certificates (PEM) for mqtts://")
    p.add_argument("--cert", help="client certificate (PEM)")
    p.add_argument("--key", help="client private key (PEM)")
    p.add_argument(
        "--insecure", action="store_true", default=None, help="TLS without host name check"
    )
    p.add_argument("--spool-dir", help="disk spool folder (default ./bridge-spool)")
    p.add_argument("--spool-max-bytes", type=int, help="spool size limit (default 1 GiB)")
    p.add_argument(
        "--spool-after-ms",
        type=int,
        help="spool once a record waited this long for streamgate (default 2000)",
    )
    p.add_argument(
        "--qos0-queue-max",
        type=int,
        help="QoS 0 messages queued in memory before dropping more (default 10000)",
    )
    p.add_argument("--metrics-listen", metavar="HOST:PORT", help="serve Prometheus /metrics")
    p.add_argument(
        "--status",
        choices=["auto", "on", "off"],
        help="live status line (default auto: when stdout is a terminal)",
    )
    p.add_argument(
        "--producer",
        action="append",
        metavar="NAME=VALUE",
        help="extra librdkafka producer setting",
    )
    p.add_argument("--log-level", default="INFO")


def register(subparsers: Any) -> None:
    """Add `bridge` (with its `mqtt` kind) to a parser's subcommands; `args.run(args)` runs
    it (the CLI plugin protocol: add "bridge.cli" to the plugin list)."""
    bridge = subparsers.add_parser("bridge", help="edge bridges into streamgate (mqtt)")
    kinds = bridge.add_subparsers(dest="bridge_kind", required=True)
    _add_mqtt_parser(kinds)
    bridge.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from bridge.mqtt.config import ConfigError, build_config
    from bridge.mqtt.mqtt_side import ConnectFailed
    from bridge.mqtt.runner import run as run_mqtt

    logging.basicConfig(
        level=str(args.log_level).upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )
    values = {
        k: v
        for k, v in vars(args).items()
        if k not in ("command", "bridge_kind", "log_level", "run")
    }
    try:
        cfg = build_config(values)
        return run_mqtt(cfg)
    except ConfigError as e:
        print(f"streamgate bridge mqtt: error: {e}", file=sys.stderr)
        return 2
    except ConnectFailed as e:
        print(f"streamgate bridge mqtt: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # the spool folder
        print(f"streamgate bridge mqtt: error: {e.filename}: {e.strerror}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bridge")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_mqtt_parser(sub)
    args = parser.parse_args(argv)
    return run(args)
