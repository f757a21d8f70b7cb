"""Where the admin listener keeps the run history: the workers' events (run/history.py) put together into
one record per run, in SQLite: the run journal's database file with -state-dir (kept across restarts), or a
database in this process's memory without it. Retention by count (-state-keep) and age (-state-keep-age).

One process writes here, the admin listener's; each worker only sends events. Nothing here knows HTTP.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import threading
import time
from typing import Any

from hookrunner.state.journal import FILE_NAME, create_private_file, new_boot_id
from hookrunner.state.model import CANCELLED, FINAL_OUTCOMES, PENDING, REPLAYED, RUNNING, Event

_SCHEMA = """
CREATE TABLE IF NOT EXISTS history (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    boot TEXT NOT NULL,
    id TEXT NOT NULL DEFAULT '',
    hook TEXT NOT NULL DEFAULT '',
    kind TEXT NOT NULL DEFAULT 'immediate',
    outcome TEXT NOT NULL DEFAULT 'pending',
    accepted_at REAL,
    started_at REAL,
    ended_at REAL,
    duration REAL,
    exit_code INTEGER,
    signal TEXT,
    detail TEXT NOT NULL DEFAULT '',
    argv TEXT NOT NULL DEFAULT '[]',
    env TEXT NOT NULL DEFAULT '[]',
    files TEXT NOT NULL DEFAULT '[]',
    cwd TEXT NOT NULL DEFAULT '',
    pid INTEGER,
    output BLOB NOT NULL DEFAULT x'',
    output_size INTEGER NOT NULL DEFAULT 0,
    output_truncated INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS history_hook ON history (hook, seq);
CREATE INDEX IF NOT EXISTS history_id ON history (id, seq);
"""

#: Fields an event may set, and how each is stored: the ones a list of runs shows, then those only one
#: run's page shows, then the JSON ones.
SUMMARY_FIELDS = (
    "id",
    "hook",
    "kind",
    "outcome",
    "accepted_at",
    "started_at",
    "ended_at",
    "exit_code",
    "signal",
    "detail",
    "output_size",
    "output_truncated",
)
EVENT_SCALARS = (*SUMMARY_FIELDS, "cwd", "pid")
JSON_FIELDS = ("argv", "env", "files")
#: The columns of a listed run (no output; `duration` is computed when a run ends), and of one run.
LISTED_FIELDS = ("seq", *SUMMARY_FIELDS, "duration")
RUN_FIELDS = (*LISTED_FIELDS, *JSON_FIELDS, "cwd", "pid", "output")

#: At most how many events between two applications of the retention rules; a small -state-keep is applied
#: more often (every tenth of it), so the history never holds more than about 1.1 times what it keeps.
_PRUNE_EVERY = 100


class OneRunReads:
    """The reads of one run that every history store gives (this one and state/pghistory.py's), on its
    `_one(column, value)`: the newest record whose `column` is `value`, with its output and, last, its key."""

    def _one(self, column: str, value: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def run(self, run_id: str) -> dict[str, Any] | None:
        """One run with its output (the newest of that id: an X-Request-Id may be sent twice)."""
        record = self._one("id", run_id)
        if record is not None:
            del record["key"]
        return record

    def followed(self, run_id: str) -> dict[str, Any] | None:
        """One run as `run` gives it, with the key its events carry (what a follower of it listens to)."""
        return self._one("id", run_id)

    def by_key(self, key: str) -> dict[str, Any] | None:
        """The run whose events carry `key`, with its output, or None (never recorded, or pruned)."""
        return self._one("key", key)


class HistoryStore(OneRunReads):
    """The records, safe from any thread. `path` "" keeps them in memory."""

    def __init__(
        self, path: str = "", keep: int = 1000, max_age: float = 0.0, output_limit: int = 64 << 10
    ) -> None:
        self.path = path
        self.keep = max(keep, 0)
        self.max_age = max(max_age, 0.0)
        #: The tail of a running run's output kept as it comes (-history-output; a run's end sets its own).
        self.output_limit = max(output_limit, 0)
        self.boot = new_boot_id()
        self._lock = threading.Lock()
        self._since_prune = 0
        self._prune_every = max(1, min(_PRUNE_EVERY, self.keep // 10))
        #: The output of each running run so far, by key: (its last `output_limit` bytes, its whole size).
        self._live: dict[str, tuple[bytes, int]] = {}
        #: The hooks each worker last said it serves, by file: {file: {"hooks": [...], "loaded_at": t}}.
        self._hooks: dict[str, dict[str, Any]] = {}
        self._db = sqlite3.connect(
            path or ":memory:", timeout=30.0, check_same_thread=False, isolation_level=None
        )
        if path:
            self._db.execute("PRAGMA journal_mode=WAL")
            # A record lost to a power cut costs nothing a run needs, and the journal's own writes (on the
            # request's path) share the file's write lock: no fsync per event here.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA secure_delete=ON")
        self._db.executescript(_SCHEMA)
        # Runs a previous start left open (it stopped, or crashed, before they ended): they did not end here.
        self._db.execute(
            "UPDATE history SET outcome = ?, detail = ? WHERE outcome IN (?, ?) AND boot != ?",
            (CANCELLED, "hookrunner stopped before this run ended", PENDING, RUNNING, self.boot),
        )
        self.prune()

    @classmethod
    def for_state_dir(
        cls, state_dir: str, keep: int, max_age: float, output_limit: int = 64 << 10
    ) -> HistoryStore:
        """The store in the run journal's database file (created private when it is not there yet)."""
        return cls(create_private_file(state_dir, FILE_NAME), keep, max_age, output_limit)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- writing: the workers' events ---------------------------------------------------------------

    def apply(self, event: Event) -> None:
        """One event from a worker; an unknown or malformed one is ignored."""
        kind = event.get("event")
        if kind == "run" and isinstance(event.get("key"), str):
            self._apply_run(event)
        elif kind == "output" and isinstance(event.get("key"), str):
            self._apply_output(event)
        elif kind == "replaying":
            self._apply_replaying(event)
        elif kind == "hooks" and isinstance(event.get("files"), list):
            with self._lock:
                for entry in event["files"]:
                    if isinstance(entry, dict) and isinstance(entry.get("file"), str):
                        self._hooks[entry["file"]] = entry
        self._since_prune += 1
        if self._since_prune >= self._prune_every:
            self.prune()

    def _apply_run(self, event: Event) -> None:
        values: dict[str, Any] = {name: event[name] for name in EVENT_SCALARS if name in event}
        for name in JSON_FIELDS:
            if name in event:
                values[name] = json.dumps(event[name], ensure_ascii=True)
        if "output" in event:
            values["output"] = base64.b64decode(event["output"])
        with self._lock:
            if values.get("outcome") in FINAL_OUTCOMES:
                self._live.pop(event["key"], None)
            self._db.execute(
                "INSERT INTO history (key, boot) VALUES (?, ?) ON CONFLICT(key) DO NOTHING",
                (event["key"], self.boot),
            )
            if values:
                # An event may come after a later one (a run starts on another thread before the request
                # that admitted it reports how): a final outcome is never replaced by a passing one.
                if values.get("outcome") in (PENDING, RUNNING):
                    outcome = values.pop("outcome")
                    self._db.execute(
                        "UPDATE history SET outcome = ? WHERE key = ? AND outcome IN (?, ?)",
                        (outcome, event["key"], PENDING, RUNNING),
                    )
                if values:
                    columns = ", ".join(f"{name} = ?" for name in values)
                    self._db.execute(
                        f"UPDATE history SET {columns} WHERE key = ?", (*values.values(), event["key"])
                    )
            self._db.execute(
                "UPDATE history SET duration = ended_at - started_at "
                "WHERE key = ? AND ended_at IS NOT NULL AND started_at IS NOT NULL",
                (event["key"],),
            )

    def _apply_output(self, event: Event) -> None:
        """A running run's output so far (run/liveoutput.py): its kept tail grows, up to `output_limit`
        bytes; bytes the event skips (dropped in a flood) replace what was kept. It is kept in memory, not
        in the database (a write a tenth of a second per running run would share the journal's write lock
        with the requests): the reads show it for a run still going, and the run's final event writes what
        its record keeps."""
        offset, size = event.get("offset"), event.get("size")
        if not isinstance(offset, int) or not isinstance(size, int) or not 0 <= offset <= size:
            return
        data = base64.b64decode(event.get("output", ""))[: size - offset]
        key = event["key"]
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM history WHERE key = ? AND outcome IN (?, ?)", (key, PENDING, RUNNING)
            ).fetchone()
            kept, had = self._live.get(key, (b"", 0))
            if row is None or size <= had:
                return
            kept = kept + data[had - offset :] if offset <= had else data
            self._live[key] = (kept[-self.output_limit :] if self.output_limit else b"", size)

    def _overlay(self, record: dict[str, Any]) -> dict[str, Any]:
        """A record as read, with the output a running run has sent so far (under the lock)."""
        key = record.pop("key")
        live = self._live.get(key)
        if live is not None:
            if record["outcome"] in (PENDING, RUNNING):
                kept, size = live
                record.update(output_size=size, output_truncated=len(kept) < size)
                if "output" in record:
                    record["output"] = kept
            else:
                del self._live[key]  # it ended without a final event of its own (its worker died)
        return record

    def _apply_replaying(self, event: Event) -> None:
        # The earlier record of a run replayed now: one of an earlier start, or of a worker that died (its
        # replacement replays it), never the replay's own record.
        with self._lock:
            row = self._db.execute(
                "SELECT seq, detail FROM history WHERE id = ? AND hook = ? AND (boot != ? OR pid IS NOT ?) "
                "AND outcome IN (?, ?, ?) ORDER BY seq DESC LIMIT 1",
                (
                    event.get("id", ""),
                    event.get("hook", ""),
                    self.boot,
                    event.get("pid"),
                    PENDING,
                    RUNNING,
                    CANCELLED,
                ),
            ).fetchone()
            if row is None:
                return
            detail = "run again after a restart (see the replayed run with the same id)"
            self._db.execute(
                "UPDATE history SET outcome = ?, detail = ? WHERE seq = ?", (REPLAYED, detail, row[0])
            )

    def worker_gone(self, pid: int) -> int:
        """The process `pid` that fed these runs (the run owner) ended (killed, or stopped) with runs it had
        not ended: they are cancelled (and, with a journal, replayed by the owner that replaces it). Returns
        how many."""
        detail = f"the process that ran it ({pid}, the run owner) ended before it did"
        with self._lock:
            cursor = self._db.execute(
                "UPDATE history SET outcome = ?, detail = ? WHERE boot = ? AND pid = ? AND outcome IN (?, ?)",
                (CANCELLED, detail, self.boot, pid, PENDING, RUNNING),
            )
        return int(cursor.rowcount)

    def prune(self) -> int:
        """Apply the retention rules to ended runs: the newest `keep`, none older than `max_age`."""
        finals = ", ".join("?" * len(FINAL_OUTCOMES))
        with self._lock:
            self._since_prune = 0
            deleted = self._db.execute(
                f"DELETE FROM history WHERE outcome IN ({finals}) AND seq NOT IN "
                "(SELECT seq FROM history ORDER BY seq DESC LIMIT ?)",
                (*FINAL_OUTCOMES, self.keep),
            ).rowcount
            if self.max_age:
                deleted += self._db.execute(
                    f"DELETE FROM history WHERE outcome IN ({finals}) AND accepted_at < ?",
                    (*FINAL_OUTCOMES, time.time() - self.max_age),
                ).rowcount
            if self._live:  # runs that ended without a final event (their worker died), never read since
                marks = ", ".join("?" * len(self._live))
                going = self._db.execute(
                    f"SELECT key FROM history WHERE key IN ({marks}) AND outcome IN (?, ?)",
                    (*self._live, PENDING, RUNNING),
                ).fetchall()
                self._live = {key: self._live[key] for (key,) in going}
        return int(deleted)

    # --- reading: the API and the pages -------------------------------------------------------------

    def runs(
        self, hook: str = "", outcome: str = "", limit: int = 50, before: int = 0
    ) -> list[dict[str, Any]]:
        """Runs newest first, without their output; `before` a seq, for the next page."""
        clause, args = runs_where(hook, outcome, before, "?")
        columns = ("key", *LISTED_FIELDS)
        query = f"SELECT {', '.join(columns)} FROM history {clause} ORDER BY seq DESC LIMIT ?"
        with self._lock:
            rows = self._db.execute(query, (*args, max(limit, 0))).fetchall()
            return [self._overlay(as_record(columns, row)) for row in rows]

    def _one(self, column: str, value: str) -> dict[str, Any] | None:
        columns = ("key", *RUN_FIELDS)
        query = f"SELECT {', '.join(columns)} FROM history WHERE {column} = ? ORDER BY seq DESC LIMIT 1"
        with self._lock:
            row = self._db.execute(query, (value,)).fetchone()
            if row is None:
                return None
            record = as_record(columns, row)
            key = record["key"]
            record = self._overlay(record)
        record["key"] = key
        return record

    def outcomes(self, keys: list[str]) -> dict[str, str]:
        """The outcome of each run of `keys` still in the history."""
        if not keys:
            return {}
        marks = ", ".join("?" * len(keys))
        with self._lock:
            rows = self._db.execute(f"SELECT key, outcome FROM history WHERE key IN ({marks})", keys)
            return {key: outcome for key, outcome in rows.fetchall()}

    def hooks(self) -> list[dict[str, Any]]:
        """Each loaded hook: its file, when that was loaded, and its last run (or None)."""
        with self._lock:
            files = sorted(self._hooks.values(), key=lambda entry: str(entry.get("file")))
        result = []
        for entry in files:
            for hook_id in entry.get("hooks", []):
                last = self.runs(hook=str(hook_id), limit=1)
                result.append(
                    {
                        "id": hook_id,
                        "file": entry["file"],
                        "loaded_at": entry.get("loaded_at"),
                        "last_run": last[0] if last else None,
                    }
                )
        return result

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM history").fetchone()[0])


def runs_where(hook: str, outcome: str, before: int, mark: str) -> tuple[str, list[Any]]:
    """The WHERE clause of a runs query (the driver's parameter `mark`), and its parameters."""
    where: list[str] = []
    args: list[Any] = []
    for column, value in (("hook", hook), ("outcome", outcome)):
        if value:
            where.append(f"{column} = {mark}")
            args.append(value)
    if before > 0:
        where.append(f"seq < {mark}")
        args.append(before)
    return (f"WHERE {' AND '.join(where)}" if where else ""), args


def as_record(columns: tuple[str, ...], row: tuple[Any, ...]) -> dict[str, Any]:
    record = dict(zip(columns, row, strict=True))
    for name in JSON_FIELDS:
        if name in record:
            record[name] = json.loads(record[name])
    if "output_truncated" in record:
        record["output_truncated"] = bool(record["output_truncated"])
    return record
