"""`streamgate serve --nodes N`: N gateway nodes on this machine (docs/several-nodes.md).

One supervisor process (no event loop: it only waits on children) starts an embedded
PostgreSQL for the metadata (cluster in `<data-dir>/postgres`, kept across restarts; or the
given `--metadata` database), then N `serve` processes: node i listens on port base+i-1,
keeps its data in `<data-dir>/node-<i>`, and all share one tier 2 (`<data-dir>/tier2`, or
`--tier2`), with `--multi-node true`. Every other serve flag is passed through. A node that
exits (status 75 after a lost lease, a crash, a SIGKILL) is restarted after a backoff; each
line a node logs is prefixed with its id. SIGINT/SIGTERM stops the nodes (SIGTERM, a grace
period, then SIGKILL) and then PostgreSQL.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from cli.embedded_pg import EmbeddedPostgres, EmbeddedPostgresError

log = logging.getLogger("streamgate.supervisor")

LEASE_LOST_EXIT = 75  # core/nodes/membership.py: the node's lease went to a newer incarnation
STOP_GRACE_S = 15.0
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 10.0
HEALTHY_AFTER_S = 30.0  # a node up this long restarts with the first backoff again
# Flags the supervisor sets per node; everything else is passed through unchanged.
OWN_DESTS = {"nodes", "listen", "data_dir", "node_id", "multi_node", "metadata", "tier2"}
PER_NODE_DESTS = {"metrics_listen", "advertised_listener"}  # port + i - 1 for node i


@dataclass
class Node:
    node_id: int
    argv: list[str]
    port: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restart_at: float | None = None
    backoff_s: float = BACKOFF_FIRST_S
    accepting: bool = False
    restarts: int = 0
    threads: list[threading.Thread] = field(default_factory=list)


def _format(value: object) -> str | None:
    """A parsed serve option back to its command-line text (None: leave it out)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple) and len(value) == 2:  # HOST:PORT
        return f"{value[0]}:{value[1]}"
    if isinstance(value, frozenset | set):  # --super-users
        return ";".join(sorted(value))
    return str(value)


def passthrough_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The serve options given (on the command line or by STREAMGATE_* variables, which
    the nodes inherit anyway) that differ from their defaults, minus the supervisor's own."""
    flags: list[str] = []
    for action in parser._actions:
        if not action.option_strings or action.dest in OWN_DESTS | PER_NODE_DESTS:
            continue
        if action.dest == "help":
            continue
        value = getattr(args, action.dest, None)
        if value == action.default:
            continue
        text = _format(value)
        if text is not None:
            flags += [action.option_strings[0], text]
    return flags


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def _describe_exit(code: int) -> str:
    if code == LEASE_LOST_EXIT:
        return "exited with status 75 (lost its lease)"
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


def node_plan(
    parser: argparse.ArgumentParser, args: argparse.Namespace, metadata_url: str
) -> list[Node]:
    host, base = args.listen or ("127.0.0.1", 9092)
    data_dir = Path(args.data_dir).resolve()
    tier2 = args.tier2 or str(data_dir / "tier2")
    common = passthrough_flags(parser, args)
    nodes = []
    for i in range(1, args.nodes + 1):
        argv = [sys.executable, "-m", "cli", "serve", "--nodes", "1", *common]
        argv += ["--listen", f"{host}:{base + i - 1}"]
        argv += ["--data-dir", str(data_dir / f"node-{i}"), "--node-id", str(i)]
        argv += ["--metadata", metadata_url, "--multi-node", "true", "--tier2", tier2]
        for dest in sorted(PER_NODE_DESTS):
            value = getattr(args, dest, None)
            if value is not None:
                flag = "--" + dest.replace("_", "-")
                argv += [flag, f"{value[0]}:{value[1] + i - 1}"]
        nodes.append(Node(i, argv, base + i - 1))
    return nodes


class Supervisor:
    def __init__(self, nodes: list[Node], host: str, postgres: EmbeddedPostgres | None) -> None:
        self.nodes = nodes
        self.host = "127.0.0.1" if host in ("", "0.0.0.0") else host
        self.postgres = postgres
        self.stopping = False
        self._out_lock = threading.Lock()

    def _pump(self, node_id: int, stream: IO[bytes]) -> None:
        prefix = f"node {node_id} | ".encode()
        out = sys.stderr.buffer
        for line in iter(stream.readline, b""):
            with self._out_lock:
                out.write(prefix + line)
                out.flush()
        stream.close()

    def spawn(self, node: Node) -> None:
        node.proc = subprocess.Popen(
            node.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a terminal's Ctrl-C reaches the supervisor only
        )
        node.started = time.monotonic()
        node.restart_at = None
        node.accepting = False
        assert node.proc.stdout is not None
        pump = threading.Thread(
            target=self._pump, args=(node.node_id, node.proc.stdout), daemon=True
        )
        pump.start()
        node.threads = [pump]
        log.info("node %d: started (pid %d, port %d)", node.node_id, node.proc.pid, node.port)

    def step(self) -> None:
        """One round: notice exits, schedule and make restarts, log readiness."""
        now = time.monotonic()
        for node in self.nodes:
            proc = node.proc
            if proc is not None and proc.poll() is not None:
                code = proc.returncode
                node.proc = None
                if now - node.started >= HEALTHY_AFTER_S:
                    node.backoff_s = BACKOFF_FIRST_S
                node.restart_at = now + node.backoff_s
                log.warning(
                    "node %d %s; restarting in %.1f s",
                    node.node_id,
                    _describe_exit(code),
                    node.backoff_s,
                )
                node.backoff_s = min(node.backoff_s * 2, BACKOFF_MAX_S)
            elif proc is None and node.restart_at is not None and now >= node.restart_at:
                node.restarts += 1
                self.spawn(node)
            elif proc is not None and not node.accepting and _accepts(self.host, node.port):
                node.accepting = True
                log.info("node %d: serving on %s:%d", node.node_id, self.host, node.port)

    def run(self) -> int:
        def on_signal(signum: int, _frame: object) -> None:
            if not self.stopping:
                log.info("received %s, stopping the nodes", signal.Signals(signum).name)
            self.stopping = True

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        try:
            for node in self.nodes:
                self.spawn(node)
            while not self.stopping:
                if self.postgres is not None and not self.postgres.alive():
                    log.error("PostgreSQL exited (see %s): stopping", self.postgres.log_path)
                    return 1
                self.step()
                time.sleep(0.2)
            return 0
        finally:
            self.stop_nodes()
            if self.postgres is not None:
                self.postgres.stop()
                log.info("PostgreSQL stopped")

    def stop_nodes(self) -> None:
        running = [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]
        for node in running:
            assert node.proc is not None
            node.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for node in running:
            assert node.proc is not None
            try:
                node.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("node %d: no exit after SIGTERM, sending SIGKILL", node.node_id)
                node.proc.kill()
                node.proc.wait()
            log.info("node %d: stopped (%s)", node.node_id, _describe_exit(node.proc.returncode))
        for node in self.nodes:
            for thread in node.threads:
                thread.join(timeout=2)


def check_args(args: argparse.Namespace) -> None:
    """SystemExit with one line for combinations --nodes cannot honour."""
    if args.nodes < 1:
        raise SystemExit(f"streamgate serve: --nodes must be at least 1, got {args.nodes}")
    if args.listeners or args.advertised_listeners:
        raise SystemExit(
            "streamgate serve: --nodes N takes --listen HOST:PORT (node i gets PORT+i-1), "
            "not --listeners / --advertised-listeners"
        )
    if args.listen is not None and args.listen[1] == 0:
        raise SystemExit("streamgate serve: --nodes N needs a fixed --listen port, not 0")


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    check_args(args)
    data_dir = Path(args.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    postgres = None
    metadata_url = args.metadata
    if not metadata_url:
        try:
            postgres = EmbeddedPostgres(data_dir / "postgres", _free_port())
            postgres.start()
        except EmbeddedPostgresError as exc:
            if postgres is not None:
                postgres.stop()
            raise SystemExit(f"streamgate serve --nodes: {exc}") from None
        metadata_url = postgres.url
        log.info("PostgreSQL on 127.0.0.1:%d (cluster in %s)", postgres.port, postgres.data_dir)
    nodes = node_plan(parser, args, metadata_url)
    host = (args.listen or ("127.0.0.1", 9092))[0]
    os.makedirs(data_dir, exist_ok=True)
    return Supervisor(nodes, host, postgres).run()
