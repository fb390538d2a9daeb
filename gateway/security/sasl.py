"""The server side of SASL: one `SaslSession` per connection on a SASL listener.

Kafka's exchange: SaslHandshake names the mechanism; after a v0 handshake the client sends
raw size-prefixed tokens (no request header), after v1 it wraps each token in a
SaslAuthenticate request. Until the exchange succeeds only ApiVersions, SaslHandshake and
SaslAuthenticate are served (the server enforces that). A failure answers with Kafka's
error (v1 framing) or nothing (v0), then the connection is closed.

PLAIN is checked against the stored SCRAM credentials (derive with the stored salt and
iterations, compare); SCRAM-SHA-256/512 is RFC 5802 with hashlib/hmac (scramp's exact
nonce check would refuse librdkafka <= 2.0, which Kafka accepts). Unknown users get
a made-up credential, so they fail exactly like a wrong password and reveal nothing.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass

import trio

from core.credentials import (
    MECHANISMS,
    MIN_ITERATIONS,
    Credentials,
    ScramCredential,
    password_matches,
)

# Kafka error codes of the SASL exchange.
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58

ALL_MECHANISMS = ("PLAIN", *MECHANISMS)
# PBKDF2 for PLAIN is CPU work: a few threads, so logins never stall the event loop.
_DERIVE_LIMITER = trio.CapacityLimiter(2)
# Made-up credentials for unknown users are derived from this, stable for the process.
_FAKE_SECRET = os.urandom(32)


class AuthenticationFailed(Exception):
    """The exchange failed; the message is what the client is told (nothing about users)."""


class SaslStateError(Exception):
    """A request out of order (ILLEGAL_SASL_STATE)."""


class State(enum.Enum):
    HANDSHAKE = "expecting SaslHandshake"
    RAW_TOKENS = "expecting raw SASL tokens (handshake v0)"
    AUTHENTICATE = "expecting SaslAuthenticate"
    DONE = "authenticated"


def parse_mechanisms(spec: str) -> tuple[str, ...]:
    """`PLAIN,SCRAM-SHA-256` -> the enabled mechanisms, checked."""
    names = tuple(dict.fromkeys(m.strip().upper() for m in spec.split(",") if m.strip()))
    unknown = [m for m in names if m not in ALL_MECHANISMS]
    if unknown or not names:
        raise ValueError(
            f"unknown SASL mechanism {', '.join(unknown) or '(none)'}: "
            f"expected some of {', '.join(ALL_MECHANISMS)}"
        )
    return names


@dataclass(slots=True)
class _Step:
    response: bytes
    done: bool


class _Plain:
    failure = "Authentication failed: Invalid username or password"

    def __init__(self, credentials: Credentials | None) -> None:
        self.credentials = credentials
        self.user = ""

    async def step(self, token: bytes) -> _Step:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed(self.failure) from None
        if authzid and authzid != user:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        found = None
        if self.credentials is not None and user:
            for mechanism in MECHANISMS:
                credential = await self.credentials.get(user, mechanism)
                if credential is not None:
                    found = (mechanism, credential)
                    break
        # An unknown user costs the same derivation as a known one.
        mechanism, credential = found or ("SCRAM-SHA-256", _fake_credential(user))
        remembered = _PLAIN_VERIFIED.get(user)
        ok = (
            found is not None
            and remembered is not None
            and hmac.compare_digest(remembered, _verified_key(credential, password))
        )
        if not ok:
            ok = await trio.to_thread.run_sync(
                password_matches, mechanism, credential, password, limiter=_DERIVE_LIMITER
            )
        if not ok or found is None:
            raise AuthenticationFailed(self.failure)
        _remember_plain(user, _verified_key(credential, password))
        self.user = user
        return _Step(b"", done=True)


async def check_password(credentials: Credentials | None, user: str, password: str) -> bool:
    """Whether `user` and `password` pass exactly as a SASL/PLAIN login would (the admin
    HTTP endpoint's Basic authentication)."""
    try:
        await _Plain(credentials).step(f"\x00{user}\x00{password}".encode())
    except AuthenticationFailed:
        return False
    return True


# PLAIN logins that passed PBKDF2, so reconnecting clients skip it: user -> a keyed digest
# of (stored key, password), in memory only. A changed credential no longer matches.
_PLAIN_VERIFIED: dict[str, bytes] = {}
_PLAIN_VERIFIED_MAX = 4096


def _verified_key(credential: ScramCredential, password: str) -> bytes:
    return hmac.digest(_FAKE_SECRET, credential.stored_key + password.encode(), "sha256")


def _remember_plain(user: str, key: bytes) -> None:
    if len(_PLAIN_VERIFIED) >= _PLAIN_VERIFIED_MAX:
        _PLAIN_VERIFIED.clear()
    _PLAIN_VERIFIED[user] = key


class _Scram:
    """RFC 5802 server side. Like Kafka's ScramSaslServer, the client-final nonce only has to
    end with the server's nonce: librdkafka up to 2.0 repeats its own nonce in front."""

    def __init__(self, mechanism: str, credentials: Credentials | None) -> None:
        self.mechanism = mechanism
        self.hash = MECHANISMS[mechanism][1]
        self.credentials = credentials
        self.failure = (
            "Authentication failed during authentication due to invalid credentials "
            f"with SASL mechanism {mechanism}"
        )
        self.user = ""
        self._credential: ScramCredential | None = None
        self._known = False
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    async def step(self, token: bytes) -> _Step:
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed(self.failure) from None
        if self._credential is None:
            return await self._first(message)
        return self._final(message)

    async def _first(self, message: str) -> _Step:
        # gs2 header: no channel binding ("n"), optional authzid equal to the user.
        gs2, _, bare = message.partition(",")
        authzid, _, bare = bare.partition(",")
        fields = _attributes(bare)
        user = _unescape(fields.get("n", ""))
        nonce = fields.get("r", "")
        if gs2 != "n" or (authzid and authzid != f"a={fields.get('n', '')}"):
            raise AuthenticationFailed(self.failure)
        if not user or not nonce or "m" in fields:
            raise AuthenticationFailed(self.failure)
        credential = None
        if self.credentials is not None:
            credential = await self.credentials.get(user, self.mechanism)
        self._known = credential is not None
        self._credential = credential or _fake_credential(user)
        self.user = user
        self._client_first_bare = bare
        self._nonce = nonce + secrets.token_hex(16)
        salt = base64.b64encode(self._credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={self._credential.iterations}"
        return _Step(self._server_first.encode(), done=False)

    def _final(self, message: str) -> _Step:
        assert self._credential is not None
        without_proof, sep, proof_part = message.rpartition(",p=")
        fields = _attributes(without_proof)
        if not sep or not fields.get("r", "").endswith(self._nonce):
            raise AuthenticationFailed(self.failure)
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise AuthenticationFailed(self.failure) from None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(self._credential.stored_key, auth_message, self.hash)
        if len(proof) != len(signature):
            raise AuthenticationFailed(self.failure)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        computed = hashlib.new(self.hash, client_key).digest()
        if not hmac.compare_digest(computed, self._credential.stored_key) or not self._known:
            raise AuthenticationFailed(self.failure)
        server_signature = hmac.digest(self._credential.server_key, auth_message, self.hash)
        return _Step(b"v=" + base64.b64encode(server_signature), done=True)


def _attributes(message: str) -> dict[str, str]:
    """`a=1,b=2` -> {"a": "1", "b": "2"} (values may contain "=")."""
    result: dict[str, str] = {}
    for item in message.split(","):
        key, sep, value = item.partition("=")
        if sep and len(key) == 1:
            result.setdefault(key, value)
    return result


def _unescape(saslname: str) -> str:
    return saslname.replace("=2C", ",").replace("=3D", "=")


def _fake_credential(user: str) -> ScramCredential:
    """A stable credential no password matches, for users that do not exist."""
    seed = hmac.digest(_FAKE_SECRET, user.encode(), "sha256")
    return ScramCredential(seed[:24], MIN_ITERATIONS, hashlib.sha256(seed).digest(), os.urandom(32))


class SaslSession:
    """One connection's SASL exchange; `principal` is set once it succeeds."""

    def __init__(self, mechanisms: tuple[str, ...], credentials: Credentials | None) -> None:
        self.mechanisms = mechanisms
        self.credentials = credentials
        self.state = State.HANDSHAKE
        self.mechanism = ""
        self.principal: str | None = None
        self._exchange: _Plain | _Scram | None = None

    @property
    def authenticated(self) -> bool:
        return self.state is State.DONE

    def handshake(self, version: int, mechanism: str) -> dict[str, object]:
        """Answer SaslHandshake; raises SaslStateError out of order. The caller closes
        the connection after any error code."""
        if self.state is not State.HANDSHAKE:
            raise SaslStateError(f"SaslHandshake while {self.state.value}")
        if mechanism not in self.mechanisms:
            return {"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": self.mechanisms}
        self.mechanism = mechanism
        self._exchange = (
            _Plain(self.credentials)
            if mechanism == "PLAIN"
            else _Scram(mechanism, self.credentials)
        )
        self.state = State.RAW_TOKENS if version == 0 else State.AUTHENTICATE
        return {"error_code": 0, "mechanisms": self.mechanisms}

    async def step(self, token: bytes) -> bytes:
        """Feed one client token; the server's token back. Raises AuthenticationFailed."""
        if self.state not in (State.RAW_TOKENS, State.AUTHENTICATE) or self._exchange is None:
            raise SaslStateError(f"SASL token while {self.state.value}")
        result = await self._exchange.step(token)
        if result.done:
            self.state = State.DONE
            self.principal = f"User:{self._exchange.user}"
        return result.response
