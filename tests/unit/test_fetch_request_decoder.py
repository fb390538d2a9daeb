"""The hand-written Fetch request decoder against kio's reader, every accepted version."""

from __future__ import annotations

import dataclasses
import datetime
import io
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_writer

from kafkawire.apis import SUPPORTED_APIS, ApiKey
from kafkawire.codec import ProtocolError, RequestHeader, decode_body
from kafkawire.fetch_request import decode_fetch_request

_SUPPORT = SUPPORTED_APIS[ApiKey.FETCH]
VERSIONS = range(_SUPPORT.min_version, _SUPPORT.max_version + 1)
_PREFIX = b"\x00\x01\x00\x0chdr"  # the body need not start at 0
_INT32 = st.integers(-(2**31), 2**31 - 1)
_INT64 = st.integers(-(2**63), 2**63 - 1)


@dataclasses.dataclass
class Wanted:
    """What a client could put in a Fetch request (every version's fields)."""

    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation: int
    session: tuple[int, int]
    topics: list[tuple[str, uuid.UUID, list[tuple[int, ...]]]]
    forgotten: list[tuple[str, uuid.UUID, list[int]]]
    rack_id: str
    cluster_id: str | None


def _module(version: int) -> Any:
    cls: Any = load_request_schema(ApiKey.FETCH, version)
    return __import__(cls.__module__, fromlist=["FetchRequest"])


def _present(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """The values of the fields `cls` (one version's dataclass) has."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in values.items() if k in names}


def _key(by_id: bool, name: str, tid: uuid.UUID) -> dict[str, Any]:
    """How a topic is named in this version: by id (v13+) or by name."""
    return {"topic_id": tid} if by_id else {"topic": name}


def _encode(version: int, w: Wanted) -> bytes:
    m = _module(version)
    by_id = version >= 13
    topics = []
    for name, tid, parts in w.topics:
        partitions = tuple(
            m.FetchPartition(
                **_present(
                    m.FetchPartition,
                    dict(
                        partition=p[0],
                        current_leader_epoch=p[1],
                        fetch_offset=p[2],
                        last_fetched_epoch=p[3],
                        log_start_offset=p[4],
                        partition_max_bytes=p[5],
                    ),
                )
            )
            for p in parts
        )
        topics.append(m.FetchTopic(**_key(by_id, name, tid), partitions=partitions))
    values: dict[str, Any] = dict(
        max_wait=datetime.timedelta(milliseconds=w.max_wait_ms),
        min_bytes=w.min_bytes,
        max_bytes=w.max_bytes,
        isolation_level=w.isolation,
        session_id=w.session[0],
        session_epoch=w.session[1],
        topics=tuple(topics),
        rack_id=w.rack_id,
        cluster_id=w.cluster_id,
        replica_id=-1,
    )
    if version >= 7:
        values["forgotten_topics_data"] = tuple(
            m.ForgottenTopic(**_key(by_id, name, tid), partitions=tuple(p))
            for name, tid, p in w.forgotten
        )
    body = m.FetchRequest(**_present(m.FetchRequest, values))
    buffer = io.BytesIO()
    entity_writer(type(body))(buffer, body)
    return _PREFIX + buffer.getvalue()


def _same(version: int, raw: bytes) -> None:
    header = RequestHeader(ApiKey.FETCH, version, 1, "c", version >= 12)
    want = decode_body(header, raw, len(_PREFIX))
    got = decode_fetch_request(raw, len(_PREFIX), version)
    for name in ("max_wait", "min_bytes", "max_bytes", "isolation_level", "session_id"):
        assert getattr(got, name) == getattr(want, name, getattr(got, name)), name
    if version >= 7:
        assert got.session_epoch == want.session_epoch
    if version >= 11:
        assert got.rack_id == want.rack_id
    if version >= 12:
        assert got.cluster_id == want.cluster_id
    assert len(got.topics) == len(want.topics)
    for mine, theirs in zip(got.topics, want.topics, strict=True):
        if version >= 13:
            assert mine.topic_id == theirs.topic_id  # type: ignore[union-attr]
            assert not hasattr(mine, "topic")
        else:
            assert mine.topic == theirs.topic  # type: ignore[union-attr]
            assert not hasattr(mine, "topic_id")  # the handler tells them apart so
        assert len(mine.partitions) == len(theirs.partitions)
        for p, q in zip(mine.partitions, theirs.partitions, strict=True):
            for field in dataclasses.fields(q):
                if "tag" in field.metadata:  # follower-only tagged fields (v17+): skipped
                    continue
                assert getattr(p, field.name) == getattr(q, field.name), field.name
    forgotten = getattr(want, "forgotten_topics_data", ())
    assert len(got.forgotten_topics_data) == len(forgotten)
    for mine_f, theirs_f in zip(got.forgotten_topics_data, forgotten, strict=True):
        key = "topic_id" if version >= 13 else "topic"
        assert getattr(mine_f, key) == getattr(theirs_f, key)
        assert list(mine_f.partitions) == list(theirs_f.partitions)


_names = st.text(min_size=1, max_size=20)
_ids = st.uuids() | st.just(uuid.UUID(int=0))
_wanted = st.builds(
    Wanted,
    max_wait_ms=st.integers(0, 2**31 - 1),
    min_bytes=_INT32,
    max_bytes=_INT32,
    isolation=st.sampled_from([0, 1]),
    session=st.tuples(_INT32, _INT32),
    topics=st.lists(
        st.tuples(
            _names,
            _ids,
            st.lists(st.tuples(_INT32, _INT32, _INT64, _INT32, _INT64, _INT32), max_size=5),
        ),
        max_size=3,
    ),
    forgotten=st.lists(st.tuples(_names, _ids, st.lists(_INT32, max_size=4)), max_size=2),
    rack_id=st.text(max_size=10),
    cluster_id=st.none() | st.text(max_size=10),
)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=100, deadline=None)
@given(wanted=_wanted)
def test_matches_kio(version: int, wanted: Wanted) -> None:
    _same(version, _encode(version, wanted))


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncation_is_a_protocol_error(version: int) -> None:
    wanted = Wanted(
        500,
        1,
        52428800,
        1,
        (7, 3),
        [("t", uuid.uuid4(), [(0, 5, 100, 4, 0, 1048576), (3, 5, 7, 4, 0, 65536)])],
        [("u", uuid.uuid4(), [1, 2])],
        "rack-1",
        "cluster",
    )
    raw = _encode(version, wanted)
    _same(version, raw)
    for end in range(len(_PREFIX), len(raw)):
        with pytest.raises(ProtocolError):
            decode_fetch_request(raw[:end], len(_PREFIX), version)


def test_hostile_lengths_are_refused_before_allocating() -> None:
    # v4: replica id, limits, then a topic array claiming 2**31 - 1 entries.
    raw = _PREFIX + b"\xff\xff\xff\xff" + bytes(13) + b"\x7f\xff\xff\xff"
    with pytest.raises(ProtocolError, match="truncated"):
        decode_fetch_request(raw, len(_PREFIX), 4)
    null_topics = _PREFIX + b"\xff\xff\xff\xff" + bytes(13) + b"\xff\xff\xff\xff"
    with pytest.raises(ProtocolError, match="null array"):
        decode_fetch_request(null_topics, len(_PREFIX), 4)


@pytest.mark.parametrize("version", [0, 3, 19])
def test_refuses_versions_it_does_not_know(version: int) -> None:
    with pytest.raises(ProtocolError):
        decode_fetch_request(_PREFIX + b"\x00" * 40, len(_PREFIX), version)
