"""Request decoding and response encoding (sans-io).

Bodies are (de)serialised with kio, whose types are generated from Kafka's own message specs.
Handlers answer with plain nested dicts keyed by the spec's field names; `build_entity` turns
them into the kio dataclass of the negotiated version, dropping fields that version lacks and
filling the spec defaults for fields the handler left out.
"""

from __future__ import annotations

import datetime
import io
import struct
import types
import typing
from dataclasses import MISSING, dataclass, fields
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.serial._implicit_defaults import get_implicit_default
from kio.static.primitive import TZAware, i32Timedelta, i64Timedelta

from .apis import SUPPORTED_APIS, ApiKey
from .body_reader import Malformed, Truncated, skip_tags
from .reader import entity_reader

_HEADER_FIXED = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ProtocolError(Exception):
    """The request cannot be understood; the connection must be closed."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    flexible: bool


def _skip_tagged_fields(buf: bytes, pos: int) -> int:
    try:
        return skip_tags(buf, pos)
    except Truncated:
        raise ProtocolError("truncated tagged fields") from None
    except Malformed as exc:
        raise ProtocolError(f"request header: {exc}") from None


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """Return (api_key, api_version, correlation_id) of a frame, or raise ProtocolError."""
    if len(frame) < _HEADER_FIXED.size:
        raise ProtocolError("frame shorter than a request header")
    return _HEADER_FIXED.unpack_from(frame, 0)


def decode_header(frame: bytes) -> tuple[RequestHeader, int]:
    """Parse the request header of a supported API; return it and the body's position.

    Header v1 (api key, version, correlation id, nullable client id) for classic versions,
    header v2 (the same plus tagged fields) for flexible ones. ApiVersions requests of an
    unknown version are parsed as v0 so they can be answered with UNSUPPORTED_VERSION.
    """
    api_key, api_version, correlation_id = peek_header(frame)
    support = SUPPORTED_APIS.get(api_key)
    if support is None:
        raise ProtocolError(f"unsupported API key {api_key}")
    pos = _HEADER_FIXED.size
    if len(frame) < pos + 2:
        raise ProtocolError("truncated client id")
    (client_id_len,) = _I16.unpack_from(frame, pos)
    pos += 2
    client_id = None
    if client_id_len >= 0:
        if len(frame) < pos + client_id_len:
            raise ProtocolError("truncated client id")
        client_id = frame[pos : pos + client_id_len].decode("utf-8", errors="replace")
        pos += client_id_len
    flexible = support.accepts(api_version) and support.is_flexible(api_version)
    if flexible:
        pos = _skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, flexible), pos


@cache
def _reader(api_key: int, version: int) -> Any:
    return entity_reader(load_request_schema(api_key, version))


def decode_body(header: RequestHeader, frame: bytes, pos: int) -> Any:
    """Decode a request body into its kio dataclass; ProtocolError if malformed."""
    try:
        body, _size = _reader(header.api_key, header.api_version)(memoryview(frame), pos)
    except Exception as exc:  # BufferUnderflow, DecodeError, value errors of kio's types
        raise ProtocolError(f"malformed {ApiKey(header.api_key).name} body: {exc}") from exc
    return body


# --- responses -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _FieldSpec:
    name: str
    convert: Any
    default: Any


def unwrap_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _epoch_ms_to_datetime(ms: int) -> datetime.datetime | None:
    if ms < 0:  # -1 means "no time" in Kafka; kio spells that None
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def _converter(tp: Any) -> Any:
    tp = unwrap_optional(tp)
    if tp is TZAware:
        return _epoch_ms_to_datetime
    if typing.get_origin(tp) is tuple:
        (item,) = typing.get_args(tp)[:1]
        if hasattr(item, "__dataclass_fields__"):
            return lambda values: (
                None if values is None else tuple(build_entity(item, v) for v in values)
            )
        return lambda values: None if values is None else tuple(values)
    if hasattr(tp, "__dataclass_fields__"):
        return lambda value: build_entity(tp, value)
    if tp is ErrorCode:
        return ErrorCode
    if isinstance(tp, type) and issubclass(tp, i32Timedelta | i64Timedelta):
        return lambda ms: datetime.timedelta(milliseconds=ms)
    return None


@cache
def _field_specs(cls: type) -> tuple[_FieldSpec, ...]:
    hints = typing.get_type_hints(cls)
    specs = []
    for f in fields(cls):
        tp = hints[f.name]
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:
            inner = unwrap_optional(tp)
            if inner is not tp:
                default = None
            elif typing.get_origin(inner) is tuple:
                default = ()
            elif inner is ErrorCode:
                default = ErrorCode.none
            elif isinstance(inner, type) and issubclass(inner, i32Timedelta | i64Timedelta):
                default = datetime.timedelta(0)
            elif hasattr(inner, "__dataclass_fields__"):
                default = MISSING  # nested struct: built from {} on demand
            elif inner is bool:  # kio has no implicit default for bool
                default = False
            else:
                try:
                    default = get_implicit_default(inner)
                except NotImplementedError:  # kio has none for `records` (ShareFetch)
                    default = b""
        specs.append(_FieldSpec(f.name, _converter(tp), default))
    return tuple(specs)


def build_entity(cls: type, data: dict[str, Any]) -> Any:
    """Build kio entity `cls` from a dict of spec field names (extra keys are ignored)."""
    kwargs = {}
    for spec in _field_specs(cls):
        if spec.name in data:
            value = data[spec.name]
            kwargs[spec.name] = value if spec.convert is None else spec.convert(value)
        elif spec.default is MISSING:
            kwargs[spec.name] = spec.convert({})
        else:
            kwargs[spec.name] = spec.default
    return cls(**kwargs)


@cache
def _writer(api_key: int, version: int) -> tuple[type, Any]:
    cls = load_response_schema(api_key, version)
    return cls, entity_writer(cls)


def response_header(correlation_id: int, flexible: bool) -> bytes:
    """Response header v0 (correlation id), or v1 (plus empty tagged fields) when flexible."""
    return _I32.pack(correlation_id) + (b"\x00" if flexible else b"")


def encode_response(header: RequestHeader, data: dict[str, Any]) -> bytes:
    """Encode a response (header + body, without the size prefix) for the request's version."""
    cls, write = _writer(header.api_key, header.api_version)
    buffer = io.BytesIO()
    # ApiVersions answers always use response header v0 so any client can read them.
    flexible_header = header.flexible and header.api_key != ApiKey.API_VERSIONS
    buffer.write(response_header(header.correlation_id, flexible_header))
    write(buffer, build_entity(cls, data))
    return buffer.getvalue()
