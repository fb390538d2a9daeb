"""The bridge's pure parts: settings, topic maps and keys, the spool's framing and recovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.mqtt.config import ConfigError, build_config, parse_map, parse_mqtt_url
from bridge.mqtt.records import Record, Router, decode, encode
from bridge.mqtt.spool import Spool, SpoolFull


def test_mqtt_urls():
    u = parse_mqtt_url("mqtts://dev:s%40cret@broker.local")
    assert (u.host, u.port, u.tls, u.username, u.password) == (
        "broker.local",
        8883,
        True,
        "dev",
        "s@cret",
    )
    assert parse_mqtt_url("mqtt://127.0.0.1:1884").port == 1884
    for bad in ["http://x", "mqtt://", "mqtt://x:99999", "mqtt://x/path", "x:1883"]:
        with pytest.raises(ConfigError, match="bad MQTT URL"):
            parse_mqtt_url(bad)


def test_maps_and_keys():
    assert parse_map("plant/+/sensors/#=sensors").topic == "sensors"
    assert parse_map("$share/g1/plant/#=t").match_filter == "plant/#"
    for bad in ["plant/#/x=t", "a/b+=t", "noequals", "a/b=bad topic", "$share//a=t", "=t"]:
        with pytest.raises(ConfigError):
            parse_map(bad)
    r = Router([parse_map("plant/+/sensors/#=s"), parse_map("plant/#=other")], key_level=2)
    assert r.topic_for("plant/d1/sensors/t") == "s"
    assert r.topic_for("plant/d1/alarm") == "other"
    assert r.topic_for("elsewhere") is None
    assert r.key_for("plant/d1/sensors/t") == b"d1"
    assert r.key_for("plant") == b"plant"  # too few levels: the whole topic
    assert Router([], None).key_for("a/b") == b"a/b"


def test_build_config_flags_win_over_file(tmp_path: Path):
    f = tmp_path / "b.toml"
    f.write_text(
        'mqtt = "mqtt://a"\ngateway = "g:1"\nqos = 0\nmap = ["x/#=t1"]\n'
        '[[reverse]]\ntopic = "al"\nmqtt_topic = "p/al"\n'
    )
    cfg = build_config({"config": str(f), "qos": 1, "map": ["y/#=t2"]})
    assert cfg.qos == 1
    assert [m.topic for m in cfg.maps] == ["t1", "t2"]
    assert cfg.reverse[0].mqtt_topic == "p/al"
    with pytest.raises(ConfigError, match="no gateway"):
        build_config({"mqtt": "mqtt://a", "map": ["a=b"]})
    with pytest.raises(ConfigError, match="nothing to bridge"):
        build_config({"mqtt": "mqtt://a", "gateway": "g:1"})
    with pytest.raises(ConfigError, match="--mqtt-version"):
        build_config({"mqtt": "mqtt://a", "gateway": "g:1", "map": ["a=b"], "mqtt_version": "4"})
    with pytest.raises(ConfigError, match="a loop"):
        build_config(
            {
                "mqtt": "mqtt://a",
                "gateway": "g:1",
                "map": ["plant/#=t"],
                "reverse": ["al=plant/{key}/alerts"],
            }
        )
    with pytest.raises(ConfigError, match="no such file"):
        build_config({"mqtt": "mqtts://a", "gateway": "g:1", "map": ["a=b"], "ca": "/nope"})


def test_record_round_trip():
    rec = Record(7, "t", None, b"\x00\xff" * 10, [("mqtt.topic", b"a/b"), ("h", b"")], 123)
    assert decode(encode(rec)) == rec
    rec2 = Record(8, "t", b"", b"", [], -1)
    assert decode(encode(rec2)) == rec2


def test_spool_order_commit_and_segments(tmp_path: Path):
    s = Spool(tmp_path, 1 << 20, segment_bytes=1000)
    for i in range(50):
        s.append([b"r%03d" % i * 10])
    got = s.read(30)
    assert [b[:4] for b, _ in got] == [b"r%03d" % i for i in range(30)]
    s.commit(got[-1][1], 30)
    assert s.records_pending == 20
    s.close()
    s = Spool(tmp_path, 1 << 20, segment_bytes=1000)  # restart: resumes after the commit
    rest = s.read(100)
    assert [b[:4] for b, _ in rest] == [b"r%03d" % i for i in range(30, 50)]
    s.commit(rest[-1][1], 20)
    assert s.is_empty() and s.size_bytes == 0
    assert len(list(tmp_path.glob("*.seg"))) == 1  # drained segments are gone


def test_spool_torn_tail_and_uncommitted_records_survive_a_crash(tmp_path: Path):
    s = Spool(tmp_path, 1 << 20)
    s.append([b"one", b"two"])
    got = s.read(1)  # read, never committed: comes again after a crash
    assert got[0][0] == b"one"
    seg = next(tmp_path.glob("*.seg"))
    with seg.open("ab") as f:  # a frame cut by the crash
        f.write(b"\x00\x00\x00\x20\x01\x02\x03\x04half")
    s2 = Spool(tmp_path, 1 << 20)
    assert [b for b, _ in s2.read(10)] == [b"one", b"two"]
    assert seg.stat().st_size == 2 * (8 + 3)
    s2.append([b"three"])
    assert [b for b, _ in s2.read(10)] == [b"three"]


def test_spool_limit(tmp_path: Path):
    s = Spool(tmp_path, 1 << 16)
    s.append([b"x" * 30_000, b"y" * 30_000])
    with pytest.raises(SpoolFull):
        s.append([b"z" * 10_000])
    assert s.records_pending == 2
