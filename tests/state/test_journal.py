"""The run journal on its own (hookrunner/state/journal.py): durable rows, claiming a dead process's runs once,
pruning, private files, a journal that cannot be opened (corrupt file, newer schema, read-only folder)
turning into a logged, counted fallback instead of an exception, and a full or failing disk refusing runs
while finishes are kept until they can be written."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from journal_faults import failing_disk

from hookrunner.ops import metrics
from hookrunner.run.processes import ProcessId
from hookrunner.state.finishledger import NAME as LEDGER
from hookrunner.state.finishledger import FinishLedger
from hookrunner.state.journal import (
    FILE_NAME,
    RETRY_AFTER,
    SCHEMA_VERSION,
    Journal,
    JournalError,
    JournalUnwritable,
    RunSpec,
    check_journal,
    lock_state_dir,
    open_journal,
)

SECRET = "s3cr3t-token-value"


def spec(n: int = 1, hook: str = "deploy") -> RunSpec:
    return RunSpec(
        hook_id=hook,
        request_id=f"req-{n}",
        command="/bin/deploy",
        argv=("/bin/deploy", f"arg {n}", "caf\udce9"),  # an undecodable byte, kept as surrogateescape
        env=(("HOOK_TOKEN", SECRET), ("HOOK_N", str(n))),
        files=(("HOOK_PAYLOAD", b"\x00\xffbinary" + bytes([n % 256])),),
        cwd="/srv",
    )


class _Hooks:
    def __len__(self) -> int:
        return 0


class _Runner:
    running = 0
    queued = 0


@pytest.fixture
def logged(log_lines: io.StringIO) -> Iterator[io.StringIO]:
    """The log, with the metrics on (the journal counts its fallbacks)."""
    m = metrics.enable(_Hooks(), _Runner())
    try:
        yield log_lines
    finally:
        metrics.disable()
        del m


def journal_count(event: str) -> float:
    m = metrics.active()
    assert m is not None
    return m.journal.labels(event=event)._value.get()


def test_a_recorded_run_comes_back_exactly_to_the_next_boot(tmp_path: Path) -> None:
    first = Journal(str(tmp_path / "state"), "boot-1")
    ids = [first.record(spec(n)) for n in range(3)]
    assert all(isinstance(i, int) for i in ids)
    first.started(ids[0], ProcessId(os.getpid(), 1))  # type: ignore[arg-type]
    first.close()

    second = Journal(str(tmp_path / "state"), "boot-2")
    left = second.claim_left_overs()
    assert [x.run_id for x in left] == ids
    assert [x.spec for x in left] == [spec(0), spec(1), spec(2)]
    assert second.counts() == {"running": 3}  # claimed by a replay: running, started or not
    # Claimed by this live process: a sibling worker of the same boot (another process) finds nothing.
    assert claim_in_child(tmp_path / "state", "boot-2") == 0
    second.close()


CLAIM_CHILD = """
import sys
from hookrunner.state.journal import Journal
print(len(Journal(sys.argv[1], sys.argv[2]).claim_left_overs()))
"""


def claim_in_child(state: Path, boot: str) -> int:
    result = subprocess.run(
        [sys.executable, "-c", CLAIM_CHILD, str(state), boot],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return int(result.stdout)


def test_a_live_siblings_runs_are_not_claimed_but_a_dead_workers_are(tmp_path: Path) -> None:
    state = str(tmp_path)
    mine = Journal(state, "boot")
    mine.record(spec(1))
    # A row of the same boot owned by a worker pid that is alive (this test's parent) or dead.
    sibling = os.getppid()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    db = sqlite3.connect(os.path.join(state, FILE_NAME))
    db.execute("UPDATE runs SET owner = ?", (f"boot:{sibling}",))
    db.commit()
    assert mine.claim_left_overs() == []
    db.execute("UPDATE runs SET owner = ?", (f"boot:{child.pid}",))
    db.commit()
    db.close()
    assert [x.spec for x in mine.claim_left_overs()] == [spec(1)]
    mine.close()


def test_finished_runs_are_not_replayed_and_are_pruned_to_keep(tmp_path: Path, logged: io.StringIO) -> None:
    journal = Journal(str(tmp_path), "boot-1", keep=5)
    ids = [journal.record(spec(n)) for n in range(12)]
    journal.finished([i for i in ids[:10] if i is not None], "exit status 0")
    assert journal.prune() == 5
    assert journal.counts() == {"finished": 5, "accepted": 2}
    assert journal_count("pruned") == 5
    assert journal_count("journaled") == 12
    journal.close()
    again = Journal(str(tmp_path), "boot-2", keep=5)
    assert [x.run_id for x in again.claim_left_overs()] == ids[10:]
    again.close()


def finish_bulky_runs(state: Path, secure_delete: bool) -> tuple[int, int]:
    """Five runs of a few hundred bytes finished at once, then one finished and one still waiting."""
    journal = Journal(str(state), "boot")
    if not secure_delete:  # as SQLite builds without SQLITE_SECURE_DELETE have it, unless the journal asks
        journal._db.execute("PRAGMA secure_delete=OFF")
    bulky = [
        dataclasses.replace(spec(n), argv=("/bin/deploy", SECRET * n), files=(("F", SECRET.encode() * 50),))
        for n in range(3, 8)
    ]
    journal.finished([journal.record(run) or 0 for run in bulky], "exit status 0")
    done, waiting = journal.record(spec(1)), journal.record(spec(2, hook="later"))
    assert done is not None and waiting is not None
    journal.finished([done], "exit status 0")
    journal.close()
    return done, waiting


def test_a_finished_run_keeps_no_secret_on_disk(tmp_path: Path) -> None:
    done, waiting = finish_bulky_runs(tmp_path, secure_delete=True)
    db = sqlite3.connect(tmp_path / FILE_NAME)
    try:
        rows = dict(db.execute("SELECT id, spec FROM runs").fetchall())
        assert rows[done] == "" and SECRET in rows[waiting]  # the unfinished one still has what it needs
        journal = Journal(str(tmp_path), "boot-2")
        assert [run.run_id for run in journal.claim_left_overs()] == [waiting]
        journal.finished([waiting], "exit status 0")
        journal.close()
    finally:
        db.close()  # the last connection: SQLite checkpoints the write-ahead log into the file
    assert not (tmp_path / (FILE_NAME + "-wal")).exists()
    assert SECRET.encode() not in (tmp_path / FILE_NAME).read_bytes()
    # The control: with SQLite's secure_delete off, the dropped specs' bytes stay in the file's free space.
    control = tmp_path / "control"
    finish_bulky_runs(control, secure_delete=False)
    assert SECRET.encode() in (control / FILE_NAME).read_bytes()


def test_folder_and_files_are_private(tmp_path: Path) -> None:
    state = tmp_path / "state"
    journal = Journal(str(state), "boot")
    journal.record(spec())
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    names = sorted(p.name for p in state.iterdir())
    assert names == [LEDGER, FILE_NAME, FILE_NAME + "-shm", FILE_NAME + "-wal"]
    for path in state.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    db = sqlite3.connect(state / FILE_NAME)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()
    journal.close()


def test_a_corrupt_file_is_refused_with_a_clear_line_and_left_alone(
    tmp_path: Path, logged: io.StringIO
) -> None:
    path = tmp_path / FILE_NAME
    garbage = b"this is not a database at all\n" * 200
    path.write_bytes(garbage)
    with pytest.raises(JournalError, match=f"^cannot use {path}: file is not a database$"):
        check_journal(str(tmp_path), "boot", 10)  # the master's check: the start stops
    assert open_journal(str(tmp_path), "boot", 10) is None  # a worker's open: the worker stops
    text = logged.getvalue()
    assert f"run journal: cannot use {path}: file is not a database; this worker stops" in text
    assert journal_count("failed") == 1
    assert path.read_bytes() == garbage


def test_the_master_check_opens_and_closes_a_usable_journal(tmp_path: Path) -> None:
    check_journal(str(tmp_path / "state"), "boot", 10)
    assert (tmp_path / "state" / FILE_NAME).stat().st_mode & 0o777 == 0o600
    journal = Journal(str(tmp_path / "state"), "boot-2")  # not held open by the check
    assert journal.record(spec()) == 1
    journal.close()


def test_the_state_dir_lock_is_held_once(tmp_path: Path) -> None:
    fd = lock_state_dir(str(tmp_path / "state"))
    try:
        with pytest.raises(JournalError, match="is in use by another hookrunner$"):
            lock_state_dir(str(tmp_path / "state"))
    finally:
        os.close(fd)
    os.close(lock_state_dir(str(tmp_path / "state")))  # free again once the holder is gone


def test_a_journal_from_a_newer_version_is_refused(tmp_path: Path, logged: io.StringIO) -> None:
    journal = Journal(str(tmp_path), "boot")
    journal.record(spec())
    journal.close()
    db = sqlite3.connect(tmp_path / FILE_NAME)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    newer = rf"written by a newer hookrunner \(schema version {SCHEMA_VERSION + 1}, this one knows {SCHEMA_VERSION}\)"
    with pytest.raises(JournalError, match=newer):
        Journal(str(tmp_path), "boot-2")
    assert open_journal(str(tmp_path), "boot-2", 10) is None
    assert "written by a newer hookrunner" in logged.getvalue()
    db = sqlite3.connect(tmp_path / FILE_NAME)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
    assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
    db.close()


READ_ONLY_CHILD = """
import os
import sqlite3  # loaded before the privileges go, as hookrunner does with -setuid (cli.load_server_code)
import sys
from hookrunner.state.journal import Journal, JournalError
if os.geteuid() == 0:  # root writes anywhere: the check runs as an unprivileged user
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
try:
    Journal(sys.argv[1], "boot")
except JournalError as exc:
    print("refused:", exc)
else:
    print("opened")
"""


def test_a_read_only_folder_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o500)
    if os.geteuid() == 0:
        os.chown(state, 65534, 65534)
        tmp_path.chmod(0o755)
    result = subprocess.run(
        [sys.executable, "-c", READ_ONLY_CHILD, str(state)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"refused: cannot open {state / FILE_NAME}: Permission denied"


@contextlib.contextmanager
def full_database(journal: Journal) -> Iterator[None]:
    """SQLite's own "database or disk is full" (SQLITE_FULL): the file may not grow by a page."""
    db = journal._db
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    limit = db.execute("PRAGMA max_page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count={pages}")
    try:
        yield
    finally:
        db.execute(f"PRAGMA max_page_count={limit}")


def big_spec(n: int) -> RunSpec:
    """A run whose record needs pages of its own (its file's contents)."""
    return dataclasses.replace(spec(n), files=(("HOOK_PAYLOAD", os.urandom(64 * 1024)),))


def on_disk(state: Path) -> dict[int, str]:
    """Each run's state as the file holds it, read by a connection of its own (as the next start would)."""
    db = sqlite3.connect(state / FILE_NAME)
    try:
        return {int(run_id): str(state) for run_id, state in db.execute("SELECT id, state FROM runs")}
    finally:
        db.close()


@pytest.fixture
def journals(tmp_path: Path) -> Iterator[Callable[..., Journal]]:
    """Opens journals (in tmp_path unless told) that never try again on their own unless told; all closed
    at the end."""
    opened: list[Journal] = []

    def open_one(state: Path = tmp_path, boot: str = "boot", retry_every: float = 3600) -> Journal:
        opened.append(Journal(str(state), boot, retry_every=retry_every))
        return opened[-1]

    yield open_one
    for journal in opened:
        journal.close()


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


@pytest.mark.parametrize("fault", ["full", "failing"])
def test_a_run_a_full_or_failing_disk_cannot_take_is_refused_and_the_journal_stays_on(
    tmp_path: Path, logged: io.StringIO, journals: Callable[..., Journal], fault: str
) -> None:
    journal = journals()
    assert journal.record(spec(1)) == 1
    with full_database(journal) if fault == "full" else failing_disk(tmp_path):
        for n in (2, 3, 4):
            with pytest.raises(JournalUnwritable) as refused:
                journal.record(big_spec(n))
            assert refused.value.retry_after == RETRY_AFTER
        assert journal.enabled  # on, and telling the truth: nothing was answered as kept
        if fault == "failing":
            assert not journal.writable()
    text = logged.getvalue()
    assert text.count("cannot record an accepted run") == 1  # one line per outage, not per request
    expected = "database or disk is full" if fault == "full" else "disk I/O error"
    assert f"cannot record an accepted run: {expected}; runs are refused (503)" in text
    assert SECRET not in text
    assert journal_count("unwritable") == 1
    assert journal_count("failed") == 0
    # Writes succeed again: the next record is kept, and the journal says so once.
    assert journal.record(big_spec(5)) == 2
    assert journal.writable()
    assert logged.getvalue().count("writes succeed again") == 1
    assert on_disk(tmp_path) == {1: "accepted", 2: "accepted"}


def test_a_finish_that_cannot_be_written_is_kept_and_written_by_the_next_write(
    tmp_path: Path, logged: io.StringIO, journals: Callable[..., Journal]
) -> None:
    journal = journals()
    assert [journal.record(spec(1)), journal.record(spec(2))] == [1, 2]
    journal.started(1, ProcessId(os.getpid(), 1))
    with failing_disk(tmp_path):
        journal.finished([1], "exit status 0")  # no exception: the run did finish
        assert on_disk(tmp_path) == {1: "running", 2: "accepted"}
        with pytest.raises(JournalUnwritable):  # the kept finish is tried first, and still fails
            journal.record(spec(3))
    assert "cannot mark a run finished" in logged.getvalue()
    assert on_disk(tmp_path) == {1: "running", 2: "accepted"}
    assert journal.record(spec(4)) == 3  # the next write that succeeds writes the kept finish first
    assert on_disk(tmp_path) == {1: "finished", 2: "accepted", 3: "accepted"}
    journal.close()
    # The next start replays what did not finish, never the run that did.
    again = journals(boot="boot-2")
    assert [left.spec.request_id for left in again.claim_left_overs()] == ["req-2", "req-4"]


def test_an_attempts_processes_that_cannot_be_written_are_kept_and_written_with_the_next_write(
    tmp_path: Path, journals: Callable[..., Journal]
) -> None:
    journal = journals()
    assert [journal.record(spec(n)) for n in (1, 2)] == [1, 2]
    journal.started(2, ProcessId(40, 400))
    with failing_disk(tmp_path):
        journal.started(1, ProcessId(10, 100))  # queued while the disk was free, started once it was full
        journal.add_process(1, ProcessId(11, 110))
        journal.add_process(2, ProcessId(21, 210))
    assert on_disk(tmp_path) == {1: "accepted", 2: "running"}
    assert journal.record(spec(3)) == 3
    assert on_disk(tmp_path) == {1: "running", 2: "running", 3: "accepted"}
    journal.close()
    # A worker that dies now leaves each attempt's processes for the replay to end first.
    left = {x.run_id: x.processes for x in journals(boot="boot-2").claim_left_overs() or []}
    assert left == {
        1: (ProcessId(10, 100), ProcessId(11, 110)),
        2: (ProcessId(40, 400), ProcessId(21, 210)),
        3: (),
    }


def test_a_kept_finish_is_written_by_the_journal_itself_once_the_disk_takes_it(
    tmp_path: Path, logged: io.StringIO, journals: Callable[..., Journal]
) -> None:
    journal = journals(retry_every=0.05)
    assert journal.record(spec(1)) == 1
    with failing_disk(tmp_path):
        journal.finished([1], "exit status 0")
        assert not journal.writable()
    # No request comes: the journal tries again on its own, and readiness comes back.
    assert wait_until(lambda: on_disk(tmp_path) == {1: "finished"}), on_disk(tmp_path)
    assert wait_until(journal.writable)
    assert logged.getvalue().count("writes succeed again") == 1


def test_closing_writes_the_kept_finishes_or_leaves_them_in_the_ledger(
    tmp_path: Path, logged: io.StringIO, journals: Callable[..., Journal]
) -> None:
    journal = journals()
    assert [journal.record(spec(n)) for n in (1, 2, 3)] == [1, 2, 3]
    with failing_disk(tmp_path):
        journal.finished([1], "exit status 0")
    journal.close()  # the disk takes it now
    assert on_disk(tmp_path) == {1: "finished", 2: "accepted", 3: "accepted"}
    assert not FinishLedger(str(tmp_path)).ids()  # written to the database: the ledger is free again

    journal = journals(boot="boot-2")
    assert journal.claim_left_overs() != []
    with failing_disk(tmp_path):
        journal.finished([2], "exit status 0")
        journal.close()
    assert on_disk(tmp_path) == {1: "finished", 2: "running", 3: "running"}  # both replayed
    assert FinishLedger(str(tmp_path)).ids() == {2}
    assert "the next start runs them again" not in logged.getvalue()
    # The next start does not replay it, and frees its slot.
    again = journals(boot="boot-3")
    assert [left.spec.request_id for left in again.claim_left_overs()] == ["req-3"]
    assert on_disk(tmp_path) == {1: "finished", 2: "finished", 3: "running"}
    assert not FinishLedger(str(tmp_path)).ids()


def test_a_claim_a_full_disk_refuses_is_made_by_the_next_record_that_succeeds(
    tmp_path: Path, journals: Callable[..., Journal]
) -> None:
    first = journals(boot="boot-1")
    assert [first.record(spec(n)) for n in (1, 2)] == [1, 2]
    first.close()
    journal = journals(boot="boot-2")
    claims: list[list[str]] = []

    def claim() -> None:
        left = journal.claim_left_overs()
        assert left is not None
        claims.append([x.spec.request_id for x in left])

    with failing_disk(tmp_path):
        assert journal.claim_left_overs() is None  # not written: nothing claimed, and it says so
        journal.claim_later = claim
        with pytest.raises(JournalUnwritable):
            journal.record(spec(3))
    assert claims == []
    assert journal.record(spec(4)) == 3  # its own run, recorded first, is not among the left-overs
    assert claims == [["req-1", "req-2"]]
    assert journal.record(spec(5)) == 4
    assert claims == [["req-1", "req-2"]]  # once
    assert on_disk(tmp_path) == {1: "running", 2: "running", 3: "accepted", 4: "accepted"}  # 1, 2: replayed


def test_a_dead_workers_runs_are_claimed_even_when_its_pid_is_this_ones_but_never_this_ones_own(
    tmp_path: Path, journals: Callable[..., Journal]
) -> None:
    dead = journals(boot="boot")
    assert dead.record(spec(1)) == 1
    dead.close()
    journal = journals(boot="boot")  # the same start, and the same pid: a replaced worker's
    assert journal.record(spec(2)) == 2
    left = journal.claim_left_overs()
    assert left is not None and [x.spec.request_id for x in left] == ["req-1"]


# A worker that dies (kill -9, the OOM killer) while its disk is full, after a run finished: the finish could
# not go to the database, and the process that kept it in memory is gone.
DIES_WHILE_FULL_CHILD = """
import os, resource, signal, sys
from hookrunner.state.journal import Journal, RunSpec
from hookrunner.run.processes import ProcessId
state = sys.argv[1]
journal = Journal(state, "boot-1", retry_every=3600)
for n in (1, 2):
    journal.record(RunSpec("deploy", f"req-{n}", "/bin/true", ("/bin/true",), (), (), "/"))
journal.started(1, ProcessId(os.getpid(), 1))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
wal = os.path.join(state, "journal.sqlite3-wal")
resource.setrlimit(resource.RLIMIT_FSIZE, (os.stat(wal).st_size, resource.RLIM_INFINITY))
journal.finished([1], "exit status 0")
print(journal.writable(), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_run_that_finished_while_the_disk_was_full_is_not_replayed_after_a_kill_9(tmp_path: Path) -> None:
    child = subprocess.run(
        [sys.executable, "-c", DIES_WHILE_FULL_CHILD, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, (child.returncode, child.stdout, child.stderr)
    assert child.stdout.split() == ["False"]  # the journal could not write when it died
    assert on_disk(tmp_path) == {1: "running", 2: "accepted"}
    again = Journal(str(tmp_path), "boot-2")
    try:
        assert [left.spec.request_id for left in again.claim_left_overs()] == ["req-2"]
        assert on_disk(tmp_path) == {1: "finished", 2: "running"}  # claimed by the replay
    finally:
        again.close()


# A serving process that dies as the kernel's OOM killer ends it: SIGKILL, in the middle of a journal write.
# A watcher thread sends the signal once the record in flight has begun writing SQLite's write-ahead log (its
# mtime moved) and before record() has returned; a record is acknowledged (printed) only after it returned,
# as a request is answered only then. The big file content makes each write hundreds of pages long.
MID_WRITE_CHILD = """
import os, signal, sys, threading, time
from hookrunner.state.journal import Journal, RunSpec
state, boot, first, kill_after = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
journal = Journal(state, boot)
wal = os.path.join(state, "journal.sqlite3-wal")
in_write = threading.Event()
def mtime():
    try:
        return os.stat(wal).st_mtime_ns
    except FileNotFoundError:
        return 0
def watch(before):
    while in_write.is_set():
        if mtime() != before:
            os.kill(os.getpid(), signal.SIGKILL)
blob = os.urandom(1 << 20)
for n in range(first, first + 1000):
    spec = RunSpec("big", f"req-{n}", "/bin/true", ("/bin/true", str(n)), (("N", str(n)),),
                   (("HOOK_BLOB", blob),), "/")
    if n - first == kill_after:
        in_write.set()
        threading.Thread(target=watch, args=(mtime(),), daemon=True).start()
    journal.record(spec)
    in_write.clear()
    print(n, flush=True)
print("never killed", flush=True)
"""


def test_a_sigkill_in_the_middle_of_a_journal_write_loses_no_acknowledged_run(tmp_path: Path) -> None:
    state = tmp_path / "state"
    acknowledged: set[int] = set()
    attempted: set[int] = set()
    first = 0
    for round_, kill_after in enumerate((0, 3, 1, 5, 2)):
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                MID_WRITE_CHILD,
                str(state),
                f"boot-{round_}",
                str(first),
                str(kill_after),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert child.returncode == -signal.SIGKILL, (child.returncode, child.stdout, child.stderr)
        printed = [int(line) for line in child.stdout.split()]
        assert printed == list(range(first, first + kill_after))  # killed in the write after these
        acknowledged.update(printed)
        attempted.update(range(first, first + kill_after + 1))
        first += 1000
        # The next start finds a sound journal: nothing torn, every acknowledged run there to replay.
        db = sqlite3.connect(state / FILE_NAME)
        try:
            assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        finally:
            db.close()
        journal = Journal(str(state), f"check-{round_}")
        try:
            left = journal.claim_left_overs()
        finally:
            journal.close()
        seen = [int(run.spec.argv[1]) for run in left]
        assert len(seen) == len(set(seen))
        assert acknowledged <= set(seen) <= attempted, (sorted(acknowledged), sorted(seen))
        assert all(len(dict(run.spec.files)["HOOK_BLOB"]) == 1 << 20 for run in left)


def test_each_attempts_processes_come_back_with_the_left_over_run(tmp_path: Path) -> None:
    first = Journal(str(tmp_path / "state"), "boot-1")
    started, never = first.record(spec(1)), first.record(spec(2))
    assert started is not None and never is not None
    first.started(started, ProcessId(101, 5000))
    first.add_process(started, ProcessId(202, 5100))
    first.add_process(never, ProcessId(303, 5200))  # a run not running records nothing
    assert first.counts() == {"running": 1, "accepted": 1}
    first.close()

    second = Journal(str(tmp_path / "state"), "boot-2")
    left = {x.run_id: x.processes for x in second.claim_left_overs()}
    assert left == {started: (ProcessId(101, 5000), ProcessId(202, 5100)), never: ()}
    # A new attempt replaces the previous one's processes; a finished run keeps none.
    second.started(started, ProcessId(404, 6000))
    row = "SELECT processes FROM runs WHERE id = ?"
    assert second._db.execute(row, (started,)).fetchone() == ("[[404, 6000]]",)
    second.finished([started], "exit status 0")
    assert second._db.execute(row, (started,)).fetchone() == ("[]",)
    second.close()


def test_a_version_1_journal_is_brought_to_the_current_schema_and_its_runs_replayed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    db = sqlite3.connect(state / FILE_NAME)
    db.executescript(
        """
        CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, hook TEXT NOT NULL, request_id TEXT NOT NULL,
            accepted_at REAL NOT NULL, state TEXT NOT NULL, owner TEXT NOT NULL, spec TEXT NOT NULL,
            exit_status TEXT);
        CREATE INDEX runs_state ON runs (state, id);
        PRAGMA user_version=1;
        """
    )
    db.execute(
        "INSERT INTO runs (hook, request_id, accepted_at, state, owner, spec) VALUES (?, ?, ?, ?, ?, ?)",
        ("deploy", "req-1", 1.0, "running", "old-boot:1", spec(1).to_json()),
    )
    db.commit()
    db.close()
    journal = Journal(str(state), "boot-2")
    left = journal.claim_left_overs()
    assert [(x.spec, x.processes) for x in left] == [(spec(1), ())]
    journal.started(left[0].run_id, ProcessId(7, 8))
    journal.close()
    db = sqlite3.connect(state / FILE_NAME)
    try:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert db.execute("SELECT processes FROM runs").fetchone() == ("[[7, 8]]",)
    finally:
        db.close()
