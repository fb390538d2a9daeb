"""core/segments/tier2_health.py: tier-2 failures in words, the start-up check, and the
rate-limited failure lines."""

from __future__ import annotations

import errno
import logging
import socket
from pathlib import Path

import pytest
import trio
from botocore import exceptions as bx

from core.segments.objectstore import BucketNotCreated, ObjectStoreUnavailable
from core.segments.tier2_health import (
    NO_CREDENTIALS,
    FailureReporter,
    Tier2Check,
    Tier2Unreachable,
    check_folder,
    check_tier2,
    reason_for,
)


def client_error(code: str, status: int = 400, message: str = "") -> bx.ClientError:
    response = {
        "Error": {"Code": code, "Message": message or code},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return bx.ClientError(response, "PutObject")


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (bx.NoCredentialsError(), NO_CREDENTIALS),
        (bx.PartialCredentialsError(provider="env", cred_var="secret"), NO_CREDENTIALS),
        (bx.EndpointConnectionError(endpoint_url="http://x"), "endpoint does not answer"),
        (
            bx.ConnectTimeoutError(endpoint_url="http://x"),
            "endpoint does not answer (connect timed out)",
        ),
        (bx.ReadTimeoutError(endpoint_url="http://x"), "endpoint timed out (no reply in time)"),
        (client_error("NoSuchBucket", 404), "bucket 'b' does not exist"),
        (
            client_error("AccessDenied", 403),
            "access denied to bucket 'b' for PutObject (check the key's policy)",
        ),
        (
            client_error("403", 403),
            "access denied to bucket 'b' for PutObject (a bad key or secret, or the policy)",
        ),
        (
            client_error("InvalidAccessKeyId", 403),
            "the endpoint does not know the AWS access key id",
        ),
        (
            client_error("SignatureDoesNotMatch", 403),
            "the AWS secret access key does not match the key id",
        ),
        (client_error("SlowDown", 503), "endpoint is throttling requests (SlowDown)"),
        (client_error("InternalError", 500), "endpoint fails (HTTP 500 InternalError)"),
        (client_error("Weird", 400, "odd thing"), "S3 error Weird: odd thing"),
        (OSError(errno.ENOSPC, "No space left on device"), "disk full"),
        (PermissionError(errno.EACCES, "Permission denied", "/x/y"), "permission denied (/x/y)"),
        (OSError(errno.EROFS, "Read-only file system"), "read-only file system"),
    ],
)
def test_reasons(exc: BaseException, expected: str) -> None:
    assert reason_for(exc, "b") == expected


def test_wrapped_and_bucket_reasons() -> None:
    try:
        try:
            raise bx.EndpointConnectionError(endpoint_url="http://x")
        except bx.EndpointConnectionError as inner:
            raise ObjectStoreUnavailable("s3://b: put 'k' failed: ...") from inner
    except ObjectStoreUnavailable as exc:
        assert reason_for(exc) == "endpoint does not answer"
    assert reason_for(ObjectStoreUnavailable("busy")) == "busy"
    denied = BucketNotCreated("b", client_error("AccessDenied", 403))
    assert reason_for(denied) == (
        "bucket 'b' does not exist and could not be created "
        "(access denied: the key may not create buckets)"
    )


def test_unknown_types_have_no_reason() -> None:
    assert reason_for(KeyError("x")) is None
    assert reason_for(RuntimeError("bug")) is None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def reporter(caplog: pytest.LogCaptureFixture) -> tuple[FailureReporter, Clock]:
    caplog.set_level(logging.INFO, logger="test.tier2")
    clock = Clock()
    rep = FailureReporter(
        "s3://b at http://e",
        "b",
        interval_s=60,
        logger=logging.getLogger("test.tier2"),
        clock=clock,
    )
    return rep, clock


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    out = [r.getMessage() for r in caplog.records]
    caplog.clear()
    return out


def test_first_failure_at_once_then_one_summary_per_interval(reporter, caplog) -> None:
    rep, clock = reporter
    rep.failed("upload", bx.NoCredentialsError())
    assert messages(caplog) == [
        f"tier 2 s3://b at http://e: cannot upload: {NO_CREDENTIALS} (retrying)"
    ]
    for _ in range(11):  # within the interval: counted, not logged
        clock.now += 5
        rep.failed("upload", bx.NoCredentialsError())
    assert messages(caplog) == []
    clock.now += 5  # 60 s after the first line
    rep.failed("upload", bx.NoCredentialsError())
    (summary,) = messages(caplog)
    assert summary.startswith(f"tier 2 s3://b at http://e: cannot upload: {NO_CREDENTIALS} (")
    assert "12 more failures in the last 1 min 0 s, 13 in all; failing for 1 min 0 s" in summary
    assert "last error NoCredentialsError: Unable to locate credentials" in summary
    assert rep.failing("upload")

    rep.succeeded("upload")
    (back,) = [r for r in caplog.records]
    assert back.levelno == logging.INFO
    assert back.getMessage() == (
        "tier 2 s3://b at http://e: uploads work again after 1 min 0 s (13 failures)"
    )
    caplog.clear()
    rep.succeeded("upload")  # not failing: nothing to say
    assert messages(caplog) == [] and not rep.failing("upload")


def test_each_kind_and_operation_has_its_own_line(reporter, caplog) -> None:
    rep, _clock = reporter
    rep.failed("upload", bx.NoCredentialsError())
    rep.failed("upload", client_error("NoSuchBucket", 404))
    rep.failed("read", client_error("NoSuchBucket", 404), "fetches get a retriable error")
    rep.failed("upload", client_error("NoSuchBucket", 404))  # same kind again: quiet
    lines = messages(caplog)
    assert len(lines) == 3
    assert lines[1].endswith(
        "cannot upload: bucket 'b' does not exist (retrying; ClientError: An error occurred "
        "(NoSuchBucket) when calling the PutObject operation: NoSuchBucket)"
    )
    assert "cannot read: bucket 'b' does not exist (fetches get a retriable error;" in lines[2]
    # known failures never say "upload failed" (log checks keep it for bugs)
    assert not any("upload failed" in line for line in lines)


def test_unexpected_type_traceback_once(reporter, caplog) -> None:
    rep, clock = reporter
    for _ in range(3):
        try:
            raise KeyError("missing")
        except KeyError as exc:
            rep.failed("upload", exc)
        clock.now += 1
    records = list(caplog.records)
    assert len(records) == 1
    assert records[0].levelno == logging.ERROR
    assert records[0].exc_info is not None
    assert records[0].getMessage() == (
        "tier 2 s3://b at http://e: upload failed: unexpected KeyError (retrying; "
        "KeyError: 'missing')"
    )


def test_local_error_around_an_upload_is_unexpected(reporter, caplog) -> None:
    rep, _clock = reporter
    for _ in range(2):
        try:
            raise OSError(errno.EIO, "Input/output error", "/data/streams/x.log")
        except OSError as exc:
            rep.failed("upload", exc, unexpected=True)
    (record,) = caplog.records
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert record.getMessage().startswith(
        "tier 2 s3://b at http://e: upload failed: I/O error (/data/streams/x.log) (retrying;"
    )


def test_announced_reason_is_not_repeated(reporter, caplog) -> None:
    rep, clock = reporter
    rep.announced(NO_CREDENTIALS)
    rep.failed("upload", bx.NoCredentialsError())
    clock.now += 30
    rep.failed("upload", bx.NoCredentialsError())
    assert messages(caplog) == []
    clock.now += 30
    rep.failed("upload", bx.NoCredentialsError())
    (summary,) = messages(caplog)
    assert "2 more failures in the last 1 min 0 s, 3 in all" in summary


def test_check_folder(tmp_path: Path) -> None:
    check = check_folder(str(tmp_path / "new" / "tier2"), str(tmp_path))
    assert check is not None and check.ok, check
    assert list((tmp_path / "new" / "tier2").iterdir()) == []  # the probe is gone
    assert check_folder("s3://bucket/x", str(tmp_path)) is None
    default = check_folder(None, str(tmp_path))
    assert default is not None and default.description == f"folder {tmp_path / 'tier2'}"

    (tmp_path / "file").write_text("x")
    bad = check_folder(str(tmp_path / "file" / "tier2"), str(tmp_path))
    assert bad is not None and not bad.ok
    assert bad.line().startswith(f"tier 2 folder {tmp_path / 'file' / 'tier2'}: ")
    assert isinstance(bad.exception, OSError)
    with pytest.raises(Tier2Unreachable) as raised:
        bad.raise_if_failed()
    assert raised.value.check is bad
    Tier2Check("x").raise_if_failed()  # works: nothing raised


def test_check_s3_endpoint_silent_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An endpoint that accepts connections and never answers: the check gives up in time."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"

        async def main() -> Tier2Check:
            return await check_tier2("s3://bucket/p", str(tmp_path), endpoint, timeout=0.5)

        check = trio.run(main)
    finally:
        listener.close()
    assert check.line() == (
        f"tier 2 s3://bucket/p at {endpoint}: endpoint does not answer (no reply within 0.5 s)"
    )
    assert check.seconds < 3
