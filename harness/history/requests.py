"""The run configuration and the raw pipelined requests of the prober."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from .model import Op, Recorder

_T = TypeVar("_T")


# --------------------------------------------------------------------------- the workload

API_PRODUCE, API_FETCH, API_LIST_OFFSETS, API_METADATA = 0, 1, 2, 3
API_OFFSET_COMMIT, API_OFFSET_FETCH, API_CREATE_TOPICS, API_DELETE_RECORDS = 8, 9, 19, 21
V_PRODUCE, V_FETCH, V_LIST_OFFSETS, V_METADATA = 9, 12, 7, 12
V_OFFSET_COMMIT, V_OFFSET_FETCH, V_CREATE_TOPICS, V_DELETE_RECORDS = 8, 7, 7, 2
EARLIEST, LATEST = -2, -1


@dataclass
class RunConfig:
    seconds: float = 60.0
    kills: int = 1
    seed: int = 1
    partitions: int = 4
    producers: int = 2
    keys_per_producer: int = 8
    produce_pause_s: float = 0.05  # between rounds of one record per key
    async_commits_per_cycle: int = 200
    create_topics: int = 20  # CreateTopics+Metadata probes at most
    repo: Path | None = None  # the gateway's code (cwd and PYTHONPATH); default: this one
    workdir: Path | None = None  # data dir and log; default: a temporary one, removed


def _code(error: Any) -> int:
    return int(getattr(error, "value", error))


class _Raw:
    """One raw connection (`kafkaclient.KafkaClient`) that pipelines requests of mixed kinds:
    every request of a batch is sent before the first answer is read."""

    counter = 0
    counter_lock = threading.Lock()

    def __init__(self, recorder: Recorder, bootstrap: str, client: str) -> None:
        from kafkaclient.client import KafkaClient

        with _Raw.counter_lock:
            _Raw.counter += 1
            number = _Raw.counter
        self.recorder = recorder
        self.client = client
        self.conn = f"{client}/raw{number}"
        self.kc = KafkaClient(bootstrap, timeout=15.0, client_id=client)

    def close(self) -> None:
        self.kc.close()

    def pipeline(self, requests: Sequence[Request]) -> list[Any]:
        """Send every request, then read every answer in order. Each request's Op (if any) is
        begun as it is sent; the caller finishes it from the answer. On a connection error
        the ops without an answer stay unknown and the error is raised."""
        from kafkaclient.client import KafkaClientError, encode_request

        kc = self.kc
        sent: list[int] = []
        frames = []
        for api_key, version, body, _op in requests:
            kc._correlation_id += 1
            frames.append(encode_request(api_key, version, kc._correlation_id, kc._client_id, body))
            sent.append(kc._correlation_id)
        for _api_key, _version, _body, op in requests:
            if op is not None:
                op.client = self.client
                self.recorder.begin(op, self.conn)
        try:  # back to back, in one write: the gateway gets them all at once
            kc._sock.sendall(b"".join(frames))
        except OSError as exc:
            raise KafkaClientError(f"request failed: {exc}") from exc
        answers = []
        for (api_key, version, _body, _op), correlation_id in zip(requests, sent, strict=True):
            answers.append(kc._read_response(api_key, version, correlation_id))
        return answers


Request = tuple[int, int, dict[str, Any], Op | None]  # api key, version, body, its Op


def list_offsets_request(topic: str, partition: int, timestamp: int, op: Op | None) -> Request:
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "timestamp": timestamp}]}
        ],
    }
    return API_LIST_OFFSETS, V_LIST_OFFSETS, body, op


def fetch_request(topic: str, partition: int, offset: int, op: Op | None) -> Request:
    """A Fetch that answers at once with what there is (max wait 0, min bytes 0)."""
    wanted = {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
    body = {
        "max_wait": 0,
        "min_bytes": 0,
        "topics": [{"topic": topic, "partitions": [wanted]}],
        "forgotten_topics_data": [],
    }
    return API_FETCH, V_FETCH, body, op


def produce_request(topic: str, partition: int, batch: bytes, op: Op | None) -> Request:
    data = [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]
    body = {"transactional_id": None, "acks": -1, "timeout": 30000, "topic_data": data}
    return API_PRODUCE, V_PRODUCE, body, op


def commit_request(group: str, topic: str, partition: int, offset: int, op: Op | None) -> Request:
    """OffsetCommit without group management (generation -1)."""
    wanted = {"partition_index": partition, "committed_offset": offset, "committed_metadata": None}
    body = {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [{"name": topic, "partitions": [wanted]}],
    }
    return API_OFFSET_COMMIT, V_OFFSET_COMMIT, body, op


def offset_fetch_request(group: str, topic: str, partitions: Sequence[int]) -> Request:
    body = {"group_id": group, "topics": [{"name": topic, "partition_indexes": list(partitions)}]}
    return API_OFFSET_FETCH, V_OFFSET_FETCH, body, None


def delete_records_request(topic: str, partition: int, offset: int, op: Op | None) -> Request:
    wanted = [{"name": topic, "partitions": [{"partition_index": partition, "offset": offset}]}]
    return API_DELETE_RECORDS, V_DELETE_RECORDS, {"topics": wanted, "timeout": 30000}, op


def create_topics_request(topics: dict[str, int], op: Op | None) -> Request:
    wanted = [
        {"name": name, "num_partitions": count, "replication_factor": 1}
        for name, count in topics.items()
    ]
    body = {"topics": wanted, "timeout": 30000, "validate_only": False}
    return API_CREATE_TOPICS, V_CREATE_TOPICS, body, op


def metadata_request(topic: str, op: Op | None) -> Request:
    body = {
        "topics": [{"name": topic, "topic_id": None}],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    return API_METADATA, V_METADATA, body, op


def _records_of(blob: Any, from_offset: int) -> list[tuple[int, str | None, str | None]]:
    from core.recordbatch import decode_records, iter_stored_batches

    if not blob:
        return []
    buf = bytes(blob)
    out = []
    for pos, header in iter_stored_batches(buf):
        if header.is_control:
            continue
        for rec in decode_records(memoryview(buf)[pos : pos + header.total_size]):
            if rec.offset >= from_offset:
                key = None if rec.key is None else bytes(rec.key).decode()
                value = None if rec.value is None else bytes(rec.value).decode()
                out.append((rec.offset, key, value))
    return out
