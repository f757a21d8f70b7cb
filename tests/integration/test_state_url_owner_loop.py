"""psycopg waits cooperatively on the real run owner's loop (issue 33 item 1, "a test that measures the
loop"), with the installed command on the tests' throwaway PostgreSQL: while an admission waits in the
database (the test's own connection holds a lock on `hookrunner_runs` that its INSERT needs), the owner
goes on answering what needs it but not that lock: `/metrics` scrapes, which -workers 2 asks of the owner.
The same measure, with psycopg imported before gevent's patching (so that it chose its C wait, which holds
the thread: what the owner's ordering in serve/ownerprocess.py guards against), sees the loop held for as
long as the lock. scripts/test runs these on both worker classes (HOOKRUNNER_TEST_FLAGS)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
from pg_cluster import Cluster
from replica_support import REPLICA_VARIABLE, recorded_runs, recording_hook, state_url
from test_serving import Server, wait_until

#: How long the test's connection holds the lock the push's admission waits for.
HELD = 2.5
#: The longest a scrape may take while the admission waits, on a loop that is not held (a scrape takes a few
#: ms; the bound leaves room for two cores shared by several test runs).
BOUND = 0.5

#: A sitecustomize (on PYTHONPATH) for the measure's control: psycopg imported at the interpreter's start,
#: in the master, before the run owner's fork and its patching, so it picks its wait as an unpatched
#: process does; the name of that wait is written to the file the environment names.
EARLY_IMPORT = """
import os
import psycopg.waiting
with open(os.environ["HOOKRUNNER_TEST_WAIT_NAME"], "w") as out:
    out.write(psycopg.waiting.wait.__name__)
"""


def start_server(
    tmp_path: Path, url: str, record: Path, env: dict[str, str], flag: str = "-metrics"
) -> Server:
    """Two workers on the database at `url`, with `flag`; returned once a first push (`seq=first`) ran."""
    hooks = [recording_hook("record", record, "r1", 0.0)]
    server = Server(
        tmp_path,
        hooks,
        "-state-url",
        url,
        "-state-replica",
        "r1",
        "-workers",
        "2",
        flag,
        popen=functools.partial(subprocess.Popen, env={**os.environ, REPLICA_VARIABLE: "r1", **env}),
    )
    server.ready()
    # The owner has its workers' connections (it answers a push only then; GET / is the worker's own).
    assert wait_until(lambda: server.request("POST", "/hooks/record?seq=first")[0] == 200, timeout=20), (
        server.log
    )
    assert wait_until(lambda: len(recorded_runs(record)) == 1, timeout=10)
    return server


def admission_waits(conninfo: str) -> bool:
    """Whether a backend other than the asker's waits on a lock of `hookrunner_runs` (the admission's)."""
    sql = (
        "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'hookrunner_runs'::regclass"
        " AND pid <> pg_backend_pid()"
    )
    with psycopg.connect(conninfo) as conn:
        row = conn.execute(sql).fetchone()
    return row is not None and row[0] > 0


def measure(server: Server, conninfo: str, record: Path) -> dict[str, float]:
    """Hold the lock HELD seconds from the test's own connection while a push's admission waits for it,
    scraping /metrics one after another meanwhile; then release it (on a thread of its own, so that a scrape
    held by the owner cannot hold the release back too). Returns the slowest scrape, how many were answered
    while the lock was held, and how long after the release the push was answered."""
    with ThreadPoolExecutor(max_workers=2) as pool, psycopg.connect(conninfo) as holder:
        holder.execute("LOCK TABLE hookrunner_runs IN SHARE ROW EXCLUSIVE MODE")  # what INSERT waits for
        locked = time.monotonic()
        push = pool.submit(server.request, "POST", "/hooks/record?seq=held")
        assert wait_until(lambda: admission_waits(conninfo), timeout=HELD / 2), server.log[-2000:]

        def release() -> tuple[bool, float]:
            time.sleep(max(0.0, locked + HELD - time.monotonic()))
            waited = admission_waits(conninfo) and not push.done()  # the push waited throughout
            holder.commit()
            return waited, time.monotonic()

        released = pool.submit(release)
        scrapes: list[float] = []
        while not released.done():
            started = time.monotonic()
            status, _, body = server.request("GET", "/metrics")
            scrapes.append(time.monotonic() - started)
            assert status == 200 and b"hookrunner_" in body, (status, body[:300], server.log[-2000:])
            time.sleep(0.05)
        waited, released_at = released.result()
        status = push.result(timeout=15)[0]
        answered = time.monotonic() - released_at
    assert waited, server.log[-2000:]
    assert status == 200, server.log[-2000:]
    assert wait_until(lambda: "held" in {run.seq for run in recorded_runs(record)}, timeout=10)
    return {"slowest": max(scrapes), "scrapes": len(scrapes), "answered": answered}


def test_the_owner_loop_serves_while_an_admission_waits_in_the_database(
    tmp_path: Path, servers: list[Server], pg_cluster: Cluster, pg_database: str
) -> None:
    record = tmp_path / "runs.txt"
    server = start_server(tmp_path, state_url(pg_cluster, pg_database), record, {})
    servers.append(server)
    found = measure(server, pg_database, record)
    print(f"psycopg patched in the owner: {found}")
    assert found["slowest"] < BOUND, found
    assert found["scrapes"] >= 5, found  # scrapes went on throughout the wait, not only before and after
    assert found["answered"] < 5.0, found
    assert "Traceback" not in server.log, server.log


def test_the_measure_sees_the_loop_held_by_psycopg_imported_before_the_patch(
    tmp_path: Path, servers: list[Server], pg_cluster: Cluster, pg_database: str
) -> None:
    # Without gevent's patching in effect for psycopg, its waits hold the owner's thread: the same measure must
    # say so, or the test above could pass with a loop that was never shared.
    early = tmp_path / "early"
    early.mkdir()
    (early / "sitecustomize.py").write_text(EARLY_IMPORT)
    wait_name = tmp_path / "wait-name.txt"
    env = {"PYTHONPATH": str(early), "HOOKRUNNER_TEST_WAIT_NAME": str(wait_name)}
    record = tmp_path / "runs.txt"
    server = start_server(tmp_path, state_url(pg_cluster, pg_database), record, env)
    servers.append(server)
    assert wait_name.read_text() == "wait_c"  # psycopg's C wait, chosen before any patching
    found = measure(server, pg_database, record)
    print(f"psycopg imported before the patch: {found}")
    assert found["slowest"] >= HELD / 2, found  # the loop was held for most of the lock's time


def test_hot_reload_follows_the_file_and_runs_go_on_in_a_patched_owner(
    tmp_path: Path, servers: list[Server], pg_cluster: Cluster, pg_database: str
) -> None:
    """With -state-url the run owner is monkey-patched (threads are greenlets), and with -hotreload it runs
    watchdog's observer and the hooks watcher: neither may hold the owner's loop while it waits for a file
    event, and a change to the file still reaches every worker."""
    record = tmp_path / "runs.txt"
    server = start_server(tmp_path, state_url(pg_cluster, pg_database), record, {}, "-hotreload")
    servers.append(server)
    # Runs are admitted, started and answered while the watcher waits for a change (a loop held by a
    # blocking wait on inotify would answer none of them).
    for seq in range(10):
        assert wait_until(
            lambda s=seq: server.request("POST", f"/hooks/record?seq=a{s}")[0] == 200, timeout=10
        )
    assert wait_until(lambda: len(recorded_runs(record)) == 1 + 10, timeout=10), server.log[-2000:]
    # A new hook written to the file is served by both workers (a GET / and requests spread over them).
    hooks = [recording_hook("record", record, "r1", 0.0), recording_hook("added", record, "r1", 0.0)]
    server.hooks_path.write_text(json.dumps(hooks))
    assert wait_until(lambda: server.request("POST", "/hooks/added?seq=b0")[0] == 200, timeout=10), (
        server.log[-2000:]
    )
    statuses = [server.request("POST", f"/hooks/added?seq=b{n}")[0] for n in range(1, 21)]
    assert statuses == [200] * 20, (statuses, server.log[-2000:])
    assert wait_until(lambda: len(recorded_runs(record)) == 1 + 31, timeout=15), server.log[-2000:]
    assert "Traceback" not in server.log, server.log
