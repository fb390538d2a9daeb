"""Ranged reads of chunk objects straight from tier 2, on the Spark executors.

Where tier 2 is comes from the chunk map (the gateway's own settings); the options
`tier2.folder` and `s3.endpoint` / `s3.bucket` / `s3.prefix` / `s3.region` override it
(a folder mounted elsewhere, an endpoint seen under another name). S3 credentials come
from `s3.accessKeyId` / `s3.secretAccessKey` or else the AWS chain of the executors
(environment, profile), never from the gateway.
"""

from __future__ import annotations

import os
from typing import Any

from .errors import StreamgateSourceError


class Tier2Reader:
    """Reads byte ranges of chunk objects; every failure is a StreamgateSourceError naming
    the object and the store."""

    def __init__(self, location: dict[str, Any], overrides: dict[str, str]) -> None:
        self.kind = "s3" if "s3.bucket" in overrides else location.get("kind")
        self._client: Any = None
        if "tier2.folder" in overrides:
            self.kind = "folder"
            self.root = overrides["tier2.folder"]
            self.description = f"folder {self.root}"
        elif self.kind == "folder":
            self.root = location["root"]
            self.description = f"folder {self.root}"
        elif self.kind == "s3":
            self.bucket = overrides.get("s3.bucket", location.get("bucket") or "")
            self.prefix = overrides.get("s3.prefix", location.get("prefix") or "").strip("/")
            self.endpoint = overrides.get("s3.endpoint", location.get("endpoint"))
            self.region = overrides.get("s3.region", location.get("region"))
            self.key_id = overrides.get("s3.accesskeyid")
            self.secret = overrides.get("s3.secretaccesskey")
            where = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
            self.description = f"{where} at {self.endpoint}" if self.endpoint else where
        else:
            raise StreamgateSourceError(
                "the gateway has no tier 2 to read from; set the option 'tier2.folder' or "
                "'s3.bucket'"
            )

    def read(self, key: str, start: int, length: int) -> bytes:
        if self.kind == "folder":
            return self._read_file(key, start, length)
        return self._read_s3(key, start, length)

    def _read_file(self, key: str, start: int, length: int) -> bytes:
        path = os.path.join(self.root, *key.split("/"))
        try:
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read(length)
        except FileNotFoundError:
            if not os.path.isdir(self.root):
                raise StreamgateSourceError(
                    f"tier 2 {self.description} cannot be read: no such folder (option "
                    "'tier2.folder' overrides where the gateway keeps it)"
                ) from None
            raise StreamgateSourceError(
                f"chunk object {key!r} is missing from tier 2 {self.description} (deleted by "
                "retention or compaction since the read was planned?)"
            ) from None
        except OSError as exc:
            raise StreamgateSourceError(
                f"chunk object {key!r} in tier 2 {self.description}: {exc}"
            ) from None
        if len(data) != length:
            raise StreamgateSourceError(
                f"chunk object {key!r} in tier 2 {self.description} is shorter than its "
                f"index says ({start + len(data)} < {start + length} bytes)"
            )
        return data

    def _s3(self) -> Any:
        if self._client is None:
            import boto3
            import botocore.config

            config = botocore.config.Config(
                region_name=self.region or "us-east-1",
                connect_timeout=5,
                read_timeout=30,
                retries={"total_max_attempts": 3, "mode": "standard"},
                s3={"addressing_style": "path"} if self.endpoint else None,
            )
            self._client = boto3.session.Session().client(
                "s3",
                endpoint_url=self.endpoint or None,
                config=config,
                aws_access_key_id=self.key_id,
                aws_secret_access_key=self.secret,
            )
        return self._client

    def _read_s3(self, key: str, start: int, length: int) -> bytes:
        import botocore.exceptions

        full = f"{self.prefix}/{key}" if self.prefix else key
        try:
            reply = self._s3().get_object(
                Bucket=self.bucket, Key=full, Range=f"bytes={start}-{start + length - 1}"
            )
            data: bytes = reply["Body"].read()
        except botocore.exceptions.ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchKey", "404"):
                raise StreamgateSourceError(
                    f"chunk object {key!r} is missing from tier 2 {self.description} "
                    "(deleted by retention or compaction since the read was planned?)"
                ) from None
            raise StreamgateSourceError(
                f"chunk object {key!r} in tier 2 {self.description}: {code or exc}"
            ) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise StreamgateSourceError(
                f"tier 2 {self.description} cannot be reached (options 's3.endpoint', "
                f"'s3.bucket'): {exc}"
            ) from None
        if len(data) != length:
            raise StreamgateSourceError(
                f"chunk object {key!r} in tier 2 {self.description} is shorter than its index says"
            )
        return data
