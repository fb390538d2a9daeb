"""The metadata layer (core/metadata) on both engines, from one suite: every test that is
not about nodes runs on SQLite and on a real PostgreSQL (harness/postgres.py; skipped
where its binaries are missing). Then the schema's story: numbered migrations shared by
both, SQLite files and PostgreSQL databases made by the code before the shared layer
opened in place, and PostgreSQL's nodes, leases and segment owners."""

from __future__ import annotations

import pathlib
import sqlite3
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support.metadata_legacy import OLD_PG_MIGRATIONS, OLD_SQLITE_SCHEMA, OLD_SQLITE_SCRAM
from support.nodes import pg_url, postgres, requires_postgres  # noqa: F401

from core.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType
from core.acl.quotas import Entity
from core.credentials import new_credential
from core.metadata import (
    SCHEMA_VERSION,
    AbortedTxn,
    ChunkRecord,
    ChunkSlice,
    CommittedOffset,
    CredentialInfo,
    CredentialKey,
    CredentialStore,
    OpenTxn,
    OpenTxnSnapshot,
    ProducerSnapshot,
    SegmentRecord,
    SQLiteCredentialStore,
    SQLiteMetadataStore,
    SqlMetadataStore,
    TopicExistsError,
    TopicHead,
    TopicRecord,
    TxnRecord,
    UserCredential,
)


class Engine:
    """One engine's database for a test: open stores on it, run raw SQL against it."""

    def __init__(self, name: str, target: str) -> None:
        self.name = name
        self.target = target  # a file path or a postgresql:// URL

    def store(self, node_id: int | None = None) -> SqlMetadataStore:
        if self.name == "sqlite":
            return SQLiteMetadataStore(self.target)
        from core.metadata.postgres import PostgresMetadataStore

        return PostgresMetadataStore(self.target, node_id)

    def credentials(self) -> CredentialStore:
        if self.name == "sqlite":
            return SQLiteCredentialStore(self.target)
        from core.metadata.postgres import PostgresCredentialStore

        return PostgresCredentialStore(self.target)

    def raw(self, query: str, params: tuple[object, ...] = ()) -> list[Any]:
        """Run one statement outside the layer (committed); its rows, if any."""
        if self.name == "sqlite":
            with sqlite3.connect(self.target) as conn:
                return conn.execute(query, params).fetchall()
        import psycopg

        with psycopg.connect(self.target, autocommit=True) as conn:
            cursor = conn.execute(query.replace("?", "%s"), params)
            return cursor.fetchall() if cursor.description else []


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=requires_postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Engine:
    if request.param == "sqlite":
        return Engine("sqlite", str(tmp_path / "metadata.db"))
    return Engine("postgresql", request.getfixturevalue("pg_url"))


@pytest.fixture
def db(engine: Engine) -> Iterator[SqlMetadataStore]:
    store = engine.store()
    yield store
    store.close()


def _topic(name: str = "t", partitions: int = 4) -> TopicRecord:
    return TopicRecord(
        name,
        uuid.uuid4(),
        partitions,
        {"retention.ms": "5"},
        0,
        [SegmentRecord(0, 0, 0, partitions - 1)],
    )


# --- the schema --------------------------------------------------------------------------


def test_schema_is_created_once_and_versioned(engine: Engine) -> None:
    a = engine.store()
    b = engine.store()  # a second node (or a restart): nothing left to migrate
    rows = engine.raw("SELECT version FROM schema_version ORDER BY version")
    assert [r[0] for r in rows] == list(range(1, SCHEMA_VERSION + 1))
    assert a.schema_version() == b.schema_version() == SCHEMA_VERSION
    a.close()
    b.close()


def test_newer_schema_is_refused(engine: Engine) -> None:
    engine.store().close()
    engine.raw("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION + 1,))
    with pytest.raises(RuntimeError, match="newer than this streamgate"):
        engine.store()


# --- the store's methods -----------------------------------------------------------------


def test_topics_segments_chunks_offsets_round_trip(db: SqlMetadataStore) -> None:
    topic = _topic()
    db.create_topic(topic)
    with pytest.raises(TopicExistsError, match="already exists"):
        db.create_topic(_topic())
    db.update_topic_configs("t", {"cleanup.policy": "delete"})
    with pytest.raises(KeyError):
        db.update_topic_configs("nope", {})
    db.grow_partitions("t", 6, 0)
    with pytest.raises(ValueError):
        db.grow_partitions("t", 5, 0)
    db.scale_segments("t", [0], [SegmentRecord(1, 1, 0, 2), SegmentRecord(2, 1, 3, 5)])
    with pytest.raises(ValueError):
        db.scale_segments("t", [0], [SegmentRecord(3, 2, 0, 5)])
    with pytest.raises(ValueError):
        db.scale_segments("t", [1], [SegmentRecord(2, 2, 0, 2)])  # successor id exists
    (loaded,) = db.load_topics()
    assert (loaded.name, loaded.topic_id, loaded.partitions) == ("t", topic.topic_id, 6)
    assert loaded.configs == {"cleanup.policy": "delete"}
    assert [
        (s.segment_id, s.sealed, s.first_partition, s.last_partition) for s in loaded.segments
    ] == [(0, True, 0, 5), (1, False, 0, 2), (2, False, 3, 5)]
    assert db.topic_heads() == {"t": TopicHead(topic.topic_id, 6, {"cleanup.policy": "delete"})}
    assert [
        (r.segment.segment_id, r.segment.sealed, r.owner_node) for r in db.load_segments("t")
    ] == [
        (0, True, None),
        (1, False, None),
        (2, False, None),
    ]

    assert [db.next_counter("producer_id") for _ in range(3)] == [0, 1, 2]

    chunk = ChunkRecord(1, 0, 100, "k/1", 100, [ChunkSlice(0, 0, 9, 0, 100, 1234)])
    chunk_id = db.commit_chunk("t", chunk, [ProducerSnapshot(0, 7, 0, [(0, 9, 0)])])
    assert chunk_id == chunk.chunk_id == chunk.slices[0].chunk_id > 0
    with pytest.raises(KeyError):
        db.commit_chunk("t", ChunkRecord(99, 0, 1, "k/2", 1))
    (again,) = db.load_chunks("t")
    assert (again.segment_id, again.end_position, again.slices[0].max_timestamp) == (1, 100, 1234)
    assert db.load_topics()[0].segments[1].uploaded_end == 100
    assert db.load_producer_states("t") == [ProducerSnapshot(0, 7, 0, [(0, 9, 0)])]
    db.save_producer_states("t", [ProducerSnapshot(0, 7, 1, [(10, 19, 10)])])
    assert db.load_producer_states("t") == [ProducerSnapshot(0, 7, 1, [(10, 19, 10)])]

    db.set_log_starts("t", {0: 5})
    db.set_log_starts("t", {0: 3})  # never lowered
    db.delete_chunks("t", [chunk_id], {1: 8})
    assert db.load_log_starts("t") == {0: 5, 1: 8}
    assert db.load_chunks("t") == []

    db.commit_offsets(
        [CommittedOffset("g", "t", 0, 10, -1, None, 1), CommittedOffset("g", "t", 1, 11, 3, "m", 2)]
    )
    db.commit_offsets([CommittedOffset("g", "t", 0, 12, -1, None, 3)])
    db.commit_offsets([CommittedOffset("h", "t", 0, 1, -1, None, 4)])
    assert [(o.partition, o.offset) for o in db.load_offsets() if o.group_id == "g"] == [
        (0, 12),
        (1, 11),
    ]
    assert db.load_group_offsets("h") == [CommittedOffset("h", "t", 0, 1, -1, None, 4)]
    db.delete_offsets("g", [("t", 1)])
    db.delete_offsets("h")
    assert [(o.partition, o.offset) for o in db.load_offsets()] == [(0, 12)]
    db.delete_topic("t")
    assert db.load_topics() == [] and db.load_offsets() == []


def test_transactions_round_trip(db: SqlMetadataStore) -> None:
    db.create_topic(_topic())
    txn = TxnRecord("tx", 7, 0, "Ongoing", 60000, 5, 6, [("t", 0), ("t", 1)])
    txn.offsets = [("g", "t", 0, 42, -1, None), ("g", "t", 1, 43, 2, "m")]
    db.save_transaction(txn)
    db.save_transaction(TxnRecord("tx", 7, 1, "CompleteCommit", 60000, -1, 9))  # replaces
    db.save_transaction(txn2 := TxnRecord("other", 8, 3, "Ongoing", 1000, 1, 2, [("t", 2)]))
    txn2.offsets = [("g", "t", 2, 1, -1, None)]
    db.save_transaction(txn2)
    loaded = {t.transactional_id: t for t in db.load_transactions()}
    assert loaded["tx"] == TxnRecord("tx", 7, 1, "CompleteCommit", 60000, -1, 9)
    assert loaded["other"] == txn2

    db.add_aborted_txns("t", [AbortedTxn(0, 7, 10, 20), AbortedTxn(1, 7, 11, 21)])
    db.add_aborted_txns("t", [AbortedTxn(0, 7, 10, 20), AbortedTxn(0, 8, 30, 40)])  # repeat
    assert db.load_aborted_txns("t") == [
        AbortedTxn(partition=0, producer_id=7, first_offset=10, last_offset=20),
        AbortedTxn(1, 7, 11, 21),
        AbortedTxn(0, 8, 30, 40),
    ]
    db.delete_topic("t")
    assert db.load_aborted_txns("t") == []


def test_open_transactions_newest_snapshot_wins(db: SqlMetadataStore) -> None:
    db.create_topic(TopicRecord("t", uuid.uuid4(), 2, segments=[SegmentRecord(1, 0, 0, 1)]))
    db.save_open_txns("t", [OpenTxnSnapshot(0, 100, {7: 10, 8: 50})])
    db.save_open_txns("t", [OpenTxnSnapshot(1, 30, {9: 5})])
    assert sorted(db.load_open_txns("t")) == [OpenTxn(0, 7, 10), OpenTxn(0, 8, 50), (1, 9, 5)]
    # a newer snapshot of partition 0 replaces its rows (7 committed meanwhile)
    db.save_open_txns("t", [OpenTxnSnapshot(0, 120, {8: 50})])
    # an older one committed late changes nothing
    db.save_open_txns("t", [OpenTxnSnapshot(0, 90, {7: 10, 8: 50})])
    assert sorted(db.load_open_txns("t")) == [(0, 8, 50), (1, 9, 5)]
    db.save_open_txns("t", [OpenTxnSnapshot(1, 60, {})])
    assert db.load_open_txns("t") == [OpenTxn(partition=0, producer_id=8, first_offset=50)]
    db.delete_topic("t")
    assert db.load_open_txns("t") == []


def test_acls_and_client_quotas_round_trip(db: SqlMetadataStore) -> None:
    read = AclBinding(
        ResourceType.TOPIC, "t", PatternType.LITERAL, "User:a", "*", Operation.READ,
        Permission.ALLOW,
    )  # fmt: skip
    deny = AclBinding(
        ResourceType.GROUP, "g-", PatternType.PREFIXED, "User:b", "10.0.0.1", Operation.ALL,
        Permission.DENY,
    )  # fmt: skip
    db.add_acls([read, deny])
    db.add_acls([read])  # already there: no duplicate
    assert sorted(db.load_acls(), key=repr) == sorted([read, deny], key=repr)
    loaded = {a.resource_type: a for a in db.load_acls()}
    assert isinstance(loaded[ResourceType.GROUP].operation, Operation)
    db.delete_acls([deny])
    assert db.load_acls() == [read]

    user: Entity = (("user", "alice"),)
    default_client: Entity = (("client-id", None),)
    db.alter_client_quotas(
        [
            (user, {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.5}),
            (default_client, {"request_percentage": 50.0}),
        ]
    )
    db.alter_client_quotas([(user, {"producer_byte_rate": 4096.0, "consumer_byte_rate": None})])
    assert db.load_client_quotas() == {
        user: {"producer_byte_rate": 4096.0},
        default_client: {"request_percentage": 50.0},
    }


def test_broker_configs_round_trip(engine: Engine, db: SqlMetadataStore) -> None:
    """Dynamic broker configs (per node id, and "" for the cluster default): each save
    replaces one resource's whole set; a reopened store loads the same."""
    assert db.load_broker_configs() == {}
    db.save_broker_configs("1", {"message.max.bytes": "2000000", "foo.bar": "x"})
    db.save_broker_configs("", {"log.cleaner.threads": "2"})
    db.save_broker_configs("2", {"message.max.bytes": "1"})
    db.save_broker_configs("1", {"sasl.kerberos.min.time.before.relogin": "61000"})  # replaces
    db.save_broker_configs("2", {})  # empties
    expected = {
        "1": {"sasl.kerberos.min.time.before.relogin": "61000"},
        "": {"log.cleaner.threads": "2"},
    }
    assert db.load_broker_configs() == expected
    again = engine.store()
    assert again.load_broker_configs() == expected
    again.close()


def test_share_partitions_round_trip(db: SqlMetadataStore) -> None:
    db.save_share_partitions([("g", "t", 0, 5, 9, "[[5, 1, 2]]"), ("g", "u", 1, 0, 0, "[]")])
    db.save_share_partitions([("g", "t", 0, 7, 9, "[]"), ("h", "t", 0, 1, 1, "[]")])
    assert sorted(db.load_share_partitions()) == [
        ("g", "t", 0, 7, 9, "[]"),
        ("g", "u", 1, 0, 0, "[]"),
        ("h", "t", 0, 1, 1, "[]"),
    ]
    db.delete_share_partitions("g", "u")
    db.delete_share_partitions(None, "t")
    assert db.load_share_partitions() == []


def test_compaction_swap_round_trip(db: SqlMetadataStore) -> None:
    db.create_topic(_topic())
    old = [
        ChunkRecord(0, 0, 100, "k/1", 100, [ChunkSlice(0, 0, 9, 0, 100, 1)]),
        ChunkRecord(0, 100, 200, "k/2", 100, [ChunkSlice(1, 0, 9, 0, 100, 2)]),
    ]
    old_ids = [db.commit_chunk("t", c) for c in old]
    new = ChunkRecord(
        0, 0, 200, "k/3", 60, [ChunkSlice(0, 0, 9, 0, 30, 1), ChunkSlice(1, 0, 9, 30, 30, 2)]
    )
    db.replace_chunks("t", old_ids, [new], {0: 10, 1: 10})
    assert new.chunk_id not in old_ids and {s.chunk_id for s in new.slices} == {new.chunk_id}
    (loaded,) = db.load_chunks("t")
    assert (loaded.chunk_id, loaded.object_key, len(loaded.slices)) == (new.chunk_id, "k/3", 2)
    assert db.load_compacted_ends("t") == {0: 10, 1: 10}
    # The old chunks are gone: a second swap of them changes nothing.
    with pytest.raises(KeyError, match="gone"):
        db.replace_chunks("t", old_ids, [ChunkRecord(0, 0, 200, "k/4", 1)], {0: 99})
    assert [c.object_key for c in db.load_chunks("t")] == ["k/3"]
    assert db.load_compacted_ends("t") == {0: 10, 1: 10}
    db.replace_chunks("t", [new.chunk_id], [], {0: 5, 1: 12})  # ends never move back
    assert db.load_compacted_ends("t") == {0: 10, 1: 12}
    db.replace_chunks("t", [], [], {})  # nothing to swap: nothing changes
    assert [c.chunk_id for c in db.load_chunks("t")] == []
    db.delete_topic("t")
    assert db.load_compacted_ends("t") == {}


def test_credentials_round_trip(engine: Engine) -> None:
    store = engine.credentials()
    a = new_credential("SCRAM-SHA-256", "pw-a")
    b = new_credential("SCRAM-SHA-512", "pw-b", 8192)
    upserts = [
        UserCredential("alice", "SCRAM-SHA-256", a),
        UserCredential("bob", "SCRAM-SHA-512", b),
    ]
    assert store.apply(upserts, []) == set()
    assert store.get("alice", "SCRAM-SHA-256") == a
    assert store.get("alice", "SCRAM-SHA-512") is None
    assert store.describe(None) == {
        "alice": [CredentialInfo(mechanism="SCRAM-SHA-256", iterations=4096)],
        "bob": [CredentialInfo("SCRAM-SHA-512", 8192)],
    }
    missing = store.apply(
        [UserCredential("alice", "SCRAM-SHA-256", b)],
        [CredentialKey("bob", "SCRAM-SHA-512"), CredentialKey("x", "y")],
    )
    assert missing == {CredentialKey(user="x", mechanism="y")}
    assert store.get("alice", "SCRAM-SHA-256") == b
    assert store.describe(["bob"]) == {}
    # the metadata store opens the same database, schema and all
    meta = engine.store()
    assert meta.schema_version() == SCHEMA_VERSION
    meta.close()
    store.close()


def test_a_failed_transaction_changes_nothing(db: SqlMetadataStore) -> None:
    db.create_topic(_topic())
    with pytest.raises(ValueError):  # the second segment to seal is not open
        db.scale_segments("t", [0, 5], [SegmentRecord(1, 1, 0, 3)])
    assert [s.sealed for s in db.load_topics()[0].segments] == [False]
    assert db.next_counter("c") == 0  # and the connection is usable after the rollback


# --- databases made before the shared layer ----------------------------------------------


def _old_sqlite_file(path: pathlib.Path, tier2: bool = True) -> None:
    """A metadata.db as the code before the shared layer left it: its DDL verbatim, the
    ad hoc uploaded_end column (absent before tier 2), SCRAM's `user` column, data."""
    conn = sqlite3.connect(path)
    conn.executescript(OLD_SQLITE_SCHEMA)
    conn.executescript(OLD_SQLITE_SCRAM)
    if tier2:
        conn.execute("ALTER TABLE segments ADD COLUMN uploaded_end INTEGER NOT NULL DEFAULT 0")
        conn.execute("INSERT INTO segments VALUES ('t', 0, 0, 0, 1, 1, 300)")
    else:
        conn.execute("INSERT INTO segments VALUES ('t', 0, 0, 0, 1, 1)")
    tid = uuid.UUID(int=7)
    conn.execute(
        "INSERT INTO topics VALUES ('t', ?, 2, '{\"retention.ms\": \"5\"}', 11)", (str(tid),)
    )
    conn.execute(
        "INSERT INTO segments (topic, segment_id, epoch, first_partition, last_partition) "
        "VALUES ('t', 1, 1, 0, 1)"
    )
    conn.execute("INSERT INTO counters VALUES ('producer_id', 41)")
    conn.execute("INSERT INTO committed_offsets VALUES ('g', 't', 0, 12, -1, 'm', 3)")
    conn.execute(
        "INSERT INTO chunks (topic, segment_id, start_position, end_position, object_key, "
        "size, created_ms) VALUES ('t', 0, 0, 300, 'k/1', 300, 5)"
    )
    conn.execute("INSERT INTO chunk_slices VALUES (1, 0, 0, 9, 0, 300, 99)")
    conn.execute("INSERT INTO producer_states VALUES ('t', 0, 7, 0, '[[0, 9, 0]]')")
    conn.execute(
        "INSERT INTO transactions VALUES ('tx', 7, 0, 'Ongoing', 1000, 1, 2, '[[\"t\", 0]]', '[]')"
    )
    conn.execute("INSERT INTO open_txns VALUES ('t', 0, -1, 20)")
    conn.execute("INSERT INTO open_txns VALUES ('t', 0, 7, 10)")
    conn.execute("INSERT INTO aborted_txns VALUES ('t', 1, 8, 3, 4)")
    conn.execute("INSERT INTO log_starts VALUES ('t', 0, 2)")
    conn.execute("INSERT INTO acls VALUES (2, 't', 3, 'User:a', '*', 3, 3)")
    conn.execute(
        "INSERT INTO client_quotas VALUES ('[[\"user\", \"alice\"]]', 'producer_byte_rate', 1024.0)"
    )
    conn.execute("INSERT INTO broker_configs VALUES ('', 'log.cleaner.threads', '2')")
    conn.execute("INSERT INTO compaction_state VALUES ('t', 0, 9)")
    cred = new_credential("SCRAM-SHA-256", "pw")
    conn.execute(
        "INSERT INTO scram_credentials VALUES ('alice', 'SCRAM-SHA-256', ?, ?, ?, ?)",
        (cred.salt, cred.iterations, cred.stored_key, cred.server_key),
    )
    conn.commit()
    conn.close()


@pytest.mark.parametrize("tier2", [True, False], ids=["tier2", "before-tier2"])
def test_an_old_sqlite_file_is_migrated_in_place(tmp_path: pathlib.Path, tier2: bool) -> None:
    path = tmp_path / "metadata.db"
    _old_sqlite_file(path, tier2)
    cred = SQLiteCredentialStore(str(path))  # either store may open it first
    assert cred.describe(None) == {"alice": [("SCRAM-SHA-256", 4096)]}
    assert cred.get("alice", "SCRAM-SHA-256") is not None
    db = SQLiteMetadataStore(str(path))
    assert db.schema_version() == SCHEMA_VERSION
    (topic,) = db.load_topics()
    assert (topic.topic_id, topic.partitions, topic.configs, topic.created_ms) == (
        uuid.UUID(int=7),
        2,
        {"retention.ms": "5"},
        11,
    )
    assert [(s.segment_id, s.sealed, s.uploaded_end) for s in topic.segments] == [
        (0, True, 300 if tier2 else 0),
        (1, False, 0),
    ]
    assert db.next_counter("producer_id") == 42
    assert db.load_offsets() == [CommittedOffset("g", "t", 0, 12, -1, "m", 3)]
    (chunk,) = db.load_chunks("t")
    assert (chunk.chunk_id, chunk.object_key, chunk.slices[0].max_timestamp) == (1, "k/1", 99)
    assert db.load_producer_states("t") == [ProducerSnapshot(0, 7, 0, [(0, 9, 0)])]
    assert [t.transactional_id for t in db.load_transactions()] == ["tx"]
    assert db.load_open_txns("t") == [OpenTxn(0, 7, 10)]
    assert db.load_aborted_txns("t") == [AbortedTxn(1, 8, 3, 4)]
    assert db.load_log_starts("t") == {0: 2}
    assert [(a.resource_name, a.principal) for a in db.load_acls()] == [("t", "User:a")]
    assert db.load_client_quotas() == {(("user", "alice"),): {"producer_byte_rate": 1024.0}}
    assert db.load_broker_configs() == {"": {"log.cleaner.threads": "2"}}
    assert db.load_compacted_ends("t") == {0: 9}
    # and it takes today's writes: ids carry on, owners and credentials by today's names
    new_id = db.commit_chunk("t", ChunkRecord(1, 0, 10, "k/2", 10))
    assert new_id == 2
    db.scale_segments("t", [1], [SegmentRecord(2, 2, 0, 1)])
    cred.apply([UserCredential("bob", "SCRAM-SHA-512", new_credential("SCRAM-SHA-512", "pw"))], [])
    assert sorted(cred.describe(None)) == ["alice", "bob"]
    db.close()
    cred.close()
    reopened = SQLiteMetadataStore(str(path))  # nothing left to migrate
    assert [s.segment_id for s in reopened.load_topics()[0].segments] == [0, 1, 2]
    reopened.close()


def test_a_fresh_sqlite_file_matches_a_migrated_old_one(tmp_path: pathlib.Path) -> None:
    """One schema whatever the history: the tables and columns of a new file equal those
    of an old file brought up to date (the column order aside)."""

    def columns(path: pathlib.Path) -> dict[str, set[tuple[str, str, int]]]:
        with sqlite3.connect(path) as conn:
            tables = [
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            ]
            return {
                t: {(r[1], r[2], r[3]) for r in conn.execute(f"PRAGMA table_info({t})")}
                for t in tables
                if t != "sqlite_sequence"
            }

    _old_sqlite_file(tmp_path / "old.db", tier2=False)
    SQLiteMetadataStore(str(tmp_path / "old.db")).close()
    SQLiteMetadataStore(str(tmp_path / "new.db")).close()
    old, new = columns(tmp_path / "old.db"), columns(tmp_path / "new.db")
    assert old.keys() == new.keys()
    for table in new:  # the types may be spelled INTEGER (old) or as the dialect does
        assert {c[0] for c in old[table]} == {c[0] for c in new[table]}, table


@requires_postgres
def test_an_old_postgres_database_opens_unchanged(
    pg_url: str,  # noqa: F811
    postgres: Any,  # noqa: F811
) -> None:
    """A database made by the PostgreSQL steps before the shared layer (copied verbatim)
    takes only the steps added since (offset reservations): data stays, columns match."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        for version, step in enumerate(OLD_PG_MIGRATIONS, 1):
            conn.execute(step.encode())
            conn.execute("INSERT INTO schema_version VALUES (%s)", (version,))
        conn.execute("INSERT INTO topics VALUES ('t', %s, 2, '{}', 1)", (str(uuid.uuid4()),))
        conn.execute(
            "INSERT INTO segments (topic, segment_id, epoch, first_partition, last_partition, "
            "owner_node, owner_epoch) VALUES ('t', 0, 0, 0, 1, 3, 4)"
        )
    assert len(OLD_PG_MIGRATIONS) <= SCHEMA_VERSION  # later steps run at the open below
    fresh = pg_url + "_fresh"
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {fresh.rsplit('/', 1)[1]}")
    from core.metadata.postgres import PostgresMetadataStore

    db = PostgresMetadataStore(pg_url)
    assert db.schema_version() == SCHEMA_VERSION
    assert db.segment_owners("t") == {0: (3, 4)}
    db.close()
    PostgresMetadataStore(fresh).close()

    def columns(url: str) -> set[tuple[str, str, str, str | None, str]]:
        with psycopg.connect(url) as conn:
            return {
                tuple(r)
                for r in conn.execute(
                    "SELECT table_name, column_name, data_type, column_default, is_nullable "
                    "FROM information_schema.columns WHERE table_schema = current_schema()"
                ).fetchall()
            }

    assert columns(pg_url) == columns(fresh)


@requires_postgres
def test_a_version_2_postgres_database_is_migrated(pg_url: str) -> None:  # noqa: F811
    import psycopg

    from core.metadata.postgres import PostgresMetadataStore

    PostgresMetadataStore(pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:  # back to the nodes branch schema
        conn.execute(
            "DROP TABLE transactions, aborted_txns, acls, client_quotas, compaction_state, "
            "scram_credentials, open_txns, broker_configs, offset_reservations"
        )
        conn.execute("DELETE FROM schema_version WHERE version > 2")
    db = PostgresMetadataStore(pg_url)
    db.save_transaction(TxnRecord("tx", 1, 0, "Empty", 1000))
    assert [t.transactional_id for t in db.load_transactions()] == ["tx"]
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
    assert [r[0] for r in rows] == list(range(1, SCHEMA_VERSION + 1))
    db.close()


# --- PostgreSQL only: the cluster id, nodes, leases and segment owners -------------------


@pytest.fixture
def pg(pg_url: str) -> Iterator[Any]:  # noqa: F811
    from core.metadata.postgres import PostgresMetadataStore

    store = PostgresMetadataStore(pg_url)
    yield store
    store.close()


@requires_postgres
def test_cluster_id_is_shared(pg: Any, pg_url: str) -> None:  # noqa: F811
    from core.metadata.postgres import PostgresMetadataStore

    other = PostgresMetadataStore(pg_url)
    assert pg.cluster_id() == other.cluster_id() != ""
    other.close()


@requires_postgres
def test_node_lease_is_compare_and_set_and_fences_a_stale_incarnation(pg: Any) -> None:
    from core.metadata.postgres import LeaseError

    db = pg
    db.create_topic(_topic())
    assert db.segment_owners("t") == {0: (None, 1)}  # created without a node id
    first = db.register_node(1, "127.0.0.1", 9092, 0.5, exclusive=True)
    assert db.segment_owners("t") == {0: (1, 2)}
    assert db.renew_lease(1, first, 0.5)
    with pytest.raises(LeaseError, match="held by a live process"):
        db.register_node(1, "127.0.0.1", 9092, 0.5, exclusive=True)
    with pytest.raises(LeaseError, match="one active node"):
        db.register_node(2, "127.0.0.1", 9093, 0.5, exclusive=True)
    time.sleep(0.7)  # the first incarnation is "frozen" past its lease
    assert not db.renew_lease(1, first, 0.5)  # expired: a renewal cannot revive it
    second = db.register_node(1, "127.0.0.1", 9092, 5, exclusive=True)
    assert second == first + 1
    assert db.segment_owners("t") == {0: (1, 3)}  # the claim bumped the owner epoch
    assert not db.renew_lease(1, first, 5)  # the stale incarnation stays fenced out
    assert db.renew_lease(1, second, 5)
    assert [(n.node_id, n.live) for n in db.nodes()] == [(1, True)]
    assert 0 < db.nodes()[0].lease_left_s <= 5
    assert db.node_loads() == {1: 1}
    assert db.topic_owners() == {"t": 1}
    assert [(s.topic, s.segment_id, s.owner_node) for s in db.open_segments()] == [("t", 0, 1)]
    db.release_lease(1, second)
    assert [(n.node_id, n.live) for n in db.nodes()] == [(1, False)]
    # node 1's segments wait for node 1 (its tier-1 log is on its disk), even once released
    with pytest.raises(LeaseError, match=r"belong to node\(s\) \[1\]"):
        db.register_node(2, "127.0.0.1", 9093, 5, exclusive=True)
    assert db.segment_owners("t") == {0: (1, 3)}
    db.delete_topic("t")
    assert db.register_node(2, "127.0.0.1", 9093, 5, exclusive=True) == 1


@requires_postgres
def test_successors_stay_with_the_owner_of_their_predecessors(pg: Any) -> None:
    pg.create_topic(_topic())
    pg.register_node(3, "h", 1, 5, exclusive=True)
    pg.scale_segments("t", [0], [SegmentRecord(1, 1, 0, 1), SegmentRecord(2, 1, 2, 3)])
    assert pg.segment_owners("t") == {0: (3, 2), 1: (3, 1), 2: (3, 1)}


@requires_postgres
def test_placed_topics_and_hand_over(pg: Any) -> None:
    topic = _topic()
    topic.segments = [SegmentRecord(0, 0, 0, 1), SegmentRecord(1, 0, 2, 3)]
    pg.create_topic_placed(topic, [1, 2])
    with pytest.raises(TopicExistsError):
        pg.create_topic_placed(_topic(), [1])
    assert pg.segment_owners("t") == {0: (1, 1), 1: (2, 1)}
    with pytest.raises(ValueError, match="not an open segment of node 2"):
        pg.hand_over("t", [0], [SegmentRecord(2, 1, 0, 1)], [2], from_node=2)
    pg.hand_over("t", [0], [SegmentRecord(2, 1, 0, 1)], [2], from_node=1)
    assert pg.segment_owners("t") == {0: (1, 2), 1: (2, 1), 2: (2, 1)}
    with pytest.raises(ValueError, match="already exists"):
        pg.hand_over("t", [1], [SegmentRecord(2, 1, 2, 3)], [1], from_node=2)


def test_a_topic_created_elsewhere_meanwhile_is_topic_already_exists(
    tmp_path: pathlib.Path,
) -> None:
    """The stream store turns the layer's TopicExistsError into Kafka's error: a topic the
    database has but this store has not loaded (another node, or another process on the
    file, created it meanwhile)."""
    import trio

    from core.api import TopicError
    from core.errors import ErrorCode
    from core.store import StoreSettings, StreamStore

    async def main() -> None:
        store = StreamStore(StoreSettings(str(tmp_path)))
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            other = SQLiteMetadataStore(str(tmp_path / "metadata.db"))
            other.create_topic(_topic("elsewhere", 1))
            other.close()
            with pytest.raises(TopicError) as refused:
                store.create_topic("elsewhere", 1)
            assert refused.value.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
            assert store.get("elsewhere") is None
            store.stop()

    trio.run(main)
