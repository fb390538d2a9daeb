"""Tier 2's trouble in words: a start-up check, and one line per kind of failure.

- :func:`reason_for` turns what an object store raised (botocore's exceptions, S3 error
  codes, ``OSError`` of a folder) into a short reason such as ``no AWS credentials (...)``
  or ``bucket 'x' does not exist``; ``None`` for an exception type it does not know.
- :func:`check_tier2` opens the store a ``--tier2`` URL names and probes it (write, read
  back, delete a small object) in a worker thread under a deadline of a few seconds. It
  returns a :class:`Tier2Check`; :meth:`Tier2Check.raise_if_failed` raises
  :class:`Tier2Unreachable` for a caller that must not start without tier 2.
- :class:`FailureReporter` logs a failing operation's first failure of a kind at once, then
  at most one summary per interval with a count while it persists, and one line when the
  operation works again: never a traceback per retry (an exception type it does not know
  is logged with its traceback once).
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from .objectstore import (
    BucketNotCreated,
    ObjectStore,
    ObjectStoreUnavailable,
    S3Store,
    folder_of,
    open_object_store,
    probe_folder,
)

log = logging.getLogger("streamgate.tier2")

CHECK_TIMEOUT_S = 5.0  # the start-up check's whole budget
SUMMARY_INTERVAL_S = 60.0  # at most one summary line per kind of failure this often

NO_CREDENTIALS = "no AWS credentials (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile)"
NO_ANSWER = "endpoint does not answer"

# S3 error codes, as a reason; {bucket} is filled in
_CODE_REASONS = {
    "NoSuchBucket": "bucket {bucket} does not exist",
    "AccessDenied": "access denied to bucket {bucket} (check the key's policy)",
    "AllAccessDisabled": "access to bucket {bucket} is disabled",
    "AccountProblem": "the AWS account cannot use S3 (AccountProblem)",
    "InvalidAccessKeyId": "the endpoint does not know the AWS access key id",
    "SignatureDoesNotMatch": "the AWS secret access key does not match the key id",
    "ExpiredToken": "the AWS credentials have expired",
    "TokenRefreshRequired": "the AWS credentials have expired",
    "InvalidToken": "the AWS session token is not valid",
    "InvalidBucketName": "bucket name {bucket} is not valid",
    "PermanentRedirect": "bucket {bucket} is in another region (set AWS_DEFAULT_REGION)",
    "AuthorizationHeaderMalformed": "the AWS region does not match the bucket's",
}
_BUSY_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestThrottled", "TooManyRequests"}
)

_OS_REASONS = {
    errno.ENOENT: "folder does not exist",
    errno.ENOTDIR: "a path component is not a folder",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EROFS: "read-only file system",
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EIO: "I/O error",
}


def _bucket_of(bucket: str | None) -> str:
    return repr(bucket) if bucket else "(the bucket)"


def _client_error_reason(exc: Any, bucket: str | None) -> str:
    response = getattr(exc, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    message = str(response.get("Error", {}).get("Message", "")).strip()
    template = _CODE_REASONS.get(code)
    if template is None and code in ("404", "NotFound") and bucket:
        template = _CODE_REASONS["NoSuchBucket"]
    if template is None and (code in ("403", "Forbidden") or status == 403):
        template = "access denied to bucket {bucket} (a bad key or secret, or the policy)"
    if template is not None:
        reason = template.format(bucket=_bucket_of(bucket))
        operation = getattr(exc, "operation_name", None)
        if reason.startswith("access denied") and operation:
            reason = reason.replace(" (", f" for {operation} (", 1)  # which step was refused
        return reason
    if code in _BUSY_CODES or status == 429:
        return f"endpoint is throttling requests ({code or status})"
    if status >= 500:
        return f"endpoint fails (HTTP {status} {code})".rstrip()
    detail = f": {message}" if message and message != code else ""
    return f"S3 error {code or status}{detail}"


def _botocore_reason(exc: BaseException, bucket: str | None) -> str | None:
    try:
        from botocore import exceptions as bx
    except ImportError:  # pragma: no cover - boto3 is a dependency
        return None
    if isinstance(exc, bx.NoCredentialsError | bx.PartialCredentialsError):
        return NO_CREDENTIALS
    if isinstance(exc, bx.ProfileNotFound):
        return f"AWS profile not found ({exc})"
    if isinstance(exc, bx.ConnectTimeoutError):
        return f"{NO_ANSWER} (connect timed out)"
    if isinstance(exc, bx.ReadTimeoutError):
        return "endpoint timed out (no reply in time)"
    if isinstance(exc, bx.EndpointConnectionError):
        return NO_ANSWER
    if isinstance(exc, bx.ConnectionClosedError):
        return "endpoint closed the connection"
    if isinstance(exc, bx.SSLError):
        return f"TLS to the endpoint failed ({exc})"
    if isinstance(exc, bx.ConnectionError | bx.HTTPClientError | bx.IncompleteReadError):
        return f"connection to the endpoint failed ({type(exc).__name__})"
    if isinstance(exc, bx.ClientError):
        return _client_error_reason(exc, bucket)
    if isinstance(exc, bx.ParamValidationError):
        return f"request refused before sending: {str(exc).splitlines()[-1].strip()}"
    if isinstance(exc, bx.NoRegionError):
        return "no AWS region (set AWS_DEFAULT_REGION)"
    if isinstance(exc, bx.BotoCoreError):
        return f"{type(exc).__name__}: {exc}"
    return None


def _why_not(exc: BucketNotCreated) -> str:
    """Why creating the bucket was refused, in a few words."""
    response = getattr(exc.cause, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    if code in ("AccessDenied", "403", "Forbidden") or status == 403:
        return "access denied: the key may not create buckets"
    if code == "InvalidBucketName":
        return "the name is not a valid bucket name"
    return reason_for(exc.cause) or short_error(exc.cause)


def reason_for(exc: BaseException, bucket: str | None = None) -> str | None:
    """A short human reason for a tier-2 failure; ``None`` for an unknown exception type.

    ``bucket`` (the S3 bucket, if any) is named in reasons about it."""
    if isinstance(exc, BucketNotCreated):
        return f"bucket {exc.bucket!r} does not exist and could not be created ({_why_not(exc)})"
    if isinstance(exc, ObjectStoreUnavailable):
        # the store wraps botocore's transient errors: the cause says more
        behind = exc.__cause__
        if behind is not None:
            inner = reason_for(behind, bucket)
            if inner is not None:
                return inner
        return str(exc) or "unavailable"
    if type(exc).__module__.startswith(("botocore", "boto3")):
        return _botocore_reason(exc, bucket)
    if isinstance(exc, trio.TooSlowError | TimeoutError):
        return "timed out"
    if isinstance(exc, OSError):
        what = _OS_REASONS.get(exc.errno or 0) or exc.strerror or str(exc)
        return f"{what} ({exc.filename})" if exc.filename else what
    return None


def short_error(exc: BaseException, limit: int = 200) -> str:
    """The exception's type and first line, cut to ``limit`` characters."""
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


# --------------------------------------------------------------------------- start-up check


class Tier2Unreachable(Exception):
    """Tier 2 failed the start-up check (for a mode that cannot run without it)."""

    def __init__(self, check: Tier2Check) -> None:
        super().__init__(check.line())
        self.check = check


@dataclass(slots=True)
class Tier2Check:
    """What the start-up check found. ``reason`` is ``None`` when tier 2 works."""

    description: str
    reason: str | None = None
    error: str | None = None  # the exception behind ``reason``, in short
    seconds: float = 0.0
    exception: BaseException | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.reason is None

    def line(self) -> str:
        if self.reason is None:
            return f"tier 2 {self.description}: reachable and writable ({self.seconds:.2f} s)"
        return f"tier 2 {self.description}: {self.reason}"

    def raise_if_failed(self) -> None:
        if self.reason is not None:
            raise Tier2Unreachable(self)


def check_folder(url: str | None, data_dir: str) -> Tier2Check | None:
    """Blocking and quick: probe the folder a ``--tier2`` URL names (``None`` for S3). Opens
    no store (a folder store's start clears its temporary files: not beside a running one)."""
    folder = folder_of(url, data_dir)
    if folder is None:
        return None
    root = os.path.abspath(folder)
    began = time.monotonic()
    try:
        probe_folder(root)
    except Exception as exc:
        return Tier2Check(f"folder {root}", _reason(exc, None), short_error(exc), exception=exc)
    return Tier2Check(f"folder {root}", seconds=time.monotonic() - began)


def _probe_sync(url: str | None, data_dir: str, s3_endpoint: str | None) -> Tier2Check:
    folder = check_folder(url, data_dir)
    if folder is not None:
        return folder
    began = time.monotonic()
    try:
        store = open_object_store(url, data_dir, s3_endpoint)
    except ValueError:
        raise  # a malformed URL is the caller's to report
    except Exception as exc:
        return Tier2Check(
            describe_url(url, s3_endpoint), _reason(exc, None), short_error(exc), exception=exc
        )
    try:
        try:
            store.probe()
        except Exception as exc:
            bucket = store.bucket if isinstance(store, S3Store) else None
            return Tier2Check(
                store.description, _reason(exc, bucket), short_error(exc), exception=exc
            )
        return Tier2Check(store.description, seconds=time.monotonic() - began)
    finally:
        store.close()


def describe_url(url: str | None, s3_endpoint: str | None) -> str:
    where = (url or "").rstrip("/")
    return f"{where} at {s3_endpoint}" if s3_endpoint else where


def _reason(exc: BaseException, bucket: str | None) -> str:
    return reason_for(exc, bucket) or f"unexpected {short_error(exc)}"


async def check_tier2(
    url: str | None,
    data_dir: str,
    s3_endpoint: str | None = None,
    timeout: float = CHECK_TIMEOUT_S,
) -> Tier2Check:
    """Open and probe the tier 2 a ``--tier2`` URL names, in a worker thread, for at most
    ``timeout`` seconds (a thread still waiting then is left to finish on its own)."""
    folder = folder_of(url, data_dir)
    description = f"folder {os.path.abspath(folder)}" if folder else describe_url(url, s3_endpoint)
    began = time.monotonic()
    with trio.move_on_after(timeout):
        check = await trio.to_thread.run_sync(
            _probe_sync, url, data_dir, s3_endpoint, abandon_on_cancel=True
        )
        check.seconds = time.monotonic() - began
        return check
    return Tier2Check(
        description,
        f"{NO_ANSWER} (no reply within {timeout:g} s)",
        seconds=time.monotonic() - began,
    )


async def check_object_store(store: ObjectStore, timeout: float = CHECK_TIMEOUT_S) -> Tier2Check:
    """Probe an already open store, in a worker thread, for at most ``timeout`` seconds."""
    began = time.monotonic()
    bucket = store.bucket if isinstance(store, S3Store) else None
    with trio.move_on_after(timeout):
        try:
            await trio.to_thread.run_sync(store.probe, abandon_on_cancel=True)
        except Exception as exc:
            seconds = time.monotonic() - began
            reason = _reason(exc, bucket)
            return Tier2Check(store.description, reason, short_error(exc), seconds, exc)
        return Tier2Check(store.description, seconds=time.monotonic() - began)
    return Tier2Check(
        store.description,
        f"{NO_ANSWER} (no reply within {timeout:g} s)",
        seconds=time.monotonic() - began,
    )


# --------------------------------------------------------------------------- failure summaries

# what each operation is called in lines: (what cannot be done, what works again).
# Known failures never say "upload failed": log checks (tests, the soak) keep that phrase
# for the unexpected kind.
_WORDS = {
    "upload": ("cannot upload", "uploads work"),
    "read": ("cannot read", "reads work"),
    "delete": ("cannot delete objects", "deletes work"),
    "list": ("cannot list objects", "listing works"),
}


@dataclass(slots=True)
class _Kind:
    reason: str
    first_at: float
    last_logged_at: float
    count: int = 0  # failures since the last line
    total: int = 0
    last_error: str = ""


@dataclass(slots=True)
class _Operation:
    kinds: dict[str, _Kind] = field(default_factory=dict)
    failing_since: float | None = None
    failures: int = 0


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


class FailureReporter:
    """Rate-limited lines about failing tier-2 operations (``upload``, ``read``, ...).

    ``failed(op, exc)`` after each failure, ``succeeded(op)`` after each success. The first
    failure of a kind (operation and reason) is logged at once; while it persists, at most
    one summary per ``interval_s``, logged on the next failure after it; when the operation
    works again, one line."""

    def __init__(
        self,
        description: str,
        bucket: str | None = None,
        *,
        interval_s: float = SUMMARY_INTERVAL_S,
        logger: logging.Logger = log,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.description = description
        self.bucket = bucket
        self.interval_s = interval_s
        self._log = logger
        self._clock = clock
        self._ops: dict[str, _Operation] = {}
        self._traced: set[tuple[str, type[BaseException]]] = set()
        self._announced: set[str] = set()

    @classmethod
    def for_store(cls, store: ObjectStore, **kwargs: Any) -> FailureReporter:
        bucket = store.bucket if isinstance(store, S3Store) else None
        return cls(store.description, bucket, **kwargs)

    def announced(self, reason: str) -> None:
        """``reason`` was said already (the start-up check): a first failure for it is only
        counted, its first summary comes an interval later."""
        self._announced.add(reason)

    def failing(self, op: str) -> bool:
        state = self._ops.get(op)
        return state is not None and state.failing_since is not None

    def failed(
        self, op: str, exc: BaseException, then: str = "retrying", *, unexpected: bool = False
    ) -> str:
        """Count a failure of ``op``; log if due. ``then`` says what happens next, in a
        few words. ``unexpected``: not the object store's failure (a local error or a bug
        around it): said as such, with its traceback once per type. Returns the reason."""
        now = self._clock()
        known = reason_for(exc, self.bucket)
        reason = known if known is not None else f"unexpected {type(exc).__name__}"
        if unexpected and known is not None:
            known = None
        state = self._ops.setdefault(op, _Operation())
        if state.failing_since is None:
            state.failing_since = now
        state.failures += 1
        kind = state.kinds.get(reason)
        cannot, _works = _WORDS.get(op, (f"cannot {op}", f"{op} works"))
        error = short_error(exc)
        if kind is None:
            kind = state.kinds[reason] = _Kind(reason, now, now, 0, 1, error)
            if known is None:
                # an unknown exception type: its traceback, once per operation and type
                trace = (op, type(exc)) not in self._traced
                self._traced.add((op, type(exc)))
                self._log.error(
                    "tier 2 %s: %s failed: %s (%s; %s)",
                    self.description,
                    op,
                    reason,
                    then,
                    error,
                    exc_info=exc if trace else None,
                )
                return reason
            if reason in self._announced:
                return reason
            detail = "" if _says_it(error) else f"; {error}"
            self._log.warning(
                "tier 2 %s: %s: %s (%s%s)", self.description, cannot, reason, then, detail
            )
            return reason
        kind.count += 1
        kind.total += 1
        kind.last_error = error
        if now - kind.last_logged_at >= self.interval_s:
            self._log.warning(
                "tier 2 %s: %s: %s (%d more %s in the last %s, %d in all; failing for %s; "
                "%s; last error %s)",
                self.description,
                cannot,
                reason,
                kind.count,
                "failure" if kind.count == 1 else "failures",
                _duration(now - kind.last_logged_at),
                kind.total,
                _duration(now - kind.first_at),
                then,
                error,
            )
            kind.count = 0
            kind.last_logged_at = now
        return reason

    def succeeded(self, op: str) -> None:
        """``op`` worked: if it was failing, say so once and forget its failures."""
        state = self._ops.get(op)
        if state is None or state.failing_since is None:
            return
        _cannot, works = _WORDS.get(op, (f"cannot {op}", f"{op} works"))
        self._log.info(
            "tier 2 %s: %s again after %s (%d %s)",
            self.description,
            works,
            _duration(self._clock() - state.failing_since),
            state.failures,
            "failure" if state.failures == 1 else "failures",
        )
        del self._ops[op]


def _says_it(error: str) -> bool:
    """True when the error adds nothing a reader needs beyond the reason."""
    return error.startswith(("NoCredentialsError", "PartialCredentialsError"))
