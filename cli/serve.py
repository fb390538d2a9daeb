"""`streamgate serve`: run the gateway. Every option can also come from a STREAMGATE_* variable."""

from __future__ import annotations

import argparse
import contextlib
import os
import resource

import trio

from cli import acl_flags
from cli.app import Settings, serve
from core import interpreter_tuning
from core.compaction import CompactionSettings
from core.segments.log import RECENT_BUDGET_BYTES, set_read_memory
from core.segments.readahead import READ_AHEAD_BUDGET_BYTES
from core.sharegroups import ShareSettings
from core.tiering import TierSettings
from core.wal.writer import (
    DEFAULT_FLUSH_BYTES,
    DEFAULT_FLUSH_MS_FOLDER,
    DEFAULT_FLUSH_MS_S3,
    WalSettings,
)
from gateway.security.listeners import (
    Listener,
    ListenerError,
    match_advertised,
    parse_listeners,
    parse_protocol_map,
)
from gateway.security.sasl import ALL_MECHANISMS, parse_mechanisms
from gateway.security.tls import CLIENT_AUTH, server_context


def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def _bridge_urls(value: str) -> str:
    """Comma-separated URLs, each checked; kept as one string so that `--nodes N` passes
    the flag on to every node as given."""
    from admin.bridge import check_url

    try:
        return ",".join(check_url(u.strip()) for u in value.split(",") if u.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _bool(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _node_count(value: str) -> int:
    """`--nodes`: a count, or `auto` for one node per usable core."""
    if value.strip().lower() == "auto":
        return usable_cores()
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count or auto, got {value!r}") from None


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"STREAMGATE_{name}", default)


_PARSER: list[argparse.ArgumentParser] = []  # serve's parser: --nodes N passes flags on


def register(commands: argparse._SubParsersAction) -> None:
    """Add the `serve` command."""
    serve_cmd = commands.add_parser("serve", help="run the Kafka-protocol gateway")
    _PARSER[:] = [serve_cmd]
    serve_cmd.set_defaults(run=run)
    listen = _env("LISTEN")
    serve_cmd.add_argument(
        "--listen",
        type=_host_port,
        default=_host_port(listen) if listen else None,
        help="address of the one PLAINTEXT listener (STREAMGATE_LISTEN, default "
        "127.0.0.1:9092 unless --listeners is given; with --listeners it is added to them)",
    )
    serve_cmd.add_argument(
        "--data-dir",
        default=_env("DATA_DIR", "./data"),
        help="where the log and metadata live (STREAMGATE_DATA_DIR)",
    )
    advertised = _env("ADVERTISED_LISTENER")
    serve_cmd.add_argument(
        "--advertised-listener",
        type=_host_port,
        default=_host_port(advertised) if advertised else None,
        help="host:port given to clients (STREAMGATE_ADVERTISED_LISTENER)",
    )
    serve_cmd.add_argument(
        "--default-partitions",
        type=int,
        default=int(_env("DEFAULT_PARTITIONS", "1") or 1),
        help="partitions of auto-created topics (STREAMGATE_DEFAULT_PARTITIONS)",
    )
    serve_cmd.add_argument(
        "--auto-create-topics",
        type=_bool,
        default=_bool(_env("AUTO_CREATE_TOPICS", "true") or "true"),
        help="create unknown topics on produce/metadata (STREAMGATE_AUTO_CREATE_TOPICS)",
    )
    serve_cmd.add_argument(
        "--max-request-bytes",
        type=int,
        default=int(_env("MAX_REQUEST_BYTES", str(100 * 1024 * 1024)) or 0),
        help="largest request accepted (STREAMGATE_MAX_REQUEST_BYTES)",
    )
    serve_cmd.add_argument(
        "--max-message-bytes",
        type=int,
        default=int(_env("MAX_MESSAGE_BYTES", str(8 * 1024 * 1024)) or 0),
        help="largest record batch accepted (STREAMGATE_MAX_MESSAGE_BYTES)",
    )
    serve_cmd.add_argument(
        "--group-consumer-session-timeout-ms",
        type=int,
        default=int(_env("GROUP_CONSUMER_SESSION_TIMEOUT_MS", "45000") or 0),
        help="consumer groups (group.protocol=consumer): how long a silent member stays "
        "(STREAMGATE_GROUP_CONSUMER_SESSION_TIMEOUT_MS, default 45000, as Kafka)",
    )
    serve_cmd.add_argument(
        "--group-consumer-heartbeat-interval-ms",
        type=int,
        default=int(_env("GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS", "5000") or 0),
        help="consumer groups (group.protocol=consumer): the heartbeat interval members are "
        "given (STREAMGATE_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS, default 5000, as Kafka)",
    )
    serve_cmd.add_argument(
        "--group-initial-rebalance-delay-ms",
        type=int,
        default=int(_env("GROUP_INITIAL_REBALANCE_DELAY_MS", "300") or 0),
        help="how long a new group waits for more members before its first rebalance "
        "(STREAMGATE_GROUP_INITIAL_REBALANCE_DELAY_MS, default 300; Kafka's is 3000)",
    )
    serve_cmd.add_argument(
        "--share-record-lock-ms",
        type=int,
        default=int(_env("SHARE_RECORD_LOCK_MS", "30000") or 0),
        help="share groups: how long a delivered record stays acquired before it is "
        "redelivered (Kafka's group.share.record.lock.duration.ms; default 30000)",
    )
    serve_cmd.add_argument(
        "--share-delivery-count-limit",
        type=int,
        default=int(_env("SHARE_DELIVERY_COUNT_LIMIT", "5") or 0),
        help="share groups: deliveries before a record is archived "
        "(group.share.delivery.count.limit; default 5)",
    )
    serve_cmd.add_argument(
        "--share-auto-offset-reset",
        choices=("latest", "earliest"),
        default=_env("SHARE_AUTO_OFFSET_RESET", "latest") or "latest",
        help="share groups: where a new share partition starts (share.auto.offset.reset)",
    )
    serve_cmd.add_argument(
        "--share-session-timeout-ms",
        type=int,
        default=int(_env("SHARE_SESSION_TIMEOUT_MS", "45000") or 0),
        help="share groups: a member silent this long leaves the group (default 45000)",
    )
    metrics = _env("METRICS_LISTEN")
    serve_cmd.add_argument(
        "--metrics-listen",
        type=_host_port,
        default=_host_port(metrics) if metrics else None,
        help="serve Prometheus /metrics and the /streams admin API over HTTP on HOST:PORT "
        "(STREAMGATE_METRICS_LISTEN; off by default)",
    )
    serve_cmd.add_argument(
        "--console-bridge-metrics",
        type=_bridge_urls,
        metavar="URL[,URL...]",
        default=_env("CONSOLE_BRIDGE_METRICS", ""),
        help="MQTT bridges' Prometheus URLs (their --metrics-listen, e.g. "
        "http://127.0.0.1:9101/metrics), comma-separated: the console shows their counters "
        "(STREAMGATE_CONSOLE_BRIDGE_METRICS)",
    )
    serve_cmd.add_argument(
        "--admin-insecure",
        type=_bool,
        default=_bool(_env("ADMIN_INSECURE", "false") or "false"),
        metavar="true|false",
        help="true: allow --metrics-listen on a non-loopback address without authentication "
        "(no SASL listener): anyone who reaches it may scale and move segments "
        "(STREAMGATE_ADMIN_INSECURE=true)",
    )
    serve_cmd.add_argument(
        "--admin-tls",
        type=_bool,
        default=_bool(_env("ADMIN_TLS", "false") or "false"),
        metavar="true|false",
        help="true: serve --metrics-listen over HTTPS (and HTTP/2) with --ssl-certfile/"
        "--ssl-keyfile (STREAMGATE_ADMIN_TLS)",
    )
    # Hidden tuning knobs for the scaler (tests shrink the 60 s window to seconds).
    serve_cmd.add_argument(
        "--scaling-window-s",
        type=float,
        default=float(_env("SCALING_WINDOW_S", "60") or 60),
        help=argparse.SUPPRESS,
    )
    serve_cmd.add_argument(
        "--scaling-interval-s",
        type=float,
        default=float(_env("SCALING_INTERVAL_S", "0") or 0),
        help=argparse.SUPPRESS,
    )
    serve_cmd.add_argument(
        "--tier2",
        default=_env("TIER2"),
        help="tier-2 object storage: s3://bucket/prefix, or a folder path "
        "(STREAMGATE_TIER2; default: DATA_DIR/tier2). S3 credentials come from the AWS chain",
    )
    serve_cmd.add_argument(
        "--s3-endpoint",
        default=_env("S3_ENDPOINT"),
        help="S3 endpoint URL for MinIO, moto and the like (STREAMGATE_S3_ENDPOINT)",
    )
    serve_cmd.add_argument(
        "--wal",
        choices=["local", "object"],
        default=_env("WAL", "local"),
        help="the write-ahead log an acknowledgement waits for: local (fsync'd files on this "
        "node's disk) or object (objects in the tier-2 store, recorded in the metadata store: "
        "survives the loss of the node and its disk) (STREAMGATE_WAL, default local)",
    )
    serve_cmd.add_argument(
        "--wal-flush-ms",
        type=float,
        default=float(_env("WAL_FLUSH_MS") or 0) or None,
        help="--wal object: under load, start a write-ahead object at most every this many ms "
        f"(STREAMGATE_WAL_FLUSH_MS; default {DEFAULT_FLUSH_MS_S3:g} on S3, where each PUT "
        f"is billed, {DEFAULT_FLUSH_MS_FOLDER:g} on a folder)",
    )
    serve_cmd.add_argument(
        "--wal-flush-bytes",
        type=int,
        default=int(_env("WAL_FLUSH_BYTES", str(DEFAULT_FLUSH_BYTES)) or DEFAULT_FLUSH_BYTES),
        help="--wal object: ...or as soon as this many bytes wait "
        "(STREAMGATE_WAL_FLUSH_BYTES, default 4 MiB)",
    )
    serve_cmd.add_argument(
        "--chunk-bytes",
        type=int,
        default=int(_env("CHUNK_BYTES", str(8 << 20)) or 0),
        help="cut a tier-2 chunk when a segment's log file reaches this size "
        "(STREAMGATE_CHUNK_BYTES, default 8 MiB)",
    )
    serve_cmd.add_argument(
        "--chunk-age-ms",
        type=int,
        default=int(_env("CHUNK_AGE_MS", "5000") or 0),
        help="...or when its oldest entry is this old (STREAMGATE_CHUNK_AGE_MS, default 5000)",
    )
    serve_cmd.add_argument(
        "--tier1-budget-bytes",
        type=int,
        default=int(_env("TIER1_BUDGET_BYTES", str(1 << 30)) or 0),
        help="local bytes not yet in tier 2 before producers get a retriable "
        "KAFKA_STORAGE_ERROR (STREAMGATE_TIER1_BUDGET_BYTES, default 1 GiB)",
    )
    serve_cmd.add_argument(
        "--local-retain-bytes",
        type=int,
        default=int(_env("LOCAL_RETAIN_BYTES", str(256 << 20)) or 0),
        help="uploaded data kept in tier 1 for fast reads before it is trimmed "
        "(STREAMGATE_LOCAL_RETAIN_BYTES, default 256 MiB; 0 trims right after upload)",
    )
    serve_cmd.add_argument(
        "--tier2-cache-bytes",
        type=int,
        default=int(_env("TIER2_CACHE_BYTES", str(64 << 20)) or 0),
        help="memory cache of chunk slices read from tier 2 (STREAMGATE_TIER2_CACHE_BYTES)",
    )
    serve_cmd.add_argument(
        "--recent-batch-bytes",
        type=int,
        default=int(_env("RECENT_BATCH_BYTES", str(RECENT_BUDGET_BYTES)) or 0),
        help="memory for the newest durable batches, which tail readers get without a file "
        "read (STREAMGATE_RECENT_BATCH_BYTES, default 64 MiB)",
    )
    serve_cmd.add_argument(
        "--read-ahead-bytes",
        type=int,
        default=int(_env("READ_AHEAD_BYTES", str(READ_AHEAD_BUDGET_BYTES)) or 0),
        help="memory for tier-1 ranges read ahead for consumers behind the tail "
        "(STREAMGATE_READ_AHEAD_BYTES, default 32 MiB; 0 turns read-ahead off)",
    )
    serve_cmd.add_argument(
        "--retention-check-interval-ms",
        type=int,
        default=int(_env("RETENTION_CHECK_INTERVAL_MS", "30000") or 0),
        help="how often retention.ms / retention.bytes are applied "
        "(STREAMGATE_RETENTION_CHECK_INTERVAL_MS, default 30000)",
    )
    serve_cmd.add_argument(
        "--connections-max-idle-ms",
        type=int,
        default=int(_env("CONNECTIONS_MAX_IDLE_MS") or 600_000),
        help="close a Kafka connection that sends no complete request for this long while "
        "none is in flight (STREAMGATE_CONNECTIONS_MAX_IDLE_MS, default 600000, as Kafka's "
        "connections.max.idle.ms)",
    )
    acl_flags.add_arguments(serve_cmd)
    _add_security_arguments(serve_cmd)
    serve_cmd.add_argument(
        "--compaction-interval-ms",
        type=int,
        default=int(_env("COMPACTION_INTERVAL_MS") or 15_000),
        help="how often compacted topics are checked and cleaned "
        "(STREAMGATE_COMPACTION_INTERVAL_MS, default 15000, as Kafka's log.cleaner.backoff.ms)",
    )
    # docs/several-nodes.md
    serve_cmd.add_argument(
        "--metadata",
        default=_env("METADATA"),
        help="shared metadata database: postgresql://user@host:port/db (STREAMGATE_METADATA; "
        "default: SQLite in the data dir)",
    )
    serve_cmd.add_argument(
        "--node-id",
        type=int,
        default=int(_env("NODE_ID", "1") or 1),
        help="this node's id in a cluster sharing --metadata (STREAMGATE_NODE_ID, default 1)",
    )
    multi_node = _env("MULTI_NODE")
    serve_cmd.add_argument(
        "--multi-node",
        type=_bool,
        default=_bool(multi_node) if multi_node else None,
        help="with --metadata: several active nodes share the database, each partition led "
        "by the node owning its open segment (STREAMGATE_MULTI_NODE; default true with "
        "--metadata; false: one active node per database, the others refused)",
    )
    serve_cmd.add_argument(
        "--nodes",
        type=_node_count,
        default=_env("NODES", "1") or "1",  # a string default goes through type too
        help="run N nodes on this machine under one supervisor (auto: one per usable core); "
        "an embedded PostgreSQL in "
        "DATA_DIR/postgres (unless --metadata), node i on --listen's port+i-1 with data in "
        "DATA_DIR/node-<i>, one shared tier 2 (STREAMGATE_NODES, default 1: one process; "
        "--nodes 1 --multi-node true: a one-node cluster)",
    )
    serve_cmd.add_argument(
        "--node-lease-s",
        type=float,
        default=float(_env("NODE_LEASE_S", "3") or 3),
        help="a node's lease on its segments, renewed every lease/6 "
        "(STREAMGATE_NODE_LEASE_S, default 3)",
    )
    serve_cmd.add_argument(
        "--log-level",
        default=_env("LOG_LEVEL", "INFO"),
        help="DEBUG, INFO, WARNING (STREAMGATE_LOG_LEVEL)",
    )


def _add_security_arguments(serve_cmd: argparse.ArgumentParser) -> None:
    group = serve_cmd.add_argument_group(
        "listeners and security",
        "Kafka-style listeners with TLS and SASL. SASL users are SCRAM credentials in the "
        "metadata store: create the first one with `streamgate users add`, then manage them "
        "with kafka-configs.sh --entity-type users.",
    )
    group.add_argument(
        "--listeners",
        default=_env("LISTENERS"),
        help="NAME://HOST:PORT,... with NAME a security protocol (PLAINTEXT, SSL, "
        "SASL_PLAINTEXT, SASL_SSL) or mapped to one (STREAMGATE_LISTENERS)",
    )
    group.add_argument(
        "--advertised-listeners",
        default=_env("ADVERTISED_LISTENERS"),
        help="NAME://HOST:PORT,... given to clients of each listener, matched by name "
        "(STREAMGATE_ADVERTISED_LISTENERS; default: the listener's own address)",
    )
    group.add_argument(
        "--listener-security-protocol-map",
        default=_env("LISTENER_SECURITY_PROTOCOL_MAP"),
        help="NAME:PROTOCOL,... for listeners not named after their protocol "
        "(STREAMGATE_LISTENER_SECURITY_PROTOCOL_MAP)",
    )
    group.add_argument(
        "--ssl-certfile",
        default=_env("SSL_CERTFILE"),
        help="PEM certificate chain of SSL/SASL_SSL listeners (STREAMGATE_SSL_CERTFILE)",
    )
    group.add_argument(
        "--ssl-keyfile",
        default=_env("SSL_KEYFILE"),
        help="PEM private key, if not in the certificate file (STREAMGATE_SSL_KEYFILE)",
    )
    group.add_argument(
        "--ssl-cafile",
        default=_env("SSL_CAFILE"),
        help="PEM CAs that client certificates must chain to (STREAMGATE_SSL_CAFILE)",
    )
    group.add_argument(
        "--ssl-client-auth",
        choices=tuple(CLIENT_AUTH),
        default=_env("SSL_CLIENT_AUTH", "none"),
        help="ask TLS clients for a certificate, whose subject becomes the principal "
        "(STREAMGATE_SSL_CLIENT_AUTH, default none)",
    )
    group.add_argument(
        "--sasl-enabled-mechanisms",
        default=_env("SASL_ENABLED_MECHANISMS", ",".join(ALL_MECHANISMS)),
        help="mechanisms of SASL listeners (STREAMGATE_SASL_ENABLED_MECHANISMS, default "
        + ",".join(ALL_MECHANISMS)
        + ")",
    )


def _resolve_listeners(
    args: argparse.Namespace,
) -> tuple[list[Listener] | None, dict[str, tuple[str, int]]]:
    """--listeners (plus --listen as a PLAINTEXT listener when given too), or None for the
    single --listen listener."""
    if not args.listeners:
        if args.advertised_listeners:
            raise ListenerError("--advertised-listeners needs --listeners")
        return None, {}
    protocol_map = parse_protocol_map(args.listener_security_protocol_map)
    listeners = parse_listeners(args.listeners, protocol_map)
    if args.listen is not None:
        if any(listener.name == "PLAINTEXT" for listener in listeners):
            raise ListenerError("--listen and a PLAINTEXT listener in --listeners: give one")
        listeners.insert(0, Listener("PLAINTEXT", "PLAINTEXT", args.listen[0], args.listen[1]))
    advertised = match_advertised(listeners, args.advertised_listeners)
    if args.advertised_listener is not None and args.listen is not None:
        advertised.setdefault("PLAINTEXT", args.advertised_listener)
    return listeners, advertised


def _raise_open_file_limit() -> None:
    """Every tier-1 file and connection holds a descriptor: use the hard limit, not 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def run(args: argparse.Namespace) -> int:
    # --nodes 1 --multi-node true (no --metadata): a one-node cluster under the supervisor
    if args.nodes != 1 or (args.multi_node and not args.metadata):
        from cli import supervisor  # docs/several-nodes.md: serve --nodes N

        return supervisor.run(_PARSER[0], args)
    try:
        listeners, advertised_listeners = _resolve_listeners(args)
        mechanisms = parse_mechanisms(args.sasl_enabled_mechanisms)
        ssl_context = admin_tls = None
        if args.admin_tls:  # the admin listener: the same certificate, no client certificates
            if not args.ssl_certfile:
                raise ValueError("--admin-tls true needs --ssl-certfile (PEM)")
            admin_tls = server_context(args.ssl_certfile, args.ssl_keyfile, None, "none")
        if any(listener.uses_tls for listener in listeners or ()):
            if not args.ssl_certfile:
                raise ValueError("an SSL or SASL_SSL listener needs --ssl-certfile (PEM)")
            ssl_context = server_context(
                args.ssl_certfile, args.ssl_keyfile, args.ssl_cafile, args.ssl_client_auth
            )
    except (ListenerError, ValueError, OSError) as exc:  # ssl.SSLError is an OSError
        raise SystemExit(f"streamgate serve: {exc}") from None
    _raise_open_file_limit()
    advertised_host, advertised_port = args.advertised_listener or (None, None)
    listen_host, listen_port = args.listen or ("127.0.0.1", 9092)
    if listeners:
        listen_host, listen_port = listeners[0].host, listeners[0].port
    settings = Settings(
        listen_host=listen_host,
        listen_port=listen_port,
        listeners=listeners,
        advertised_listeners=advertised_listeners,
        ssl_context=ssl_context,
        ssl_client_auth=args.ssl_client_auth,
        sasl_mechanisms=mechanisms,
        data_dir=args.data_dir,
        advertised_host=advertised_host,
        advertised_port=advertised_port,
        default_partitions=args.default_partitions,
        auto_create_topics=args.auto_create_topics,
        max_request_bytes=args.max_request_bytes,
        max_message_bytes=args.max_message_bytes,
        connections_max_idle_ms=args.connections_max_idle_ms,
        group_initial_rebalance_delay_ms=args.group_initial_rebalance_delay_ms,
        share=ShareSettings(
            record_lock_ms=args.share_record_lock_ms,
            delivery_count_limit=args.share_delivery_count_limit,
            auto_offset_reset=args.share_auto_offset_reset,
            session_timeout_ms=args.share_session_timeout_ms,
        ),
        group_consumer_session_timeout_ms=args.group_consumer_session_timeout_ms,
        group_consumer_heartbeat_interval_ms=args.group_consumer_heartbeat_interval_ms,
        metrics_listen=args.metrics_listen,
        admin_insecure=args.admin_insecure,
        console_bridge_metrics=tuple(
            u for u in _bridge_urls(args.console_bridge_metrics).split(",") if u
        ),
        admin_tls=admin_tls,
        scaling_window_s=args.scaling_window_s,
        # Default: evaluate a dozen times per window, at most every 5 s.
        scaling_interval_s=args.scaling_interval_s or min(5.0, args.scaling_window_s / 12),
        tier2_url=args.tier2,
        s3_endpoint=args.s3_endpoint,
        tier=TierSettings(
            chunk_bytes=args.chunk_bytes,
            chunk_age_s=args.chunk_age_ms / 1000,
            tier1_budget_bytes=args.tier1_budget_bytes,
            local_retain_bytes=args.local_retain_bytes,
            cache_bytes=args.tier2_cache_bytes,
            retention_check_interval_s=args.retention_check_interval_ms / 1000,
        ),
        acl=acl_flags.settings_from(args),
        compaction=CompactionSettings(interval_s=args.compaction_interval_ms / 1000),
        wal=args.wal,
        wal_settings=WalSettings(args.wal_flush_ms, args.wal_flush_bytes),
    )
    if args.metadata and not args.metadata.startswith(("postgresql://", "postgres://")):
        raise SystemExit(f"--metadata must be a postgresql:// URL, got {args.metadata!r}")
    settings.metadata_url = args.metadata
    settings.node_id = args.node_id
    settings.node_lease_s = args.node_lease_s
    # the issue's `serve --node-id N --metadata postgresql://...` on each node just works:
    # several active nodes unless --multi-node false asks for one
    settings.multi_node = bool(args.metadata) if args.multi_node is None else args.multi_node
    _check_placement()
    os.makedirs(settings.data_dir, exist_ok=True)
    if settings.wal != "object":  # which checks it before it starts (cli/app.py)
        _check_tier2_folder(settings.tier2_url, settings.data_dir)
    set_read_memory(args.recent_batch_bytes, args.read_ahead_bytes)
    interpreter_tuning.tune()  # GC thresholds, GIL switch interval: see the module
    try:
        trio.run(serve, settings)
    except* Exception as group:  # a node that cannot take its lease: one clear line
        lease = [e for e in group.exceptions if type(e).__name__ == "LeaseError"]
        if not lease:
            raise
        raise SystemExit(f"streamgate: {lease[0]}") from None
    return 0


def _check_tier2_folder(url: str | None, data_dir: str) -> None:
    """A tier-2 folder is probed before anything starts (milliseconds): one that cannot be
    created or written stops the start with one line (the store could not open it); other
    trouble (a full disk) is said once and the server goes on. S3 is checked once the
    server runs (cli/app.py), without holding up the start."""
    import errno
    import logging

    from core.segments.tier2_health import check_folder

    try:
        check = check_folder(url, data_dir)
    except ValueError as exc:
        raise SystemExit(f"streamgate serve: --tier2: {exc}") from None
    if check is None or check.ok:
        return
    fatal = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOTDIR, errno.EEXIST)
    if isinstance(check.exception, OSError) and check.exception.errno in fatal:
        raise SystemExit(f"streamgate serve: {check.line()}")
    logging.getLogger("streamgate").error("%s (serving from tier 1 meanwhile)", check.line())


def _check_placement() -> None:
    """STREAMGATE_PLACEMENT (read by the store; placement in docs/several-nodes.md)."""
    from core.store import PLACEMENTS

    placement = os.environ.get("STREAMGATE_PLACEMENT", PLACEMENTS[0])
    if placement not in PLACEMENTS:
        raise SystemExit(
            f"streamgate: STREAMGATE_PLACEMENT must be one of {', '.join(PLACEMENTS)}, "
            f"got {placement!r}"
        )
