"""The security tests' gateway: TLS, SASL and mTLS listeners with fresh certificates, and a
producer logging in with each SASL mechanism."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Producer

from harness.gateway import Gateway
from harness.security import SecureListeners, add_scram_user, make_certs


@contextmanager
def secure_gateway(
    base: Path, user: str | None = None, password: str = ""
) -> Iterator[tuple[Gateway, SecureListeners]]:
    """A gateway in `base` with every secure listener (certificates in base/certs); with a
    `user`, a SCRAM user of that name and password is added once it runs."""
    listeners = SecureListeners(make_certs(base / "certs"))
    gw = Gateway(base / "data", base / "server.log", listeners.gateway_args())
    gw.start_fresh()
    try:
        if user is not None:
            add_scram_user(gw.bootstrap, user, password)
        yield gw, listeners
    finally:
        gw.close()


def produce_with_each_mechanism(
    port: int, user: str, password: str, topic: str, mechanisms: Iterable[str]
) -> None:
    """One record to `topic` over SASL_PLAINTEXT on 127.0.0.1:`port`, logging in with each
    mechanism in turn; fails on the first that cannot deliver."""
    for mechanism in mechanisms:
        producer = Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{port}",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": mechanism,
                "sasl.username": user,
                "sasl.password": password,
            }
        )
        producer.produce(topic, b"x")
        assert producer.flush(30) == 0, mechanism
