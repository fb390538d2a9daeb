"""Contract tests of the tier-2 object stores: the local folder and S3 (moto server, MinIO).

Every contract test runs against each implementation through the ``store`` fixture. The S3
flavour talks HTTP to a real S3 API server (moto in server mode), in a fresh bucket per test.
"""

from __future__ import annotations

import http.server
import os
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import trio

from core.segments import objectstore
from core.segments.objectstore import (
    LocalFolderStore,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreUnavailable,
    S3Store,
    open_object_store,
)
from harness.moto import MotoServer
from harness.proxy import OutageProxy

# The fixtures live in tests/support/s3.py; registering the plugin here as well keeps this
# module runnable on its own (a plugin registered twice under one name is loaded once).
pytest_plugins = ["support.s3"]

DATA = bytes(range(256)) * 40 + b"tail"  # 10244 bytes, every offset distinguishable


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    return trio.run(fn)


def new_bucket() -> str:
    return f"sg-test-{uuid.uuid4().hex[:20]}"


def s3_client(endpoint: str) -> Any:
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


@pytest.fixture(params=["folder", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    if request.param == "folder":
        st: ObjectStore = LocalFolderStore(str(tmp_path / "tier2"))
    else:
        moto: MotoServer = request.getfixturevalue("moto_server")
        st = S3Store(new_bucket(), "cluster-a/tier2", endpoint_url=moto.endpoint, delete_batch=50)
    yield st
    st.close()


# --------------------------------------------------------------------------- contract


def test_put_and_get_exact_ranges(store: ObjectStore) -> None:
    async def main() -> None:
        key = "0f3a9c/3/00000000000000000000.chunk"
        await store.put(key, DATA)
        assert await store.get_range(key, 0, 16) == DATA[:16]
        assert await store.get_range(key, 5000, 1234) == DATA[5000:6234]
        assert await store.get_range(key, len(DATA) - 4, 4) == b"tail"
        assert await store.get_range(key, len(DATA) - 1, 1) == b"l"
        assert await store.get_range(key, 0, len(DATA)) == DATA
        assert await store.get_range(key, 100, 0) == b""
        with pytest.raises(ValueError):
            await store.get_range(key, len(DATA) - 4, 5)  # one byte past the end

    run(main)


def test_put_in_pieces_stores_them_end_to_end(store: ObjectStore) -> None:
    """A chunk is handed over in pieces (views of its batches, the index, the footer) and
    written gathered: the object is their concatenation, empty pieces and all, and more
    pieces than one gathered write takes."""
    pieces: list[bytes | memoryview] = [memoryview(DATA)[:100], b"", DATA[100:5000]]
    pieces += [bytes([i % 251]) * (i % 7) for i in range(3000)]
    pieces.append(memoryview(DATA)[5000:])

    async def main() -> None:
        await store.put("t/9/pieces.chunk", pieces)
        whole = b"".join(pieces)
        assert await store.get_range("t/9/pieces.chunk", 0, len(whole)) == whole

    run(main)


def test_overwrite_replaces_whole_object(store: ObjectStore) -> None:
    async def main() -> None:
        await store.put("t/0/a.chunk", DATA)
        await store.put("t/0/a.chunk", b"short")
        assert await store.get_range("t/0/a.chunk", 0, 5) == b"short"
        with pytest.raises(ValueError):
            await store.get_range("t/0/a.chunk", 0, 6)
        assert await store.list_keys("") == ["t/0/a.chunk"]

    run(main)


def test_empty_object(store: ObjectStore) -> None:
    async def main() -> None:
        await store.put("t/empty", b"")
        assert await store.get_range("t/empty", 0, 0) == b""
        assert await store.list_keys("t/") == ["t/empty"]

    run(main)


def test_missing_key_is_object_not_found(store: ObjectStore) -> None:
    async def main() -> None:
        with pytest.raises(ObjectNotFound):
            await store.get_range("nope/0/x.chunk", 0, 10)
        with pytest.raises(ObjectNotFound):
            await store.get_range("nope/0/x.chunk", 0, 0)
        await store.put("some/0/x.chunk", b"abc")
        with pytest.raises(ObjectNotFound):
            await store.get_range("some/0", 0, 1)  # a prefix of a key is not an object
        await store.delete_many(["some/0/x.chunk"])
        with pytest.raises(ObjectNotFound):
            await store.get_range("some/0/x.chunk", 0, 1)

    run(main)


def test_delete_many_ignores_missing_keys(store: ObjectStore) -> None:
    async def main() -> None:
        for i in range(5):
            await store.put(f"t/1/{i:020d}.chunk", b"x" * i)
        await store.delete_many([])
        await store.delete_many(["t/1/00000000000000000001.chunk", "t/1/missing", "other/x"])
        assert await store.list_keys("t/") == [f"t/1/{i:020d}.chunk" for i in (0, 2, 3, 4)]
        await store.delete_many([f"t/1/{i:020d}.chunk" for i in range(5)])
        assert await store.list_keys("") == []
        await store.delete_many([f"t/1/{i:020d}.chunk" for i in range(5)])  # all gone: fine

    run(main)


def test_delete_many_in_several_batches(store: ObjectStore) -> None:
    # The S3 flavour deletes in batches of 50 here, so 130 keys need three requests.
    keys = [f"b/{i % 3}/{i:020d}.chunk" for i in range(130)]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for key in keys:
                nursery.start_soon(store.put, key, key.encode())
        assert await store.list_keys("b/") == sorted(keys)
        await store.delete_many(keys[:-7] + ["b/9/missing"])
        assert await store.list_keys("b/") == sorted(keys[-7:])

    run(main)


def test_list_keys_by_prefix_sorted(store: ObjectStore) -> None:
    keys = [
        "t2/0/00000000000000000000.chunk",
        "t1/3/00000000000000000100.chunk",
        "t1/3/00000000000000000000.chunk",
        "t1/10/00000000000000000000.chunk",
        "t1/1/00000000000000000000.chunk",
        "t10/0/00000000000000000000.chunk",
        "top-level-object",
    ]

    async def main() -> None:
        for key in keys:
            await store.put(key, b"x")
        assert await store.list_keys("") == sorted(keys)
        assert await store.list_keys("t1/") == sorted(k for k in keys if k.startswith("t1/"))
        assert await store.list_keys("t1") == sorted(k for k in keys if k.startswith("t1"))
        assert await store.list_keys("t1/3/") == [
            "t1/3/00000000000000000000.chunk",
            "t1/3/00000000000000000100.chunk",
        ]
        assert await store.list_keys("t1/3/000000000000000001") == [
            "t1/3/00000000000000000100.chunk"
        ]
        assert await store.list_keys("t1/1") == [
            "t1/1/00000000000000000000.chunk",
            "t1/10/00000000000000000000.chunk",
        ]
        assert await store.list_keys("nothing/") == []
        assert await store.list_keys("t1/9/") == []

    run(main)


def test_invalid_keys_rejected(store: ObjectStore) -> None:
    async def main() -> None:
        for bad in ["", "/abs", "a//b", "a/../b", "../x", "a/.hidden", "a/"]:
            with pytest.raises(ValueError):
                await store.put(bad, b"x")
        with pytest.raises(ValueError):
            await store.get_range("a/b", -1, 1)
        with pytest.raises(ValueError):
            await store.list_keys("../")

    run(main)


def test_description(store: ObjectStore) -> None:
    if isinstance(store, S3Store):
        assert store.description.startswith(f"s3://{store.bucket}/cluster-a/tier2 at http://")
    else:
        assert store.description.startswith("folder /")


# --------------------------------------------------------------------------- folder specifics


def test_folder_store_layout_and_cleanup(tmp_path: Path) -> None:
    root = tmp_path / "t2"
    st = LocalFolderStore(str(root))

    async def main() -> None:
        await st.put("a/b/c.chunk", b"hello")
        assert (root / "a" / "b" / "c.chunk").read_bytes() == b"hello"
        assert sorted(os.listdir(root / "a" / "b")) == ["c.chunk"]  # no temp file left behind
        # a leftover temp file of a crashed put is not listed
        (root / "a" / "b" / ".tmp-0123-c.chunk").write_bytes(b"partial")
        assert await st.list_keys("") == ["a/b/c.chunk"]
        (root / "a" / "b" / ".tmp-0123-c.chunk").unlink()
        await st.delete_many(["a/b/c.chunk"])
        assert not (root / "a").exists()  # emptied directories are pruned
        assert root.is_dir()

    run(main)


def test_folder_store_writes_a_chunk_in_synced_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk goes to disk a step at a time, an fdatasync after each (so the tier-1 logs'
    fsyncs never queue behind a whole chunk), and still arrives whole: pieces smaller and
    larger than a step, and a last step that is only part of one."""
    step = objectstore.SYNC_STEP_BYTES
    pieces: list[bytes | memoryview] = [os.urandom(1000) for _ in range(3 * step // 1000)]
    pieces += [os.urandom(2 * step + 17), b"", memoryview(os.urandom(step // 3))]
    whole = b"".join(pieces)
    synced: list[int] = []
    real_fdatasync = os.fdatasync

    def counting_fdatasync(fd: int) -> None:
        synced.append(os.fstat(fd).st_size)
        real_fdatasync(fd)

    monkeypatch.setattr(objectstore.os, "fdatasync", counting_fdatasync)
    st = LocalFolderStore(str(tmp_path / "t2"))

    async def main() -> None:
        await st.put("t/1/steps.chunk", pieces)
        assert await st.get_range("t/1/steps.chunk", 0, len(whole)) == whole

    run(main)
    assert len(synced) >= 3 and synced == sorted(synced) and synced[-1] < len(whole)
    gaps = [b - a for a, b in zip([0, *synced], synced, strict=False)]
    assert all(gap < step + 1000 for gap in gaps[:2])  # small pieces: about a step each


def test_folder_store_disk_errors_are_not_unavailable(tmp_path: Path) -> None:
    st = LocalFolderStore(str(tmp_path / "t2"))

    async def main() -> None:
        await st.put("a/file", b"x")
        with pytest.raises(OSError) as info:
            await st.put("a/file/below", b"y")  # a path component is a regular file
        assert not isinstance(info.value, ObjectStoreUnavailable)

    run(main)


# --------------------------------------------------------------------------- URL parsing


def test_open_object_store_urls(tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")

    st = open_object_store(None, data_dir)
    assert isinstance(st, LocalFolderStore)
    assert st.root == os.path.join(data_dir, "tier2")
    st = open_object_store("", data_dir)
    assert isinstance(st, LocalFolderStore)
    assert st.root == os.path.join(data_dir, "tier2")

    st = open_object_store("s3://my-bucket/some/prefix/", data_dir, "http://127.0.0.1:9000")
    assert isinstance(st, S3Store)
    assert (st.bucket, st.prefix, st.endpoint_url) == (
        "my-bucket",
        "some/prefix",
        "http://127.0.0.1:9000",
    )
    assert st.description == "s3://my-bucket/some/prefix at http://127.0.0.1:9000"
    st.close()

    st = open_object_store("s3://my-bucket", data_dir)
    assert isinstance(st, S3Store)
    assert (st.bucket, st.prefix, st.endpoint_url) == ("my-bucket", "", None)
    assert st.description == "s3://my-bucket"
    st.close()
    st = open_object_store("s3://my-bucket/", data_dir)
    assert isinstance(st, S3Store)
    assert st.prefix == ""
    st.close()

    st = open_object_store(f"file://{tmp_path}/objs", data_dir)
    assert isinstance(st, LocalFolderStore)
    assert st.root == f"{tmp_path}/objs"
    assert st.description == f"folder {tmp_path}/objs"

    st = open_object_store(str(tmp_path / "plain"), data_dir)
    assert isinstance(st, LocalFolderStore)
    assert st.root == str(tmp_path / "plain")

    for bad in ["http://host/x", "gs://bucket/x", "s3://", "s3:///prefix", "file://host/x"]:
        with pytest.raises(ValueError):
            open_object_store(bad, data_dir)


# --------------------------------------------------------------------------- S3 specifics


def test_s3_bucket_created_on_first_use(moto_server: MotoServer) -> None:
    bucket = new_bucket()
    client = s3_client(moto_server.endpoint)
    st = S3Store(bucket, "p", endpoint_url=moto_server.endpoint)
    assert bucket not in {b["Name"] for b in client.list_buckets()["Buckets"]}

    async def main() -> None:
        assert await st.list_keys("") == []
        assert bucket in {b["Name"] for b in client.list_buckets()["Buckets"]}
        await st.put("x/y", b"data")
        assert client.get_object(Bucket=bucket, Key="p/x/y")["Body"].read() == b"data"

    run(main)
    st.close()


def test_s3_bucket_recreated_when_removed(moto_server: MotoServer) -> None:
    bucket = new_bucket()
    client = s3_client(moto_server.endpoint)
    st = S3Store(bucket, "", endpoint_url=moto_server.endpoint)

    async def main() -> None:
        await st.put("k", b"v1")
        client.delete_object(Bucket=bucket, Key="k")
        client.delete_bucket(Bucket=bucket)
        await st.put("k", b"v2")
        assert await st.get_range("k", 0, 2) == b"v2"

    run(main)
    st.close()


def test_s3_prefixes_isolate_stores(moto_server: MotoServer) -> None:
    bucket = new_bucket()
    a = S3Store(bucket, "/cluster-a/", endpoint_url=moto_server.endpoint)
    b = S3Store(bucket, "cluster-b", endpoint_url=moto_server.endpoint)
    root = S3Store(bucket, "", endpoint_url=moto_server.endpoint)

    async def main() -> None:
        await a.put("t/0/x", b"a")
        await b.put("t/0/x", b"b")
        assert await a.list_keys("") == ["t/0/x"]
        assert await b.get_range("t/0/x", 0, 1) == b"b"
        assert await root.list_keys("") == ["cluster-a/t/0/x", "cluster-b/t/0/x"]
        await a.delete_many(["t/0/x"])
        assert await root.list_keys("") == ["cluster-b/t/0/x"]

    run(main)
    for st in (a, b, root):
        st.close()


def test_s3_delete_many_more_than_1000_keys(moto_server: MotoServer) -> None:
    """DeleteObjects takes at most 1000 keys (moto does not enforce it, so count the requests).
    Deleting missing keys costs the same as deleting real ones, so most keys are missing."""
    st = S3Store(new_bucket(), "big", endpoint_url=moto_server.endpoint)
    keys = [f"t/0/{i:020d}.chunk" for i in range(2003)]
    batches: list[int] = []

    def count(params: dict[str, Any], **_kwargs: Any) -> None:
        batches.append(len(params["Delete"]["Objects"]))

    st._client.meta.events.register("provide-client-params.s3.DeleteObjects", count)

    async def main() -> None:
        for key in keys[::400]:
            await st.put(key, key.encode())
        assert len(await st.list_keys("")) == 6
        await st.delete_many(keys)
        assert await st.list_keys("") == []

    run(main)
    st.close()
    assert batches == [1000, 1000, 3]


def test_s3_outage_raises_unavailable_and_recovers(outage_proxy: OutageProxy) -> None:
    st = S3Store(new_bucket(), "p", endpoint_url=outage_proxy.endpoint)
    seen: list[BaseException] = []

    async def expect_unavailable(call: Awaitable[Any]) -> None:
        with pytest.raises(ObjectStoreUnavailable) as info:
            await call
        seen.append(info.value)

    async def main() -> None:
        await st.put("t/0/before", DATA)
        assert await st.get_range("t/0/before", 10, 10) == DATA[10:20]

        outage_proxy.down()
        await expect_unavailable(st.put("t/0/during", b"x"))
        await expect_unavailable(st.get_range("t/0/before", 0, 10))
        await expect_unavailable(st.list_keys(""))
        await expect_unavailable(st.delete_many(["t/0/before"]))

        outage_proxy.up()
        assert await st.get_range("t/0/before", 0, len(DATA)) == DATA
        await st.put("t/0/after", b"after")
        assert await st.list_keys("t/") == ["t/0/after", "t/0/before"]

    run(main)
    st.close()
    msg = str(seen[0])
    assert "put" in msg and "t/0/during" in msg and outage_proxy.endpoint in msg
    assert all(isinstance(e.__cause__, Exception) for e in seen)


def test_s3_down_at_first_use_creates_bucket_later(outage_proxy: OutageProxy) -> None:
    bucket = new_bucket()
    st = S3Store(bucket, "", endpoint_url=outage_proxy.endpoint)

    async def main() -> None:
        outage_proxy.down()
        with pytest.raises(ObjectStoreUnavailable):
            await st.put("k", b"v")
        outage_proxy.up()
        await st.put("k", b"v")  # the bucket check is retried now
        assert await st.get_range("k", 0, 1) == b"v"

    run(main)
    st.close()


class _ErrorHandler(http.server.BaseHTTPRequestHandler):
    status = 503
    code = "SlowDown"
    requests = 0

    def do_HEAD(self) -> None:  # noqa: N802
        # HeadBucket succeeds, so the error comes from the operation itself.
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _reply(self) -> None:
        type(self).requests += 1
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{self.code}</Code>'
            f"<Message>injected</Message></Error>"
        ).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_DELETE = _reply  # noqa: N815

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@pytest.mark.parametrize(
    ("status", "code", "op"), [(503, "SlowDown", "put"), (500, "InternalError", "get_range")]
)
def test_s3_server_errors_are_unavailable(
    status: int, code: str, op: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in MotoServer.env().items():
        monkeypatch.setenv(name, value)
    handler = type("Handler", (_ErrorHandler,), {"status": status, "code": code, "requests": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        st = S3Store("bucket", "", endpoint_url=f"http://127.0.0.1:{server.server_address[1]}")

        async def main() -> None:
            with pytest.raises(ObjectStoreUnavailable, match=f"{op} 'k'.*{code}"):
                if op == "put":
                    await st.put("k", b"v")
                else:
                    await st.get_range("k", 0, 1)

        run(main)
        st.close()
        assert handler.requests >= 2  # botocore retried before giving up
    finally:
        server.shutdown()
        server.server_close()


# --------------------------------------------------------------------------- MinIO


def _docker_reachable() -> bool:
    try:
        import docker

        return bool(docker.from_env().ping())
    except Exception:
        return False


@pytest.mark.skipif(
    not _docker_reachable(),
    reason="no Docker engine on this machine: MinIO via testcontainers skipped",
)
def test_minio_contract_basics(monkeypatch: pytest.MonkeyPatch) -> None:
    from testcontainers.minio import MinioContainer

    with MinioContainer() as minio:
        config = minio.get_config()
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", config["access_key"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", config["secret_key"])
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        st = S3Store(new_bucket(), "tier2", endpoint_url=f"http://{config['endpoint']}")

        async def main() -> None:
            await st.put("t/0/a.chunk", DATA)
            await st.put("t/0/b.chunk", b"b")
            assert await st.get_range("t/0/a.chunk", 5000, 100) == DATA[5000:5100]
            assert await st.get_range("t/0/a.chunk", len(DATA) - 4, 4) == b"tail"
            with pytest.raises(ObjectNotFound):
                await st.get_range("t/0/missing", 0, 1)
            assert await st.list_keys("t/") == ["t/0/a.chunk", "t/0/b.chunk"]
            await st.delete_many(["t/0/a.chunk", "t/0/missing"])
            assert await st.list_keys("") == ["t/0/b.chunk"]

        run(main)
        st.close()


def test_folder_store_clears_puts_cut_short_by_a_crash(tmp_path) -> None:
    """A put interrupted before its rename leaves a file in the incoming folder only; the
    next start removes it, and it never shows up as a key."""
    store = LocalFolderStore(str(tmp_path))
    leftover = os.path.join(store._incoming, "0123456789abcdef-x.chunk")
    with open(leftover, "wb") as f:
        f.write(b"half a chunk")
    assert trio.run(store.list_keys, "") == []
    LocalFolderStore(str(tmp_path))
    assert not os.path.exists(leftover)
