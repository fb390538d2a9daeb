"""core/metadata_pg.py against a real PostgreSQL: the SQLite store's behaviour, the schema
migrations, node leases (compare-and-set on the incarnation) and segment owner epochs."""

from __future__ import annotations

import pathlib
import sqlite3
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from support.nodes import pg_url, postgres, requires_postgres  # noqa: F401

from core.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType
from core.acl.quotas import Entity
from core.api import TopicError
from core.metadata import (
    ChunkRecord,
    ChunkSlice,
    CommittedOffset,
    MetadataStore,
    ProducerSnapshot,
    SegmentRecord,
    SQLiteMetadataStore,
    TopicRecord,
    TxnRecord,
)
from core.metadata_pg import SCHEMA_VERSION, LeaseError, PostgresMetadataStore

pytestmark = requires_postgres


def _topic(name: str = "t", partitions: int = 4) -> TopicRecord:
    return TopicRecord(
        name,
        uuid.uuid4(),
        partitions,
        {"retention.ms": "5"},
        0,
        [SegmentRecord(0, 0, 0, partitions - 1)],
    )


def test_schema_is_created_once_and_versioned(pg_url: str) -> None:  # noqa: F811
    a = PostgresMetadataStore(pg_url)
    b = PostgresMetadataStore(pg_url)  # a second node: nothing left to migrate
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
    assert [r[0] for r in rows] == list(range(1, SCHEMA_VERSION + 1))
    assert a.cluster_id() == b.cluster_id() != ""
    a.close()
    b.close()


def test_newer_schema_is_refused(pg_url: str) -> None:  # noqa: F811
    PostgresMetadataStore(pg_url).close()
    with psycopg.connect(pg_url) as conn:
        conn.execute("INSERT INTO schema_version VALUES (%s)", (SCHEMA_VERSION + 1,))
    with pytest.raises(RuntimeError, match="newer than this streamgate"):
        PostgresMetadataStore(pg_url)


def test_topics_segments_chunks_offsets_round_trip(pg_url: str) -> None:  # noqa: F811
    db = PostgresMetadataStore(pg_url)
    topic = _topic()
    db.create_topic(topic)
    with pytest.raises(TopicError, match="already exists"):
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

    db.set_log_starts("t", {0: 5})
    db.set_log_starts("t", {0: 3})  # never lowered
    db.delete_chunks("t", [chunk_id], {1: 8})
    assert db.load_log_starts("t") == {0: 5, 1: 8}
    assert db.load_chunks("t") == []

    db.commit_offsets(
        [CommittedOffset("g", "t", 0, 10, -1, None, 1), CommittedOffset("g", "t", 1, 11, 3, "m", 2)]
    )
    db.commit_offsets([CommittedOffset("g", "t", 0, 12, -1, None, 3)])
    assert [(o.partition, o.offset) for o in db.load_offsets()] == [(0, 12), (1, 11)]
    db.delete_offsets("g", [("t", 1)])
    assert [(o.partition, o.offset) for o in db.load_offsets()] == [(0, 12)]
    db.delete_topic("t")
    assert db.load_topics() == [] and db.load_offsets() == []
    db.close()


def test_node_lease_is_compare_and_set_and_fences_a_stale_incarnation(
    pg_url: str,  # noqa: F811
) -> None:
    db = PostgresMetadataStore(pg_url)
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
    db.release_lease(1, second)
    assert [(n.node_id, n.live) for n in db.nodes()] == [(1, False)]
    # node 1's segments wait for node 1 (its tier-1 log is on its disk), even once released
    with pytest.raises(LeaseError, match=r"belong to node\(s\) \[1\]"):
        db.register_node(2, "127.0.0.1", 9093, 5, exclusive=True)
    assert db.segment_owners("t") == {0: (1, 3)}
    db.delete_topic("t")
    assert db.register_node(2, "127.0.0.1", 9093, 5, exclusive=True) == 1
    db.close()


def test_successors_stay_with_the_owner_of_their_predecessors(pg_url: str) -> None:  # noqa: F811
    db = PostgresMetadataStore(pg_url)
    db.create_topic(_topic())
    db.register_node(3, "h", 1, 5, exclusive=True)
    db.scale_segments("t", [0], [SegmentRecord(1, 1, 0, 1), SegmentRecord(2, 1, 2, 3)])
    assert db.segment_owners("t") == {0: (3, 2), 1: (3, 1), 2: (3, 1)}
    db.close()


# --- the newer features' methods: the same round trip on SQLite and on PostgreSQL --------


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store(
    request: pytest.FixtureRequest,
    pg_url: str,  # noqa: F811
    tmp_path: pathlib.Path,
) -> Iterator[MetadataStore]:
    store: MetadataStore = (
        SQLiteMetadataStore(str(tmp_path / "metadata.db"))
        if request.param == "sqlite"
        else PostgresMetadataStore(pg_url)
    )
    yield store
    store.close()


def test_transactions_round_trip(any_store: MetadataStore) -> None:
    db = any_store
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

    db.add_aborted_txns("t", [(0, 7, 10, 20), (1, 7, 11, 21)])
    db.add_aborted_txns("t", [(0, 7, 10, 20), (0, 8, 30, 40)])  # a repeat is ignored
    assert db.load_aborted_txns("t") == [(0, 7, 10, 20), (1, 7, 11, 21), (0, 8, 30, 40)]
    db.delete_topic("t")
    assert db.load_aborted_txns("t") == []


def test_acls_and_client_quotas_round_trip(any_store: MetadataStore) -> None:
    db = any_store
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


def test_broker_configs_round_trip(any_store: MetadataStore, tmp_path: pathlib.Path) -> None:
    """Dynamic broker configs (per node id, and "" for the cluster default): each save
    replaces one resource's whole set; a reopened store loads the same."""
    db = any_store
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
    if isinstance(db, SQLiteMetadataStore):  # a data dir from before the table: created on open
        path = str(tmp_path / "metadata.db")
        with sqlite3.connect(path) as conn:
            conn.execute("DROP TABLE broker_configs")
        reopened = SQLiteMetadataStore(path)
        assert reopened.load_broker_configs() == {}
        reopened.save_broker_configs("", {"message.max.bytes": "3"})
        reopened.close()
        assert SQLiteMetadataStore(path).load_broker_configs() == {"": {"message.max.bytes": "3"}}
    else:
        again = PostgresMetadataStore(db.url)  # type: ignore[attr-defined]
        assert again.load_broker_configs() == expected
        again.close()


def test_compaction_swap_round_trip(any_store: MetadataStore) -> None:
    db = any_store
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
    db.delete_topic("t")
    assert db.load_compacted_ends("t") == {}


def test_a_version_2_database_is_migrated(pg_url: str) -> None:  # noqa: F811
    PostgresMetadataStore(pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:  # back to the nodes branch schema
        conn.execute(
            "DROP TABLE transactions, aborted_txns, acls, client_quotas, compaction_state, "
            "scram_credentials, open_txns, broker_configs"
        )
        conn.execute("DELETE FROM schema_version WHERE version > 2")
    db = PostgresMetadataStore(pg_url)
    db.save_transaction(TxnRecord("tx", 1, 0, "Empty", 1000))
    assert [t.transactional_id for t in db.load_transactions()] == ["tx"]
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
    assert [r[0] for r in rows] == [1, 2, 3, 4, 5] == list(range(1, SCHEMA_VERSION + 1))
    db.close()


def test_open_transactions_round_trip(pg_url: str) -> None:  # noqa: F811
    """The open-transaction snapshots (issue 16) as SQLite keeps them: newest wins."""
    from core.metadata import OpenTxnSnapshot

    db = PostgresMetadataStore(pg_url)
    try:
        db.create_topic(_topic("ot"))
        db.save_open_txns("ot", [OpenTxnSnapshot(0, 20, {7: 10, 8: 12})])
        assert sorted(db.load_open_txns("ot")) == [(0, 7, 10), (0, 8, 12)]
        db.save_open_txns("ot", [OpenTxnSnapshot(0, 15, {8: 12})])  # older: ignored
        assert sorted(db.load_open_txns("ot")) == [(0, 7, 10), (0, 8, 12)]
        db.save_open_txns("ot", [OpenTxnSnapshot(0, 40, {9: 30})])
        assert db.load_open_txns("ot") == [(0, 9, 30)]
    finally:
        db.close()
