"""Where the Spark tests and examples find Spark's Kafka connector (no Spark started here,
and no network: Maven is only used when STREAMGATE_SPARK_PACKAGES=1 says so)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_examples import session


@pytest.fixture(autouse=True)
def no_shared_no_maven(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("STREAMGATE_SPARK_JARS", raising=False)
    monkeypatch.setattr(session, "SHARED_CONNECTOR", tmp_path / "absent")
    monkeypatch.delenv("STREAMGATE_SPARK_PACKAGES", raising=False)


def _jars(folder: Path, *names: str) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / n for n in names]
    for p in paths:
        p.write_bytes(b"PK")
    return paths


def test_nothing_found_says_why() -> None:
    found = session.find_connector()
    assert not found.found
    assert "absent" in found.reason and "STREAMGATE_SPARK_PACKAGES=1 not set" in found.reason


def test_env_folder_then_list_win(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    a, b = _jars(tmp_path / "env", "a.jar", "b.jar")
    _jars(tmp_path / "absent", "shared.jar")  # the shared folder exists too: env first
    monkeypatch.setenv("STREAMGATE_SPARK_JARS", str(tmp_path / "env"))
    assert session.find_connector().jars == (str(a), str(b))
    monkeypatch.setenv("STREAMGATE_SPARK_JARS", f"{b}, {a}")
    assert session.find_connector().jars == (str(b), str(a))


def test_bad_env_falls_back_to_shared(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (shared,) = _jars(tmp_path / "absent", "shared.jar")
    monkeypatch.setenv("STREAMGATE_SPARK_JARS", str(tmp_path / "missing.jar"))
    found = session.find_connector()
    assert found.jars == (str(shared),)


def test_maven_when_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMGATE_SPARK_PACKAGES", "1")
    found = session.find_connector()
    assert found.packages == ("org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.1",)
