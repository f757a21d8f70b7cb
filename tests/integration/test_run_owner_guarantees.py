"""Issue 32's cross-worker guarantees (docs/run-state.md, landing plan step 10) in the installed `hookrunner`:
with `-workers 3` the global cap and the coalescing are the host's, and a worker killed past its timeout
loses no run, since every run lives in the one run owner (the whole tree's kill -9 with -state-dir and
-workers 3 is in test_run_journal.py). Each push's answering worker is found
from the kernel (which worker process holds the accepted socket), so a test can show that several workers
took part, or pick the one it stops. scripts/test runs these on both worker classes (HOOKRUNNER_TEST_FLAGS).
"""

from __future__ import annotations

import http.client
import os
import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from test_limits import alive, recorder_hook, records, start
from test_run_owner import (
    assert_each_ran_once_and_never_two_at_once,
    descriptors,
    each_run,
    greeted_with,
    settled_workers,
)
from test_serving import Server, run_owner_pids, wait_until, worker_pids

LOOPBACK = "0100007F"  # 127.0.0.1 as /proc/net/tcp writes it


def accepted_socket_inode(server_port: int, client_port: int) -> str | None:
    """The inode of the server's end of the connection from `client_port`, once a worker accepted it."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if (fields[1], fields[2]) == (f"{LOOPBACK}:{server_port:04X}", f"{LOOPBACK}:{client_port:04X}"):
            return fields[9] if fields[9] != "0" else None
    return None


def holder(server: Server, client_port: int) -> int | None:
    """The worker process that holds the accepted end of the connection from `client_port`."""
    inode = accepted_socket_inode(server.port, client_port)
    if inode is None:
        return None
    for pid in worker_pids(server.process.pid):
        if f"socket:[{inode}]" in descriptors(pid):
            return pid
    return None


def push(server: Server, path: str) -> tuple[int, int, bytes]:
    """POST `path` on a new connection: (the worker that accepted it, the status, the body). The worker is
    found before the request is sent, while nothing else can have happened on the connection."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
    try:
        conn.connect()
        assert conn.sock is not None
        client_port = int(conn.sock.getsockname()[1])
        found: list[int] = []

        def accepted() -> bool:
            pid = holder(server, client_port)
            if pid is not None:
                found.append(pid)
            return bool(found)

        assert wait_until(accepted, timeout=10, interval=0.01), f"no worker accepted port {client_port}"
        conn.request("POST", path)
        answer = conn.getresponse()
        return found[0], answer.status, answer.read()
    finally:
        conn.close()


# ------------------------------------------------------------ -max-concurrent-commands 2 across hooks


def most_at_once(rows: list[tuple[str, int, str]]) -> int:
    """The largest number of runs between their start and their end at one moment (an end before a start
    at the same instant: a slot freed is taken)."""
    edges = sorted((stamp, 0 if what == "end" else 1) for what, stamp, _ in rows)
    running = peak = 0
    for _, starting in edges:
        running += 1 if starting else -1
        peak = max(peak, running)
    return peak


def test_three_workers_hold_one_max_concurrent_commands_over_every_hook(
    tmp_path: Path, servers: list[Server]
) -> None:
    # Issue 32: each worker had its own -max-concurrent-commands, so 3 workers ran 6 at once. Now the cap
    # is the owner's: 40 pushes over three hooks and three workers, never more than 2 running.
    # Each hook's runs go to a file of its own: the file tells which hook ran. A run waits 0.2 s for a gate
    # that never opens.
    never = str(tmp_path / "never")
    lasting = {
        "pass-environment-to-command": [{"source": "string", "name": "0.2", "envname": "RECORDER_GATE_WAIT"}]
    }
    record = {f"h{n}": tmp_path / f"runs-h{n}" for n in range(3)}
    hooks = [recorder_hook(hook_id, path, never, **lasting) for hook_id, path in record.items()]
    server = start(tmp_path, servers, hooks, "-workers", "3", "-max-concurrent-commands", "2")
    settled_workers(server, 3)

    def one(n: int) -> tuple[str, int, int, bytes]:
        worker, status, body = push(server, f"/hooks/h{n % 3}?seq={n}")
        return f"h{n % 3}", worker, status, body

    with ThreadPoolExecutor(max_workers=40) as pool:
        answers = list(pool.map(one, range(40)))
    # Nothing refuses: past the cap, runs wait in the owner's one line over every hook.
    assert [(status, body) for _, _, status, body in answers] == [(200, b"accepted")] * 40, answers
    assert len({worker for _, worker, _, _ in answers}) >= 2, answers  # the pushes were spread

    def every_record() -> list[tuple[str, int, str]]:
        return [row for path in record.values() for row in records(path)]

    assert wait_until(lambda: len(every_record()) == 80, timeout=60), len(every_record())
    time.sleep(0.5)  # nothing more comes: no run runs twice
    for hook_id, path in record.items():
        runs = each_run(path)
        assert sorted(runs, key=int) == [str(n) for n in range(40) if f"h{n % 3}" == hook_id], (hook_id, runs)
        for seq, rows in runs.items():
            assert [what for what, _ in rows] == ["start", "end"], (hook_id, seq, rows)  # exactly once
    assert most_at_once(every_record()) == 2, every_record()  # at the cap, never past it
    assert server.stop() == 0


# ----------------------------------------------------------------------- coalescing across workers


PUSHES = 24
BRANCHES = ("dev", "main")


@pytest.mark.parametrize(
    ("limits", "expected_runs"),
    [
        # coalesce: the whole burst is one more run, with the latest payload.
        ({"coalesce": True}, ["first", f"p{PUSHES - 1}"]),
        # coalesce-by: one more run per branch, each with its branch's latest push; the first to wait
        # (dev, pushed first) runs first.
        (
            {"max-queue": 2, "coalesce-by": {"source": "url", "name": "branch"}},
            ["first", f"p{PUSHES - 2}", f"p{PUSHES - 1}"],
        ),
    ],
    ids=["coalesce", "coalesce-by"],
)
def test_a_burst_over_three_workers_coalesces_in_the_owner(
    tmp_path: Path, servers: list[Server], limits: dict[str, object], expected_runs: list[str]
) -> None:
    record, gate = tmp_path / "runs", tmp_path / "gate"
    server, _ = greeted_with(
        tmp_path, servers, [recorder_hook("docs", record, str(gate), **{"max-concurrency": 1, **limits})], 3
    )
    assert push(server, "/hooks/docs?seq=first&branch=dev")[1:] == (200, b"accepted")
    assert wait_until(lambda: len(records(record)) == 1, timeout=15)  # the first run holds the slot
    # One push after the other, each on a connection of its own, so that "latest" means one thing.
    answers = [push(server, f"/hooks/docs?seq=p{n}&branch={BRANCHES[n % 2]}") for n in range(PUSHES)]
    assert [answer[1:] for answer in answers] == [(200, b"accepted")] * PUSHES, answers
    workers = Counter(worker for worker, _, _ in answers)
    assert len(workers) >= 2, workers  # several workers took the burst
    gate.write_text("go")
    assert wait_until(lambda: len(records(record)) == 2 * len(expected_runs), timeout=30), records(record)
    time.sleep(0.5)  # room for a run that should not exist
    assert_each_ran_once_and_never_two_at_once(record, expected_runs)
    assert [seq for what, _, seq in records(record) if what == "start"] == expected_runs
    waiting = len(expected_runs) - 1  # the pushes that queued a run; every other one joined it
    assert server.log.count("docs is at its concurrency limit; run coalesced") == PUSHES - waiting
    assert server.stop() == 0


# --------------------------------------------------------------- a worker stopped past its timeout

#: gunicorn's worker timeout, which hookrunner sets (serve/arbiter.py) and no flag changes.
WORKER_TIMEOUT = 30


def test_a_worker_stopped_past_its_timeout_leaves_its_queued_run_to_the_owner(
    tmp_path: Path, servers: list[Server]
) -> None:
    """Issue 32: a worker SIGSTOPped past its timeout, without -state-dir. The worker answered 200 for a
    run queued behind a gated one, then stops; gunicorn's master finds its heartbeat 30 s old (the timeout
    is fixed, so this test takes about that long), kills it and forks another. The run was the owner's,
    never the worker's: once the gate opens it runs, once."""
    record, gate = tmp_path / "runs", tmp_path / "gate"
    # The first run holds the slot for longer than the worker's timeout: its gate waits up to 2 minutes.
    wait_long = [{"source": "string", "name": "120", "envname": "RECORDER_GATE_WAIT"}]
    limits = {"max-concurrency": 1, "max-queue": 5, "pass-environment-to-command": wait_long}
    hook = recorder_hook("docs", record, str(gate), **limits)
    server, _ = greeted_with(tmp_path, servers, [hook], 3)
    assert push(server, "/hooks/docs?seq=first")[1:] == (200, b"accepted")
    assert wait_until(lambda: len(records(record)) == 1, timeout=15)
    stopped, status, body = push(server, "/hooks/docs?seq=queued")
    assert (status, body) == (200, b"accepted")
    assert server.wait_for_log("docs is at its concurrency limit; run queued")
    os.kill(stopped, signal.SIGSTOP)
    since = time.monotonic()
    assert wait_until(lambda: not alive(stopped), timeout=WORKER_TIMEOUT + 30, interval=0.2), server.log
    took = time.monotonic() - since
    assert took > WORKER_TIMEOUT - 5, f"the worker died {took:.1f}s after its stop, before its timeout"
    assert f"WORKER TIMEOUT (pid:{stopped})" in server.log, server.log
    assert server.wait_for_log(f"worker {stopped} is gone; the run owner let its connection go", 20)
    assert [seq for what, _, seq in records(record)] == ["first"]  # the queued run still waits its turn
    gate.write_text("go")
    assert wait_until(lambda: len(records(record)) == 4, timeout=30), records(record)
    time.sleep(0.5)
    assert_each_ran_once_and_never_two_at_once(record, ["first", "queued"])
    # The master replaced the stopped worker; the tree serves as before.
    assert wait_until(
        lambda: len(worker_pids(server.process.pid)) == 3 and stopped not in worker_pids(server.process.pid),
        timeout=20,
    )
    assert len(run_owner_pids(server.process.pid)) == 1
    assert push(server, "/hooks/docs?seq=after")[1:] == (200, b"accepted")
    assert wait_until(lambda: len(records(record)) == 6, timeout=15), records(record)
    assert server.stop() == 0
