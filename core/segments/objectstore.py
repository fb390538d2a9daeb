"""Tier-2 object storage: immutable chunks of sealed segments, stored under relative keys.

An :class:`ObjectStore` holds whole objects addressed by relative, slash-separated keys such
as ``"0f3a.../3/00000000000000000000.chunk"``. The contract every implementation keeps:

* ``put(key, data)`` stores the whole object; once it returns the object is durable. Putting
  an existing key replaces the object (writers only ever rewrite identical content).
* ``get_range(key, start, length)`` returns exactly ``length`` bytes from offset ``start``;
  :class:`ObjectNotFound` if there is no such object, ``ValueError`` if the range runs past
  the end of the object.
* ``delete_many(keys)`` deletes the objects; keys that do not exist are not an error.
* ``list_keys(prefix)`` returns the keys (relative to the store's own root or prefix) that
  start with ``prefix``, sorted.
* Failures that may go away on their own (endpoint unreachable, connection refused or reset,
  timeouts, HTTP 5xx, throttling) raise :class:`ObjectStoreUnavailable`: the caller keeps the
  data in tier 1 and retries later. Anything else (bad credentials, a local disk error) is
  raised as it is; :mod:`core.segments.tier2_health` puts any of them into words.
* ``probe()`` (blocking, for a worker thread) writes, reads back and deletes a small object
  outside every key the store hands out, so a start-up check sees what uploads will meet.

Key components must not be empty, ``.`` or ``..``, and must not start with ``.`` (reserved
for the folder store's temporary files), so a key means the same thing in every store.

Two implementations: :class:`LocalFolderStore` (a directory, e.g. ``<data-dir>/tier2``) and
:class:`S3Store` (any S3 API: AWS, MinIO, moto). :func:`open_object_store` picks one from a
URL. All blocking work runs in ``trio.to_thread.run_sync``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

import trio

from ..api import StoreUnavailable
from ..gathered_io import views_of, write_all

T = TypeVar("T")

DEFAULT_S3_REGION = "us-east-1"
S3_DELETE_BATCH = 1000  # the maximum number of keys one DeleteObjects request may carry
_TMP_MARK = ".tmp-"
# Start-up probe objects: a name no key may have (keys' components never start with ".").
_PROBE_MARK = ".streamgate-probe-"


# An object's bytes: one buffer, or pieces in order (written gathered, not joined, where
# the store can).
Body = bytes | Sequence[bytes | memoryview]


class ObjectStoreUnavailable(StoreUnavailable):
    """The store could not be reached or refused to serve for now; retrying later may work."""


class ObjectNotFound(Exception):
    """There is no object under the requested key."""


class BucketNotCreated(Exception):
    """The S3 bucket does not exist and creating it was refused (the cause says why)."""

    def __init__(self, bucket: str, cause: BaseException) -> None:
        super().__init__(f"bucket {bucket!r} does not exist and could not be created: {cause}")
        self.bucket = bucket
        self.cause = cause


def _probe_body(token: str) -> bytes:
    return f"streamgate tier-2 probe {token}\n".encode()


class ObjectStore(Protocol):
    description: str

    async def put(self, key: str, data: Body) -> None: ...

    async def get_range(self, key: str, start: int, length: int) -> bytes: ...

    async def delete_many(self, keys: list[str]) -> None: ...

    async def list_keys(self, prefix: str) -> list[str]: ...

    def probe(self) -> None: ...

    def close(self) -> None: ...


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not key:
        raise ValueError(f"object key must be a non-empty string, got {key!r}")
    for part in key.split("/"):
        if not part or part.startswith("."):
            raise ValueError(
                f"invalid object key {key!r}: components must be non-empty and must not "
                "start with '.'"
            )


def _check_prefix(prefix: str) -> None:
    if not isinstance(prefix, str):
        raise ValueError(f"object key prefix must be a string, got {prefix!r}")
    if not prefix:
        return
    parts = prefix.split("/")
    # The last part may be empty ("dir/") or a partial name; the complete ones must be valid.
    for part in parts[:-1]:
        if not part or part.startswith("."):
            raise ValueError(f"invalid object key prefix {prefix!r}")
    if parts[-1] in (".", ".."):
        raise ValueError(f"invalid object key prefix {prefix!r}")


def _check_range(key: str, start: int, length: int) -> None:
    _check_key(key)
    if start < 0 or length < 0:
        raise ValueError(f"invalid range start={start} length={length} for {key!r}")


# --------------------------------------------------------------------------- local folder


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _makedirs_durable(path: str) -> None:
    """Create ``path`` and missing parents, fsyncing the parent of every directory created."""
    if os.path.isdir(path):
        return
    missing: list[str] = []
    cur = path
    while not os.path.isdir(cur):
        missing.append(cur)
        parent = os.path.dirname(cur)
        if parent == cur:
            break
        cur = parent
    for d in reversed(missing):
        try:
            os.mkdir(d)
        except FileExistsError:
            if not os.path.isdir(d):
                raise
            continue
        _fsync_dir(os.path.dirname(d))


# A chunk is written in steps of about this size, each followed by an fdatasync. One fsync
# of a whole 8 MiB chunk queues all of it on the disk at once, and the tier-1 logs' fsyncs
# (what acknowledgements wait for) on the same disk wait behind it. Measured on this
# project's 2-core VM, a 128 KiB append + fsync in a loop while 8 MiB files are written
# beside it: p99 3.6-4.4 -> 1.8-2.2 ms, p99.9 20-21 -> 7-9 ms, stalls over 20 ms 11-15 per
# 6 s -> none (`tools/probes/fsync_beside_chunks.py`).
SYNC_STEP_BYTES = 512 * 1024


def _write_in_synced_steps(fd: int, pieces: list[memoryview]) -> None:
    group: list[memoryview] = []
    size = 0
    for piece in pieces:
        group.append(piece)
        size += len(piece)
        if size >= SYNC_STEP_BYTES:
            write_all(lambda views: os.writev(fd, views), group)
            os.fdatasync(fd)
            group, size = [], 0
    if group:
        write_all(lambda views: os.writev(fd, views), group)


def probe_folder(root: str) -> None:
    """Blocking: create ``root`` if missing, then write, read back and delete a small file
    in it; ``OSError`` if any step fails. Touches nothing else (no store needs to be open)."""
    token = secrets.token_hex(8)
    path = os.path.join(root, _PROBE_MARK + token)
    body = _probe_body(token)
    _makedirs_durable(root)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            write_all(lambda views: os.writev(fd, views), views_of([body]))
            os.fsync(fd)
        finally:
            os.close(fd)
        with open(path, "rb") as f:
            if f.read() != body:
                raise OSError(errno.EIO, "the probe file read back differs", path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


class LocalFolderStore:
    """Objects as files under ``root``; the key's slashes become sub-directories."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.description = f"folder {self.root}"
        # Puts are written here first and renamed into place; whatever is left here was
        # cut short by a crash (only this process writes under the root), so clear it.
        self._incoming = os.path.join(self.root, _TMP_MARK + "incoming")
        shutil.rmtree(self._incoming, ignore_errors=True)
        _makedirs_durable(self._incoming)
        # Serialises "make the directory and create a file in it" against "remove the
        # directory because it became empty", so a put never loses its directory.
        self._dir_lock = threading.Lock()

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *key.split("/"))

    # put ---------------------------------------------------------------------------------
    def _put_sync(self, key: str, data: Body) -> None:
        path = self._path(key)
        folder = os.path.dirname(path)
        tmp = os.path.join(self._incoming, f"{secrets.token_hex(8)}-{os.path.basename(path)}")
        with self._dir_lock:
            _makedirs_durable(folder)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            try:
                # gathered writes: the kernel copies, the GIL is free meanwhile
                pieces = views_of([data] if isinstance(data, bytes) else data)
                _write_in_synced_steps(fd, pieces)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _fsync_dir(folder)

    async def put(self, key: str, data: Body) -> None:
        _check_key(key)
        body = bytes(data) if isinstance(data, bytes | bytearray | memoryview) else list(data)
        await trio.to_thread.run_sync(self._put_sync, key, body)

    # get_range ---------------------------------------------------------------------------
    def _get_range_sync(self, key: str, start: int, length: int) -> bytes:
        path = self._path(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFound(f"{self.description}: no object {key!r}") from None
        try:
            if os.path.isdir(path):
                raise ObjectNotFound(f"{self.description}: no object {key!r} (a directory)")
            chunks: list[bytes] = []
            got = 0
            while got < length:
                chunk = os.pread(fd, length - got, start + got)
                if not chunk:
                    size = os.fstat(fd).st_size
                    raise ValueError(
                        f"{self.description}: range start={start} length={length} runs past "
                        f"the end of {key!r} ({size} bytes)"
                    )
                chunks.append(chunk)
                got += len(chunk)
            if len(chunks) == 1:
                return chunks[0]
            return b"".join(chunks)
        finally:
            os.close(fd)

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        _check_range(key, start, length)
        return await trio.to_thread.run_sync(self._get_range_sync, key, start, length)

    # delete_many -------------------------------------------------------------------------
    def _delete_many_sync(self, keys: list[str]) -> None:
        folders: set[str] = set()
        for key in keys:
            path = self._path(key)
            try:
                os.unlink(path)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except IsADirectoryError:
                continue  # a key prefix, not an object: nothing to delete
            folders.add(os.path.dirname(path))
        for folder in sorted(folders, key=len, reverse=True):
            with contextlib.suppress(FileNotFoundError):
                _fsync_dir(folder)
            self._prune_empty(folder)

    def _prune_empty(self, folder: str) -> None:
        """Remove ``folder`` and its parents (below the root) while they are empty."""
        with self._dir_lock:
            while folder != self.root and folder.startswith(self.root + os.sep):
                try:
                    os.rmdir(folder)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                        return
                    raise
                folder = os.path.dirname(folder)

    async def delete_many(self, keys: list[str]) -> None:
        keys = list(keys)
        for key in keys:
            _check_key(key)
        if keys:
            await trio.to_thread.run_sync(self._delete_many_sync, keys)

    # list_keys ---------------------------------------------------------------------------
    def _list_keys_sync(self, prefix: str) -> list[str]:
        folder_key = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        top = self._path(folder_key) if folder_key else self.root
        keys: list[str] = []
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            rel = os.path.relpath(dirpath, self.root)
            base = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            for name in filenames:
                if name.startswith("."):
                    continue  # temporary files of unfinished puts
                key = base + name
                if key.startswith(prefix):
                    keys.append(key)
        keys.sort()
        return keys

    async def list_keys(self, prefix: str) -> list[str]:
        _check_prefix(prefix)
        return await trio.to_thread.run_sync(self._list_keys_sync, prefix)

    # probe -------------------------------------------------------------------------------
    def probe(self) -> None:
        """Blocking: write, read back and delete a small file in the root (OSError if not)."""
        probe_folder(self.root)

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------- S3

# Error codes of S3 and S3-compatible stores that mean "busy or broken for now, retry later".
_RETRIABLE_CODES = frozenset(
    {
        "SlowDown",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "ServiceUnavailable",
        "InternalError",
        "Throttling",
        "ThrottlingException",
        "RequestThrottled",
        "TooManyRequests",
        "XMinioServerNotInitialized",
    }
)
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})


def _client_error_info(exc: Any) -> tuple[str, int]:
    response = getattr(exc, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return code, status


class S3Store:
    """Objects in an S3 bucket under ``prefix/`` (AWS, MinIO, moto, ...)."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        endpoint_url: str | None = None,
        region: str | None = None,
        *,
        delete_batch: int = S3_DELETE_BATCH,
    ) -> None:
        import boto3
        import botocore.config
        import botocore.exceptions

        if not bucket:
            raise ValueError("S3Store needs a bucket name")
        if not 1 <= delete_batch <= S3_DELETE_BATCH:
            raise ValueError(f"delete_batch must be within 1..{S3_DELETE_BATCH}")
        self._bx = botocore.exceptions
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url or None
        self.delete_batch = delete_batch
        where = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.description = f"{where} at {self.endpoint_url}" if self.endpoint_url else where

        session = boto3.session.Session()
        self.region = region or session.region_name or DEFAULT_S3_REGION
        config = botocore.config.Config(
            region_name=self.region,
            connect_timeout=2,
            read_timeout=10,
            retries={"total_max_attempts": 2, "mode": "standard"},
            s3={"addressing_style": "path"} if self.endpoint_url else None,
        )
        # One client for the store's whole life: boto3 clients are safe to share between the
        # worker threads that trio.to_thread uses (sessions and resources are not).
        self._client: Any = session.client("s3", endpoint_url=self.endpoint_url, config=config)
        self._bucket_lock = threading.Lock()
        self._bucket_ready = False
        self._transient: tuple[type[BaseException], ...] = (
            botocore.exceptions.HTTPClientError,  # read timeout, connection closed/reset
            botocore.exceptions.ConnectionError,  # refused, connect timeout, DNS, proxy
            botocore.exceptions.IncompleteReadError,
        )

    def _full_key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    # error mapping -----------------------------------------------------------------------
    def _unavailable(self, op: str, subject: str, exc: BaseException) -> ObjectStoreUnavailable:
        return ObjectStoreUnavailable(
            f"{self.description}: {op} {subject} failed: {type(exc).__name__}: {exc}"
        )

    def _is_retriable_client_error(self, exc: BaseException) -> bool:
        code, status = _client_error_info(exc)
        return status >= 500 or status == 429 or code in _RETRIABLE_CODES

    def _run(self, op: str, subject: str, fn: Callable[[], T]) -> T:
        """Ensure the bucket exists, run ``fn`` and translate botocore errors (worker thread).

        ``subject`` names what the operation was about in error messages (the key's repr).
        """
        for attempt in range(2):
            try:
                self._ensure_bucket()
                return fn()
            except self._bx.ClientError as exc:
                code, status = _client_error_info(exc)
                if code == "NoSuchBucket" and attempt == 0:
                    # Someone removed the bucket behind our back: create it again and retry.
                    self._bucket_ready = False
                    continue
                if self._is_retriable_client_error(exc):
                    raise self._unavailable(op, subject, exc) from exc
                if op == "get_range" and (code in _NOT_FOUND_CODES or status == 404):
                    raise ObjectNotFound(f"{self.description}: no object {subject}") from None
                if op == "get_range" and (code == "InvalidRange" or status == 416):
                    raise ValueError(
                        f"{self.description}: range runs past the end of {subject}: {exc}"
                    ) from exc
                raise
            except self._transient as exc:
                raise self._unavailable(op, subject, exc) from exc
        raise AssertionError("unreachable")

    def _ensure_bucket(self) -> None:
        if self._bucket_ready:
            return
        with self._bucket_lock:
            if self._bucket_ready:
                return
            try:
                self._client.head_bucket(Bucket=self.bucket)
            except self._bx.ClientError as exc:
                code, status = _client_error_info(exc)
                if status == 403 or code in ("403", "AccessDenied", "Forbidden"):
                    # HEAD answers 403 without a reason (bad key, bad secret, a policy
                    # without s3:ListBucket): go on, the operation's own reply says which
                    self._bucket_ready = True
                    return
                if code not in ("404", "NoSuchBucket", "NotFound") and status != 404:
                    raise
                self._create_bucket()
            self._bucket_ready = True

    def _create_bucket(self) -> None:
        kwargs: dict[str, Any] = {"Bucket": self.bucket}
        if self.region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
        try:
            self._client.create_bucket(**kwargs)
        except self._bx.ClientError as exc:
            code, _status = _client_error_info(exc)
            if code in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                return
            if self._is_retriable_client_error(exc):
                raise
            raise BucketNotCreated(self.bucket, exc) from exc

    # operations --------------------------------------------------------------------------
    async def put(self, key: str, data: Body) -> None:
        _check_key(key)
        pieces = bytes(data) if isinstance(data, bytes | bytearray | memoryview) else list(data)

        def call() -> None:
            body = pieces if isinstance(pieces, bytes) else b"".join(pieces)
            self._client.put_object(Bucket=self.bucket, Key=self._full_key(key), Body=body)

        await trio.to_thread.run_sync(self._run, "put", repr(key), call)

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        _check_range(key, start, length)

        def call() -> bytes:
            full = self._full_key(key)
            if length == 0:
                self._client.head_object(Bucket=self.bucket, Key=full)
                return b""
            rng = f"bytes={start}-{start + length - 1}"
            response = self._client.get_object(Bucket=self.bucket, Key=full, Range=rng)
            with contextlib.closing(response["Body"]) as body:
                data = body.read()
            if len(data) != length:
                raise ValueError(
                    f"{self.description}: range start={start} length={length} runs past the "
                    f"end of {key!r} (got {len(data)} bytes)"
                )
            return data

        return await trio.to_thread.run_sync(self._run, "get_range", repr(key), call)

    async def delete_many(self, keys: list[str]) -> None:
        keys = list(dict.fromkeys(keys))
        for key in keys:
            _check_key(key)

        def call(batch: list[str]) -> None:
            response = self._client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": self._full_key(k)} for k in batch], "Quiet": True},
            )
            errors = [e for e in response.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if not errors:
                return
            first = errors[0]
            detail = (
                f"{len(errors)} of {len(batch)} keys not deleted, first "
                f"{first.get('Key')!r}: {first.get('Code')}: {first.get('Message')}"
            )
            if any(e.get("Code") in _RETRIABLE_CODES for e in errors):
                raise ObjectStoreUnavailable(f"{self.description}: delete_many: {detail}")
            raise OSError(f"{self.description}: delete_many: {detail}")

        for i in range(0, len(keys), self.delete_batch):
            batch = keys[i : i + self.delete_batch]
            what = f"of {len(batch)} keys from {batch[0]!r}"
            await trio.to_thread.run_sync(self._run, "delete_many", what, lambda b=batch: call(b))

    async def list_keys(self, prefix: str) -> list[str]:
        _check_prefix(prefix)
        base = f"{self.prefix}/" if self.prefix else ""

        def call() -> list[str]:
            paginator = self._client.get_paginator("list_objects_v2")
            keys: list[str] = []
            for page in paginator.paginate(Bucket=self.bucket, Prefix=base + prefix):
                for item in page.get("Contents", []):
                    full: str = item["Key"]
                    if full.startswith(base):
                        keys.append(full[len(base) :])
            keys.sort()
            return keys

        subject = f"with prefix {prefix!r}"
        return await trio.to_thread.run_sync(self._run, "list_keys", subject, call)

    def probe(self) -> None:
        """Blocking: make sure the bucket is there (created if missing, like every operation),
        then write, read back and delete a small object under the prefix. Raises what an
        upload would meet (botocore's exceptions, :class:`BucketNotCreated`)."""
        token = secrets.token_hex(8)
        key = self._full_key(_PROBE_MARK + token)
        body = _probe_body(token)
        for attempt in range(2):
            try:
                self._ensure_bucket()
                self._client.put_object(Bucket=self.bucket, Key=key, Body=body)
                break
            except self._bx.ClientError as exc:
                code, _status = _client_error_info(exc)
                if code == "NoSuchBucket" and attempt == 0:
                    self._bucket_ready = False  # a 403 HEAD let us by: try to create it
                    continue
                raise
        try:
            response = self._client.get_object(Bucket=self.bucket, Key=key)
            with contextlib.closing(response["Body"]) as stream:
                got = stream.read()
            if got != body:
                raise ObjectStoreUnavailable(
                    f"{self.description}: the probe object read back differs"
                )
        finally:
            self._client.delete_object(Bucket=self.bucket, Key=key)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._client.close()


# --------------------------------------------------------------------------- factory


def folder_of(url: str | None, data_dir: str) -> str | None:
    """The folder a ``--tier2`` style URL names; ``None`` for ``s3://``; ``ValueError`` if
    the URL is malformed or of an unknown kind."""
    if not url:
        return os.path.join(data_dir, "tier2")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "s3":
        if not parts.netloc:
            raise ValueError(f"object store URL {url!r}: expected s3://bucket[/prefix]")
        if parts.query or parts.fragment:
            raise ValueError(f"object store URL {url!r}: query or fragment not supported")
        return None
    if scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise ValueError(f"object store URL {url!r}: expected file:///absolute/path")
        return parts.path
    if scheme == "":
        return url
    raise ValueError(
        f"unsupported object store URL {url!r}: use s3://bucket[/prefix], file:///path or a "
        "plain folder path"
    )


def open_object_store(
    url: str | None, data_dir: str, s3_endpoint: str | None = None
) -> ObjectStore:
    """The store a ``--tier2`` style URL names.

    ``None`` or ``""``: the folder ``<data_dir>/tier2``; ``s3://bucket[/prefix]``: an S3 bucket
    (at ``s3_endpoint`` if given, else AWS); ``file:///abs/path`` or a plain path: a folder.
    """
    folder = folder_of(url, data_dir)
    if folder is not None:
        return LocalFolderStore(folder)
    parts = urlsplit(url or "")
    return S3Store(parts.netloc, parts.path.strip("/"), endpoint_url=s3_endpoint)
