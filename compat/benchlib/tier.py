"""Tier-2 measurement: a gateway with its admin API and a tier-2 store (a folder or S3 on
moto), `/tier` sampled in a thread, disk and object-store usage."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from compat.benchlib.display import Display
from harness.gateway import Gateway
from harness.moto import MotoServer

MIB = 1024 * 1024

Report = dict[str, Any]


S3_BUCKET = "streamgate-bench"


def du_bytes(path: Path) -> tuple[int, int]:
    """(allocated bytes as du counts them, apparent bytes) of everything under path."""
    allocated = apparent = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(root, name))
                allocated += st.st_blocks * 512
                apparent += st.st_size
    return allocated, apparent


_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxies


def http_json(url: str, timeout: float = 5.0) -> Any:
    with _HTTP.open(url, timeout=timeout) as resp:
        return json.loads(resp.read())


class S3Backend:
    """A moto S3 server (harness.moto) and a boto3 client to measure and empty it."""

    def __init__(self, log_dir: Path) -> None:
        self.server = MotoServer(log_dir)
        self._client: Any = None

    def start(self) -> None:
        self.server.start()
        import boto3

        self._client = boto3.session.Session().client(
            "s3",
            endpoint_url=self.server.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def env(self) -> dict[str, str]:
        return self.server.env()

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    def _keys(self, prefix: str) -> Iterator[tuple[str, int]]:
        paginator = self._client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=S3_BUCKET, Prefix=prefix + "/"):
                for obj in page.get("Contents", []):
                    yield obj["Key"], obj["Size"]
        except self._client.exceptions.NoSuchBucket:
            return

    def sizes(self, prefix: str) -> list[int]:
        """Sizes of the objects under prefix."""
        return [n for _key, n in self._keys(prefix)]

    def empty(self, prefix: str) -> None:
        """Delete a run's objects: moto keeps everything in memory."""
        keys = [k for k, _ in self._keys(prefix)]
        for i in range(0, len(keys), 1000):
            self._client.delete_objects(
                Bucket=S3_BUCKET,
                Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True},
            )

    def peak_rss_kib(self) -> int | None:
        return self.server.peak_rss_kib()

    def stop(self) -> None:
        self.server.stop()


class TierGateway(Gateway):
    """A gateway in `work_root/name` with the admin API on and tier 2 in its data dir
    (`folder`) or under a prefix of its own in the S3 bucket (`s3`)."""

    def __init__(
        self,
        work_root: Path,
        name: str,
        backend: str,
        s3: S3Backend | None,
        extra_args: Sequence[str],
    ) -> None:
        self.work_dir = work_root / name
        self.work_dir.mkdir(parents=True)
        self.backend = backend
        self.s3 = s3 if backend == "s3" else None
        self.s3_prefix = f"{name}-{uuid.uuid4().hex[:8]}"
        args = list(extra_args)
        if self.s3 is not None:
            args = [
                "--tier2",
                f"s3://{S3_BUCKET}/{self.s3_prefix}",
                "--s3-endpoint",
                self.s3.endpoint,
                *args,
            ]
        super().__init__(
            self.work_dir / "data",
            self.work_dir / "gateway.log",
            args,
            default_partitions=None,
            metrics=True,
            env=self.s3.env() if self.s3 is not None else None,
        )

    def ready(self) -> bool:
        if not super().ready():
            return False
        try:
            self.tier()
        except (OSError, ValueError):
            return False
        return True

    def tier(self) -> Report:
        return http_json(self.admin_url + "/tier")

    def stream(self, topic: str) -> Report | None:
        try:
            return http_json(f"{self.admin_url}/streams/{topic}")
        except (OSError, ValueError):
            return None

    def local_disk(self) -> tuple[int, int]:
        return du_bytes(self.data_dir / "streams")

    def tier2_sizes(self) -> list[int]:
        """Sizes of the chunks in this gateway's tier 2."""
        if self.s3 is not None:
            return self.s3.sizes(self.s3_prefix)
        sizes = []
        for path in (self.data_dir / "tier2").rglob("*.chunk"):
            with contextlib.suppress(OSError):
                sizes.append(path.stat().st_size)
        return sizes

    def tier2_usage(self) -> tuple[int, int]:
        """(objects, bytes) in this gateway's tier 2."""
        sizes = self.tier2_sizes()
        return len(sizes), sum(sizes)

    def cleanup(self, keep: bool) -> None:
        self.close()
        if self.s3 is not None:
            with contextlib.suppress(Exception):
                self.s3.empty(self.s3_prefix)
        if not keep:
            shutil.rmtree(self.work_dir, ignore_errors=True)


SAMPLE_FIELDS = (
    "t",
    "tier1_pending_bytes",
    "tier1_retained_bytes",
    "chunks_uploaded",
    "bytes_uploaded",
    "upload_errors",
    "local_disk_bytes",
)


class TierSampler:
    """Samples /tier (and du of DATA/streams) every interval in a thread."""

    FIELDS = (
        "tier1_pending_bytes",
        "tier1_retained_bytes",
        "chunks_uploaded",
        "bytes_uploaded",
        "upload_errors",
        "cache_hits",
        "cache_misses",
        "bytes_fetched",
        "tier2_upload_lag_p50_seconds",
        "tier2_upload_lag_p99_seconds",
    )

    def __init__(self, gateway: TierGateway, interval: float) -> None:
        self.gateway = gateway
        self.interval = interval
        self.t0 = time.perf_counter()
        self.samples: list[Report] = []
        self.errors = 0
        self.last: Report = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tier-sampler", daemon=True)

    def __enter__(self) -> TierSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        next_at = time.perf_counter()
        while not self._stop.is_set():
            self.sample()
            next_at += self.interval
            self._stop.wait(max(0.0, next_at - time.perf_counter()))

    def sample(self) -> Report | None:
        t = time.perf_counter() - self.t0
        try:
            tier = self.gateway.tier()
        except (OSError, ValueError):
            self.errors += 1
            return None
        row = {
            "t": round(t, 3),
            **{k: tier.get(k) for k in self.FIELDS},
            "local_disk_bytes": self.gateway.local_disk()[0],
        }
        self.samples.append(row)
        self.last = row
        return row

    def compact(self) -> Report:
        """The samples for the JSON: one row of SAMPLE_FIELDS each."""
        return {
            "sample_fields": list(SAMPLE_FIELDS),
            "samples": [[s.get(f) for f in SAMPLE_FIELDS] for s in self.samples],
        }

    def between(self, start: float, end: float) -> list[Report]:
        return [s for s in self.samples if start <= s["t"] <= end]


def wait_uploaded(
    gateway: TierGateway, display: Display, label: str, timeout: float
) -> tuple[float, bool]:
    """Wait until tier1_pending_bytes is 0: (time.perf_counter() then, reached)."""
    started = time.perf_counter()
    state: Report = {}

    def poll() -> tuple[float, str]:
        pending = state.get("tier1_pending_bytes")
        return 0.0, (
            ""
            if pending is None
            else f"pending {pending / MIB:,.1f} MiB, {state.get('chunks_uploaded')} chunks"
        )

    with display.phase(label, None, poll):
        while True:
            with contextlib.suppress(OSError, ValueError):
                state.update(gateway.tier())
                if state.get("tier1_pending_bytes") == 0:
                    return time.perf_counter(), True
            if time.perf_counter() - started > timeout:
                return time.perf_counter(), False
            time.sleep(0.05)
