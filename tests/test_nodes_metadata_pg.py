"""core/metadata_pg.py against a real PostgreSQL: the SQLite store's behaviour, the schema
migrations, node leases (compare-and-set on the incarnation) and segment owner epochs."""

from __future__ import annotations

import time
import uuid

import psycopg
import pytest

from core.api import TopicError
from core.metadata import (
    ChunkRecord,
    ChunkSlice,
    CommittedOffset,
    ProducerSnapshot,
    SegmentRecord,
    TopicRecord,
)
from core.metadata_pg import SCHEMA_VERSION, LeaseError, PostgresMetadataStore
from tests.nodes_fixtures import pg_url, postgres, requires_postgres  # noqa: F401

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
