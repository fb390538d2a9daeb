"""The client side of SASL/SCRAM-SHA-256 and -512 (RFC 5802, no channel binding), as Kafka
clients speak it: the client-first message, then the final one with the proof, then a
check of the server's signature, so a gateway that does not know the password is caught."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class ScramError(Exception):
    """The server's answer is malformed or does not prove it knows the password."""


def _saslname(user: str) -> str:
    return user.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    def __init__(self, mechanism: str, user: str, password: str) -> None:
        self.hash = HASHES[mechanism]
        self.password = password.encode()
        self.nonce = base64.b64encode(secrets.token_bytes(18)).decode()
        self.first_bare = f"n={_saslname(user)},r={self.nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self.first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        """The client-final message for the server-first one."""
        text = server_first.decode(errors="replace")
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            nonce, salt, iterations = fields["r"], base64.b64decode(fields["s"]), int(fields["i"])
        except (KeyError, ValueError) as exc:
            raise ScramError(f"malformed server-first message {text!r}") from exc
        if not nonce.startswith(self.nonce):
            raise ScramError("the server's nonce does not extend the client's")
        salted = hashlib.pbkdf2_hmac(self.hash, self.password, salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", self.hash)
        stored_key = hashlib.new(self.hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self.first_bare},{text},{without_proof}".encode()
        signature = hmac.digest(stored_key, auth_message, self.hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.digest(salted, b"Server Key", self.hash)
        self._server_signature = hmac.digest(server_key, auth_message, self.hash)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def check(self, server_final: bytes) -> None:
        text = server_final.decode(errors="replace")
        if not text.startswith("v="):
            raise ScramError(f"the server refused: {text}")
        try:
            given = base64.b64decode(text[2:])
        except ValueError as exc:
            raise ScramError("malformed server-final message") from exc
        if not hmac.compare_digest(given, self._server_signature):
            raise ScramError("the server's signature is wrong: it does not know the password")
