"""The metadata schema: numbered migrations shared by SQLite and PostgreSQL.

`schema_version` (the same table on both engines) holds every applied step; at open, a
store applies the missing ones in one transaction (PostgreSQL: under an advisory lock, so
nodes starting together do not race; SQLite: BEGIN IMMEDIATE, the single writer). A
database newer than this code is refused.

The numbering is PostgreSQL's from before SQLite shared it, so existing PostgreSQL
databases carry on from their version. SQLite data folders from before the numbering have
no `schema_version`: they start at 0 and every step runs, which is safe because each step
is idempotent: tables are created IF NOT EXISTS, columns added only when missing, renamed
only when the old name is there. That also brings old SQLite files up to today's schema
(segments.uploaded_end on pre-tier-2 files, the owner columns, the credentials' `user`
column renamed `username` as on PostgreSQL).
"""

from __future__ import annotations

from dataclasses import dataclass

from .dialect import Handle


@dataclass(frozen=True)
class Ddl:
    """Statements (separated by `;`, no `;` inside) with `{TYPE}` slots."""

    text: str
    only: str | None = None  # a dialect name: this engine only

    def apply(self, db: Handle) -> None:
        if self.only in (None, db.dialect.name):
            for statement in self.text.split(";"):
                if statement.strip():
                    db.execute(statement)


@dataclass(frozen=True)
class AddColumn:
    table: str
    column: str
    definition: str

    def apply(self, db: Handle) -> None:
        if self.column not in db.columns(self.table):
            db.execute(f"ALTER TABLE {self.table} ADD COLUMN {self.column} {self.definition}")


@dataclass(frozen=True)
class RenameColumn:
    table: str
    old: str
    new: str

    def apply(self, db: Handle) -> None:
        if self.old in db.columns(self.table):
            db.execute(f'ALTER TABLE {self.table} RENAME COLUMN "{self.old}" TO {self.new}')


Step = Ddl | AddColumn | RenameColumn

# Each step runs once, in order, in one transaction with its schema_version row.
MIGRATIONS: list[list[Step]] = [
    # 1: topics, segments, tier 2, committed offsets (and PostgreSQL's cluster id: a
    # SQLite data folder keeps its id in a file)
    [
        Ddl("""
        CREATE TABLE IF NOT EXISTS topics (
            name TEXT PRIMARY KEY,
            topic_id TEXT NOT NULL UNIQUE,
            partitions INTEGER NOT NULL,
            configs TEXT NOT NULL,
            created_ms {BIGINT} NOT NULL
        );
        CREATE TABLE IF NOT EXISTS segments (
            topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
            segment_id INTEGER NOT NULL,
            epoch INTEGER NOT NULL,
            first_partition INTEGER NOT NULL,
            last_partition INTEGER NOT NULL,
            sealed {BOOL} NOT NULL DEFAULT FALSE,
            uploaded_end {BIGINT} NOT NULL DEFAULT 0,
            PRIMARY KEY (topic, segment_id)
        );
        CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value {BIGINT} NOT NULL);
        CREATE TABLE IF NOT EXISTS committed_offsets (
            group_id TEXT NOT NULL,
            topic TEXT NOT NULL,
            partition INTEGER NOT NULL,
            committed_offset {BIGINT} NOT NULL,
            leader_epoch INTEGER NOT NULL,
            metadata TEXT,
            commit_ms {BIGINT} NOT NULL,
            PRIMARY KEY (group_id, topic, partition)
        );
        CREATE INDEX IF NOT EXISTS committed_offsets_by_topic ON committed_offsets(topic);
        CREATE TABLE IF NOT EXISTS chunks (
            chunk_id {SERIAL_PK},
            topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
            segment_id INTEGER NOT NULL,
            start_position {BIGINT} NOT NULL,
            end_position {BIGINT} NOT NULL,
            object_key TEXT NOT NULL,
            size {BIGINT} NOT NULL,
            created_ms {BIGINT} NOT NULL
        );
        CREATE INDEX IF NOT EXISTS chunks_by_topic ON chunks(topic, segment_id, start_position);
        CREATE TABLE IF NOT EXISTS chunk_slices (
            chunk_id {BIGINT} NOT NULL REFERENCES chunks(chunk_id) ON DELETE CASCADE,
            partition INTEGER NOT NULL,
            first_offset {BIGINT} NOT NULL,
            last_offset {BIGINT} NOT NULL,
            byte_start {BIGINT} NOT NULL,
            byte_length {BIGINT} NOT NULL,
            max_timestamp {BIGINT} NOT NULL,
            PRIMARY KEY (chunk_id, partition)
        );
        CREATE TABLE IF NOT EXISTS producer_states (
            topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
            partition INTEGER NOT NULL,
            producer_id {BIGINT} NOT NULL,
            epoch INTEGER NOT NULL,
            batches TEXT NOT NULL,
            PRIMARY KEY (topic, partition, producer_id)
        );
        CREATE TABLE IF NOT EXISTS log_starts (
            topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
            partition INTEGER NOT NULL,
            log_start_offset {BIGINT} NOT NULL,
            PRIMARY KEY (topic, partition)
        )
        """),
        AddColumn("segments", "uploaded_end", "{BIGINT} NOT NULL DEFAULT 0"),  # pre-tier 2
        Ddl(
            "CREATE TABLE IF NOT EXISTS cluster "
            "(id INTEGER PRIMARY KEY CHECK (id = 1), cluster_id TEXT NOT NULL)",
            only="postgresql",
        ),
    ],
    # 2: segment owners with fencing epochs (and PostgreSQL's nodes with leases)
    [
        Ddl(
            """
            CREATE TABLE IF NOT EXISTS nodes (
                node_id INTEGER PRIMARY KEY,
                host TEXT NOT NULL,
                port INTEGER NOT NULL,
                incarnation BIGINT NOT NULL,
                lease_expires TIMESTAMPTZ NOT NULL
            )
            """,
            only="postgresql",
        ),
        AddColumn("segments", "owner_node", "INTEGER"),
        AddColumn("segments", "owner_epoch", "{BIGINT} NOT NULL DEFAULT 0"),
    ],
    # 3: transactions, ACLs, client quotas, compaction and SCRAM credentials
    [
        Ddl("""
        CREATE TABLE IF NOT EXISTS transactions (
            transactional_id TEXT PRIMARY KEY,
            producer_id {BIGINT} NOT NULL,
            epoch INTEGER NOT NULL,
            state TEXT NOT NULL,
            timeout_ms {BIGINT} NOT NULL,
            start_ms {BIGINT} NOT NULL,
            update_ms {BIGINT} NOT NULL,
            partitions TEXT NOT NULL,
            offsets TEXT NOT NULL
        );
        CREATE TABLE IF NOT EXISTS aborted_txns (
            topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
            partition INTEGER NOT NULL,
            producer_id {BIGINT} NOT NULL,
            first_offset {BIGINT} NOT NULL,
            last_offset {BIGINT} NOT NULL,
            PRIMARY KEY (topic, partition, last_offset)
        );
        CREATE TABLE IF NOT EXISTS acls (
            resource_type INTEGER NOT NULL,
            resource_name TEXT NOT NULL,
            pattern_type INTEGER NOT NULL,
            principal TEXT NOT NULL,
            host TEXT NOT NULL,
            operation INTEGER NOT NULL,
            permission INTEGER NOT NULL,
            PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host,
                         operation, permission)
        );
        CREATE TABLE IF NOT EXISTS client_quotas (
            entity TEXT NOT NULL,
            quota_key TEXT NOT NULL,
            value {DOUBLE} NOT NULL,
            PRIMARY KEY (entity, quota_key)
        );
        CREATE TABLE IF NOT EXISTS compaction_state (
            topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
            partition INTEGER NOT NULL,
            compacted_end {BIGINT} NOT NULL,
            PRIMARY KEY (topic, partition)
        );
        CREATE TABLE IF NOT EXISTS scram_credentials (
            username TEXT NOT NULL,
            mechanism TEXT NOT NULL,
            salt {BLOB} NOT NULL,
            iterations INTEGER NOT NULL,
            stored_key {BLOB} NOT NULL,
            server_key {BLOB} NOT NULL,
            PRIMARY KEY (username, mechanism)
        )
        """),
        RenameColumn("scram_credentials", "user", "username"),  # SQLite's older name
    ],
    # 4: open transactions as of a chunk commit (producer_id -1 holds the snapshot's end,
    # so an older snapshot committed late never replaces a newer one)
    [
        Ddl("""
        CREATE TABLE IF NOT EXISTS open_txns (
            topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
            partition INTEGER NOT NULL,
            producer_id {BIGINT} NOT NULL,
            first_offset {BIGINT} NOT NULL,
            PRIMARY KEY (topic, partition, producer_id)
        )
        """),
    ],
    # 5: dynamic broker configs (resource: a node id, or '' for the cluster default)
    [
        Ddl("""
        CREATE TABLE IF NOT EXISTS broker_configs (
            resource TEXT NOT NULL,
            name TEXT NOT NULL,
            value TEXT NOT NULL,
            PRIMARY KEY (resource, name)
        )
        """),
    ],
    # 6: offset reservations: per partition, an upper bound of every offset ever
    # acknowledged or made visible (core/stream/reservations.py); only ever raised
    [
        Ddl("""
        CREATE TABLE IF NOT EXISTS offset_reservations (
            topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
            partition INTEGER NOT NULL,
            reserved {BIGINT} NOT NULL,
            PRIMARY KEY (topic, partition)
        )
        """),
    ],
    # 7: write-ahead objects in object storage (core/wal): one row per object, one per
    # segment range in it; an object goes once every range is below its segment's
    # uploaded end
    [
        Ddl("""
        CREATE TABLE IF NOT EXISTS wal_objects (
            object_key TEXT PRIMARY KEY,
            node_id INTEGER NOT NULL,
            size {BIGINT} NOT NULL,
            created_ms {BIGINT} NOT NULL
        );
        CREATE TABLE IF NOT EXISTS wal_ranges (
            object_key TEXT NOT NULL REFERENCES wal_objects(object_key) ON DELETE CASCADE,
            topic TEXT NOT NULL,
            topic_id TEXT NOT NULL,
            segment_id INTEGER NOT NULL,
            start_position {BIGINT} NOT NULL,
            end_position {BIGINT} NOT NULL,
            object_offset {BIGINT} NOT NULL,
            PRIMARY KEY (topic, segment_id, start_position)
        )
        """),
    ],
    # 8: several nodes: transaction markers a coordinator leaves for the node leading the
    # partition (core/txn/coordinator.py); a row goes once its marker is durable
    [
        Ddl("""
        CREATE TABLE IF NOT EXISTS txn_markers (
            topic TEXT NOT NULL,
            partition INTEGER NOT NULL,
            producer_id {BIGINT} NOT NULL,
            epoch INTEGER NOT NULL,
            is_commit INTEGER NOT NULL,
            PRIMARY KEY (topic, partition, producer_id)
        )
        """),
    ],
    # 9: share groups (core/sharegroups): per share partition, its start and end offsets
    # and the state and delivery count of every in-flight record (JSON)
    [
        Ddl("""
        CREATE TABLE IF NOT EXISTS share_partitions (
            group_id TEXT NOT NULL,
            topic TEXT NOT NULL,
            partition INTEGER NOT NULL,
            start_offset {BIGINT} NOT NULL,
            end_offset {BIGINT} NOT NULL,
            records TEXT NOT NULL,
            PRIMARY KEY (group_id, topic, partition)
        )
        """),
    ],
]

SCHEMA_VERSION = len(MIGRATIONS)


def migrate(db: Handle) -> int:
    """Apply the missing steps inside the caller's transaction; returns the version now in
    place. RuntimeError for a database newer than this code."""
    if db.dialect.migration_lock is not None:
        db.execute(db.dialect.migration_lock)
    db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    row = db.one("SELECT max(version) FROM schema_version")
    current = int(row[0]) if row and row[0] is not None else 0
    if current > SCHEMA_VERSION:
        raise RuntimeError(
            f"database schema version {current} is newer than this streamgate's "
            f"({SCHEMA_VERSION}): upgrade streamgate"
        )
    for version in range(current + 1, SCHEMA_VERSION + 1):
        for step in MIGRATIONS[version - 1]:
            step.apply(db)
        db.execute("INSERT INTO schema_version VALUES (?)", (version,))
    return SCHEMA_VERSION


def schema_version(db: Handle) -> int:
    """The version recorded in the database (0: none)."""
    row = db.one("SELECT max(version) FROM schema_version")
    return int(row[0]) if row and row[0] is not None else 0
