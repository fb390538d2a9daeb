"""The driver's view of a topic: its chunk map from the gateway's admin listener
(`GET /streams/TOPIC/chunks`, admin/chunks.py) and its topic list (`GET /streams`)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from .access import Access
from .errors import StreamgateSourceError, UnreachableError


@dataclass(frozen=True, slots=True)
class SliceRef:
    """One partition's bytes in one chunk object: offsets [first, last], max timestamp."""

    key: str
    first: int
    last: int
    byte_start: int
    byte_length: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class PartitionMap:
    partition: int
    log_start: int
    high_watermark: int
    last_stable_offset: int
    tier2_end: int  # first offset not in tier 2: from here on, the Kafka protocol
    slices: tuple[SliceRef, ...]
    aborted: tuple[tuple[int, int, int], ...]  # (producer id, first offset, marker offset)
    # the admin node leads it; if not (several nodes), the watermarks are its tier-2 end
    # and the leader knows the rest
    led_here: bool = True


@dataclass(frozen=True, slots=True)
class TopicMap:
    topic: str
    tier2: dict[str, Any]
    partitions: tuple[PartitionMap, ...]


def _get(admin: str, path: str, timeout_s: float, access: Access) -> Any:
    url = access.admin_url(admin, path)
    request = urllib.request.Request(url, headers=access.admin_headers())
    context = access.ssl_context() if access.admin_https else None
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("error", "")
        except (ValueError, AttributeError):
            detail = ""
        if exc.code == 404 and path.endswith("/chunks") and "no route" in detail:
            raise StreamgateSourceError(
                f"the gateway at {admin} (option 'admin') has no chunk map route: it is "
                "older than this source"
            ) from None
        if exc.code == 401:
            raise StreamgateSourceError(
                f"the gateway's admin listener at {admin} wants credentials: {detail} "
                "(options 'user' and 'password': a SASL user of the gateway)"
            ) from None
        if exc.code == 403:
            raise StreamgateSourceError(
                f"the gateway's admin listener at {admin} refused {path}: {detail} (option "
                "'user' needs READ on the topic)"
            ) from None
        raise StreamgateSourceError(
            f"GET {url} (option 'admin'): HTTP {exc.code} {detail}".rstrip()
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UnreachableError(
            f"cannot reach the gateway's admin listener at {admin} (option 'admin'): {reason}"
        ) from None


def list_topics(admin: str, timeout_s: float, access: Access) -> list[str]:
    return list(_get(admin, "/streams", timeout_s, access)["topics"])


def fetch_chunk_map(admin: str, topic: str, timeout_s: float, access: Access) -> TopicMap:
    """The topic's chunk map; StreamgateSourceError naming the topic if it does not exist."""
    path = f"/streams/{urllib.parse.quote(topic, safe='')}/chunks"
    try:
        doc = _get(admin, path, timeout_s, access)
    except StreamgateSourceError as exc:
        if "HTTP 404" in str(exc):
            raise StreamgateSourceError(
                f"topic {topic!r} does not exist on the gateway at {admin}"
            ) from None
        raise
    return TopicMap(
        topic=doc["topic"],
        tier2=doc["tier2"],
        partitions=tuple(
            PartitionMap(
                partition=p["partition"],
                log_start=p["log_start"],
                high_watermark=p["high_watermark"],
                last_stable_offset=p["last_stable_offset"],
                tier2_end=p["tier2_end"],
                slices=tuple(SliceRef(*s) for s in p["slices"]),
                aborted=tuple((a[0], a[1], a[2]) for a in p["aborted"]),
                led_here=bool(p.get("leader", True)),
            )
            for p in doc["partitions"]
        ),
    )
