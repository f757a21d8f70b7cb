"""`-max-concurrent-commands` counted over every replica (issue 33 item 1), with the installed command on
the tests' throwaway PostgreSQL: three replicas with a cap of 2 and three hooks, pushes spread over both,
never more than 2 commands alive at once over the fleet. The same fleet on the embedded state, each replica
its own -state-dir, goes past it: the measure sees a cap that is only a host's. scripts/test runs these on
both worker classes (HOOKRUNNER_TEST_FLAGS)."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pg_cluster import Cluster
from replica_support import Run, ran_once, recording_hook, start_replicas, state_url
from test_serving import Server

CAP = 2
REPLICAS = 3
HOOKS = ("one", "two", "three")
PUSHES = 40


def fleet_hooks(record: Path, name: str) -> list[dict[str, object]]:
    """Three hooks with no limit of their own, each recording its runs (0.2 s each) in `record`."""
    return [recording_hook(hook, record, name, 0.2) for hook in HOOKS]


def push_spread(replicas: list[Server]) -> dict[str, int]:
    """PUSHES concurrent pushes, push n to replica n % 3 and hook n % 3 shifted by n // 3 (so every
    replica gets every hook), each on a connection of its own; each push's status by its seq."""

    def push(n: int) -> tuple[str, int]:
        server = replicas[n % len(replicas)]
        hook = HOOKS[(n + n // len(replicas)) % len(HOOKS)]
        return str(n), server.request("POST", f"/hooks/{hook}?seq={n}")[0]

    with ThreadPoolExecutor(max_workers=PUSHES) as pool:
        return dict(pool.map(push, range(PUSHES)))


def peak(runs: list[Run]) -> int:
    """The most runs alive at one moment, by their commands' own start and end stamps (one clock for the
    host: CLOCK_MONOTONIC); an end at the very nanosecond of a start counts before it."""
    edges = sorted([(run.start, 1) for run in runs] + [(run.end, -1) for run in runs])
    alive = most = 0
    for _, step in edges:
        alive += step
        most = max(most, alive)
    return most


def test_the_cap_holds_over_every_replica(
    tmp_path: Path, servers: list[Server], pg_cluster: Cluster, pg_database: str
) -> None:
    record = tmp_path / "runs.txt"
    url = state_url(pg_cluster, pg_database)
    flags = ("-max-concurrent-commands", str(CAP))
    replicas = start_replicas(
        tmp_path, servers, url, REPLICAS, lambda name: fleet_hooks(record, name), *flags
    )
    statuses = push_spread(replicas)
    assert set(statuses.values()) == {200}, statuses  # the cap's line refuses nothing
    runs = ran_once(record, statuses)
    assert len(runs) == PUSHES
    print(f"fleet on PostgreSQL: peak {peak(runs)}, ran on {Counter(run.ran_on for run in runs)}")
    assert peak(runs) == CAP, runs  # never past the cap, and the cap used
    # Every replica admitted runs, and the cap's places went to more than one of them.
    names = {"r1", "r2", "r3"}
    assert {run.admitted_by for run in runs} == names, runs
    assert len({run.ran_on for run in runs}) >= 2 and {run.ran_on for run in runs} <= names, runs
    for server in replicas:
        assert "Traceback" not in server.log, server.log


def test_the_measure_sees_a_cap_per_replica_on_the_embedded_state(
    tmp_path: Path, servers: list[Server]
) -> None:
    # Each replica its own -state-dir: each holds the cap on its own host only, so the fleet goes past it.
    # The same pushes and the same measure as above must say so, or the test above proves nothing.
    record = tmp_path / "runs.txt"
    replicas = []
    for n in range(1, REPLICAS + 1):
        folder = tmp_path / f"r{n}"
        folder.mkdir()
        state = ("-state-dir", str(folder / "state"))
        server = Server(folder, fleet_hooks(record, f"r{n}"), "-max-concurrent-commands", str(CAP), *state)
        servers.append(server)
        replicas.append(server)
    for server in replicas:
        server.ready()
        assert server.wait_for_log("connected to the run owner", timeout=15), server.log
    statuses = push_spread(replicas)
    assert set(statuses.values()) == {200}, statuses
    runs = ran_once(record, statuses)
    print(f"fleet on the embedded state: peak {peak(runs)}")
    assert peak(runs) > CAP, runs
    assert peak(runs) <= CAP * REPLICAS, runs  # each replica still holds its own
