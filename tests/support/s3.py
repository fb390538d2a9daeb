"""pytest fixtures for tier-2 storage tests: a moto S3 server and an outage proxy in front of it.

Registered from ``tests/conftest.py`` (``pytest_plugins``)
or imported by a test module directly.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from harness.moto import MotoServer
from harness.proxy import OutageProxy


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """One moto S3 server for the session. While it runs, this process's environment carries
    its test credentials and region (so boto3 clients created in tests find them); use
    ``moto_server.env()`` for subprocesses started with a custom environment.
    """
    server = MotoServer(tmp_path_factory.mktemp("moto"))
    saved = {name: os.environ.get(name) for name in server.env()}
    os.environ.update(server.env())
    try:
        server.start()
        yield server
    finally:
        server.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture
def outage_proxy(moto_server: MotoServer) -> Iterator[OutageProxy]:
    """A TCP proxy in front of the moto server; ``.endpoint`` is its S3 endpoint URL."""
    proxy = OutageProxy(("127.0.0.1", moto_server.port))
    try:
        yield proxy
    finally:
        proxy.close()
