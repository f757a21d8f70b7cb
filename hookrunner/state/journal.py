"""The run journal (`-state-dir`): accepted runs kept on disk until they have finished, so that runs a dead
process left accepted or running are run again by the next one (docs/operations.md, "Run journal").

A SQLite file (standard library) in WAL mode with synchronous=FULL: a run's row is on disk before its
request is answered. Each row is a run ready to start again: hook id, request id, argv, the hook's
environment variables, the contents of its files and its working directory. Rows go accepted -> running ->
finished; a running row also names its attempt's processes (pid and start time: state/model.py), so that
a replay can end what is still running of it first; a finished row keeps only its ids, times and exit status
(the spec, which holds the payload's secrets, is dropped and its bytes zeroed), and finished rows are pruned
to the newest `keep`. A row a replay claimed is running from that claim on, started or not.

Each row also counts its attempts (schema 3; the rule is state/backend.py's RunState.claims): a run is on
attempt 1 from its acceptance, and a claim of left-overs starts the next one, unless the row never started
and no replay claimed it before (a run that only waited is claimed on attempt 1). A caller that names its
attempt when it records processes or finishes a row changes nothing when the row has moved on to a later
attempt (a late write from an old attempt: the call returns False). docs/run-state.md, "How each
guarantee is kept".

Each row names its owner: the serving process that accepted it (a boot id shared by all the workers of one
start, and the worker's pid). A worker claims, once at start and atomically, the unfinished rows whose owner
is gone (another boot, or a worker pid no longer alive); so with -workers N every left-over run is claimed
by exactly one worker.

A journal that cannot be opened (corrupt file, read-only folder, a schema written by a newer hookrunner)
stops the start (check_journal, in the master) or the worker (open_journal): -state-dir means that a 200 is
journaled. Once open, a journal that
cannot write (a full or failing disk) stays on and tells the truth: a run it cannot record raises
JournalUnwritable (the request is refused, never answered as if it were kept), a finish it cannot write is
kept in memory and written before anything else once writes succeed again, tried again every `retry_every`
seconds meanwhile, and `writable()` says whether writes succeed (readiness). A kept finish is also written
at once to the finish ledger (state/finishledger.py), which needs no new space, so that a process that dies
before the disk has room leaves it for the next claim, which does not replay it. Nothing here knows HTTP, and
nothing it stores is ever logged: the rows hold secrets.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from hookrunner.ops import metrics
from hookrunner.ops.log import log
from hookrunner.state.finishledger import FinishLedger
from hookrunner.state.model import ProcessId, RunSpec

#: The schema this hookrunner writes; a journal with a higher PRAGMA user_version is refused, one with a
#: lower one is brought up to it. 2: each run's `processes`, the attempt's leader first. 3: each run's
#: `attempt`, 1 when accepted and one more at each claim of left-overs that started or was claimed before.
SCHEMA_VERSION = 3
FILE_NAME = "journal.sqlite3"
LOCK_NAME = "journal.lock"

T = TypeVar("T")

#: What the log says when a worker cannot open the journal that the master could.
WORKER_STOPS = "this worker stops: it cannot journal the runs it would accept"
#: What the log says when an open journal's writes start failing.
REFUSING = "runs are refused (503) until it can write again"
#: How long a run refused for an unwritable journal is told to wait (Retry-After, seconds).
RETRY_AFTER = 5
#: How often, while writes fail, the journal tries them again on its own (seconds).
RETRY_EVERY = 1.0

ACCEPTED = "accepted"
RUNNING = "running"
FINISHED = "finished"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    hook TEXT NOT NULL,
    request_id TEXT NOT NULL,
    accepted_at REAL NOT NULL,
    state TEXT NOT NULL,
    owner TEXT NOT NULL,
    spec TEXT NOT NULL,
    exit_status TEXT,
    processes TEXT NOT NULL DEFAULT '[]',
    attempt INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS runs_state ON runs (state, id);
"""

#: A finished run is never started again: its spec (argv, variables, files: the payload's secrets) is
#: dropped, and secure_delete (set at open) zeroes the bytes it took.
_FINISH = "UPDATE runs SET state = ?, exit_status = ?, spec = '', processes = '[]' WHERE id = ?"
#: A finished row never runs again: a late start (a race with its own finish) leaves it finished.
_RUNNING = "UPDATE runs SET state = ?, processes = ? WHERE id = ? AND state != 'finished'"
#: The same writes of one attempt only: the last parameter is the attempt, or None for whichever is current.
_ATTEMPT = " AND attempt = coalesce(?, attempt)"


class JournalError(Exception):
    """The journal cannot be used; the text says why, for the log."""


class JournalUnwritable(Exception):
    """The journal cannot record this run now (a full or failing disk): refuse it, with Retry-After, rather
    than answer a run that a restart would lose."""

    def __init__(self, path: str) -> None:
        super().__init__(f"run journal {path} cannot be written")
        self.retry_after = RETRY_AFTER


@dataclass(frozen=True)
class LeftOver:
    """An unfinished run of a process that is gone, claimed for replay by this one."""

    run_id: int
    accepted_at: float
    spec: RunSpec
    #: The processes of its last attempt, as recorded (the leader first); empty when it never started.
    processes: tuple[ProcessId, ...] = ()
    #: The attempt this claim starts: one more than the last, or 1 for a run that never started and that no
    #: replay claimed before.
    attempt: int = 2


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def create_private_file(state_dir: str, name: str) -> str:
    """`state_dir` (made 0700 if missing) and `name` in it, created 0600 if missing; returns its path.

    The database file is created before SQLite opens it: its -wal and -shm files take its mode."""
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    path = os.path.join(state_dir, name)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
    return path


def new_boot_id() -> str:
    """An id for one start of hookrunner, shared by its workers (made in the master, before forking)."""
    return f"{os.getpid()}.{time.time_ns()}"


class Journal:
    """One process's connection to the journal file; every method is safe from any thread."""

    def __init__(
        self, state_dir: str, boot_id: str, keep: int = 1000, retry_every: float = RETRY_EVERY
    ) -> None:
        """Open (creating, private) the journal in `state_dir`; raises JournalError when it cannot be used."""
        import sqlite3  # here, not at the top: only -state-dir needs it (docs/performance.md, memory at rest)

        self._failures: tuple[type[Exception], ...] = (sqlite3.Error, OSError)
        self.path = os.path.join(state_dir, FILE_NAME)
        self.keep = max(keep, 0)
        self.boot_id = boot_id
        self._lock = threading.Lock()
        self._enabled = True
        self._finished_since_prune = 0
        #: Why writes fail now (the first error of this outage); None while they succeed.
        self._failing: str | None = None
        #: Finishes not yet written (run id -> exit status): written first by the next write that succeeds.
        self._kept: dict[int, str] = {}
        #: Attempts' processes not yet written (run id -> leader first), written with the kept finishes.
        self._kept_running: dict[int, list[ProcessId]] = {}
        #: The attempt that kept writes of a run are for (run id -> attempt); absent: whichever is current.
        self._kept_attempt: dict[int, int] = {}
        self._retry_every = retry_every
        self._last_try = 0.0
        self._retrier: threading.Thread | None = None
        self._closed = threading.Event()
        #: Kept finishes that are in the ledger (durable already); None: no ledger (it could not be made).
        self._ledger: FinishLedger | None = None
        self._in_ledger: set[int] = set()
        #: Called (once) by the next record that succeeds, in its caller's thread, before it returns: set when
        #: the claim of left-over runs could not be written, so that they are claimed once the disk has room.
        self.claim_later: Callable[[], None] | None = None
        try:
            create_private_file(state_dir, FILE_NAME)
            self._db = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False, isolation_level=None)
        except OSError as exc:
            raise JournalError(f"cannot open {self.path}: {exc.strerror or exc}") from exc
        except sqlite3.Error as exc:
            raise JournalError(f"cannot open {self.path}: {exc}") from exc
        try:
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise JournalError(
                    f"{self.path} was written by a newer hookrunner (schema version {version}, this one "
                    f"knows {SCHEMA_VERSION}); leaving it untouched"
                )
            mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise JournalError(f"{self.path}: cannot use write-ahead logging (journal_mode {mode})")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA secure_delete=ON")
            self._db.executescript(_SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(runs)")}
            if "processes" not in columns:  # a version 1 journal
                self._db.execute("ALTER TABLE runs ADD COLUMN processes TEXT NOT NULL DEFAULT '[]'")
            if "attempt" not in columns:  # a version 1 or 2 journal: each row is on its first attempt
                self._db.execute("ALTER TABLE runs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1")
            if version < SCHEMA_VERSION:
                self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            #: Rows up to this id were written before this process opened the journal: a row of its own
            #: owner among them is a dead worker's that had the same pid (claimed), any later one is its own.
            self._opened_at_id = int(self._db.execute("SELECT coalesce(max(id), 0) FROM runs").fetchone()[0])
        except sqlite3.Error as exc:
            self._db.close()
            raise JournalError(f"cannot use {self.path}: {exc}") from exc
        except JournalError:
            self._db.close()
            raise
        try:
            self._ledger = FinishLedger(state_dir)
        except OSError as exc:
            log.output(
                f"run journal: cannot make {exc.filename}: {exc.strerror or exc}; finishes that the "
                "journal cannot write are kept in memory only"
            )

    @property
    def enabled(self) -> bool:
        return self._enabled

    @property
    def owner(self) -> str:
        return f"{self.boot_id}:{os.getpid()}"

    def close(self) -> None:
        """Stop using the journal; finishes still kept are written first if they can be, else named in the log
        (the next start would run them again)."""
        self._closed.set()
        with self._lock:
            if not self._enabled:
                return
            self._enabled = False
            try:
                self._write_kept()
            except self._failures as exc:
                lost = sorted(set(self._kept) - self._in_ledger)
                if lost:
                    log.output(
                        f"run journal {self.path}: cannot mark run(s) {' '.join(map(str, lost))} "
                        f"finished: {exc}; the next start runs them again"
                    )
            self._db.close()
            if self._ledger is not None:
                self._ledger.close()

    def writable(self) -> bool:
        """Whether the journal's writes succeed (readiness); while they fail, each call tries them again (the
        kept finishes, or one small write), at most once a `retry_every`."""
        if self._failing is None:
            return True
        return self._try_again()

    def _try_again(self) -> bool:
        with self._lock:
            if self._failing is None or not self._enabled:
                return self._failing is None
            if time.monotonic() - self._last_try < self._retry_every:
                return False
            # One page written and synced, as a run's record would be: user_version is rewritten as it is.
            probe = f"PRAGMA user_version={SCHEMA_VERSION}"
            return self._write_locked("write again", lambda: self._db.execute(probe))[0]

    def _keep_trying(self) -> None:
        """While writes fail, try them again every `retry_every` (the kept finishes get written without
        waiting for a request); ends once they succeed or the journal is closed."""
        while not self._closed.wait(self._retry_every):
            if self._try_again():
                return

    def _write(self, what: str, action: Callable[[], T]) -> tuple[bool, T | None]:
        """Run `action` (a write) under the lock, after the kept finishes: (whether it was written, its
        result). A failure is logged and counted once per outage; the journal stays on."""
        with self._lock:
            return self._write_locked(what, action)

    def _write_locked(self, what: str, action: Callable[[], T]) -> tuple[bool, T | None]:
        if not self._enabled:
            return False, None
        try:
            self._write_kept()
            result = action()
        except self._failures as exc:
            self._last_try = time.monotonic()
            if self._db.in_transaction:
                try:
                    self._db.execute("ROLLBACK")
                except self._failures:
                    pass
            if self._failing is None:
                self._failing = str(exc)
                metrics.record_journal("unwritable")
                log.output(f"run journal {self.path}: cannot {what}: {exc}; {REFUSING}")
            if self._retrier is None or not self._retrier.is_alive():
                self._retrier = threading.Thread(target=self._keep_trying, name="journal-retry", daemon=True)
                self._retrier.start()
            return False, None
        if self._failing is not None:
            self._failing = None
            log.output(f"run journal {self.path}: writes succeed again")
        return True, result

    def _write_kept(self) -> None:
        """Write the kept processes and finishes, all or none (under the lock)."""
        if not self._kept and not self._kept_running:
            return
        kept = list(self._kept.items())
        attempt = self._kept_attempt.get
        running = [
            (RUNNING, _processes_json(found), run_id, attempt(run_id))
            for run_id, found in self._kept_running.items()
        ]
        self._db.execute("BEGIN IMMEDIATE")
        self._db.executemany(_RUNNING + _ATTEMPT, running)
        self._db.executemany(
            _FINISH + _ATTEMPT, [(FINISHED, status, run_id, attempt(run_id)) for run_id, status in kept]
        )
        self._db.execute("COMMIT")
        self._kept.clear()
        self._kept_running.clear()
        self._kept_attempt.clear()
        self._finished_since_prune += len(kept)
        if self._ledger is not None and self._in_ledger:
            self._ledger.remove(self._in_ledger)  # if it cannot, the ids left there are still true
            self._in_ledger.clear()

    def record(self, spec: RunSpec) -> int | None:
        """Write an accepted run, durably; its row id, or None when the journal is closed. Raises
        JournalUnwritable when it cannot be written: the run must not be answered as kept."""

        def insert() -> int:
            cursor = self._db.execute(
                "INSERT INTO runs (hook, request_id, accepted_at, state, owner, spec) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (spec.hook_id, spec.request_id, time.time(), ACCEPTED, self.owner, spec.to_json()),
            )
            return int(cursor.lastrowid or 0)

        if not self._enabled:
            return None
        written, run_id = self._write("record an accepted run", insert)
        if not written or run_id is None:
            raise JournalUnwritable(self.path)
        metrics.record_journal("journaled")
        with self._lock:
            claim, self.claim_later = self.claim_later, None
        if claim is not None:
            claim()
        return run_id

    def started(self, run_id: int, leader: ProcessId, attempt: int | None = None) -> bool:
        """An attempt of the run started: its leader process is recorded (replacing an earlier attempt's);
        kept, when it cannot be written now, and written with the kept finishes. With `attempt`, only while
        the row is on that attempt. False: nothing written (the row is on another attempt, or gone)."""
        with self._lock:
            self._kept_running.pop(run_id, None)
            mark = (RUNNING, _processes_json([leader]), run_id, attempt)
            written, changed = self._write_locked(
                "mark a run running", lambda: self._db.execute(_RUNNING + _ATTEMPT, mark).rowcount
            )
            if not written:
                if not self._enabled:
                    return False
                self._kept_running[run_id] = [leader]
                self._keep_attempt(run_id, attempt)
                return True
            return bool(changed)

    def add_process(self, run_id: int, process: ProcessId, attempt: int | None = None) -> bool:
        """A process of the run's attempt was found outside its leader's group: it is recorded too (kept
        with its attempt's when that is not written yet, or when it cannot be written now). With `attempt`,
        only while the row is on that attempt. False: nothing recorded (not running, another attempt)."""
        with self._lock:
            if run_id in self._kept_running:
                if attempt is not None and self._kept_attempt.get(run_id, attempt) != attempt:
                    return False
                self._kept_running[run_id].append(process)
                return True
            if not self._enabled:
                return False
            try:
                query = "SELECT processes FROM runs WHERE id = ? AND state = ?" + _ATTEMPT
                found = self._db.execute(query, (run_id, RUNNING, attempt)).fetchone()
            except self._failures:
                return False
            if found is None:
                return False
            processes = [*_processes_from(found[0]), process]
            add = ("UPDATE runs SET processes = ? WHERE id = ?", (_processes_json(processes), run_id))
            if not self._write_locked("record a run's process", lambda: self._db.execute(*add))[0]:
                self._kept_running[run_id] = processes
                self._keep_attempt(run_id, attempt)
            return True

    def finished(self, run_ids: list[int], exit_status: str, attempt: int | None = None) -> bool:
        """Mark runs finished; what cannot be written now is kept, and written before any later write. With
        `attempt`, only if the first run (the one that ran; the others are requests folded into it) is on
        that attempt: False, and nothing written, for a late finish of an old attempt. The check is a read
        under this process's lock, and a kept write is made on the same condition."""
        if not run_ids:
            return True
        with self._lock:
            if not self._enabled:
                return False
            if attempt is not None and not self._on_attempt(run_ids[0], attempt):
                return False
            self._kept.update((run_id, exit_status) for run_id in run_ids)
            for run_id in run_ids:
                self._kept_running.pop(run_id, None)  # its finish says more
            self._keep_attempt(run_ids[0], attempt)
            written = self._write_locked("mark a run finished", lambda: None)[0]
            if not written and self._ledger is not None and self._ledger.add(run_ids):
                self._in_ledger.update(run_ids)
        if self._finished_since_prune >= max(self.keep // 10, 100):
            self.prune()
        return True

    def _keep_attempt(self, run_id: int, attempt: int | None) -> None:
        """The attempt that kept writes of `run_id` are for (under the lock); None: whichever is current."""
        if attempt is None:
            self._kept_attempt.pop(run_id, None)
        else:
            self._kept_attempt[run_id] = attempt

    def _on_attempt(self, run_id: int, attempt: int) -> bool:
        """Whether `run_id`'s row is on `attempt` (under the lock). A row that is gone is not; a read that
        fails counts as yes, since the kept write is made on the same condition."""
        kept = self._kept_attempt.get(run_id)
        if kept is not None and kept != attempt:
            return False
        try:
            found = self._db.execute("SELECT attempt FROM runs WHERE id = ?", (run_id,)).fetchone()
        except self._failures:
            return True
        return found is not None and int(found[0]) == attempt

    def attempt(self, run_id: int) -> int | None:
        """The row's current attempt, or None when there is no such row (for tests and diagnostics)."""
        with self._lock:
            found = self._db.execute("SELECT attempt FROM runs WHERE id = ?", (run_id,)).fetchone()
        return None if found is None else int(found[0])

    def prune(self) -> int:
        """Delete finished rows beyond the newest `keep`; returns how many went."""

        def delete() -> int:
            self._finished_since_prune = 0
            cursor = self._db.execute(
                "DELETE FROM runs WHERE state = ? AND id NOT IN "
                "(SELECT id FROM runs WHERE state = ? ORDER BY id DESC LIMIT ?)",
                (FINISHED, FINISHED, self.keep),
            )
            return int(cursor.rowcount)

        pruned = self._write("prune finished runs", delete)[1]
        count = pruned or 0
        if count:
            metrics.record_journal("pruned", count)
        return count

    def claim_left_overs(self) -> list[LeftOver] | None:
        """Take over, atomically, the unfinished runs of processes that are gone, oldest first; None when the
        claim cannot be written (a full disk): nothing is claimed, and it may be tried again later."""

        def claim() -> list[LeftOver]:
            me = self.owner
            done = self._ledger.ids() if self._ledger is not None else set()
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(
                    _FINISH + " AND state != ?",
                    [(FINISHED, "finished while the journal could not write", i, FINISHED) for i in done],
                )
                rows = self._db.execute(
                    "SELECT id, hook, request_id, accepted_at, owner, spec, processes, attempt, state "
                    "FROM runs WHERE state IN (?, ?) ORDER BY id",
                    (ACCEPTED, RUNNING),
                ).fetchall()
                claimed: list[LeftOver] = []
                for run_id, hook, request_id, accepted_at, owner, spec, processes, attempt, state in rows:
                    boot, _, pid = str(owner).rpartition(":")
                    if owner == me and run_id > self._opened_at_id:
                        continue  # this process's own run (a claim tried again after a full disk)
                    if boot == self.boot_id and pid.isdigit() and owner != me and _pid_alive(int(pid)):
                        continue  # a live sibling worker's run
                    try:
                        run_spec = RunSpec.from_json(hook, request_id, spec)
                        previous = tuple(_processes_from(processes))
                        # An accepted row on attempt 1 never started and no replay claimed it: its
                        # first claim that can write is still to come. A replay's claim is marked running
                        # (below), so that the next replay counts on from it even if it never starts.
                        counted = str(state) == RUNNING or int(attempt) > 1
                        left = LeftOver(run_id, accepted_at, run_spec, previous, int(attempt) + counted)
                    except (ValueError, KeyError, TypeError):
                        log.output(f"run journal: run {run_id} of hook {hook} cannot be read; not replayed")
                        self._db.execute(_FINISH, (FINISHED, "unreadable", run_id))
                        continue
                    self._db.execute(
                        "UPDATE runs SET state = ?, owner = ?, attempt = ? WHERE id = ?",
                        (RUNNING, me, left.attempt, run_id),
                    )
                    claimed.append(left)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            if self._ledger is not None and done:
                self._ledger.remove(done - self._in_ledger)  # this process's own are freed once written
            return claimed

        written, result = self._write("claim left-over runs", claim)
        return result if written else None

    def counts(self) -> dict[str, int]:
        """Rows by state (for tests and diagnostics)."""
        query = "SELECT state, count(*) FROM runs GROUP BY state"
        rows: list[tuple[str, int]] | None = self._write(
            "count runs", lambda: self._db.execute(query).fetchall()
        )[1]
        return {str(state): int(n) for state, n in (rows or [])}


def accepts_runs(journal: Journal | None) -> bool:
    """Readiness (-state-dir): whether runs can be journaled now; without a journal they always can."""
    return journal is None or journal.writable()


def _processes_json(processes: list[ProcessId]) -> str:
    return json.dumps([[process.pid, process.start] for process in processes])


def _processes_from(text: str) -> list[ProcessId]:
    """The recorded processes; a value that cannot be read counts as none recorded."""
    try:
        return [ProcessId(int(pid), int(start)) for pid, start in json.loads(text or "[]")]
    except (ValueError, TypeError):
        return []


def lock_state_dir(state_dir: str) -> int:
    """Hold `state_dir` for this start of hookrunner (the master, and the workers it forks, share the lock);
    returns the descriptor. Raises JournalError when it cannot be had, another hookrunner holding it: two
    processes replaying each other's runs would run them twice."""
    path = os.path.join(state_dir, LOCK_NAME)
    try:
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise JournalError(f"cannot open {path}: {exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise JournalError(f"{state_dir} is in use by another hookrunner") from None
    return fd


def check_journal(state_dir: str, boot_id: str, keep: int) -> None:
    """Open the journal and close it again (the master, before any worker exists); raises JournalError when it
    cannot be used, so that hookrunner does not start: with -state-dir, a 200 means the run is journaled."""
    Journal(state_dir, boot_id, keep).close()


def open_journal(state_dir: str, boot_id: str, keep: int) -> Journal | None:
    """A worker's journal, or None (logged, counted) when it cannot be used, though the master's check passed:
    the worker must then stop rather than answer 200 for runs it cannot journal."""
    try:
        return Journal(state_dir, boot_id, keep)
    except JournalError as exc:
        metrics.record_journal("failed")
        log.output(f"run journal: {exc}; {WORKER_STOPS}")
        return None
