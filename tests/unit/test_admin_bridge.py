"""The console's reading of an MQTT bridge's Prometheus text (admin/bridge.py)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from admin.bridge import check_url, parse, shown
from bridge.mqtt.metrics import Stats, _StatsCollector


def test_parse_reads_the_bridges_own_exposition() -> None:
    registry = CollectorRegistry()
    registry.register(_StatsCollector(Stats(received=7, forwarded=5, lag=2, mqtt_connected=1)))
    text = generate_latest(registry).decode() + "other_metric 3\n"
    families = parse(text)
    assert families["counters"]["received"] == 7 and families["counters"]["forwarded"] == 5
    assert families["gauges"]["lag"] == 2 and families["gauges"]["mqtt_connected"] == 1
    assert "other_metric" not in families["gauges"]


def test_urls_are_checked_and_shown_without_credentials() -> None:
    assert check_url("http://127.0.0.1:9101/metrics")
    for bad in ("127.0.0.1:9101", "ftp://host/metrics", "http:///metrics"):
        with pytest.raises(ValueError, match="http:// or https://"):
            check_url(bad)
    assert shown("https://u:secret@bridge:9101/metrics") == "https://bridge:9101/metrics"
