"""Fixtures for the integration suite: a session-wide pool of real servers, and the `reference` marker.

Tests that need the reference binary carry `@pytest.mark.reference`; they are skipped only when
/usr/bin/webhook is absent (CI installs it, so there they run).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from integration_harness import REFERENCE_BINARY, ServerPool, reference_available

if TYPE_CHECKING:
    from test_serving import Server


@pytest.fixture(scope="session")
def server_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    pool = ServerPool(tmp_path_factory.mktemp("servers"))
    try:
        yield pool
    finally:
        pool.stop_all()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if reference_available():
        return
    skip = pytest.mark.skip(reason=f"reference webhook binary {REFERENCE_BINARY} is not installed")
    for item in items:
        if "reference" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    """hookrunner processes a test started (test_serving.Server); killed if the test left them running."""
    started: list[Server] = []
    yield started
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait(timeout=10)
        if server.process.stdout:
            server.process.stdout.close()
