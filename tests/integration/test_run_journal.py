"""The run journal (-state-dir) against the real `hookrunner`: runs accepted (answered 200) and then lost to
a kill -9 of the run owner, of the whole process tree, or to a SIGTERM that outlasts -shutdown-timeout, run
again at the next start, each once; and a thousand accepted runs across three crashes all run."""

from __future__ import annotations

import errno
import http.client
import itertools
import json
import os
import signal
import sqlite3
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from test_serving import Server, run_owner_pids, wait_until, worker_pids

# Records `start <seq> <pid>` and, once the gate file exists (bounded wait), `end <seq>`: a test decides
# how long the runs last and can tell a run that started from one that finished.
RECORDER = """
import os, sys, time
record, gate, seq = sys.argv[1], sys.argv[2], sys.argv[3]
def write(what):
    with open(record, "a") as out:
        out.write(what + "\\n")
write(f"start {seq} {os.getpid()}")
deadline = time.monotonic() + 20
while not os.path.exists(gate) and time.monotonic() < deadline:
    time.sleep(0.01)
write(f"end {seq}")
"""


def recorder_hook(record: Path, gate: Path, **extra: object) -> dict[str, object]:
    return {
        "id": "build",
        "execute-command": sys.executable,
        "pass-arguments-to-command": [
            {"source": "string", "name": "-c"},
            {"source": "string", "name": RECORDER},
            {"source": "string", "name": str(record)},
            {"source": "string", "name": str(gate)},
            {"source": "url", "name": "seq"},
        ],
        **extra,
    }


def lines(record: Path, kind: str) -> list[str]:
    if not record.exists():
        return []
    return [line.split()[1] for line in record.read_text().splitlines() if line.startswith(kind + " ")]


def start(tmp_path: Path, servers: list[Server], hooks: object, *flags: str) -> Server:
    server = Server(tmp_path, hooks, *flags)
    servers.append(server)
    server.ready()
    return server


def accept_five(server: Server, record: Path) -> None:
    """Five runs answered 200: the first running, the others queued behind -max-concurrent-commands 1."""
    for seq in range(1, 6):
        assert server.request("POST", f"/hooks/build?seq={seq}")[0] == 200
    assert wait_until(lambda: lines(record, "start") == ["1"], timeout=15), record.read_text()


def states(state: Path) -> Counter[str]:
    db = sqlite3.connect(state / "journal.sqlite3")
    try:
        return Counter(row[0] for row in db.execute("SELECT state FROM runs"))
    finally:
        db.close()


def assert_each_ran_once_more(record: Path, server: Server) -> None:
    """After the restart: every accepted run finished exactly once, in the order they were accepted."""
    assert wait_until(lambda: len(lines(record, "end")) >= 5, timeout=30), record.read_text()
    time.sleep(0.3)  # nothing more may come
    assert lines(record, "end") == ["1", "2", "3", "4", "5"], record.read_text()
    # Run 1 was running when the process died: it started twice; the queued ones once.
    assert lines(record, "start") == ["1", "1", "2", "3", "4", "5"], record.read_text()
    for run in range(1, 6):
        assert f"replaying run {run} of hook build, accepted at " in server.log


def test_kill_9_of_the_run_owner_replays_its_running_and_queued_runs(
    tmp_path: Path, servers: list[Server]
) -> None:
    # The run owner holds every run (issue 32 step 6): its death is what a worker's was before.
    record, gate, state = tmp_path / "record", tmp_path / "gate", tmp_path / "state"
    server = start(
        tmp_path, servers, [recorder_hook(record, gate)], "-state-dir", str(state), "-max-concurrent-commands", "1"
    )
    accept_five(server, record)
    assert states(state) == {"running": 1, "accepted": 4}
    (owner,) = run_owner_pids(server.process.pid)
    os.kill(owner, signal.SIGKILL)
    # The master forks a new owner, which finds the dead one's runs.
    assert server.wait_for_log("replaying run 5 of hook build", timeout=20), server.log
    # The first run's command outlived its owner (its own session); the replay ended it before starting
    # the run again, so it never got to its end.
    assert server.wait_for_log("run 1: ended what still ran of its previous attempt", timeout=20), server.log
    gate.touch()
    assert wait_until(lambda: len(lines(record, "end")) >= 5, timeout=30), record.read_text()
    time.sleep(0.3)
    assert Counter(lines(record, "end")) == {"1": 1, "2": 1, "3": 1, "4": 1, "5": 1}, record.read_text()
    assert Counter(lines(record, "start")) == {"1": 2, "2": 1, "3": 1, "4": 1, "5": 1}, record.read_text()
    assert wait_until(lambda: states(state) == {"finished": 5}, timeout=10), states(state)
    assert server.stop() == 0


def test_kill_9_of_the_worker_loses_nothing_and_replays_nothing(tmp_path: Path, servers: list[Server]) -> None:
    # The worker holds no run: its death leaves the running run running and the queued ones queued.
    record, gate, state = tmp_path / "record", tmp_path / "gate", tmp_path / "state"
    server = start(
        tmp_path, servers, [recorder_hook(record, gate)], "-state-dir", str(state), "-max-concurrent-commands", "1"
    )
    accept_five(server, record)
    worker = server.worker_pid()
    os.kill(worker, signal.SIGKILL)
    assert wait_until(lambda: replaced(server, worker), timeout=20)
    gate.touch()
    assert wait_until(lambda: len(lines(record, "end")) >= 5, timeout=30), record.read_text()
    time.sleep(0.3)
    assert lines(record, "start") == lines(record, "end") == ["1", "2", "3", "4", "5"], record.read_text()
    assert "replaying run" not in server.log
    assert wait_until(lambda: states(state) == {"finished": 5}, timeout=10), states(state)
    assert server.stop() == 0


def kill_tree(server: Server, record: Path) -> None:
    """kill -9 of everything, as when a container or node dies: master, run owner, workers, and the commands."""
    workers = worker_pids(server.process.pid)
    owners = run_owner_pids(server.process.pid)
    commands = [int(line.split()[2]) for line in record.read_text().splitlines() if line.startswith("start ")]
    for pid in (server.process.pid, *owners, *workers, *commands):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    server.process.wait(timeout=10)
    assert wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in workers), timeout=10)


@pytest.mark.parametrize(("before", "after"), [(1, 2), (3, 3)], ids=["1-then-2-workers", "3-workers"])
def test_kill_9_of_the_whole_tree_replays_once_with_several_workers(
    tmp_path: Path, servers: list[Server], before: int, after: int
) -> None:
    # With 3 workers the runs were taken by several of them, and every one of the tree's processes dies.
    record, gate, state = tmp_path / "record", tmp_path / "gate", tmp_path / "state"
    hooks = [recorder_hook(record, gate)]
    flags = ("-state-dir", str(state), "-max-concurrent-commands", "1", "-workers", str(before))
    server = start(tmp_path, servers, hooks, *flags)
    assert wait_until(lambda: len(worker_pids(server.process.pid)) == before, timeout=20)
    accept_five(server, record)
    assert states(state) == {"running": 1, "accepted": 4}
    kill_tree(server, record)
    # The next tree's one owner replays the left-overs, in their order; the hook's own limit keeps them so
    # (a replayed run joins its queue past max-queue).
    gate.touch()
    hooks = [recorder_hook(record, gate, **{"max-concurrency": 1, "max-queue": 1})]
    again = start(tmp_path, servers, hooks, "-state-dir", str(state), "-workers", str(after))
    assert_each_ran_once_more(record, again)
    assert again.log.count("replaying run ") == 5
    assert wait_until(lambda: states(state) == {"finished": 5}, timeout=10), states(state)
    assert again.stop() == 0


def test_sigterm_past_the_shutdown_timeout_replays_what_it_cut_short(
    tmp_path: Path, servers: list[Server]
) -> None:
    record, gate, state = tmp_path / "record", tmp_path / "gate", tmp_path / "state"
    flags = ("-state-dir", str(state), "-max-concurrent-commands", "1", "-shutdown-timeout", "1s")
    server = start(tmp_path, servers, [recorder_hook(record, gate)], *flags)
    accept_five(server, record)
    server.signal(signal.SIGTERM)
    assert server.stop(timeout=30) == 0
    assert "shutdown: killing the process group of command" in server.log
    assert states(state) == {"running": 1, "accepted": 4}
    gate.touch()
    again = start(tmp_path, servers, [recorder_hook(record, gate)], *flags)
    assert_each_ran_once_more(record, again)
    assert again.stop() == 0


def test_a_hook_with_replay_false_is_not_replayed(tmp_path: Path, servers: list[Server]) -> None:
    record, gate, state = tmp_path / "record", tmp_path / "gate", tmp_path / "state"
    flags = ("-state-dir", str(state), "-max-concurrent-commands", "1")
    server = start(tmp_path, servers, [recorder_hook(record, gate, replay=False)], *flags)
    accept_five(server, record)
    kill_tree(server, record)
    gate.touch()
    again = start(tmp_path, servers, [recorder_hook(record, gate, replay=False)], *flags)
    assert again.wait_for_log("not replaying run 5 of hook build: the hook has replay: false"), again.log
    assert wait_until(lambda: states(state) == {"finished": 5}, timeout=10), states(state)
    assert lines(record, "start") == ["1"]
    assert "replaying run 1 of" not in again.log.replace("not replaying run 1 of", "")
    assert again.stop() == 0


def exits_with_one_line(server: Server, line: str) -> None:
    """`server` exited 1 without serving, its last line `line` (the rest: webhook's start-up lines)."""
    assert server.process.wait(timeout=30) == 1, server.log
    assert server.log.rstrip("\n").splitlines()[-1].endswith(line), server.log
    assert "Traceback" not in server.log, server.log


def test_an_unusable_journal_stops_the_start_with_one_line(tmp_path: Path, servers: list[Server]) -> None:
    """-state-dir promises that a 200 is journaled: a corrupt journal is not served without, and is left alone."""
    record, gate, state = tmp_path / "record", tmp_path / "gate", tmp_path / "state"
    state.mkdir()
    garbage = b"not a database\n" * 500
    (state / "journal.sqlite3").write_bytes(garbage)
    server = Server(tmp_path, [recorder_hook(record, gate)], "-state-dir", str(state))
    servers.append(server)
    exits_with_one_line(
        server,
        f"run journal: cannot use {state / 'journal.sqlite3'}: file is not a database; not starting "
        '(docs/operations.md, "Run journal")',
    )
    assert (state / "journal.sqlite3").read_bytes() == garbage


# A run that appends its sequence number to a file: cheap enough for a thousand.
APPEND = "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n')"


def append_hook(hook_id: str, out: Path, **extra: object) -> dict[str, object]:
    return {
        "id": hook_id,
        "execute-command": sys.executable,
        "pass-arguments-to-command": [
            {"source": "string", "name": "-c"},
            {"source": "string", "name": APPEND},
            {"source": "string", "name": str(out)},
            {"source": "url", "name": "seq"},
        ],
        **extra,
    }


def appended(out: Path) -> Counter[int]:
    return Counter(int(line) for line in out.read_text().split()) if out.exists() else Counter()


class Pushes:
    """Threads that push `/hooks/<id>?seq=N` (N counting up) until told to stop or `target` were accepted;
    a push is accepted when it was answered 200, and one whose worker died under it is not."""

    def __init__(self, server: Server, hook_id: str, body: bytes | None = None, target: int | None = None) -> None:
        self.server, self.hook_id, self.body, self.target = server, hook_id, body, target
        self.accepted: set[int] = set()
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._numbers = itertools.count()

    def _send(self) -> None:
        while not self.stopped.is_set():
            with self._lock:
                if self.target is not None and len(self.accepted) >= self.target:
                    return
                seq = next(self._numbers)
            conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=20)
            try:
                conn.request("POST", f"/hooks/{self.hook_id}?seq={seq}", body=self.body,
                             headers={"Content-Type": "application/json"} if self.body else {})
                status = conn.getresponse().status
            except OSError:
                continue  # the worker died under this request: not accepted
            finally:
                conn.close()
            if status == 200:
                with self._lock:
                    self.accepted.add(seq)

    def reach(self, count: int) -> None:
        assert wait_until(lambda: len(self.accepted) >= count, timeout=60), len(self.accepted)

    def run(self, threads: int, during: Callable[[], None]) -> None:
        """Push from `threads` threads while `during` runs, then until the target (or stop at once)."""
        with ThreadPoolExecutor(threads) as pool:
            senders = [pool.submit(self._send) for _ in range(threads)]
            try:
                during()
            finally:
                if self.target is None:
                    self.stopped.set()
                for sender in senders:
                    sender.result(timeout=120)


@pytest.mark.slow
def test_a_thousand_accepted_runs_across_three_crashes_all_run(tmp_path: Path, servers: list[Server]) -> None:
    out, state = tmp_path / "out", tmp_path / "state"
    cap = 4
    flags = ("-state-dir", str(state), "-max-concurrent-commands", str(cap))
    server = start(tmp_path, servers, [append_hook("append", out)], *flags)
    pushes = Pushes(server, "append", target=1000)
    crashes = 0

    def crash_three_times() -> None:
        nonlocal crashes
        for threshold in (250, 500, 750):
            pushes.reach(threshold)
            (owner,) = run_owner_pids(server.process.pid)  # the process that holds the runs
            os.kill(owner, signal.SIGKILL)
            crashes += 1
            assert wait_until(lambda o=owner: owner_replaced(server, o), timeout=20)  # type: ignore[misc]

    pushes.run(8, crash_three_times)
    accepted = pushes.accepted
    assert crashes == 3 and len(accepted) >= 1000
    assert wait_until(lambda: accepted <= set(appended(out)), timeout=60), sorted(accepted - set(appended(out)))[:20]
    assert wait_until(lambda: set(states(state)) == {"finished"}, timeout=30), states(state)
    counts = appended(out)
    twice = {seq: n for seq, n in counts.items() if n > 1}
    # Only a run in flight when its owner died (at most `cap` per crash) may run again; a finished one never.
    assert len(twice) <= 3 * cap, twice
    print(f"accepted {len(accepted)}, ran {len(counts)}, ran twice {len(twice)}: {sorted(twice)}")
    assert server.stop() == 0


def test_a_second_hookrunner_on_the_same_state_dir_does_not_start(tmp_path: Path, servers: list[Server]) -> None:
    record, gate, state = tmp_path / "record", tmp_path / "gate", tmp_path / "state"
    hooks = [recorder_hook(record, gate)]
    first = start(tmp_path, servers, hooks, "-state-dir", str(state), "-max-concurrent-commands", "1")
    accept_five(first, record)
    second = Server(tmp_path, hooks, "-state-dir", str(state))
    servers.append(second)
    exits_with_one_line(
        second,
        f'run journal: {state} is in use by another hookrunner; not starting (docs/operations.md, "Run journal")',
    )
    # It did not take the first one's runs, which are still running and queued there, and run them all once.
    gate.touch()
    assert wait_until(lambda: len(lines(record, "end")) == 5, timeout=30), record.read_text()
    assert Counter(lines(record, "start")) == {str(n): 1 for n in range(1, 6)}
    assert first.stop() == 0


def replaced(server: Server, worker: int) -> bool:
    """Whether the master has a new worker: not `worker`, and not none (between the old one's reaping and
    the new one's fork the master has no child; worker_pid() asserts one)."""
    workers = worker_pids(server.process.pid)
    return len(workers) == 1 and workers[0] != worker


def owner_replaced(server: Server, owner: int) -> bool:
    """Whether the master has forked a new run owner in place of `owner`."""
    owners = run_owner_pids(server.process.pid)
    return len(owners) == 1 and owners[0] != owner


def test_kill_9_while_the_journal_is_being_written_loses_no_answered_run(
    tmp_path: Path, servers: list[Server]
) -> None:
    """An OOM-like death mid-write: the run owner, which alone writes the journal, is killed -9 the moment
    the journal's write-ahead log is written to (a 1 MiB file per run makes each write hundreds of pages
    long), three times under load."""
    out, state = tmp_path / "out", tmp_path / "state"
    hook = append_hook("big", out, **{
        "pass-file-to-command": [{"source": "payload", "name": "blob", "envname": "BLOB"}],
    })
    server = start(tmp_path, servers, [hook], "-state-dir", str(state), "-max-concurrent-commands", "2")
    pushes = Pushes(server, "big", body=json.dumps({"blob": "x" * (1 << 20)}).encode())
    wal = state / "journal.sqlite3-wal"

    def written_at() -> int:
        try:
            return wal.stat().st_mtime_ns
        except FileNotFoundError:
            return 0

    kills = 0

    def kill_while_writing() -> None:
        nonlocal kills
        for _ in range(3):
            pushes.reach(len(pushes.accepted) + 5)
            (owner,), before = run_owner_pids(server.process.pid), written_at()
            deadline = time.monotonic() + 10
            while written_at() == before and time.monotonic() < deadline:
                pass  # spin: the kill must land while the write is still going on
            os.kill(owner, signal.SIGKILL)
            kills += 1
            assert wait_until(lambda o=owner: owner_replaced(server, o), timeout=20)  # type: ignore[misc]
        pushes.reach(len(pushes.accepted) + 5)

    pushes.run(3, kill_while_writing)
    accepted = pushes.accepted
    assert kills == 3
    assert wait_until(lambda: accepted <= set(appended(out)), timeout=60), sorted(accepted - set(appended(out)))
    assert wait_until(lambda: set(states(state)) == {"finished"}, timeout=30), states(state)
    # The journal was never found torn: every new owner opened it (one that cannot says so and stops).
    assert "the run journal cannot be opened" not in server.log and server.process.poll() is None, server.log
    db = sqlite3.connect(state / "journal.sqlite3")
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        db.close()
    print(f"accepted {len(accepted)} across {kills} kills mid-write, all ran")
    assert server.stop() == 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs of its own (the tests run as root); skipped only where mounting is not permitted."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(disk)],
        capture_output=True, text=True, check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        if subprocess.run(["umount", str(disk)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(disk)], capture_output=True, check=False)


def fill(disk: Path) -> Path:
    """Take every free byte of `disk` with one file; returns it."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as out:
        try:
            for _ in range(64 * 1024):
                out.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    assert os.statvfs(disk).f_bavail == 0
    return filler


def test_a_full_disk_refuses_runs_keeps_finishes_and_replays_nothing_that_finished(
    tmp_path: Path, servers: list[Server], small_disk: Path
) -> None:
    record, gate, state = tmp_path / "record", tmp_path / "gate", small_disk / "state"
    flags = ("-state-dir", str(state), "-metrics")
    server = start(tmp_path, servers, [recorder_hook(record, gate)], *flags)
    answered: dict[int, tuple[int, dict[str, str], bytes]] = {}
    stop = threading.Event()

    def load() -> None:  # pushes one after another, as a sender would, until told to stop
        for seq in itertools.count(1):
            if stop.is_set():
                return
            answered[seq] = server.request("POST", f"/hooks/build?seq={seq}")
            stop.wait(0.05)

    def seqs(status: int) -> list[str]:
        return [str(seq) for seq, (code, _, _) in sorted(answered.items()) if code == status]

    loader = threading.Thread(target=load)
    loader.start()
    try:
        # Runs are accepted and started; they wait for the gate, so they finish only once the disk is full.
        assert wait_until(lambda: len(seqs(200)) >= 5, timeout=30), answered
        filler = fill(small_disk)
        assert wait_until(lambda: len(seqs(503)) >= 5, timeout=30), (answered, server.log)
    finally:
        stop.set()
        loader.join(timeout=30)
    accepted, refused = seqs(200), seqs(503)
    assert sorted(accepted + refused, key=int) == [str(seq) for seq in sorted(answered)]  # nothing else
    for seq in refused:
        _, headers, body = answered[int(seq)]
        assert headers["retry-after"] == "5"
        assert body == b"The run journal cannot be written; try again later."
    assert server.wait_for_log("cannot record an accepted run: database or disk is full; runs are refused (503)")
    status, _, body = server.request("GET", "/healthz?ready")
    assert (status, body) == (503, b"The run journal cannot be written; try again later.")
    metrics = server.request("GET", "/metrics")[2].decode()
    assert f'hookrunner_requests_total{{hook="build",outcome="unjournaled"}} {len(refused)}.0' in metrics
    assert 'hookrunner_journal_runs_total{event="unwritable"} 1.0' in metrics

    # The accepted runs finish while the disk is full: their finishes cannot be written, and are kept.
    gate.touch()
    assert wait_until(lambda: sorted(lines(record, "end"), key=int) == accepted, timeout=30), record.read_text()
    assert "finished" not in states(state)
    assert server.request("GET", "/healthz?ready")[0] == 503

    # Space again: with no request needed, the kept finishes are written and readiness comes back.
    filler.unlink()
    assert wait_until(lambda: server.request("GET", "/healthz?ready")[0] == 200, timeout=15), server.log
    assert wait_until(lambda: states(state) == {"finished": len(accepted)}, timeout=15), states(state)
    assert server.log.count("writes succeed again") == 1
    assert server.request("POST", "/hooks/build?seq=1000")[0] == 200
    assert wait_until(lambda: "1000" in lines(record, "end"), timeout=15), record.read_text()
    assert wait_until(lambda: states(state) == {"finished": len(accepted) + 1}, timeout=15), states(state)
    assert server.stop() == 0

    # The next start finds nothing unfinished: no run that finished is run again.
    again = start(tmp_path, servers, [recorder_hook(record, gate)], *flags)
    assert again.request("GET", "/healthz?ready")[0] == 200
    assert again.stop() == 0
    assert "replaying run" not in again.log and "unfinished run(s)" not in again.log, again.log
    assert Counter(lines(record, "start")) == Counter([*accepted, "1000"]), record.read_text()
    assert Counter(lines(record, "end")) == Counter([*accepted, "1000"]), record.read_text()


def ledger_ids(state: Path) -> set[int]:
    """The run ids in the finish ledger (journal.finished: little-endian 64-bit slots, 0 free)."""
    path = state / "journal.finished"
    data = path.read_bytes() if path.exists() else b""
    return {value for (value,) in struct.iter_unpack("<q", data) if value > 0}


def test_runs_that_finished_on_a_full_disk_are_not_replayed_after_a_kill_9(
    tmp_path: Path, servers: list[Server], small_disk: Path
) -> None:
    record, gate, state = tmp_path / "record", tmp_path / "gate", small_disk / "state"
    flags = ("-state-dir", str(state))
    server = start(tmp_path, servers, [recorder_hook(record, gate)], *flags)
    for seq in (1, 2, 3):
        assert server.request("POST", f"/hooks/build?seq={seq}")[0] == 200
    assert wait_until(lambda: sorted(lines(record, "start")) == ["1", "2", "3"], timeout=15), record.read_text()
    filler = fill(small_disk)
    gate.touch()
    # They finish while the disk is full: the database cannot take it, the ledger's slots can.
    assert wait_until(lambda: ledger_ids(state) == {1, 2, 3}, timeout=15), (ledger_ids(state), server.log)
    assert states(state) == {"running": 3}
    kill_tree(server, record)  # before the disk has room again: what the worker kept in memory is gone
    filler.unlink()
    again = start(tmp_path, servers, [recorder_hook(record, gate)], *flags)
    assert wait_until(lambda: states(state) == {"finished": 3}, timeout=15), states(state)
    assert ledger_ids(state) == set()
    assert again.stop() == 0
    assert "replaying run" not in again.log and "unfinished run(s)" not in again.log, again.log
    assert Counter(lines(record, "start")) == {"1": 1, "2": 1, "3": 1}, record.read_text()
    assert Counter(lines(record, "end")) == {"1": 1, "2": 1, "3": 1}, record.read_text()


def test_left_over_runs_a_full_disk_kept_from_being_claimed_are_replayed_once_it_has_room(
    tmp_path: Path, servers: list[Server], small_disk: Path
) -> None:
    record, gate, state = tmp_path / "record", tmp_path / "gate", small_disk / "state"
    flags = ("-state-dir", str(state))
    server = start(tmp_path, servers, [recorder_hook(record, gate)], *flags, "-max-concurrent-commands", "1")
    accept_five(server, record)
    kill_tree(server, record)
    filler = fill(small_disk)
    gate.touch()
    # The next start cannot write its claim: it replays nothing yet, refuses runs and is not ready.
    again = start(tmp_path, servers, [recorder_hook(record, gate)], *flags)
    assert again.wait_for_log("runs are refused (503) until it can write again"), again.log
    assert again.request("GET", "/healthz?ready")[0] == 503
    assert again.request("POST", "/hooks/build?seq=6")[0] == 503
    filler.unlink()
    assert wait_until(lambda: again.request("GET", "/healthz?ready")[0] == 200, timeout=15), again.log
    # The first run recorded once the disk has room claims them, and they run before it.
    assert again.request("POST", "/hooks/build?seq=7")[0] == 200
    assert wait_until(lambda: len(lines(record, "end")) >= 6, timeout=30), record.read_text()
    assert wait_until(lambda: states(state) == {"finished": 6}, timeout=15), states(state)
    assert again.stop() == 0
    for run in range(1, 6):
        assert f"replaying run {run} of hook build, accepted at " in again.log
    assert Counter(lines(record, "end")) == {"1": 1, "2": 1, "3": 1, "4": 1, "5": 1, "7": 1}, record.read_text()
    assert Counter(lines(record, "start")) == {"1": 2, "2": 1, "3": 1, "4": 1, "5": 1, "7": 1}, record.read_text()
    third = start(tmp_path, servers, [recorder_hook(record, gate)], *flags)
    assert third.request("GET", "/healthz?ready")[0] == 200
    assert third.stop() == 0
    assert "replaying run" not in third.log, third.log
