"""A request's error response, built from Kafka's message schema (as Kafka's own
`AbstractRequest.getErrorResponse`): every error code of the response gets the error,
`error_message` the message where the version has one, the items of the request are
answered item by item where a pairing says which response collection answers which request
collection, and the other fields get Kafka's "nothing" (-1 for numbers without a spec
default, empty or null for the rest, the spec's default where it has one).

The answer is a dict of spec field names, as handlers answer (`codec.build_entity` turns it
into the response of the negotiated version).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from functools import cache
from typing import Any

from kio.index import load_response_schema
from kio.static.primitive import TZAware

from .codec import unwrap_optional

# Response fields that name an item: copied from the request item of the same field name.
KEYS = (
    "name",
    "topic_id",
    "index",
    "partition_index",
    "group_id",
    "transactional_id",
    "resource_type",
    "resource_name",
    "entity_type",
    "entity_name",
)


@dataclass(frozen=True)
class Items:
    """Which response collection answers which request items: each item of the request
    collections `request` (attribute paths; a dotted one is flattened, "dirs.topics"; a
    missing one is skipped) gets an item of `response`, named by the KEYS it shares with
    the request item, or by `keys` (response field -> request attribute); `nested` pairs
    the items' own collections (e.g. a topic's partitions); `values`: fields every answered
    item gets as they are. A request item that is a plain value (a group id, a partition
    index) fills the response item's first key field."""

    request: tuple[str, ...]
    response: str
    nested: Items | None = None
    keys: Mapping[str, str] = field(default_factory=dict)
    values: Mapping[str, Any] = field(default_factory=dict)


_CODE, _MESSAGE, _ITEMS, _NOTHING, _EPOCH, _DEFAULT = range(6)


@cache
def _shape(cls: type) -> tuple[tuple[str, int, Any], ...]:
    """(field name, what an error response puts there, item class of a collection)."""
    hints = typing.get_type_hints(cls)
    shape = []
    for f in fields(cls):
        tp = hints[f.name]
        inner = unwrap_optional(tp)
        item = typing.get_args(inner)[0] if typing.get_origin(inner) is tuple else None
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        if f.name == "error_code" or f.name.endswith("_error_code"):
            kind = _CODE
        elif f.name == "error_message":
            kind = _MESSAGE
        elif item is not None and dataclasses.is_dataclass(item):
            kind = _ITEMS
        elif has_default or inner is not tp or f.name.startswith("throttle"):
            kind = _DEFAULT
        elif inner is TZAware:
            kind = _EPOCH  # kio's timestamps cannot be -1
        elif isinstance(inner, type) and issubclass(inner, int) and inner is not bool:
            kind = _NOTHING
        else:
            kind = _DEFAULT
        shape.append((f.name, kind, item))
    return tuple(shape)


def collect(source: Any, paths: Iterable[str]) -> list[Any]:
    """The request items at `paths` (see `Items.request`), in order."""
    found: list[Any] = []
    for path in paths:
        level = [source]
        for attr in path.split("."):
            level = [item for parent in level for item in (getattr(parent, attr, None) or ())]
        found.extend(level)
    return found


def _fields(cls: type, code: int, message: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, kind, _item in _shape(cls):
        if kind == _CODE:
            out[name] = code
        elif kind == _MESSAGE:
            out[name] = message
        elif kind == _NOTHING:
            out[name] = -1
        elif kind == _EPOCH:
            out[name] = 0
    return out


def _item(cls: type, source: Any, code: int, message: str | None, pairing: Items) -> dict:
    out = _fields(cls, code, message) | dict(pairing.values)
    names = [name for name, _kind, _item in _shape(cls)]
    if not dataclasses.is_dataclass(source):
        key = next(n for n in names if n in pairing.keys or n in KEYS)
        out[key] = source
    else:
        for name in names:
            if name in pairing.keys:
                out[name] = getattr(source, pairing.keys[name])
            elif name in KEYS and hasattr(source, name):
                out[name] = getattr(source, name)
    nested = pairing.nested
    if nested is not None:
        item_cls = _item_class(cls, nested.response)
        out[nested.response] = [
            _item(item_cls, s, code, message, nested) for s in collect(source, nested.request)
        ]
    return out


def _item_class(cls: type, collection: str) -> type:
    return next(item for name, kind, item in _shape(cls) if name == collection and kind == _ITEMS)


def error_items(
    api_key: int,
    version: int,
    pairing: Items,
    sources: Iterable[Any],
    code: int,
    message: str | None = None,
) -> list[dict[str, Any]]:
    """The response items of `pairing.response` answering the request items `sources`."""
    cls = _item_class(load_response_schema(api_key, version), pairing.response)
    return [_item(cls, source, code, message, pairing) for source in sources]


def error_response(
    api_key: int,
    version: int,
    body: Any,
    code: int,
    message: str | None = None,
    pairing: Items | None = None,
) -> dict[str, Any]:
    """The whole response refusing `body` with `code`; with `pairing`, every request item
    answered with it too."""
    out = _fields(load_response_schema(api_key, version), code, message)
    if pairing is not None:
        items = collect(body, pairing.request)
        out[pairing.response] = error_items(api_key, version, pairing, items, code, message)
    return out
