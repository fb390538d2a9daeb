"""How the source proves who it is to a gateway with SASL users: HTTP Basic (over HTTP or
HTTPS) on every admin request, SASL/PLAIN (over plain TCP or TLS) on the Kafka connection
that reads the tail and offsets by timestamp.

The gateway checks both against the same stored credentials, so one user and password
serve both. The Kafka login is PLAIN unless `saslMechanism` names SCRAM-SHA-256 or -512
(scram.py), which never sends the password itself.
"""

from __future__ import annotations

import base64
import ssl
import time
from dataclasses import dataclass

from kafkaclient.client import KafkaClient, KafkaClientError
from kafkawire.apis import ApiKey

from .errors import StreamgateSourceError
from .scram import ScramClient, ScramError

_HANDSHAKE_V = 1
_AUTHENTICATE_V = 2


@dataclass(frozen=True, slots=True)
class Access:
    user: str | None = None
    password: str | None = None
    admin_https: bool = False  # the admin listener runs HTTPS (`--admin-tls`)
    gateway_tls: bool = False  # the Kafka listener is SSL or SASL_SSL
    ca_file: str | None = None  # trusted for both; None: the system's CAs
    mechanism: str = "PLAIN"  # of the Kafka login: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512

    def __repr__(self) -> str:  # never show the password in a plan or a log
        return f"Access(user={self.user!r}, https={self.admin_https}, tls={self.gateway_tls})"

    def ssl_context(self) -> ssl.SSLContext:
        try:
            return ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise StreamgateSourceError(
                f"option 'sslCaFile': cannot load {self.ca_file!r}: {exc}"
            ) from None

    def admin_url(self, admin: str, path: str) -> str:
        return f"{'https' if self.admin_https else 'http'}://{admin}{path}"

    def admin_headers(self) -> dict[str, str]:
        if self.user is None:
            return {}
        token = base64.b64encode(f"{self.user}:{self.password or ''}".encode()).decode()
        return {"Authorization": f"Basic {token}"}

    def kafka_client(self, gateway: str, timeout_s: float) -> KafkaClient:
        """A connection to the gateway's Kafka listener, logged in with SASL/PLAIN when a
        user is given; StreamgateSourceError naming the option that is wrong. A gateway
        that refuses connections (restarting) is tried again for up to `timeout_s`."""
        context = self.ssl_context() if self.gateway_tls else None
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                client = KafkaClient(
                    gateway, timeout=timeout_s, client_id="streamgate-spark", ssl_context=context
                )
                break
            except KafkaClientError as exc:
                if time.monotonic() > deadline:
                    raise StreamgateSourceError(
                        f"cannot reach the gateway (option 'gateway'): {exc}"
                    ) from None
                time.sleep(0.5)
        if self.user is None:
            return client
        try:
            self._login(client, gateway)
        except BaseException:
            client.close()
            raise
        return client

    def _login(self, client: KafkaClient, gateway: str) -> None:
        user, password = self.user or "", self.password or ""
        try:
            shake = client.request(
                ApiKey.SASL_HANDSHAKE, _HANDSHAKE_V, {"mechanism": self.mechanism}
            )
            if shake.error_code:
                raise StreamgateSourceError(
                    f"the gateway {gateway} does not offer SASL/{self.mechanism} (it offers "
                    f"{', '.join(shake.mechanisms) or 'none'}): option 'saslMechanism'"
                )
            if self.mechanism == "PLAIN":
                self._step(client, gateway, f"\0{user}\0{password}".encode())
                return
            scram = ScramClient(self.mechanism, user, password)
            scram.check(
                self._step(client, gateway, scram.final(self._step(client, gateway, scram.first())))
            )
        except KafkaClientError as exc:
            raise StreamgateSourceError(
                f"SASL login at the gateway {gateway} failed (options 'gateway', 'user', "
                f"'gatewayTls'): {exc}"
            ) from None
        except ScramError as exc:
            raise StreamgateSourceError(
                f"SASL/{self.mechanism} login at the gateway {gateway}: {exc} (options 'user' "
                "and 'password')"
            ) from None

    def _step(self, client: KafkaClient, gateway: str, token: bytes) -> bytes:
        """One SaslAuthenticate round; the server's token back."""
        answer = client.request(ApiKey.SASL_AUTHENTICATE, _AUTHENTICATE_V, {"auth_bytes": token})
        if answer.error_code:
            raise StreamgateSourceError(
                f"the gateway {gateway} refused the login of {self.user!r} (options 'user' "
                f"and 'password'): {answer.error_message or answer.error_code}"
            )
        return bytes(answer.auth_bytes or b"")
