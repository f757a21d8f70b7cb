"""Suite-wide settings: in CI the reference and the tools that some tests compare against must be there."""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterator

import pg_cluster as pg_cluster_module
import pytest
from hypothesis import HealthCheck, settings

from hookrunner.ops.log import log

#: Tools whose tests would otherwise be skipped; .ci/run installs them all.
REQUIRED_IN_CI = ("webhook", "git", "curl", "shellcheck", "kubectl")


def pytest_configure(config: pytest.Config) -> None:
    # A skipped differential test must never stand in for a passing one in CI.
    if os.environ.get("HOOKRUNNER_REQUIRE_REFERENCE"):
        missing = [tool for tool in REQUIRED_IN_CI if shutil.which(tool) is None]
        if missing:
            raise pytest.UsageError(f"HOOKRUNNER_REQUIRE_REFERENCE is set but these are missing: {missing}")
    if os.environ.get("HOOKRUNNER_REQUIRE_POSTGRES") and pg_cluster_module.bindir() is None:
        raise pytest.UsageError(
            "HOOKRUNNER_REQUIRE_POSTGRES is set but /usr/lib/postgresql/*/bin/pg_ctl is missing"
        )


# Property tests (hypothesis) are seeded: a run is reproducible, and CI sees the same examples each time.
# HOOKRUNNER_PROPERTY_EXAMPLES asks for more by hand.
settings.register_profile(
    "hookrunner",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=int(os.environ.get("HOOKRUNNER_PROPERTY_EXAMPLES", "200")),
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("hookrunner")


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """What hookrunner logs during the test, with logging on."""
    stream = io.StringIO()
    saved_stream, saved_enabled = log._stream, log.enabled
    log.set_output(stream)
    log.enabled = True
    try:
        yield stream
    finally:
        log.set_output(saved_stream)
        log.enabled = saved_enabled


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[pg_cluster_module.Cluster]:
    """A throwaway PostgreSQL for the session (tests/pg_cluster.py), shared by every test that needs one.
    Skipped only off CI on a machine without PostgreSQL; in CI (root, or HOOKRUNNER_REQUIRE_POSTGRES) a
    missing or broken PostgreSQL fails the tests that need it."""
    reason = pg_cluster_module.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    cluster = pg_cluster_module.Cluster()
    try:
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def pg_database(pg_cluster: pg_cluster_module.Cluster) -> str:
    """A new, empty database on the session's cluster; its conninfo (TCP, with the test role's password)."""
    return pg_cluster.create_database()
