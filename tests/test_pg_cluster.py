"""The tests' throwaway PostgreSQL (tests/pg_cluster.py): it serves on 127.0.0.1 only, with a password over TCP,
survives a crash (`pg_ctl stop -m immediate`) and a start again, and leaves nothing behind."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pg_cluster as pg_cluster_module
import pytest
from pg_cluster import Cluster


def test_it_serves_on_loopback_and_its_unix_socket(pg_cluster: Cluster, pg_database: str) -> None:
    assert pg_cluster.running()
    database = pg_database.split("dbname=")[1].split()[0]
    assert pg_cluster.psql(database, "SELECT current_database()") == database
    assert (pg_cluster.root / f".s.PGSQL.{pg_cluster.port}").exists()
    assert pg_cluster.psql("postgres", "SHOW listen_addresses") == "127.0.0.1"
    # A password is needed over TCP: the role is not trusted there.
    assert (
        pg_cluster.psql(
            "postgres", "SELECT rolpassword IS NOT NULL FROM pg_authid WHERE rolname = 'hookrunner'"
        )
        == "t"
    )
    with socket.create_connection(("127.0.0.1", pg_cluster.port), timeout=5):
        pass


def test_a_crash_and_a_start_again(pg_cluster: Cluster, pg_database: str) -> None:
    database = pg_database.split("dbname=")[1].split()[0]
    pg_cluster.psql(database, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (42)")
    with pg_cluster.crashed():
        assert not pg_cluster.running()
    assert pg_cluster.running()
    assert pg_cluster.psql(database, "SELECT n FROM kept") == "42"  # committed before the crash


def test_a_cluster_of_its_own_is_removed_with_its_folder() -> None:
    if pg_cluster_module.unavailable_reason() is not None:
        pytest.skip(pg_cluster_module.unavailable_reason() or "")
    cluster = Cluster()
    root = cluster.root
    assert cluster.running()
    if os.geteuid() == 0:
        assert Path(root).stat().st_uid != 0  # owned by postgres, which PostgreSQL needs as root
    cluster.destroy()
    assert not root.exists()
    assert not cluster.running()


@pytest.mark.parametrize(
    ("uid", "installed", "required", "skips"),
    [
        (0, False, False, False),  # CI runs as root: a missing PostgreSQL fails the tests
        (1000, False, True, False),  # HOOKRUNNER_REQUIRE_POSTGRES (.ci/run): the same
        (1000, False, False, True),  # a developer's machine without the package: skipped, with the reason
        (1000, True, False, False),
    ],
)
def test_tests_skip_only_off_ci_without_postgres(
    monkeypatch: pytest.MonkeyPatch, uid: int, installed: bool, required: bool, skips: bool
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: uid)
    monkeypatch.setattr(
        pg_cluster_module, "bindir", lambda: Path("/usr/lib/postgresql/15/bin") if installed else None
    )
    if required:
        monkeypatch.setenv("HOOKRUNNER_REQUIRE_POSTGRES", "1")
    else:
        monkeypatch.delenv("HOOKRUNNER_REQUIRE_POSTGRES", raising=False)
    reason = pg_cluster_module.unavailable_reason()
    assert (reason is not None) == skips
    assert reason is None or "apt-get install postgresql" in reason
