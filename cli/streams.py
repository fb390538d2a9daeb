"""`streamgate streams describe TOPIC`, `streams scale TOPIC ...`, `streams move TOPIC ...`.

They talk to a running gateway's admin HTTP endpoint (`serve --metrics-listen`):
GET /streams/TOPIC, POST /streams/TOPIC/scale and (several nodes; ask the admin endpoint
of the node that owns the segment) POST /streams/TOPIC/move. Exit codes: 0 ok, 1 refused or unknown
topic, 2 no gateway reachable.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any, TextIO
from urllib.parse import quote, unquote, urlsplit, urlunsplit

DEFAULT_ADMIN = "http://127.0.0.1:9095"
_COLUMNS = (
    "EPOCH",
    "SEGMENT",
    "PARTITIONS",
    "STATE",
    "NODE",
    "SIZE-BYTES",
    "RECORDS-IN",
    "KIB/S",
    "EVENTS/S",
)


def register(commands: Any) -> None:
    """Add the `streams` command with its `describe` and `scale` subcommands."""
    default_admin = os.environ.get("STREAMGATE_ADMIN", DEFAULT_ADMIN)
    streams = commands.add_parser("streams", help="describe and scale a topic's segments")
    streams.set_defaults(run=run_streams)
    actions = streams.add_subparsers(dest="streams_command", required=True)
    describe = actions.add_parser("describe", help="epochs and segments of a topic")
    scale = actions.add_parser("scale", help="split or merge segments by hand")
    move = actions.add_parser(
        "move", help="several nodes: hand an open segment over to another node"
    )
    move.add_argument("--segment", type=int, required=True, metavar="SEG", help="segment id")
    move.add_argument("--to-node", type=int, required=True, metavar="N", help="target node id")
    for action in (describe, scale, move):
        action.add_argument("topic")
        action.add_argument(
            "--admin",
            default=default_admin,
            help=f"admin endpoint URL (STREAMGATE_ADMIN, default {DEFAULT_ADMIN}); with SASL "
            "users http://USER:PASSWORD@HOST:PORT or STREAMGATE_ADMIN_USER/_PASSWORD",
        )
    how = scale.add_mutually_exclusive_group(required=True)
    how.add_argument("--split", type=int, metavar="SEG", help="segment id to split")
    how.add_argument(
        "--merge",
        type=lambda v: [int(x) for x in v.split(",")],
        metavar="SEG,SEG",
        help="adjacent open segment ids to merge",
    )
    scale.add_argument("--parts", type=int, default=2, help="successors of a split (default 2)")
    scale.add_argument(
        "--to-node",
        type=int,
        metavar="N",
        help="with --split, several nodes: the last successor goes to node N",
    )


def run_streams(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    url = f"{args.admin.rstrip('/')}/streams/{quote(args.topic, safe='')}"
    try:
        if args.streams_command == "describe":
            status, body = _request(url)
            if status != 200:
                print(f"Error: {body.get('error')}", file=sys.stderr)
                return 1
            print_description(body, out)
            return 0
        if args.streams_command == "move":
            return _move(url, {"segment": args.segment, "to_node": args.to_node}, out)
        if args.to_node is not None:
            if args.split is None:
                print("Error: --to-node goes with --split", file=sys.stderr)
                return 1
            request = {"segment": args.split, "to_node": args.to_node, "parts": args.parts}
            return _move(url, request, out)
        request = (
            {"split": args.split, "parts": args.parts}
            if args.split is not None
            else {"merge": args.merge}
        )
        status, body = _request(url + "/scale", request)
        if status != 200:
            print(f"Error: {body.get('error')}", file=sys.stderr)
            return 1
        successors = ", ".join(
            f"{s['segment_id']} [{s['first_partition']}-{s['last_partition']}]"
            for s in body["successors"]
        )
        print(
            f"{body['kind']}: epoch {body['epoch']}, sealed {body['sealed']}, opened {successors}",
            file=out,
        )
        return 0
    except (urllib.error.URLError, OSError) as exc:
        print(f"Error: cannot reach {_credentials(args.admin)[0]}: {exc}", file=sys.stderr)
        return 2


def _move(url: str, request: dict[str, int], out: TextIO) -> int:
    status, body = _request(url + "/move", request, timeout=120)
    if status != 200:
        print(f"Error: {body.get('error')}", file=sys.stderr)
        return 1
    successors = ", ".join(
        f"{s['segment_id']} [{s['first_partition']}-{s['last_partition']}]"
        for s in body["successors"]
    )
    print(
        f"{body['kind']}: epoch {body['epoch']}, sealed {body['sealed']}, opened {successors}, "
        f"last on node {body['to_node']} (sealed data in tier 2 after {body['uploaded_s']} s, "
        f"committed after {body['committed_s']} s)",
        file=out,
    )
    return 0


def _request(url: str, payload: Any = None, timeout: float = 10) -> tuple[int, dict[str, Any]]:
    data = None if payload is None else json.dumps(payload).encode()
    url, authorization = _credentials(url)
    request = urllib.request.Request(url, data=data, method="GET" if data is None else "POST")
    request.add_header("Content-Type", "application/json")
    if authorization is not None:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _credentials(url: str) -> tuple[str, str | None]:
    """A gateway with SASL users wants HTTP Basic: `http://USER:PASSWORD@host:port` in
    --admin, or STREAMGATE_ADMIN_USER and STREAMGATE_ADMIN_PASSWORD. (URL without them, header)."""
    parts = urlsplit(url)
    user = unquote(parts.username or "") or os.environ.get("STREAMGATE_ADMIN_USER", "")
    password = unquote(parts.password or "") or os.environ.get("STREAMGATE_ADMIN_PASSWORD", "")
    if parts.username is not None:
        netloc = parts.netloc.rpartition("@")[2]
        url = urlunsplit(parts._replace(netloc=netloc))
    if not user:
        return url, None
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return url, f"Basic {token}"


def print_description(body: dict[str, Any], out: TextIO) -> None:
    """The describe table: one row per segment, by epoch then segment id."""
    policy = body["policy"]
    print(
        f"Topic: {body['topic']}  Partitions: {body['partitions']}  Epoch: {body['epoch']}  "
        f"Open segments: {body['open_segments']}  Policy: {policy['policy']} "
        f"(target {policy['target_rate']:g}, factor {policy['scale_factor']}, "
        f"min {policy['min_segments']})",
        file=out,
    )
    rows: list[tuple[str, ...]] = [
        (
            str(s["epoch"]),
            str(s["segment_id"]),
            f"{s['first_partition']}-{s['last_partition']}",
            s["state"],
            "-" if s.get("node") is None else str(s["node"]),
            str(s["size_bytes"]),
            str(s["records_in"]),
            f"{s['rate_kib_per_s']:.1f}",
            f"{s['rate_events_per_s']:.1f}",
        )
        for s in sorted(body["segments"], key=lambda s: (s["epoch"], s["segment_id"]))
    ]
    columns: tuple[str, ...] = _COLUMNS
    if all(s.get("node") is None for s in body["segments"]):  # one node: no NODE column
        at = _COLUMNS.index("NODE")
        columns = columns[:at] + columns[at + 1 :]
        rows = [r[:at] + r[at + 1 :] for r in rows]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    for row in (columns, *rows):
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip(), file=out)
