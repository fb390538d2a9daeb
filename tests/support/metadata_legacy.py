"""The metadata schemas as they were before the shared metadata layer, copied verbatim:
fixtures for the tests that open old databases with today's code."""

# core/metadata.py's DDL (SQLite, no version recorded; `uploaded_end` was added by an
# ad hoc ALTER TABLE on open).
OLD_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS topics (
    name TEXT PRIMARY KEY,
    topic_id TEXT NOT NULL UNIQUE,
    partitions INTEGER NOT NULL,
    configs TEXT NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS segments (
    topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
    segment_id INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    first_partition INTEGER NOT NULL,
    last_partition INTEGER NOT NULL,
    sealed INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (topic, segment_id)
);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS committed_offsets (
    group_id TEXT NOT NULL,
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    committed_offset INTEGER NOT NULL,
    leader_epoch INTEGER NOT NULL,
    metadata TEXT,
    commit_ms INTEGER NOT NULL,
    PRIMARY KEY (group_id, topic, partition)
);
CREATE INDEX IF NOT EXISTS committed_offsets_by_topic ON committed_offsets(topic);
CREATE TABLE IF NOT EXISTS chunks (
    chunk_id INTEGER PRIMARY KEY AUTOINCREMENT,
    topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
    segment_id INTEGER NOT NULL,
    start_position INTEGER NOT NULL,
    end_position INTEGER NOT NULL,
    object_key TEXT NOT NULL,
    size INTEGER NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_by_topic ON chunks(topic, segment_id, start_position);
CREATE TABLE IF NOT EXISTS chunk_slices (
    chunk_id INTEGER NOT NULL REFERENCES chunks(chunk_id) ON DELETE CASCADE,
    partition INTEGER NOT NULL,
    first_offset INTEGER NOT NULL,
    last_offset INTEGER NOT NULL,
    byte_start INTEGER NOT NULL,
    byte_length INTEGER NOT NULL,
    max_timestamp INTEGER NOT NULL,
    PRIMARY KEY (chunk_id, partition)
);
CREATE TABLE IF NOT EXISTS producer_states (
    topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
    partition INTEGER NOT NULL,
    producer_id INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    batches TEXT NOT NULL,
    PRIMARY KEY (topic, partition, producer_id)
);
CREATE TABLE IF NOT EXISTS transactions (
    transactional_id TEXT PRIMARY KEY,
    producer_id INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    state TEXT NOT NULL,
    timeout_ms INTEGER NOT NULL,
    start_ms INTEGER NOT NULL,
    update_ms INTEGER NOT NULL,
    partitions TEXT NOT NULL,
    offsets TEXT NOT NULL
);
-- Open transactions per partition as of a chunk commit (before tier 1 may be trimmed);
-- producer_id -1 is the row holding the snapshot's `as_of` (partition end offset), so an
-- older snapshot committed late never replaces a newer one.
CREATE TABLE IF NOT EXISTS open_txns (
    topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
    partition INTEGER NOT NULL,
    producer_id INTEGER NOT NULL,
    first_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition, producer_id)
);
CREATE TABLE IF NOT EXISTS aborted_txns (
    topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
    partition INTEGER NOT NULL,
    producer_id INTEGER NOT NULL,
    first_offset INTEGER NOT NULL,
    last_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition, last_offset)
);
CREATE TABLE IF NOT EXISTS log_starts (
    topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
    partition INTEGER NOT NULL,
    log_start_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition)
);
CREATE TABLE IF NOT EXISTS acls (
    resource_type INTEGER NOT NULL,
    resource_name TEXT NOT NULL,
    pattern_type INTEGER NOT NULL,
    principal TEXT NOT NULL,
    host TEXT NOT NULL,
    operation INTEGER NOT NULL,
    permission INTEGER NOT NULL,
    PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation,
                 permission)
);
CREATE TABLE IF NOT EXISTS client_quotas (
    entity TEXT NOT NULL,
    quota_key TEXT NOT NULL,
    value REAL NOT NULL,
    PRIMARY KEY (entity, quota_key)
);
CREATE TABLE IF NOT EXISTS broker_configs (
    resource TEXT NOT NULL,
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (resource, name)
);
CREATE TABLE IF NOT EXISTS compaction_state (
    topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
    partition INTEGER NOT NULL,
    compacted_end INTEGER NOT NULL,
    PRIMARY KEY (topic, partition)
);
"""

# core/credentials.py's table (created by the credential store's own connection).
OLD_SQLITE_SCRAM = """
CREATE TABLE IF NOT EXISTS scram_credentials (
    user TEXT NOT NULL,
    mechanism TEXT NOT NULL,
    salt BLOB NOT NULL,
    iterations INTEGER NOT NULL,
    stored_key BLOB NOT NULL,
    server_key BLOB NOT NULL,
    PRIMARY KEY (user, mechanism)
)
"""

# core/metadata_pg.py's numbered steps (PostgreSQL; `schema_version` held the last one).
OLD_PG_MIGRATIONS: list[str] = [
    # 1: the SQLite schema, in PostgreSQL types
    """
    CREATE TABLE topics (
        name TEXT PRIMARY KEY,
        topic_id TEXT NOT NULL UNIQUE,
        partitions INTEGER NOT NULL,
        configs TEXT NOT NULL,
        created_ms BIGINT NOT NULL
    );
    CREATE TABLE segments (
        topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
        segment_id INTEGER NOT NULL,
        epoch INTEGER NOT NULL,
        first_partition INTEGER NOT NULL,
        last_partition INTEGER NOT NULL,
        sealed BOOLEAN NOT NULL DEFAULT FALSE,
        uploaded_end BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (topic, segment_id)
    );
    CREATE TABLE counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
    CREATE TABLE committed_offsets (
        group_id TEXT NOT NULL,
        topic TEXT NOT NULL,
        partition INTEGER NOT NULL,
        committed_offset BIGINT NOT NULL,
        leader_epoch INTEGER NOT NULL,
        metadata TEXT,
        commit_ms BIGINT NOT NULL,
        PRIMARY KEY (group_id, topic, partition)
    );
    CREATE INDEX committed_offsets_by_topic ON committed_offsets(topic);
    CREATE TABLE chunks (
        chunk_id BIGSERIAL PRIMARY KEY,
        topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
        segment_id INTEGER NOT NULL,
        start_position BIGINT NOT NULL,
        end_position BIGINT NOT NULL,
        object_key TEXT NOT NULL,
        size BIGINT NOT NULL,
        created_ms BIGINT NOT NULL
    );
    CREATE INDEX chunks_by_topic ON chunks(topic, segment_id, start_position);
    CREATE TABLE chunk_slices (
        chunk_id BIGINT NOT NULL REFERENCES chunks(chunk_id) ON DELETE CASCADE,
        partition INTEGER NOT NULL,
        first_offset BIGINT NOT NULL,
        last_offset BIGINT NOT NULL,
        byte_start BIGINT NOT NULL,
        byte_length BIGINT NOT NULL,
        max_timestamp BIGINT NOT NULL,
        PRIMARY KEY (chunk_id, partition)
    );
    CREATE TABLE producer_states (
        topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
        partition INTEGER NOT NULL,
        producer_id BIGINT NOT NULL,
        epoch INTEGER NOT NULL,
        batches TEXT NOT NULL,
        PRIMARY KEY (topic, partition, producer_id)
    );
    CREATE TABLE log_starts (
        topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
        partition INTEGER NOT NULL,
        log_start_offset BIGINT NOT NULL,
        PRIMARY KEY (topic, partition)
    );
    CREATE TABLE cluster (id INTEGER PRIMARY KEY CHECK (id = 1), cluster_id TEXT NOT NULL);
    """,
    # 2: nodes with leases, segment owners with fencing epochs
    """
    CREATE TABLE nodes (
        node_id INTEGER PRIMARY KEY,
        host TEXT NOT NULL,
        port INTEGER NOT NULL,
        incarnation BIGINT NOT NULL,
        lease_expires TIMESTAMPTZ NOT NULL
    );
    ALTER TABLE segments ADD COLUMN owner_node INTEGER;
    ALTER TABLE segments ADD COLUMN owner_epoch BIGINT NOT NULL DEFAULT 0;
    """,
    # 3: transactions, ACLs, client quotas, compaction and SCRAM credentials (as on SQLite)
    """
    CREATE TABLE transactions (
        transactional_id TEXT PRIMARY KEY,
        producer_id BIGINT NOT NULL,
        epoch INTEGER NOT NULL,
        state TEXT NOT NULL,
        timeout_ms BIGINT NOT NULL,
        start_ms BIGINT NOT NULL,
        update_ms BIGINT NOT NULL,
        partitions TEXT NOT NULL,
        offsets TEXT NOT NULL
    );
    CREATE TABLE aborted_txns (
        topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
        partition INTEGER NOT NULL,
        producer_id BIGINT NOT NULL,
        first_offset BIGINT NOT NULL,
        last_offset BIGINT NOT NULL,
        PRIMARY KEY (topic, partition, last_offset)
    );
    CREATE TABLE acls (
        resource_type INTEGER NOT NULL,
        resource_name TEXT NOT NULL,
        pattern_type INTEGER NOT NULL,
        principal TEXT NOT NULL,
        host TEXT NOT NULL,
        operation INTEGER NOT NULL,
        permission INTEGER NOT NULL,
        PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation,
                     permission)
    );
    CREATE TABLE client_quotas (
        entity TEXT NOT NULL,
        quota_key TEXT NOT NULL,
        value DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (entity, quota_key)
    );
    CREATE TABLE compaction_state (
        topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
        partition INTEGER NOT NULL,
        compacted_end BIGINT NOT NULL,
        PRIMARY KEY (topic, partition)
    );
    CREATE TABLE scram_credentials (
        username TEXT NOT NULL,
        mechanism TEXT NOT NULL,
        salt BYTEA NOT NULL,
        iterations INTEGER NOT NULL,
        stored_key BYTEA NOT NULL,
        server_key BYTEA NOT NULL,
        PRIMARY KEY (username, mechanism)
    );
    """,
    # 4: open transactions as of a chunk commit (producer_id -1 holds the snapshot's end)
    """
    CREATE TABLE open_txns (
        topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
        partition INTEGER NOT NULL,
        producer_id BIGINT NOT NULL,
        first_offset BIGINT NOT NULL,
        PRIMARY KEY (topic, partition, producer_id)
    );
    """,
    # 5: dynamic broker configs (resource: a node id, or '' for the cluster default)
    """
    CREATE TABLE broker_configs (
        resource TEXT NOT NULL,
        name TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (resource, name)
    );
    """,
]
