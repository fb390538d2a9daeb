"""Test helpers for tier-2 storage: a real S3 API server (moto in server mode) and a TCP
proxy that can simulate an outage of it.

``MotoServer`` runs ``python -m moto.server`` as a subprocess on a free loopback port; its
``env()`` gives the AWS variables a client (an in-process boto3 client or a gateway
subprocess) needs to talk to it. Moto keeps everything in memory: a restart loses all data.

``OutageProxy`` relays TCP connections from its own loopback port to a target. ``down()``
closes the listening socket (new connections are refused) and resets every open connection;
``up()`` listens on the same port again. It runs on plain threads, so it works the same from
trio tests and from ordinary pytest code.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from helpers import free_port

MOTO_START_TIMEOUT = 60.0
MOTO_STOP_TIMEOUT = 10.0
_RECV_BYTES = 64 * 1024
_POLL = 0.05

AWS_TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class MotoServerError(RuntimeError):
    pass


def _http_answers(url: str) -> bool:
    """True once anything answers HTTP at ``url`` (any status counts)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=1.0) as resp:
            resp.read()
        return True
    except urllib.error.HTTPError:
        return True
    except (OSError, urllib.error.URLError):
        return False


class MotoServer:
    """``python -m moto.server`` on ``127.0.0.1:<free port>``, logging to ``log_dir``."""

    def __init__(self, log_dir: Path | str, env: dict[str, str] | None = None) -> None:
        self.log_dir = Path(log_dir)
        self.log_path = self.log_dir / "moto-server.log"
        base = dict(os.environ if env is None else env)
        base.update(AWS_TEST_ENV)
        base["PYTHONUNBUFFERED"] = "1"
        self._proc_env = base
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_seconds: float | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @staticmethod
    def env() -> dict[str, str]:
        """The AWS variables a client of this server needs (credentials and region)."""
        return dict(AWS_TEST_ENV)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]

    def log_tail(self, chars: int = 4000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return text if len(text) <= chars else "...\n" + text[-chars:]

    def start(self, timeout: float = MOTO_START_TIMEOUT) -> None:
        if self.proc is not None and self.proc.poll() is None:
            raise MotoServerError("moto server already running")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        last_error = ""
        for _attempt in range(3):  # the free port may be taken before moto binds it
            self.port = free_port()
            began = time.monotonic()
            with self.log_path.open("ab") as log:
                log.write(f"\n===== starting: {' '.join(self.command())}\n".encode())
                log.flush()
                self.proc = subprocess.Popen(
                    self.command(),
                    env=self._proc_env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                )
            deadline = began + timeout
            while time.monotonic() < deadline:
                code = self.proc.poll()
                if code is not None:
                    last_error = f"moto server exited with code {code}; log:\n{self.log_tail()}"
                    break
                if _http_answers(self.endpoint + "/moto-api/"):
                    self.startup_seconds = time.monotonic() - began
                    # Should the caller die without stop(), don't leave the server running.
                    atexit.register(self.stop)
                    return
                time.sleep(0.1)
            else:
                self._kill()
                raise MotoServerError(
                    f"moto server not answering on {self.endpoint} within {timeout}s; "
                    f"log:\n{self.log_tail()}"
                )
            if "Address already in use" not in self.log_tail():
                break
        raise MotoServerError(last_error)

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=MOTO_STOP_TIMEOUT)

    def stop(self, timeout: float = MOTO_STOP_TIMEOUT) -> None:
        """Terminate (SIGTERM), then kill if it has not exited within ``timeout``."""
        atexit.unregister(self.stop)
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill()

    def __enter__(self) -> MotoServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _abort(sock: socket.socket) -> None:
    """Close ``sock`` with an RST instead of a FIN."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class _Relay:
    """One proxied connection; its thread owns both sockets and closes them."""

    def __init__(self, client: socket.socket, target: tuple[str, int]) -> None:
        self.client = client
        self.target = target
        self.reset = threading.Event()
        self.thread = threading.Thread(target=self._run, name="outage-proxy-relay", daemon=True)

    def _run(self) -> None:
        client = self.client
        try:
            upstream = socket.create_connection(self.target, timeout=5.0)
        except OSError:
            _abort(client)
            return
        client.settimeout(5.0)
        upstream.settimeout(5.0)
        peer = {client: upstream, upstream: client}
        open_reads = {client, upstream}
        try:
            while open_reads and not self.reset.is_set():
                readable, _, _ = select.select(list(open_reads), [], [], _POLL)
                for sock in readable:
                    data = sock.recv(_RECV_BYTES)
                    if data:
                        peer[sock].sendall(data)
                    else:
                        open_reads.discard(sock)
                        with contextlib.suppress(OSError):
                            peer[sock].shutdown(socket.SHUT_WR)
        except OSError:
            self.reset.set()
        if self.reset.is_set():
            _abort(client)
            _abort(upstream)
        else:
            client.close()
            upstream.close()


class OutageProxy:
    """A loopback TCP proxy to ``target`` that can be switched down (refuse + reset) and up."""

    def __init__(self, target: tuple[str, int], port: int | None = None) -> None:
        self.target = target
        self.port = port or free_port()
        self.connections_total = 0
        self._lock = threading.Lock()
        self._relays: set[_Relay] = set()
        self._listener: socket.socket | None = None
        self._stop_accepting = threading.Event()
        self._acceptor: threading.Thread | None = None
        self._closed = False
        self.up()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def is_up(self) -> bool:
        return self._listener is not None

    def up(self) -> None:
        """Listen (again) on the same port."""
        if self._closed:
            raise RuntimeError("proxy closed")
        if self._listener is not None:
            return
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        deadline = time.monotonic() + 5.0
        while True:
            try:
                listener.bind(("127.0.0.1", self.port))
                break
            except OSError:
                if time.monotonic() > deadline:
                    listener.close()
                    raise
                time.sleep(0.05)
        listener.listen(128)
        self._listener = listener
        self._stop_accepting = threading.Event()
        self._acceptor = threading.Thread(
            target=self._accept_loop,
            args=(listener, self._stop_accepting),
            name="outage-proxy-accept",
            daemon=True,
        )
        self._acceptor.start()

    def _accept_loop(self, listener: socket.socket, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                readable, _, _ = select.select([listener], [], [], _POLL)
                if not readable:
                    continue
                client, _addr = listener.accept()
            except OSError:
                return
            relay = _Relay(client, self.target)
            with self._lock:
                self._relays = {r for r in self._relays if r.thread.is_alive()}
                self._relays.add(relay)
                self.connections_total += 1
            relay.thread.start()

    def down(self) -> None:
        """Refuse new connections and reset every open one; returns when both are done."""
        if self._listener is not None:
            self._stop_accepting.set()
            if self._acceptor is not None:
                self._acceptor.join(timeout=5.0)
            # Closing the listener resets connections still waiting in its backlog too.
            _abort(self._listener)
            self._listener = None
            self._acceptor = None
        with self._lock:
            relays = list(self._relays)
            self._relays.clear()
        for relay in relays:
            relay.reset.set()
        for relay in relays:
            if relay.thread.ident is not None:
                relay.thread.join(timeout=10.0)

    def close(self) -> None:
        self.down()
        self._closed = True

    def __enter__(self) -> OutageProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
