"""The shared run state does not grow with every request (-state-url): two installed `hookrunner` replicas on
one throwaway PostgreSQL (tests/pg_cluster.py), with no admin listener, a short `-state-done-age` and a small
`-state-keep`, take a few hundred pushes (some coalesced into queued runs); then the finished runs' rows,
the events and the history's records come back down to their bounds, the replicas' run owners doing it
with no admin listener. An admin listener started later shows the history as docs/history.md says: the
newest `-state-keep` ended runs, each once, and the runs that come after."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
from pg_cluster import Cluster
from test_run_history import start, trigger
from test_serving import Server, python_hook, wait_until

KEEP = 20
PUSHES = 300
RETENTION = ("-state-done-age", "2s", "-state-keep", str(KEEP))
HOOKS = [
    python_hook("ok", "print('hi')"),
    # one run at a time, one waiting: a push while one waits is folded into it (a `coalesced` row)
    python_hook("merged", "import time; time.sleep(0.05)", **{"max-concurrency": 1, "coalesce": True}),
]


def counts(conninfo: str) -> dict[str, int]:
    with psycopg.connect(conninfo) as conn:
        found = {}
        for table in ("hookrunner_runs", "hookrunner_events", "hookrunner_history"):
            exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
            row = conn.execute(f"SELECT count(*) FROM {table}").fetchone() if exists and exists[0] else (0,)
            found[table] = int(row[0]) if row else 0
        return found


def history_kinds(conninfo: str) -> list[tuple[str, str, str, int]]:
    """The history's records by kind, outcome and detail: what an assertion shows when they are too many."""
    with psycopg.connect(conninfo) as conn:
        return [
            (str(kind), str(outcome), str(detail), int(count))
            for kind, outcome, detail, count in conn.execute(
                "SELECT kind, outcome, detail, count(*) FROM hookrunner_history GROUP BY 1, 2, 3 ORDER BY 1, 2"
            ).fetchall()
        ]


def open_runs(conninfo: str) -> list[tuple[Any, ...]]:
    """The rows still in hookrunner_runs, with their lease's seconds left: what an assertion shows."""
    with psycopg.connect(conninfo) as conn:
        return [
            tuple(row)
            for row in conn.execute(
                "SELECT id, hook_id, request_id, state, attempt, holder, admitted_by, processes,"
                " lease_until - extract(epoch FROM clock_timestamp()) FROM hookrunner_runs ORDER BY id"
            ).fetchall()
        ]


def test_the_shared_tables_come_back_down_without_an_admin_listener(
    tmp_path: Path, servers: list[Server], pg_cluster: Cluster
) -> None:
    conninfo = pg_cluster.create_database()
    found = re.search(r"dbname=(\S+)", conninfo)
    assert found is not None
    url = pg_cluster.url(found.group(1))
    replicas = []
    for name in ("r1", "r2"):
        folder = tmp_path / name
        folder.mkdir()
        server = Server(folder, HOOKS, "-x-request-id", "-state-url", url, "-state-replica", name, *RETENTION)
        servers.append(server)
        server.ready()
        assert server.wait_for_log("connected to the run owner", timeout=15), server.log
        replicas.append(server)

    def one(n: int) -> int:
        return trigger(replicas[n % 2], "merged" if n % 5 == 0 else "ok", f"push-{n}")

    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(one, range(PUSHES)))
    assert statuses == [200] * PUSHES
    with psycopg.connect(conninfo) as conn:
        coalesced = conn.execute("SELECT count(*) FROM hookrunner_runs WHERE coalesced_into IS NOT NULL")
        row = coalesced.fetchone()
    print("right after the pushes:", counts(conninfo), "coalesced rows:", row)

    # Every run ends within a few seconds; two seconds later its row goes, and the owners fold the events
    # (older than half a second: nobody else folds them) under the history's -state-keep.
    def settled() -> bool:
        now = counts(conninfo)
        kept = now["hookrunner_history"]  # pruned once a tenth of -state-keep new records have come
        return now["hookrunner_runs"] == 0 and now["hookrunner_events"] == 0 and KEEP <= kept <= KEEP + 2

    if not wait_until(settled, timeout=60):
        left = open_runs(conninfo)
        running = {str(row[2]) for row in left if row[3] == "running"}
        lines = [line for s in replicas for line in s.log.splitlines() if any(r in line for r in running)]
        raise AssertionError((counts(conninfo), history_kinds(conninfo), left, lines))
    for server in replicas:
        assert "Traceback" not in server.log and "upkeep failed" not in server.log, server.log

    # An admin listener started later: the newest -state-keep ended runs, each once, from both replicas.
    folder = tmp_path / "r3"
    folder.mkdir()
    _, admin = start(folder, servers, HOOKS, "-state-url", url, "-state-replica", "r3", *RETENTION)
    runs = admin.json("/api/v1/runs?limit=500")["runs"]
    ids = [run["id"] for run in runs]
    assert KEEP <= len(ids) <= KEEP + 2 and len(ids) == len(set(ids))
    assert {run["outcome"] for run in runs} == {"ok"} and {run["replica"] for run in runs} == {"r1", "r2"}
    assert set(ids) <= {f"push-{n}" for n in range(PUSHES)}
    for n in range(3):
        assert trigger(replicas[0], "ok", f"later-{n}") == 200

    def later_shown() -> bool:
        shown = [run["id"] for run in admin.json("/api/v1/runs?limit=500")["runs"]]
        return shown[:3] == [f"later-{n}" for n in reversed(range(3))] and len(shown) == len(set(shown))

    assert wait_until(later_shown, timeout=30), admin.json("/api/v1/runs?limit=500")
