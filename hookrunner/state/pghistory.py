"""The run history of every replica that shares one PostgreSQL database (issue 33, -state-url): the events
each replica's PostgresState.record writes to hookrunner_events, folded into one record per run in
hookrunner_history, and read as the embedded store reads its own (state/historystore.py): the same fields in
the same order, newest first, paged by `seq`, plus `replica`, the name of the replica whose run it is.

A fold takes the events out of hookrunner_events (DELETE ... RETURNING, so an event is folded once, by
whichever admin listener comes first, and one whose transaction has not committed yet is folded next time)
under an advisory lock, and applies them by the embedded store's rules. Needs the `postgres` extra: the
admin listener imports this module only with -state-url. docs/history.md, "Several replicas, one history".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from hookrunner.state.backend import StateUnavailable
from hookrunner.state.historystore import (
    LISTED_FIELDS,
    RUN_FIELDS,
    OneRunReads,
    as_record,
    runs_where,
)
from hookrunner.state.model import FINAL_OUTCOMES, Event
from hookrunner.state.pgconn import Connections
from hookrunner.state.pgfold import GOING, Fold, write_hooks
from hookrunner.state.postgres import create_schema

#: Advisory lock keys (class, object), in the class the run state uses for its schema: creating the
#: history's tables, and folding events into them (one folder at a time over every replica).
_LOCK_CLASS = 0x686B73
_SCHEMA_LOCK = 3
_FOLD_LOCK = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS hookrunner_history (
    seq bigserial PRIMARY KEY,
    key text NOT NULL UNIQUE,  -- the replica's name, a space, the key its events carry
    replica text NOT NULL,
    id text NOT NULL DEFAULT '',
    hook text NOT NULL DEFAULT '',
    kind text NOT NULL DEFAULT 'immediate',
    outcome text NOT NULL DEFAULT 'pending',
    accepted_at double precision,
    started_at double precision,
    ended_at double precision,
    duration double precision,
    exit_code bigint,
    signal text,
    detail text NOT NULL DEFAULT '',
    argv text NOT NULL DEFAULT '[]',
    env text NOT NULL DEFAULT '[]',
    files text NOT NULL DEFAULT '[]',
    cwd text NOT NULL DEFAULT '',
    pid bigint,
    output bytea NOT NULL DEFAULT '',
    output_size bigint NOT NULL DEFAULT 0,
    output_truncated boolean NOT NULL DEFAULT false,
    live_output bytea,  -- a running run's output so far: its last -history-output bytes
    live_size bigint    -- and its whole size so far
);
ALTER TABLE hookrunner_history ADD COLUMN IF NOT EXISTS admitted_by text NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS hookrunner_history_hook ON hookrunner_history (hook, seq);
CREATE INDEX IF NOT EXISTS hookrunner_history_id ON hookrunner_history (id, seq);
CREATE INDEX IF NOT EXISTS hookrunner_history_accepted ON hookrunner_history (accepted_at);
-- the run state's run of a coalesced request, found when the requests it displaced end with it
CREATE INDEX IF NOT EXISTS hookrunner_runs_request ON hookrunner_runs (request_id);
CREATE TABLE IF NOT EXISTS hookrunner_history_hooks (
    file text PRIMARY KEY,
    replica text NOT NULL,
    entry jsonb NOT NULL
);
"""

#: Seconds a fold stays fresh for the reads (the follow poller folds every half second anyway).
FRESH = 0.2
#: Events folded in one transaction; a fold takes at most _MAX_BATCHES of them before the reads go on.
BATCH = 1000
_MAX_BATCHES = 10
#: The retention rules are applied at the first fold, then at most every PRUNE_INTERVAL seconds, or sooner
#: once a tenth of -state-keep (at most a hundred) new records have come since the last time.
PRUNE_INTERVAL = 60.0
_PRUNE_EVERY = 100
#: After the database was found away, reads fail at once for this long rather than each waiting for it.
DOWN_FOR = 1.0


class PostgresHistory(OneRunReads):
    """The shared history, read (and folded) from any thread: each call is one transaction on a connection
    of its own (up to `connections`); every statement has `timeout` seconds, and a connection
    `connect_timeout` (pgconn's default, 5 s, unless the URL says otherwise), so a slow database holds
    a read that long at most. A database that is away raises StateUnavailable (the admin API's 503)."""

    def __init__(
        self,
        conninfo: str,
        replica: str,
        keep: int = 1000,
        max_age: float = 0.0,
        output_limit: int = 64 << 10,
        timeout: float = 5.0,
        connections: int = 4,
    ) -> None:
        self.replica = replica
        self.keep = max(keep, 0)
        self.max_age = max(max_age, 0.0)
        self.output_limit = max(output_limit, 0)
        self._connections = Connections(_with_timeout(conninfo, timeout), connections)
        self._ready = False
        self._fold_lock = threading.Lock()
        self._folded_at = float("-inf")  # time.monotonic() of the last fold
        self._pruned_at = float("-inf")
        self._created = 0  # records made since the last prune
        self._prune_every = max(1, min(_PRUNE_EVERY, self.keep // 10))
        self.batch = BATCH  # events folded in one transaction
        self._down_until = float("-inf")
        self._down_why = ""
        #: The hooks this replica's workers last reported, by file, until written to the database.
        self._hooks: dict[str, dict[str, Any]] = {}
        self._hooks_lock = threading.Lock()

    def close(self) -> None:
        self._connections.close()

    def _check_down(self) -> None:
        if time.monotonic() < self._down_until:
            raise StateUnavailable(self._down_why)

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Cursor[Any]]:
        self._check_down()
        try:
            with self._connections.lent() as conn:
                self._check_down()  # found away while this one waited for a connection: fail at once too
                if not self._ready:
                    create_schema(conn)
                    with conn.transaction(), conn.cursor() as cur:
                        cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_CLASS, _SCHEMA_LOCK))
                        cur.execute(_SCHEMA)
                    self._ready = True
                with conn.transaction(), conn.cursor() as cur:
                    yield cur
        except StateUnavailable as exc:
            self._down_until, self._down_why = time.monotonic() + DOWN_FOR, str(exc)
            raise
        self._connections.reachable()

    # --- folding the replicas' events --------------------------------------------------------------

    def note_hooks(self, event: Event) -> None:
        """A `hooks` event from this replica's workers: written to the database at the next fold."""
        files = event.get("files")
        if event.get("event") != "hooks" or not isinstance(files, list):
            return
        with self._hooks_lock:
            for entry in files:
                if isinstance(entry, dict) and isinstance(entry.get("file"), str):
                    self._hooks[entry["file"]] = entry

    def catch_up(self, fresh: float = 0.0, wait: bool = True) -> int:
        """Fold the events every replica has recorded since, unless a fold ended less than `fresh` seconds
        ago; returns how many were folded. `wait` False: none, when another folds now (its lock is held).
        Raises StateUnavailable."""
        lock = "pg_advisory_xact_lock" if wait else "pg_try_advisory_xact_lock"
        with self._fold_lock:
            if time.monotonic() - self._folded_at < fresh:
                return 0
            folded = 0
            for _ in range(_MAX_BATCHES):
                with self._hooks_lock:
                    hooks = dict(self._hooks)
                with self._transaction() as cur:
                    cur.execute(f"SELECT {lock}(%s, %s)::text", (_LOCK_CLASS, _FOLD_LOCK))
                    if not _held(cur):
                        break  # another folds now
                    write_hooks(cur, self.replica, hooks.values())
                    cur.execute(
                        "DELETE FROM hookrunner_events WHERE id IN"
                        " (SELECT id FROM hookrunner_events ORDER BY id LIMIT %s)"
                        " RETURNING id, replica, event",
                        (self.batch,),
                    )
                    events = sorted(cur.fetchall())
                    self._created += Fold(cur, self.output_limit).apply(events)
                    if (
                        self._created >= self._prune_every
                        or time.monotonic() - self._pruned_at > PRUNE_INTERVAL
                    ):
                        self._prune(cur)
                with self._hooks_lock:
                    for file, entry in hooks.items():
                        if self._hooks.get(file) is entry:
                            del self._hooks[file]
                folded += len(events)
                if len(events) < self.batch:
                    break
            self._folded_at = time.monotonic()
            return folded

    def _prune(self, cur: psycopg.Cursor[Any]) -> int:
        """The retention rules, on ended runs: the newest `keep`, none accepted more than `max_age` ago."""
        cur.execute(
            "DELETE FROM hookrunner_history WHERE outcome = ANY(%s) AND seq <="
            " (SELECT seq FROM hookrunner_history ORDER BY seq DESC OFFSET %s LIMIT 1)",
            (list(FINAL_OUTCOMES), self.keep),
        )
        deleted = cur.rowcount
        if self.max_age:
            cur.execute(
                "DELETE FROM hookrunner_history WHERE outcome = ANY(%s) AND accepted_at < %s",
                (list(FINAL_OUTCOMES), time.time() - self.max_age),
            )
            deleted += cur.rowcount
        self._created = 0
        self._pruned_at = time.monotonic()
        return int(deleted)

    def prune(self) -> int:
        """Apply the retention rules now; returns how many records were deleted."""
        with self._fold_lock, self._transaction() as cur:
            return self._prune(cur)

    # --- reading: the API and the pages -------------------------------------------------------------

    def _select(
        self, columns: tuple[str, ...], where: str, args: Iterable[Any], limit: int
    ) -> list[dict[str, Any]]:
        """Records (newest first), each with the output its run has sent so far while it runs, and
        `replica` last; the caller folds first."""
        live = "live_output" if "output" in columns else "length(live_output)"
        query = (
            f"SELECT {', '.join(columns)}, replica, admitted_by, {live}, live_size FROM hookrunner_history"
            f" {where}"
            " ORDER BY seq DESC LIMIT %s"
        )
        with self._transaction() as cur:
            cur.execute(query, (*args, max(limit, 0)))
            rows = cur.fetchall()
        return [_overlay(columns, row) for row in rows]

    def runs(
        self, hook: str = "", outcome: str = "", limit: int = 50, before: int = 0
    ) -> list[dict[str, Any]]:
        """Runs newest first, without their output; `before` a seq, for the next page."""
        self.catch_up(FRESH)
        clause, args = runs_where(hook, outcome, before, "%s")
        records = self._select(("key", *LISTED_FIELDS), clause, args, limit)
        for record in records:
            del record["key"]
        return records

    def _one(self, column: str, value: str) -> dict[str, Any] | None:
        """(OneRunReads') a record's key is its replica's name, a space, and the key its events carry."""
        self.catch_up(FRESH)
        found = self._select(("key", *RUN_FIELDS), f"WHERE {column} = %s", (value,), 1)
        if not found:
            return None
        record = found[0]
        record["key"] = record.pop("key")  # last, as the embedded store gives it
        return record

    def outcomes(self, keys: list[str]) -> dict[str, str]:
        """The outcome of each run of `keys` still in the history."""
        if not keys:
            return {}
        with self._transaction() as cur:
            cur.execute("SELECT key, outcome FROM hookrunner_history WHERE key = ANY(%s)", (keys,))
            return {str(key): str(outcome) for key, outcome in cur.fetchall()}

    def hooks(self) -> list[dict[str, Any]]:
        """Each hook a replica last reported loading, by file (the latest report of a file wins): its
        file, when that was loaded, and its last run on any replica (or None)."""
        self.catch_up(FRESH)
        with self._transaction() as cur:
            cur.execute("SELECT entry FROM hookrunner_history_hooks")
            files = sorted((entry for (entry,) in cur.fetchall()), key=lambda entry: str(entry.get("file")))
        ids = [str(hook_id) for entry in files for hook_id in entry.get("hooks", [])]
        columns = ("key", *LISTED_FIELDS)
        last: dict[str, dict[str, Any]] = {}
        if ids:
            with self._transaction() as cur:
                cur.execute(
                    f"SELECT DISTINCT ON (hook) {', '.join(columns)}, replica, admitted_by,"
                    " length(live_output), live_size FROM hookrunner_history WHERE hook = ANY(%s)"
                    " ORDER BY hook, seq DESC",
                    (ids,),
                )
                for row in cur.fetchall():
                    record = _overlay(columns, row)
                    del record["key"]
                    last[record["hook"]] = record
        return [
            {
                "id": hook_id,
                "file": entry["file"],
                "loaded_at": entry.get("loaded_at"),
                "last_run": last.get(str(hook_id)),
            }
            for entry in files
            for hook_id in entry.get("hooks", [])
        ]


def _held(cur: psycopg.Cursor[Any]) -> bool:
    """pg_advisory_xact_lock's answer (void: it waited for the lock) or pg_try_advisory_xact_lock's."""
    row = cur.fetchone()
    return row is not None and row[0] != "false"


def _with_timeout(conninfo: str, timeout: float) -> str:
    """`conninfo` with a statement timeout added to its options (a bad one is left to Connections to tell)."""
    try:
        options = str(conninfo_to_dict(conninfo).get("options") or "")
        return make_conninfo(
            conninfo, options=f"{options} -c statement_timeout={int(timeout * 1000)}".strip()
        )
    except psycopg.Error:
        return conninfo


def _overlay(columns: tuple[str, ...], row: tuple[Any, ...]) -> dict[str, Any]:
    """A row as the embedded store gives its record: a running run's output so far over what its events
    set, the JSON fields parsed, then `replica`."""
    *values, replica, admitted_by, live, live_size = row
    record = as_record(columns, tuple(values))
    if live_size is not None and record["outcome"] in GOING:
        kept = len(live) if isinstance(live, bytes | bytearray | memoryview) else int(live or 0)
        record.update(output_size=live_size, output_truncated=kept < live_size)
        if "output" in record:
            record["output"] = bytes(live)
    if "output" in record:
        record["output"] = bytes(record["output"])
    record["replica"] = replica
    record["admitted_by"] = admitted_by
    return record
