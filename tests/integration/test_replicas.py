"""Several replicas of the installed `hookrunner` on one PostgreSQL database (-state-url, issue 33): the
caps hold over all of them, each accepted run runs exactly once, and an unreachable database stops the
start in one line. scripts/test runs these on both worker classes (HOOKRUNNER_TEST_FLAGS)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pg_cluster import Cluster
from replica_support import (
    Run,
    overlaps,
    ran_once,
    recorded_runs,
    recording_hook,
    start_replicas,
    started_count,
    state_url,
)
from test_limits import alive, python_command
from test_run_processes import ESCAPE, marked, zombie_children
from test_serving import HOOKRUNNER, HOOKRUNNER_TEST_FLAGS, Server, free_port, run_owner_pids, wait_until


def push_spread(replicas: list[Server], count: int, hook: str = "record") -> dict[str, int]:
    """`count` concurrent pushes, push n to replica n % len(replicas), each on a connection of its own;
    returns each push's status by its seq."""

    def push(n: int) -> tuple[str, int]:
        server = replicas[n % len(replicas)]
        return str(n), server.request("POST", f"/hooks/{hook}?seq={n}")[0]

    with ThreadPoolExecutor(max_workers=16) as pool:
        return dict(pool.map(push, range(count)))


def check_once_and_alone(record: Path, statuses: dict[str, int]) -> list[Run]:
    """Every push answered 200 ran exactly once, nothing else ran, and no two runs overlapped; returns
    the runs."""
    runs = ran_once(record, statuses)
    assert overlaps(runs) == []
    return runs


@pytest.mark.parametrize("count", [2, 3])
def test_max_concurrency_one_holds_across_replicas_and_each_accepted_run_runs_once(
    tmp_path: Path, servers: list[Server], pg_cluster: Cluster, pg_database: str, count: int
) -> None:
    record = tmp_path / "runs.txt"
    url = state_url(pg_cluster, pg_database)
    replicas = start_replicas(
        tmp_path,
        servers,
        url,
        count,
        lambda name: [
            recording_hook("record", record, name, 0.2, **{"max-concurrency": 1, "max-queue": 100})
        ],
    )
    statuses = push_spread(replicas, 12 * count)
    assert set(statuses.values()) == {200}, statuses
    runs = check_once_and_alone(record, statuses)
    assert len(runs) == 12 * count
    names = {f"r{n}" for n in range(1, count + 1)}
    assert {run.ran_on for run in runs} <= names and {run.admitted_by for run in runs} == names
    # Every replica's history events are rows of the database, each naming its replica; each run ended once.
    database = pg_database.split("dbname=")[1].split()[0]
    recorded = "SELECT count(DISTINCT replica) FROM hookrunner_events"
    assert wait_until(lambda: pg_cluster.psql(database, recorded) == str(count), timeout=10)
    ended = "SELECT count(*) FROM hookrunner_events WHERE event->>'outcome' = 'ok'"
    assert wait_until(lambda: int(pg_cluster.psql(database, ended)) >= 12 * count, timeout=10)
    for server in replicas:
        assert "Traceback" not in server.log, server.log


def test_an_unreachable_database_at_start_is_one_line_and_exit_1(tmp_path: Path) -> None:
    password = "pw-never-logged-9461"
    url = f"postgresql://hookrunner:{password}@127.0.0.1:{free_port()}/nothing?connect_timeout=3"
    (tmp_path / "hooks.json").write_text("[]")
    argv = [HOOKRUNNER, "-hooks", str(tmp_path / "hooks.json"), *HOOKRUNNER_TEST_FLAGS]
    argv += ["-ip", "127.0.0.1", "-port", str(free_port()), "-state-url", url]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, timeout=60, cwd=tmp_path)
    log = done.stderr.decode(errors="replace")
    assert done.returncode == 1, log
    assert time.monotonic() - started < 30
    lines = [line for line in log.splitlines() if line.strip()]
    assert len(lines) == 1, log
    assert "PostgreSQL is unavailable" in lines[0], log
    assert password not in log + done.stdout.decode(errors="replace")
    assert "serving hooks" not in log


def test_the_database_away_is_503_with_retry_after_then_recovers_with_one_line_each_way(
    tmp_path: Path, servers: list[Server], pg_cluster: Cluster, pg_database: str
) -> None:
    record = tmp_path / "runs.txt"
    url = state_url(pg_cluster, pg_database)
    hooks = [
        recording_hook("record", record, "r1", 0.0),
        {**recording_hook("captured", record, "r1", 0.0), "include-command-output-in-response": True},
        {"id": "never", "execute-command": "/bin/true", "trigger-rule": {"match": {"type": "value", "value": "x",
         "parameter": {"source": "url", "name": "never"}}}},
    ]  # fmt: skip
    (server,) = start_replicas(tmp_path, servers, url, 1, lambda name: hooks)
    assert server.request("POST", "/hooks/record?seq=before")[0] == 200
    with pg_cluster.crashed():
        for n in range(5):
            for hook in ("record", "captured"):
                status, headers, body = server.request("POST", f"/hooks/{hook}?seq=away{n}")
                assert status == 503, (status, body, server.log[-2000:])
                assert headers.get("retry-after", "").isdigit(), headers
                assert len(body) < 200, body
        # What runs nothing is answered as usual.
        assert server.request("GET", "/")[0] == 200
        assert server.request("POST", "/hooks/never")[:3:2] == (200, b"Hook rules were not satisfied.")
        assert server.request("POST", "/hooks/nothing-here")[0] == 404
        # Readiness too: the database is every replica's, so its outage must not take them all out of a
        # load balancer, which would then answer everything itself (docs/operations.md).
        assert server.request("GET", "/healthz?ready")[::2] == (200, b"OK")
        assert server.request("GET", "/healthz")[0] == 200
    # Back, with no restart.
    assert wait_until(lambda: server.request("POST", "/hooks/record?seq=back")[0] == 200, timeout=30), (
        server.log
    )
    assert server.request("POST", "/hooks/captured?seq=back2")[0] == 200
    assert server.request("GET", "/healthz?ready")[0] == 200
    assert wait_until(
        lambda: {"before", "back", "back2"} <= {r.seq for r in recorded_runs(record)}, timeout=20
    )
    assert not any(run.seq.startswith("away") for run in recorded_runs(record))
    log = server.log
    assert log.count("run state: PostgreSQL is unavailable") == 1, log
    assert log.count("run state: PostgreSQL is reachable again") == 1, log
    assert "Traceback" not in log, log


def test_a_capture_whose_queued_run_another_replica_ran_gets_its_output(
    tmp_path: Path, servers: list[Server], pg_cluster: Cluster, pg_database: str
) -> None:
    record = tmp_path / "runs.txt"
    url = state_url(pg_cluster, pg_database)
    limits = {"max-concurrency": 1, "max-queue": 10, "include-command-output-in-response": True}
    replicas = start_replicas(
        tmp_path, servers, url, 2, lambda name: [recording_hook("record", record, name, 0.3, **limits)]
    )
    first, second = replicas
    with ThreadPoolExecutor(max_workers=8) as pool:
        holding = pool.submit(first.request, "POST", "/hooks/record?seq=0")
        assert wait_until(lambda: started_count(record) == 1, timeout=20)
        waiting = [pool.submit(second.request, "POST", f"/hooks/record?seq={n}") for n in range(1, 5)]
        answers = {"0": holding.result(timeout=60)}
        answers.update({str(n): w.result(timeout=60) for n, w in enumerate(waiting, 1)})
    runs = {run.seq: run for run in recorded_runs(record)}
    assert set(runs) == set(answers) and overlaps(sorted(runs.values(), key=lambda r: r.start)) == []
    elsewhere = 0
    for seq, (status, _, body) in answers.items():
        run = runs[seq]
        # Whichever replica ran it, its output (kept with its row for the replica where the request waits;
        # test_replicas_capture.py forces the other replica and checks failures and streams).
        assert (status, body) == (200, f"ran {seq} on {run.replica}\n".encode()), (seq, status, body)
        elsewhere += run.ran_on != run.admitted_by
    print(f"captures run by another replica: {elsewhere} of 4")


def test_an_escaped_grandchild_is_ended_at_the_timeout_on_the_shared_state_too(
    tmp_path: Path, servers: list[Server], pg_cluster: Cluster, pg_database: str
) -> None:
    # The run owner patches threading for psycopg with -state-url: the process tracker's poll, which finds
    # what leaves the run's group and reaps adopted orphans, must still run.
    marker, gate = f"pg-escape-{os.getpid()}", tmp_path / "gate"
    code = ESCAPE.replace(
        'if os.fork() == 0:\n        become("escaped")',
        'if os.fork() == 0:\n        os.close(1); os.close(2)\n        become("escaped")',
    )
    assert code != ESCAPE
    hook = {
        "id": "timed",
        **python_command(code, {"source": "string", "name": marker}, {"source": "string", "name": str(gate)}),
        "command-timeout": "1s",
        "include-command-output-in-response": True,
    }  # fmt: skip
    (server,) = start_replicas(tmp_path, servers, state_url(pg_cluster, pg_database), 1, lambda name: [hook])
    status, _, body = server.request("POST", "/hooks/timed")
    assert status == 500, body
    assert marked(marker) == {}
    (owner,) = run_owner_pids(server.process.pid)
    assert wait_until(lambda: zombie_children(owner) == [], timeout=3), zombie_children(owner)


def long_run_replica(tmp_path: Path, servers: list[Server], url: str) -> tuple[Server, Path]:
    """One replica with a 1.5 s lease (and a long grace) whose hook `long` runs a minute-long command that
    writes its pid in the file returned."""
    pids = tmp_path / "pids"
    code = "import os, sys, time; open(sys.argv[1], 'a').write(f'{os.getpid()}\\n'); time.sleep(60)"
    hook = {"id": "long", **python_command(code, {"source": "string", "name": str(pids)})}
    flags = ("-state-lease", "1500ms", "-state-grace", "20s")
    (server,) = start_replicas(tmp_path, servers, url, 1, lambda name: [hook], *flags)
    return server, pids


def test_a_lost_lease_kills_the_command_at_once_with_one_line(
    tmp_path: Path, servers: list[Server], pg_cluster: Cluster, pg_database: str
) -> None:
    server, pids = long_run_replica(tmp_path, servers, state_url(pg_cluster, pg_database))
    assert server.request("POST", "/hooks/long")[0] == 200
    assert wait_until(lambda: pids.exists() and pids.read_text().strip() != "", timeout=20)
    pid = int(pids.read_text().split()[0])
    assert alive(pid)
    time.sleep(2)  # renewed past its first lease: still running
    assert alive(pid), server.log
    # Another replica took the run over (as after a lapsed lease): the next renewal is refused.
    database = pg_database.split("dbname=")[1].split()[0]
    pg_cluster.psql(database, "UPDATE hookrunner_runs SET attempt = attempt + 1, holder = 'other'")
    taken = time.monotonic()
    assert wait_until(lambda: not alive(pid), timeout=5), server.log
    assert time.monotonic() - taken <= 1.5
    assert server.log.count("its lease is lost; killing its processes") == 1, server.log


def cluster_processes(cluster: Cluster) -> list[int]:
    """The postmaster of `cluster` and its children (its backends and helpers)."""
    postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
    children = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split()
    return [postmaster, *map(int, children)]


def test_a_renewal_that_cannot_reach_the_database_in_time_kills_the_command_at_the_lease(
    tmp_path: Path, servers: list[Server], pg_cluster: Cluster, pg_database: str
) -> None:
    server, pids = long_run_replica(tmp_path, servers, state_url(pg_cluster, pg_database))
    assert server.request("POST", "/hooks/long")[0] == 200
    assert wait_until(lambda: pids.exists() and pids.read_text().strip() != "", timeout=20)
    pid = int(pids.read_text().split()[0])
    time.sleep(1)
    # The database stops answering (every process of it stopped): a renewal waits, and the lease runs out.
    stopped = cluster_processes(pg_cluster)
    try:
        for process in stopped:
            os.kill(process, signal.SIGSTOP)
        began = time.monotonic()
        assert wait_until(lambda: not alive(pid), timeout=5), server.log
        assert time.monotonic() - began <= 1.5 + 0.5
    finally:
        for process in stopped:
            os.kill(process, signal.SIGCONT)
    assert server.log.count("its lease is lost; killing its processes") == 1, server.log
