"""Several installed `hookrunner` replicas on one PostgreSQL database (-state-url, issue 33): how tests start
them, and a command that records each run's start and end with the replica that ran it. Shared by the
replica tests (test_replicas.py, and the harder ones: kill -9 take-over, the database stopped under load,
coalescing across replicas)."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from test_serving import Server, wait_until

#: The environment variable that names, to a command, the replica that runs it (start_replicas sets it).
REPLICA_VARIABLE = "HOOKRUNNER_TEST_REPLICA"

#: The command: appends `start <monotonic ns> <admitted by>><ran on> <seq>`, sleeps, then `end ...` to a
#: file, and prints `ran <seq> on <admitted by>><ran on>`. Its arguments: the file, the name of the replica
#: whose hooks prepared the run (which admitted it), the push's sequence number, the seconds to sleep; the
#: replica that runs it is its environment's (REPLICA_VARIABLE).
RECORD = """
import os, sys, time
record, seq, sleep = sys.argv[1], sys.argv[3], float(sys.argv[4])
replica = sys.argv[2] + ">" + os.environ.get("HOOKRUNNER_TEST_REPLICA", "?")
def write(what):
    with open(record, "a") as out:
        out.write(f"{what} {time.monotonic_ns()} {replica} {seq}\\n")
write("start")
time.sleep(sleep)
write("end")
print(f"ran {seq} on {replica}")
"""


def state_url(pg_cluster: object, conninfo: str) -> str:
    """The postgresql:// URL of the database whose conninfo the `pg_database` fixture gave."""
    found = re.search(r"dbname=(\S+)", conninfo)
    assert found is not None, conninfo
    return pg_cluster.url(found.group(1))  # type: ignore[attr-defined,no-any-return]


def recording_hook(
    hook_id: str, record: Path, replica: str, sleep: float = 0.2, **fields: object
) -> dict[str, object]:
    """A hook whose command records its start and end (and `replica`) in `record`, the push's `seq` query
    value naming the run; `fields` are added to the hook (max-concurrency, max-queue, coalesce...)."""
    return {
        "id": hook_id,
        "execute-command": sys.executable,
        "pass-arguments-to-command": [
            {"source": "string", "name": "-c"},
            {"source": "string", "name": RECORD},
            {"source": "string", "name": str(record)},
            {"source": "string", "name": replica},
            {"source": "url", "name": "seq"},
            {"source": "string", "name": str(sleep)},
        ],
        **fields,
    }


def start_replicas(
    tmp_path: Path,
    servers: list[Server],
    url: str,
    count: int,
    hooks_of: Callable[[str], object],
    *flags: str,
) -> list[Server]:
    """`count` replicas named r1, r2, ..., each its own folder and hooks file (`hooks_of(name)`), all on
    the database at `url`, each with REPLICA_VARIABLE set to its name for its commands; each answering
    once started and its run owner has a worker. `servers` stops them at the test's end."""
    return [start_replica(tmp_path, servers, url, f"r{n}", hooks_of, *flags) for n in range(1, count + 1)]


def start_replica(
    tmp_path: Path, servers: list[Server], url: str, name: str, hooks_of: Callable[[str], object], *flags: str
) -> Server:
    """One replica named `name` (start_replicas), started again with the same name after a kill, say."""
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    env = {**os.environ, REPLICA_VARIABLE: name}
    server = Server(
        folder,
        hooks_of(name),
        "-state-url",
        url,
        "-state-replica",
        name,
        *flags,
        popen=functools.partial(subprocess.Popen, env=env),
    )
    servers.append(server)
    server.ready()
    # GET / is the worker's own: a push is admitted only once the run owner has the worker's connection,
    # which with -state-url comes after the owner's first round trips to the database.
    assert server.wait_for_log("connected to the run owner", timeout=15), server.log
    return server


@dataclass(frozen=True)
class Run:
    """One run as its command recorded it: `admitted_by` is the replica whose hooks prepared it, `ran_on`
    the replica whose run owner started it."""

    start: int
    end: int
    replica: str
    seq: str

    @property
    def admitted_by(self) -> str:
        return self.replica.partition(">")[0]

    @property
    def ran_on(self) -> str:
        return self.replica.partition(">")[2]


def recorded_runs(record: Path) -> list[Run]:
    """Every finished run in `record`, in start order (a start and its end matched by replica and seq)."""
    if not record.exists():
        return []
    starts: dict[tuple[str, str], list[int]] = {}
    done: list[Run] = []
    for line in record.read_text().splitlines():
        what, stamp, replica, seq = line.split(" ", 3)
        if what == "start":
            starts.setdefault((replica, seq), []).append(int(stamp))
        elif starts.get((replica, seq)):
            done.append(Run(starts[(replica, seq)].pop(0), int(stamp), replica, seq))
    return sorted(done, key=lambda run: run.start)


def started_count(record: Path) -> int:
    if not record.exists():
        return 0
    return sum(1 for line in record.read_text().splitlines() if line.startswith("start "))


def overlaps(runs: Sequence[Run]) -> list[tuple[Run, Run]]:
    """Pairs of runs that ran at the same time (runs in start order)."""
    return [(a, b) for a, b in zip(runs, runs[1:], strict=False) if b.start < a.end]


def ran_once(record: Path, statuses: dict[str, int]) -> list[Run]:
    """Every push answered 200 (`statuses` by seq) ran exactly once and nothing else ran; returns the runs."""
    accepted = {seq for seq, status in statuses.items() if status == 200}
    assert wait_until(lambda: len(recorded_runs(record)) >= len(accepted), timeout=60), record.read_text()
    time.sleep(0.5)  # nothing more may start
    runs = recorded_runs(record)
    assert started_count(record) == len(runs)
    assert Counter(run.seq for run in runs) == Counter(accepted), (sorted(accepted), runs)
    return runs
