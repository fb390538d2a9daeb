"""docker/: the compose files and Dockerfiles, checked without a Docker engine (CI), and the
whole stack with testcontainers where an engine runs."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
COMPOSE_FILES = sorted(DOCKER.glob("compose*.yaml"))


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict) and isinstance(data.get("services"), dict), path
    return data


def _copy_sources(dockerfile: Path) -> list[str]:
    """The context paths of every COPY without --from (multi-stage copies are not files)."""
    sources = []
    for line in dockerfile.read_text().splitlines():
        words = line.split()
        if not words or words[0].upper() != "COPY" or any(w.startswith("--from") for w in words):
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        sources += args[:-1]
    return sources


def _serve_env_names() -> set[str]:
    # the serve flags live in cli/ (cli/serve.py and the modules it pulls flags from)
    text = "\n".join(p.read_text() for p in sorted((REPO / "cli").glob("*.py")))
    return {f"STREAMGATE_{name}" for name in re.findall(r'_env\("([A-Z0-9_]+)"', text)}


@pytest.mark.parametrize("compose", COMPOSE_FILES, ids=lambda p: p.name)
def test_compose_references_resolve(compose: Path) -> None:
    data = _load(compose)
    services: dict[str, Any] = data["services"]
    volumes = set((data.get("volumes") or {}).keys())
    env_names = _serve_env_names()
    for name, svc in services.items():
        assert "image" in svc or "build" in svc, f"{name}: neither image nor build"
        build = svc.get("build")
        if build is not None:
            context = (compose.parent / build["context"]).resolve()
            assert context.is_dir(), f"{name}: build context {context} missing"
            dockerfile = context / build.get("dockerfile", "Dockerfile")
            assert dockerfile.is_file(), f"{name}: {dockerfile} missing"
            for src in _copy_sources(dockerfile):
                assert (context / src).exists(), f"{name}: {dockerfile.name} copies missing {src}"
        deps = svc.get("depends_on") or []
        for dep in deps if isinstance(deps, list) else deps.keys():
            assert dep in services, f"{name}: depends_on unknown service {dep}"
        mode = svc.get("network_mode", "")
        if mode.startswith("service:"):
            assert mode.split(":", 1)[1] in services, f"{name}: network_mode {mode}"
        for vol in svc.get("volumes") or []:
            source = vol.split(":", 1)[0]
            if source.startswith((".", "/")):
                path = (compose.parent / source).resolve()
                # read-only mounts are inputs and must exist; writable ones are outputs
                if vol.endswith(":ro"):
                    assert path.exists(), f"{name}: mounted {path} missing"
            else:
                assert source in volumes, f"{name}: named volume {source} not declared"
        env = svc.get("environment") or {}
        for key, value in env.items():
            if key.startswith("STREAMGATE_"):
                assert key in env_names, f"{name}: {key} is not a `streamgate serve` variable"
            for host in re.findall(r"https?://([a-z0-9-]+):\d+", str(value)):
                assert host in services, f"{name}: {key} points at unknown host {host}"


def test_streamgate_image_copies_every_package() -> None:
    """Every package pyproject.toml installs is copied into the gateway image (the CLI
    imports compat/, compat imports harness/)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["packages"]["find"]["include"]
    copied = set(_copy_sources(DOCKER / "Dockerfile"))
    for pattern in patterns:
        package = pattern.rstrip("*")
        if (REPO / package).is_dir():
            assert package in copied, f"docker/Dockerfile does not COPY {package}/"


def test_compat_stack_has_every_service() -> None:
    services = _load(DOCKER / "compose.compat.yaml")["services"]
    for needed in ("streamgate", "minio", "mosquitto", "kafka", "compat", "spark"):
        assert needed in services, needed
    env = services["streamgate"]["environment"]
    assert env["STREAMGATE_TIER2"].startswith("s3://")


def _docker_unavailable() -> str | None:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env().ping()  # type: ignore[attr-defined]
    except Exception as exc:
        return f"no Docker engine: {type(exc).__name__}: {str(exc)[:120]}"
    return None


@pytest.mark.timeout(1800)
def test_compose_stack_runs_the_matrix() -> None:
    why = _docker_unavailable()
    if why:
        pytest.skip(why)
    import subprocess

    from testcontainers.compose import DockerCompose

    stack = DockerCompose(
        DOCKER,
        compose_file_name="compose.compat.yaml",
        build=True,
        services=["minio", "streamgate", "kafka", "mosquitto"],
    )
    with stack:
        stack.wait_for("http://localhost:9000/minio/health/live")
        # the runner image (profile "runners") drives every client against both brokers
        run = subprocess.run(
            [
                "docker",
                "compose",
                "-f",
                str(DOCKER / "compose.compat.yaml"),
                "run",
                "--rm",
                "--build",
                "compat",
                "--bootstrap",
                "localhost:9092",
                "--against",
                "kafka:9092",
                "--records",
                "20",
                "--output-dir",
                "/results",
            ],
            capture_output=True,
            text=True,
            timeout=1500,
        )
        assert "compatibility matrix" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]
    data = json.loads((REPO / "compat-results" / "compat_matrix.json").read_text())
    assert set(data["targets"]) == {"target", "reference"}
    passed = [c for c in data["cells"] if c["target"] == "target" and c["status"] == "pass"]
    assert len(passed) > 50, data["totals"]
