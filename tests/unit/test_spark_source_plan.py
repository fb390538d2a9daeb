"""The Spark source's planning, without Spark: options, read tasks that follow chunks,
the tail, aborted ranges, and the micro-batch bound."""

from __future__ import annotations

import base64
from dataclasses import replace
from pathlib import Path

import pytest

from core.recordbatch import build_batch
from core.segments.chunks import pack_chunk
from spark_source.chunkmap import PartitionMap, SliceRef, TopicMap
from spark_source.errors import StreamgateSourceError
from spark_source.metadata import chunk_map_from
from spark_source.options import parse_options
from spark_source.plan import ReadTask, plan_topic
from spark_source.rows import task_batches
from spark_source.scram import ScramClient, ScramError
from spark_source.stream import cap

BASE = {"gateway": "127.0.0.1:9092", "admin": "127.0.0.1:9100", "topic": "t"}


def topic_map() -> TopicMap:
    slices = tuple(SliceRef(f"c{i}", i * 100, i * 100 + 99, 0, 1000, 0) for i in range(4))
    p0 = PartitionMap(0, 50, 450, 450, 400, slices, ((7, 120, 130), (7, 300, 310)))
    p1 = PartitionMap(1, 0, 10, 10, 0, (), ())
    return TopicMap("t", {"kind": "folder", "root": "/x"}, (p0, p1))


def test_tasks_follow_chunks_then_the_tail() -> None:
    tasks = plan_topic(topic_map(), parse_options({**BASE, "minPartitionBytes": "0"}))
    assert [(t.partition, t.start, t.end, len(t.slices)) for t in tasks] == [
        (0, 50, 100, 1),  # the log start cuts the first chunk
        (0, 100, 200, 1),
        (0, 200, 300, 1),
        (0, 300, 400, 1),
        (0, 400, 450, 0),  # the tail, through the Kafka protocol
        (1, 0, 10, 0),
    ]
    grouped = plan_topic(topic_map(), parse_options({**BASE, "minPartitionBytes": "2000"}))
    assert [(t.start, t.end) for t in grouped if t.partition == 0] == [
        (50, 200),
        (200, 400),
        (400, 450),
    ]


def test_offsets_json_and_read_committed() -> None:
    options = {
        **BASE,
        "startingOffsets": '{"t": {"0": 150}}',
        "endingOffsets": '{"t": {"0": 305}}',
        "isolationLevel": "read_committed",
    }
    tasks = plan_topic(topic_map(), parse_options(options))
    assert [(t.partition, t.start, t.end, len(t.slices)) for t in tasks] == [(0, 150, 305, 3)]
    assert tasks[0].aborted == ((7, 300, 310),)  # only what overlaps the range


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"admin": "a:1", "topic": "t"}, "'gateway'"),
        ({**BASE, "admin": "nope"}, "'admin'"),
        ({**BASE, "subscribePattern": "x"}, "exactly one"),
        ({**BASE, "endingOffsets": "earliest"}, "endingOffsets"),
        ({**BASE, "startingOffsets": '{"t": {"x": 1}}'}, "startingOffsets"),
        ({**BASE, "includeHeaders": "yes"}, "includeHeaders"),
        ({**BASE, "isolationLevel": "serializable"}, "isolationLevel"),
        ({**BASE, "bogus": "1"}, "unknown option 'bogus'"),
        ({**BASE, "startingOffsets": "{bad"}, "startingOffsets"),
        ({**BASE, "maxRecordsPerTrigger": "0"}, "maxRecordsPerTrigger"),
        ({**BASE, "startingTimestamp": "1", "startingOffsets": "earliest"}, "exclude"),
        ({**BASE, "user": "alice"}, "'user' and 'password' go together"),
        ({**BASE, "gatewayTls": "maybe"}, "gatewayTls"),
        ({**BASE, "failOnDataLoss": "no"}, "failOnDataLoss"),
        ({**BASE, "saslMechanism": "GSSAPI"}, "saslMechanism"),
        ({**BASE, "metadata": "postgresql://u:p@h/db"}, "needs 'tier2.folder' or 's3.bucket'"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(StreamgateSourceError, match=named):
        parse_options(options)


def test_cap_shares_the_bound_in_proportion() -> None:
    start = {"t": {"0": 0, "1": 10}}
    end = {"t": {"0": 300, "1": 110, "2": 0}}
    assert cap(start, end, 1000) == end
    capped = cap(start, end, 100)
    assert capped == {"t": {"0": 75, "1": 35, "2": 0}}
    assert cap(start, {"t": {"0": 1, "1": 11}}, 1) == {"t": {"0": 1, "1": 10}}


def _chunk(tmp_path: Path) -> tuple[ReadTask, int]:
    batches = [build_batch([(b"k", b"v%d" % i, [])], base_offset=i) for i in range(10)]
    chunk = pack_chunk([(0, batches)])
    (tmp_path / "c.chunk").write_bytes(chunk.data)
    s = chunk.slices[0]
    ref = SliceRef("c.chunk", s.first_offset, s.last_offset, s.byte_start, s.byte_length, 0)
    task = ReadTask("t", 0, 0, 10, (ref,), {"kind": "folder", "root": str(tmp_path)}, ())
    return task, s.byte_length


def test_a_slice_read_from_the_folder_and_a_torn_one(tmp_path: Path) -> None:
    task, length = _chunk(tmp_path)
    opts = parse_options(BASE)
    assert [len(b) for b in task_batches(task, opts)] == [length // 10] * 10
    torn = replace(task, slices=(replace(task.slices[0], byte_length=length - 5),))
    with pytest.raises(StreamgateSourceError, match="ends at offset 8, its index says 9"):
        list(task_batches(torn, opts))
    (tmp_path / "c.chunk").unlink()
    with pytest.raises(StreamgateSourceError, match="'c.chunk' is missing from tier 2 folder"):
        list(task_batches(task, opts))


def test_metadata_option_replaces_admin(tmp_path: Path) -> None:
    opts = parse_options({"gateway": "a:1", "metadata": str(tmp_path / "m.db"), "topic": "t"})
    assert opts.admin == "" and opts.metadata
    with pytest.raises(StreamgateSourceError, match="option 'metadata': no metadata file"):
        chunk_map_from(str(tmp_path / "m.db"), "t")


def test_credentials_and_https() -> None:
    opts = parse_options({**BASE, "admin": "https://h:8", "user": "alice", "password": "pw"})
    assert opts.admin == "h:8" and opts.access.admin_https
    assert opts.access.admin_url(opts.admin, "/streams") == "https://h:8/streams"
    assert opts.access.admin_headers() == {"Authorization": "Basic YWxpY2U6cHc="}
    assert "pw" not in repr(opts)  # plans and logs never show the password
    assert parse_options(BASE).access.admin_headers() == {}


def test_offsets_below_the_log_start_fail_unless_told() -> None:
    below = {**BASE, "startingOffsets": '{"t": {"0": 10, "1": 0}}'}
    with pytest.raises(
        StreamgateSourceError,
        match="offsets 10 to 49 are no longer there.*'failOnDataLoss' false skips them",
    ):
        plan_topic(topic_map(), parse_options(below))
    tasks = plan_topic(topic_map(), parse_options({**below, "failOnDataLoss": "false"}))
    assert tasks[0].start == 50  # skipped to the log start
    # earliest never loses anything
    assert plan_topic(topic_map(), parse_options(BASE))[0].start == 50


def test_scram_client_against_the_rfc_7677_exchange() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil")
    client.nonce, client.first_bare = "rOprNGfwEbeRWgbNEkqO", "n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert client.final(server_first).endswith(b",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client.check(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(ScramError, match="does not know the password"):
        client.check(b"v=" + base64.b64encode(b"x" * 32))
