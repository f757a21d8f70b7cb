"""The PostgreSQL run state's connections (hookrunner/state/pgconn.py) on the tests' throwaway PostgreSQL: at
most `size` at once, reused while they are up, replaced once the server has cut them, and the password out of
every message."""

from __future__ import annotations

import io
import threading
import time

import psycopg
import pytest
from pg_cluster import PASSWORD, Cluster

from hookrunner.state.backend import StateUnavailable
from hookrunner.state.pgconn import Connections, secrets_of


def backend_pid(connections: Connections) -> int:
    with connections.lent() as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        conn.rollback()
    assert row is not None
    return int(row[0])


def test_at_most_size_at_once_and_the_rest_wait(pg_database: str) -> None:
    connections = Connections(pg_database, size=2)
    busy, most = 0, 0
    guard = threading.Lock()

    def sleeper() -> None:
        nonlocal busy, most
        with connections.lent() as conn:
            with guard:
                busy += 1
                most = max(most, busy)
            conn.execute("SELECT pg_sleep(0.2)")
            conn.rollback()
            with guard:
                busy -= 1

    threads = [threading.Thread(target=sleeper) for _ in range(6)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    took = time.monotonic() - started
    assert most == 2
    assert took >= 0.55, took  # three rounds of two
    with psycopg.connect(pg_database) as probe:
        row = probe.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'hookrunner' AND datname = current_database()"
        ).fetchone()
    assert row == (2,)  # both kept for the next use, no more made
    connections.close()


def test_a_connection_is_reused_until_the_server_cuts_it(pg_cluster: Cluster, pg_database: str) -> None:
    connections = Connections(pg_database, size=1)
    first = backend_pid(connections)
    assert backend_pid(connections) == first  # reused
    pg_cluster.psql("postgres", f"SELECT pg_terminate_backend({first}, 10000)")
    second = backend_pid(connections)  # the cut one is seen before use: no call fails on it
    assert second != first
    connections.close()
    with pytest.raises(StateUnavailable):
        backend_pid(connections)  # closed for good


def test_an_error_that_says_away_drops_the_connection(pg_cluster: Cluster, pg_database: str) -> None:
    connections = Connections(pg_database, size=1)
    first = backend_pid(connections)
    with pytest.raises(StateUnavailable, match="PostgreSQL is unavailable"):
        with connections.lent() as conn:
            conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    assert backend_pid(connections) != first
    connections.close()


def test_the_password_is_found_however_it_is_written() -> None:
    assert secrets_of("host=h password=abc dbname=d") == ["abc"]
    assert secrets_of("host=h password='a b' dbname=d") == ["a b"]
    assert secrets_of("host=h password=abc dbname") == ["abc"]  # libpq cannot read it: as written
    assert secrets_of("postgresql://u:p%40ss@h:5432/d") == ["p%40ss", "p@ss"]
    assert secrets_of("postgresql://u@h/d") == []
    connections = Connections(f"postgresql://u:{PASSWORD}@127.0.0.1:1/d")
    assert connections.redact(f"oops {PASSWORD} and p") == "oops *** and p"


def test_a_transaction_begun_before_the_database_was_found_away_does_not_say_it_is_back(
    pg_database: str, log_lines: io.StringIO
) -> None:
    # As the server goes down, one call fails while another, begun before on another connection, still
    # goes through: the log must not flap (away, back, away), only a transaction begun since says "back".
    connections = Connections(pg_database, size=2)
    with connections.lent() as begun_before:
        connections.unavailable(psycopg.OperationalError("server closed the connection unexpectedly"))
        begun_before.execute("SELECT 1")
        begun_before.rollback()
    assert "reachable again" not in log_lines.getvalue()
    with connections.lent() as begun_since:
        begun_since.execute("SELECT 1")
        begun_since.rollback()
    said = log_lines.getvalue()
    assert said.count("PostgreSQL is unavailable") == 1 and said.count("PostgreSQL is reachable again") == 1
    connections.close()
