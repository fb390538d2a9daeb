"""Shared fixtures: run the real gateway as a subprocess on a free loopback port.

``gateway`` is function scoped (fresh data dir, safe to restart or kill);
``shared_gateway`` is module scoped and meant for tests that only need a live
server and isolate themselves with unique topic names.

Extra command line arguments can be given with the ``gateway_args`` marker::

    @pytest.mark.gateway_args("--auto-create-topics", "false")
    def test_x(gateway): ...

and for ``shared_gateway`` with a module-level ``GATEWAY_ARGS = (...)`` tuple.
``{port}`` inside an argument is replaced by the server's port.

The server's stderr/stdout goes to ``server.log`` next to the data dir; when a
test that uses a gateway fails, the tail of that log is attached to the report.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.client import DEFAULT_PARTITIONS, unique_topic

from harness.gateway import Gateway, GatewayError

__all__ = ["Gateway", "GatewayError"]

pytest_plugins = ["support.s3", "support.spark", "support.kafka"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "gateway_args(*args): extra command line arguments for the gateway fixture"
    )
    config.addinivalue_line("markers", "unit: in-process test of modules (tests/unit/)")
    config.addinivalue_line("markers", "system: test against real server processes (tests/system/)")
    config.addinivalue_line(
        "markers",
        "beside_kafka: a long run of a whole tool against Apache Kafka as well "
        "(`make test-beside-kafka`; `make test` leaves it out to keep within its time budget)",
    )


_TESTS_DIR = Path(__file__).resolve().parent
# fixtures that start real servers: a test using one is a system test
SERVER_FIXTURES = frozenset(
    {"gateway", "shared_gateway", "spark", "spark_gateway", "moto_server", "outage_proxy"}
    | {"postgres", "pg_url", "group_run"}
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks each test `unit` or `system` from its folder (tests/README.md), so `-m unit` and
    `-m system` select the same tests as the folders; a module outside both folders is
    classed by the fixtures its tests use. A unit test using a server fixture is an error."""
    for item in items:
        kind = item.path.resolve().relative_to(_TESTS_DIR).parts[0]
        servers = SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        if kind == "unit" and servers:
            raise pytest.UsageError(
                f"{item.nodeid} is in tests/unit/ but uses {sorted(servers)}: "
                "a test that starts servers belongs in tests/system/"
            )
        if kind not in ("unit", "system"):
            kind = "system" if servers else "unit"
        item.add_marker(kind)


def _new_gateway(base: Path, args: tuple[str, ...]) -> Gateway:
    return Gateway(base / "data", base / "server.log", args, default_partitions=DEFAULT_PARTITIONS)


def _markers_args(request: pytest.FixtureRequest) -> tuple[str, ...]:
    args: list[str] = []
    for marker in request.node.iter_markers("gateway_args"):
        args.extend(str(a) for a in marker.args)
    return tuple(args)


@pytest.fixture
def gateway(request: pytest.FixtureRequest, tmp_path: Path):
    gw = _new_gateway(tmp_path, _markers_args(request))
    gw.start_fresh()
    yield gw
    gw.close()


@pytest.fixture(scope="module")
def shared_gateway(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """One server per test module; extra arguments come from a module-level GATEWAY_ARGS."""
    base = tmp_path_factory.mktemp("shared-gateway")
    args = tuple(getattr(request.module, "GATEWAY_ARGS", ()))
    gw = _new_gateway(base, args)
    gw.start_fresh()
    yield gw
    gw.close()


@pytest.fixture
def group_run():
    """`group_run(gateway, name, partitions)` makes a GroupRun (tests/support/groups.py): a
    new topic and group; every member made through it is stopped at teardown."""
    from support.groups import GroupRun

    runs: list[GroupRun] = []

    def make(gw: Gateway, name: str, partitions: int) -> GroupRun:
        runs.append(GroupRun.create(gw.bootstrap, name, partitions))
        return runs[-1]

    yield make
    for run in runs:
        run.stop()


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A unique topic name derived from the test name."""
    return unique_topic(request.node.name)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.failed:
        funcargs = getattr(item, "funcargs", {})
        for name, value in funcargs.items():
            if isinstance(value, Gateway):
                if value.is_alive():
                    alive = "alive"
                else:
                    alive = f"dead (rc={value.proc.returncode if value.proc else None})"
                report.sections.append(
                    (f"gateway '{name}' log ({value.bootstrap}, {alive})", value.log_tail())
                )
    return report
