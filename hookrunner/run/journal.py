"""The run journal (`-state-dir`): accepted runs kept on disk until they have finished, so that runs a dead
process left accepted or running are run again by the next one (docs/operations.md, "Run journal").

A SQLite file (standard library) in WAL mode with synchronous=FULL: a run's row is on disk before its
request is answered. Each row is a run ready to start again: hook id, request id, argv, the hook's
environment variables, the contents of its files and its working directory. Rows go accepted -> running ->
finished; a running row also names its attempt's processes (pid and start time, run/processes.py), so that
a replay can end what is still running of it first; a finished row keeps only its ids, times and exit status
(the spec, which holds the payload's secrets, is dropped and its bytes zeroed), and finished rows are pruned
to the newest `keep`.

Each row names its owner: the serving process that accepted it (a boot id shared by all the workers of one
start, and the worker's pid). A worker claims, once at start and atomically, the unfinished rows whose owner
is gone (another boot, or a worker pid no longer alive); so with -workers N every left-over run is claimed
by exactly one worker.

Any failure of the journal (corrupt file, full disk, read-only folder, a schema written by a newer
hookrunner) is logged once, counted, and the journal turns itself off: hooks keep being served, without
journaling. Nothing here knows HTTP, and nothing it stores is ever logged: the rows hold secrets.
"""

from __future__ import annotations

import base64
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
from hookrunner.run.processes import ProcessId

#: The schema this hookrunner writes; a journal with a higher PRAGMA user_version is refused, one with a
#: lower one is brought up to it. 2: each run's `processes`, the attempt's leader first.
SCHEMA_VERSION = 2
FILE_NAME = "journal.sqlite3"
LOCK_NAME = "journal.lock"

T = TypeVar("T")

#: What the log says when the journal turns off.
WITHOUT = "serving without a journal (accepted runs are not kept across a restart)"

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
    processes TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX IF NOT EXISTS runs_state ON runs (state, id);
"""

#: A finished run is never started again: its spec (argv, variables, files: the payload's secrets) is
#: dropped, and secure_delete (set at open) zeroes the bytes it took.
_FINISH = "UPDATE runs SET state = ?, exit_status = ?, spec = '', processes = '[]' WHERE id = ?"


class JournalError(Exception):
    """The journal cannot be used; the text says why, for the log."""


@dataclass(frozen=True)
class RunSpec:
    """Everything needed to start a run again: what the executor prepared from the request."""

    hook_id: str
    request_id: str
    command: str  # the hook's execute-command, resolved again when run
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]  # the hook's variables, over the serving process's environment
    files: tuple[tuple[str, bytes], ...]  # (variable name, contents) of pass-file-to-command
    cwd: str

    def to_json(self) -> str:
        # ensure_ascii: argv and values may carry lone surrogates (undecodable bytes), which SQLite's
        # UTF-8 text cannot hold but JSON escapes can.
        return json.dumps(
            {
                "command": self.command,
                "argv": list(self.argv),
                "env": [list(pair) for pair in self.env],
                "files": [[name, base64.b64encode(data).decode("ascii")] for name, data in self.files],
                "cwd": self.cwd,
            },
            ensure_ascii=True,
        )

    @classmethod
    def from_json(cls, hook_id: str, request_id: str, text: str) -> RunSpec:
        data = json.loads(text)
        return cls(
            hook_id=hook_id,
            request_id=request_id,
            command=str(data["command"]),
            argv=tuple(str(a) for a in data["argv"]),
            env=tuple((str(k), str(v)) for k, v in data["env"]),
            files=tuple((str(n), base64.b64decode(d)) for n, d in data["files"]),
            cwd=str(data["cwd"]),
        )


@dataclass(frozen=True)
class LeftOver:
    """An unfinished run of a process that is gone, claimed for replay by this one."""

    run_id: int
    accepted_at: float
    spec: RunSpec
    #: The processes of its last attempt, as recorded (the leader first); empty when it never started.
    processes: tuple[ProcessId, ...] = ()


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

    def __init__(self, state_dir: str, boot_id: str, keep: int = 1000) -> None:
        """Open (creating, private) the journal in `state_dir`; raises JournalError when it cannot be used."""
        import sqlite3  # here, not at the top: only -state-dir needs it (docs/performance.md, memory at rest)

        self._failures: tuple[type[Exception], ...] = (sqlite3.Error, OSError)
        self.path = os.path.join(state_dir, FILE_NAME)
        self.keep = max(keep, 0)
        self.boot_id = boot_id
        self._lock = threading.Lock()
        self._enabled = True
        self._finished_since_prune = 0
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
            if version < SCHEMA_VERSION:
                self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self._db.execute("SELECT count(*) FROM runs").fetchone()
        except sqlite3.Error as exc:
            self._db.close()
            raise JournalError(f"cannot use {self.path}: {exc}") from exc
        except JournalError:
            self._db.close()
            raise

    @property
    def enabled(self) -> bool:
        return self._enabled

    @property
    def owner(self) -> str:
        return f"{self.boot_id}:{os.getpid()}"

    def close(self) -> None:
        with self._lock:
            self._enabled = False
            self._db.close()

    def _guard(self, what: str, action: Callable[[], T]) -> T | None:
        """Run `action` under the lock; on a failure, log it, count it and turn the journal off."""
        with self._lock:
            if not self._enabled:
                return None
            try:
                return action()
            except self._failures as exc:
                self._enabled = False
                metrics.record_journal("failed")
                log.output(f"run journal {self.path}: cannot {what}: {exc}; {WITHOUT}")
                try:
                    self._db.close()
                except self._failures:
                    pass
                return None

    def record(self, spec: RunSpec) -> int | None:
        """Write an accepted run, durably; its row id, or None when the journal is off or failed."""

        def insert() -> int:
            cursor = self._db.execute(
                "INSERT INTO runs (hook, request_id, accepted_at, state, owner, spec) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (spec.hook_id, spec.request_id, time.time(), ACCEPTED, self.owner, spec.to_json()),
            )
            return int(cursor.lastrowid or 0)

        run_id = self._guard("record an accepted run", insert)
        if run_id is None:
            return None
        metrics.record_journal("journaled")
        return run_id

    def started(self, run_id: int, leader: ProcessId) -> None:
        """An attempt of the run started: its leader process is recorded (replacing an earlier attempt's)."""
        self._guard(
            "mark a run running",
            lambda: self._db.execute(
                "UPDATE runs SET state = ?, processes = ? WHERE id = ?",
                (RUNNING, _processes_json([leader]), run_id),
            ),
        )

    def add_process(self, run_id: int, process: ProcessId) -> None:
        """A process of the run's attempt was found outside its leader's group: it is recorded too."""

        def add() -> None:
            row = self._db.execute("SELECT processes FROM runs WHERE id = ? AND state = ?", (run_id, RUNNING))
            found = row.fetchone()
            if found is None:
                return
            processes = [*_processes_from(found[0]), process]
            self._db.execute(
                "UPDATE runs SET processes = ? WHERE id = ?", (_processes_json(processes), run_id)
            )

        self._guard("record a run's process", add)

    def finished(self, run_ids: list[int], exit_status: str) -> None:
        if not run_ids:
            return

        def update() -> None:
            self._db.executemany(
                _FINISH,
                [(FINISHED, exit_status, run_id) for run_id in run_ids],
            )

        self._guard("mark a run finished", update)
        self._finished_since_prune += len(run_ids)
        if self._finished_since_prune >= max(self.keep // 10, 100):
            self.prune()

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

        pruned = self._guard("prune finished runs", delete)
        count = pruned or 0
        if count:
            metrics.record_journal("pruned", count)
        return count

    def claim_left_overs(self) -> list[LeftOver]:
        """Take over, atomically, the unfinished runs of processes that are gone, oldest first."""

        def claim() -> list[LeftOver]:
            me = self.owner
            self._db.execute("BEGIN IMMEDIATE")
            try:
                rows = self._db.execute(
                    "SELECT id, hook, request_id, accepted_at, owner, spec, processes FROM runs "
                    "WHERE state IN (?, ?) ORDER BY id",
                    (ACCEPTED, RUNNING),
                ).fetchall()
                claimed: list[LeftOver] = []
                for run_id, hook, request_id, accepted_at, owner, spec, processes in rows:
                    boot, _, pid = str(owner).rpartition(":")
                    if boot == self.boot_id and pid.isdigit() and owner != me and _pid_alive(int(pid)):
                        continue  # a live sibling worker's run
                    try:
                        run_spec = RunSpec.from_json(hook, request_id, spec)
                        left = LeftOver(run_id, accepted_at, run_spec, tuple(_processes_from(processes)))
                    except (ValueError, KeyError, TypeError):
                        log.output(f"run journal: run {run_id} of hook {hook} cannot be read; not replayed")
                        self._db.execute(_FINISH, (FINISHED, "unreadable", run_id))
                        continue
                    self._db.execute(
                        "UPDATE runs SET state = ?, owner = ? WHERE id = ?", (ACCEPTED, me, run_id)
                    )
                    claimed.append(left)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return claimed

        result = self._guard("claim left-over runs", claim)
        return result or []

    def counts(self) -> dict[str, int]:
        """Rows by state (for tests and diagnostics)."""
        query = "SELECT state, count(*) FROM runs GROUP BY state"
        rows: list[tuple[str, int]] | None = self._guard(
            "count runs", lambda: self._db.execute(query).fetchall()
        )
        return {str(state): int(n) for state, n in (rows or [])}


def _processes_json(processes: list[ProcessId]) -> str:
    return json.dumps([[process.pid, process.start] for process in processes])


def _processes_from(text: str) -> list[ProcessId]:
    """The recorded processes; a value that cannot be read counts as none recorded."""
    try:
        return [ProcessId(int(pid), int(start)) for pid, start in json.loads(text or "[]")]
    except (ValueError, TypeError):
        return []


def lock_state_dir(state_dir: str) -> int | None:
    """Hold `state_dir` for this start of hookrunner (the master, and the workers it forks, share the lock);
    the descriptor, or None (logged, counted) when it cannot be had, another hookrunner holding it: two
    processes replaying each other's runs would run them twice."""
    path = os.path.join(state_dir, LOCK_NAME)
    try:
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        metrics.record_journal("failed")
        log.output(f"run journal: cannot open {path}: {exc.strerror or exc}; {WITHOUT}")
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        metrics.record_journal("failed")
        log.output(f"run journal: {state_dir} is in use by another hookrunner; {WITHOUT}")
        return None
    return fd


def open_journal(state_dir: str, boot_id: str, keep: int) -> Journal | None:
    """The journal, or None (logged, counted) when it cannot be used: then hooks are served without one."""
    try:
        return Journal(state_dir, boot_id, keep)
    except JournalError as exc:
        metrics.record_journal("failed")
        log.output(f"run journal: {exc}; {WITHOUT}")
        return None
