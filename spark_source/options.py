"""The source's options, checked once on the driver (`parse_options`).

Names and meanings follow Spark's Kafka source where they make sense; offsets in JSON use
its conventions (-2 earliest, -1 latest).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .access import Access
from .errors import StreamgateSourceError

EARLIEST, LATEST = -2, -1
DEFAULT_MIN_PARTITION_BYTES = 64 << 20
# offsets per (topic, partition); a topic-level string "earliest"/"latest" is kept as such
OffsetSpec = int | dict[str, dict[int, int]]

_KNOWN = {
    "gateway",
    "admin",
    "metadata",
    "topic",
    "subscribe",
    "subscribepattern",
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "endingtimestamp",
    "includeheaders",
    "isolationlevel",
    "minpartitionbytes",
    "timeoutms",
    "tier2.folder",
    "s3.endpoint",
    "s3.bucket",
    "s3.prefix",
    "s3.region",
    "s3.accesskeyid",
    "s3.secretaccesskey",
    "maxrecordspertrigger",
    "path",
    "user",
    "password",
    "gatewaytls",
    "sslcafile",
    "failondataloss",
    "saslmechanism",
}


@dataclass(frozen=True, slots=True)
class ReadOptions:
    gateway: str  # the Kafka listener, HOST:PORT (the tail not yet in tier 2)
    admin: str  # the admin HTTP listener, HOST:PORT (the chunk map); "" with `metadata`
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    starting: OffsetSpec = EARLIEST
    starting_given: bool = False  # streams start at the latest offsets unless told
    ending: OffsetSpec = LATEST
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    include_headers: bool = False
    read_committed: bool = False
    # each Spark task of a Python data source costs a fixed start-up (a worker round trip,
    # the reader unpickled): fewer, larger tasks read faster per core
    min_partition_bytes: int = DEFAULT_MIN_PARTITION_BYTES
    timeout_s: float = 30.0
    tier2_overrides: dict[str, str] = field(default_factory=dict)
    max_records_per_trigger: int | None = None
    metadata: str | None = None  # the metadata store's SQLite file: plan without the gateway
    access: Access = field(default_factory=Access)  # credentials and TLS for both listeners
    fail_on_data_loss: bool = True  # offsets asked for below the log start: an error


def _host_port(name: str, value: str | None) -> str:
    if not value:
        raise StreamgateSourceError(f"option {name!r} is required (HOST:PORT)")
    bare = value.removeprefix("http://").removeprefix("https://").rstrip("/")
    host, _, port = bare.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise StreamgateSourceError(f"option {name!r}: expected HOST:PORT, got {value!r}")
    return f"{host}:{port}"


def _int(name: str, value: str, minimum: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise StreamgateSourceError(
            f"option {name!r}: expected an integer, got {value!r}"
        ) from None
    if number < minimum:
        raise StreamgateSourceError(f"option {name!r}: must be at least {minimum}, got {number}")
    return number


def _bool(name: str, value: str) -> bool:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise StreamgateSourceError(f"option {name!r}: expected true or false, got {value!r}")


def _offsets(name: str, value: str | None, default: int, allowed: tuple[int, ...]) -> OffsetSpec:
    if value is None:
        return default
    word = value.strip().lower()
    if word in ("earliest", "latest"):
        chosen = EARLIEST if word == "earliest" else LATEST
        if chosen not in allowed:
            raise StreamgateSourceError(f"option {name!r}: {word!r} is not allowed here")
        return chosen
    try:
        parsed: Any = json.loads(value)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise StreamgateSourceError(
            f'option {name!r}: expected earliest, latest or JSON like {{"topic": {{"0": 5}}}}, '
            f"got {value!r}"
        )
    out: dict[str, dict[int, int]] = {}
    for topic, parts in parsed.items():
        out[topic] = {}
        for partition, offset in parts.items():
            if not str(partition).isdigit() or not isinstance(offset, int):
                raise StreamgateSourceError(
                    f"option {name!r}: topic {topic!r}: partition {partition!r} -> {offset!r} "
                    "is not a partition number and an offset"
                )
            if offset < 0 and offset not in allowed:
                raise StreamgateSourceError(
                    f"option {name!r}: topic {topic!r} partition {partition}: offset {offset} "
                    "is not allowed here"
                )
            out[topic][int(partition)] = offset
    return out


def parse_options(options: dict[str, str]) -> ReadOptions:
    """The options of one `spark.read/readStream.format("streamgate")`; a
    StreamgateSourceError names the first wrong or missing one."""
    lowered = {k.lower(): v for k, v in options.items()}
    unknown = sorted(k for k in lowered if k not in _KNOWN)
    if unknown:
        raise StreamgateSourceError(
            f"unknown option {unknown[0]!r} (known: gateway, admin, metadata, topic, subscribe, "
            "subscribePattern, startingOffsets, endingOffsets, startingTimestamp, "
            "endingTimestamp, includeHeaders, isolationLevel, minPartitionBytes, timeoutMs, "
            "maxRecordsPerTrigger, tier2.folder, s3.endpoint, s3.bucket, s3.prefix, s3.region, "
            "s3.accessKeyId, s3.secretAccessKey, user, password, saslMechanism, gatewayTls, "
            "sslCaFile, failOnDataLoss)"
        )
    topics_text = lowered.get("topic") or lowered.get("subscribe") or lowered.get("path")
    pattern = lowered.get("subscribepattern")
    if bool(topics_text) == bool(pattern):
        raise StreamgateSourceError(
            "exactly one of the options 'topic' (or 'subscribe': comma-separated names) and "
            "'subscribePattern' (a regular expression) is required"
        )
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise StreamgateSourceError(f"option 'subscribePattern': {exc}") from None
    topics = tuple(t.strip() for t in (topics_text or "").split(",") if t.strip())
    isolation = lowered.get("isolationlevel", "read_uncommitted").lower()
    if isolation not in ("read_committed", "read_uncommitted"):
        raise StreamgateSourceError(
            f"option 'isolationLevel': expected read_committed or read_uncommitted, got "
            f"{isolation!r}"
        )
    starting_ts = lowered.get("startingtimestamp")
    ending_ts = lowered.get("endingtimestamp")
    if starting_ts is not None and "startingoffsets" in lowered:
        raise StreamgateSourceError(
            "options 'startingOffsets' and 'startingTimestamp' exclude each other"
        )
    if ending_ts is not None and "endingoffsets" in lowered:
        raise StreamgateSourceError(
            "options 'endingOffsets' and 'endingTimestamp' exclude each other"
        )
    max_records = lowered.get("maxrecordspertrigger")
    metadata = lowered.get("metadata")
    tier2_given = "tier2.folder" in lowered or "s3.bucket" in lowered
    if metadata and metadata.startswith(("postgresql://", "postgres://")) and not tier2_given:
        raise StreamgateSourceError(
            "option 'metadata' as a PostgreSQL URL needs 'tier2.folder' or 's3.bucket' "
            "(where the gateways keep tier 2: the database does not say)"
        )
    if ("user" in lowered) != ("password" in lowered):
        raise StreamgateSourceError("options 'user' and 'password' go together")
    mechanism = lowered.get("saslmechanism", "PLAIN").upper()
    if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        raise StreamgateSourceError(
            f"option 'saslMechanism': expected PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got "
            f"{mechanism!r}"
        )
    access = Access(
        user=lowered.get("user"),
        password=lowered.get("password"),
        admin_https=lowered.get("admin", "").lower().startswith("https://"),
        gateway_tls=_bool("gatewayTls", lowered.get("gatewaytls", "false")),
        ca_file=lowered.get("sslcafile"),
        mechanism=mechanism,
    )
    return ReadOptions(
        gateway=_host_port("gateway", lowered.get("gateway")),
        admin=""
        if "metadata" in lowered and "admin" not in lowered
        else _host_port("admin", lowered.get("admin")),
        metadata=lowered.get("metadata"),
        topics=topics,
        pattern=pattern,
        starting=_offsets(
            "startingOffsets", lowered.get("startingoffsets"), EARLIEST, (EARLIEST, LATEST)
        ),
        starting_given="startingoffsets" in lowered,
        ending=_offsets("endingOffsets", lowered.get("endingoffsets"), LATEST, (LATEST,)),
        starting_timestamp=None
        if starting_ts is None
        else _int("startingTimestamp", starting_ts, 0),
        ending_timestamp=None if ending_ts is None else _int("endingTimestamp", ending_ts, 0),
        include_headers=_bool("includeHeaders", lowered.get("includeheaders", "false")),
        read_committed=isolation == "read_committed",
        min_partition_bytes=_int(
            "minPartitionBytes",
            lowered.get("minpartitionbytes", str(DEFAULT_MIN_PARTITION_BYTES)),
            0,
        ),
        timeout_s=_int("timeoutMs", lowered.get("timeoutms", "30000"), 1) / 1000,
        tier2_overrides={k: v for k, v in lowered.items() if k.startswith(("s3.", "tier2."))},
        max_records_per_trigger=None
        if max_records is None
        else _int("maxRecordsPerTrigger", max_records, 1),
        access=access,
        fail_on_data_loss=_bool("failOnDataLoss", lowered.get("failondataloss", "true")),
    )
