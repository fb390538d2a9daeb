"""The MQTT bridge's counters in the console, read from its Prometheus endpoint.

The bridge is a process of its own (`python -m bridge mqtt --metrics-listen HOST:PORT`), so
the gateway is told where its metrics are (`serve --console-bridge-metrics URL`, one per
bridge) and scrapes them when the console asks: the browser needs no access to the
bridge's port, and nothing is scraped while nobody looks. A scrape runs in a worker thread
(at most two at once), times out after SCRAPE_TIMEOUT_S, and its answer is reused for
FRESH_S, so many open consoles cost one scrape per bridge per second. A bridge that does
not answer is shown down with the reason; it never fails the request.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

import trio
from prometheus_client.parser import text_string_to_metric_families

PREFIX = "streamgate_bridge_"
SCRAPE_TIMEOUT_S = 2.0
FRESH_S = 1.0
MAX_SCRAPE_BYTES = 1024 * 1024


def check_url(url: str) -> str:
    """`url` if it is an http(s) URL with a host; ValueError saying why otherwise."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"expected an http:// or https:// URL of a bridge's /metrics, got {url!r}")
    return url


def shown(url: str) -> str:
    """The URL without any user:password."""
    parsed = urllib.parse.urlsplit(url)
    netloc = parsed.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parsed._replace(netloc=netloc))


def parse(text: str) -> dict[str, dict[str, float]]:
    """The bridge's families from Prometheus text: {"counters": {name: v}, "gauges": ...},
    names without the prefix and `_total`."""
    out: dict[str, dict[str, float]] = {"counters": {}, "gauges": {}}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(PREFIX):
            continue
        kind = "counters" if family.type == "counter" else "gauges"
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            name = sample.name.removeprefix(PREFIX).removesuffix("_total")
            out[kind][name] = sample.value
    return out


def _fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
        return bytes(response.read(MAX_SCRAPE_BYTES)).decode("utf-8", "replace")


class BridgeScraper:
    def __init__(self, urls: Sequence[str]) -> None:
        self.urls = [check_url(u) for u in urls]
        self._limiter = trio.CapacityLimiter(2)
        self._last: tuple[float, list[dict[str, Any]]] | None = None
        self._lock = trio.Lock()

    async def describe(self) -> list[dict[str, Any]]:
        """One entry per bridge: {"url", "up", "error", "counters", "gauges",
        "scraped_ms"}."""
        async with self._lock:  # concurrent polls share one scrape
            if self._last is not None and time.monotonic() - self._last[0] < FRESH_S:
                return self._last[1]
            answers = [await self._scrape(url) for url in self.urls]
            self._last = (time.monotonic(), answers)
            return answers

    async def _scrape(self, url: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"url": shown(url), "up": False, "error": None}
        entry["counters"], entry["gauges"] = {}, {}
        try:
            with trio.fail_after(SCRAPE_TIMEOUT_S + 1):
                text = await trio.to_thread.run_sync(
                    _fetch, url, limiter=self._limiter, abandon_on_cancel=True
                )
            entry.update(parse(text))
        except urllib.error.URLError as exc:  # refused, unknown host, timed out
            entry["error"] = str(exc.reason)
        except Exception as exc:  # noqa: BLE001 - a down bridge is shown, not raised
            entry["error"] = f"{type(exc).__name__}: {exc}"
        else:
            entry["up"] = bool(entry["counters"] or entry["gauges"])
            if not entry["up"]:
                entry["error"] = f"no {PREFIX}* metrics at this URL"
        entry["scraped_ms"] = int(time.time() * 1000)
        return entry
