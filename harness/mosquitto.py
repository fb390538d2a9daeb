"""mosquitto (Debian package) as a subprocess on a free loopback port with its own config.

Never the system service: each instance has a config file, a persistence folder and
optionally a password file (`mosquitto_passwd`) and a TLS listener whose certificates
come from `trustme` (`ca_pem`, `client_cert_pem`, `client_key_pem` for clients).
"""

from __future__ import annotations

import getpass
import shutil
import subprocess
from pathlib import Path

from harness.ports import free_port, port_accepts
from harness.process import ManagedProcess


def unavailable_reason() -> str | None:
    """Why mosquitto cannot run here (None when it can)."""
    if shutil.which("mosquitto") is None and not Path("/usr/sbin/mosquitto").exists():
        return "mosquitto is not installed (make test apt-installs it: apt-get install mosquitto)"
    return None


def _binary() -> str:
    return shutil.which("mosquitto") or "/usr/sbin/mosquitto"


class Mosquitto(ManagedProcess):
    """A broker on `port` (plain MQTT) and, with `tls=True`, `tls_port` (client certs
    accepted but optional). `users` = {name: password} turns anonymous access off.
    `settings` are extra config lines (e.g. {"max_queued_messages": "0"})."""

    name = "mosquitto"

    def __init__(
        self,
        work_dir: Path,
        *,
        users: dict[str, str] | None = None,
        tls: bool = False,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        super().__init__(self.work_dir / "mosquitto.log")
        self.port = free_port()
        self.tls_port = free_port() if tls else None
        self.users = dict(users or {})
        self.settings = {
            # Tests publish bursts: keep every queued QoS 1 message for a stalled subscriber.
            "max_queued_messages": "0",
            "max_inflight_messages": "1000",
            "persistent_client_expiration": "1d",
            **(settings or {}),
        }
        self.ca_pem: Path | None = None
        self.client_cert_pem: Path | None = None
        self.client_key_pem: Path | None = None
        self._write_files()

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    @property
    def tls_url(self) -> str:
        return f"mqtts://localhost:{self.tls_port}"

    def _write_files(self) -> None:
        persist = self.work_dir / "persist"
        persist.mkdir(exist_ok=True)
        lines = [
            # As root, mosquitto drops to user "mosquitto", who cannot read our temp files.
            f"user {getpass.getuser()}",
            "per_listener_settings false",
            "persistence true",
            f"persistence_location {persist}/",
            "log_dest stdout",
            "log_type error",
            "log_type warning",
            "log_type notice",
            "log_type information",
            "connection_messages true",
            f"listener {self.port} 127.0.0.1",
        ]
        if self.tls_port is not None:
            lines += [f"listener {self.tls_port} 127.0.0.1", *self._tls_lines()]
        if self.users:
            pw = self.work_dir / "passwords"
            pw.write_text("")
            for user, password in self.users.items():
                subprocess.run(
                    ["mosquitto_passwd", "-b", str(pw), user, password],
                    check=True,
                    capture_output=True,
                )
            pw.chmod(0o600)
            lines += ["allow_anonymous false", f"password_file {pw}"]
        else:
            lines.append("allow_anonymous true")
        lines += [f"{k} {v}" for k, v in self.settings.items()]
        self.config_path = self.work_dir / "mosquitto.conf"
        self.config_path.write_text("\n".join(lines) + "\n")

    def _tls_lines(self) -> list[str]:
        import trustme

        ca = trustme.CA()
        server = ca.issue_cert("localhost", "127.0.0.1")
        client = ca.issue_cert("bridge-client")
        self.ca_pem = self.work_dir / "ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_pem))
        server_cert = self.work_dir / "server.pem"
        server_key = self.work_dir / "server.key"
        server.cert_chain_pems[0].write_to_path(str(server_cert))
        server.private_key_pem.write_to_path(str(server_key))
        self.client_cert_pem = self.work_dir / "client.pem"
        self.client_key_pem = self.work_dir / "client.key"
        client.cert_chain_pems[0].write_to_path(str(self.client_cert_pem))
        client.private_key_pem.write_to_path(str(self.client_key_pem))
        return [
            f"cafile {self.ca_pem}",
            f"certfile {server_cert}",
            f"keyfile {server_key}",
            "require_certificate false",
        ]

    def command(self) -> list[str]:
        return [_binary(), "-c", str(self.config_path)]

    def ready(self) -> bool:
        return port_accepts(self.port) and (self.tls_port is None or port_accepts(self.tls_port))
