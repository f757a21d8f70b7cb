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

import base64
import binascii
import json
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.json import Jsonb

from hookrunner.state.backend import StateUnavailable
from hookrunner.state.historystore import (
    EVENT_SCALARS,
    JSON_FIELDS,
    LISTED_FIELDS,
    RUN_FIELDS,
    OneRunReads,
    as_record,
    runs_where,
)
from hookrunner.state.model import (
    CANCELLED,
    COALESCED,
    FINAL_OUTCOMES,
    PENDING,
    REPLAYED,
    RUNNING,
    SERVED_BY_RUN,
    Event,
    record_key,
)
from hookrunner.state.pgconn import Connections
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

#: A record's columns as this module writes them (all but `seq`).
_RECORD = ("key", "replica", "admitted_by", *EVENT_SCALARS, "duration", *JSON_FIELDS, "output")
_COLUMNS = (*_RECORD, "live_output", "live_size")
_DEFAULTS: dict[str, Any] = {
    **dict.fromkeys(_COLUMNS),
    "id": "",
    "hook": "",
    "kind": "immediate",
    "outcome": PENDING,
    "detail": "",
    **dict.fromkeys(JSON_FIELDS, "[]"),
    "cwd": "",
    "output": b"",
    "output_size": 0,
    "output_truncated": False,
}
#: What an event's value must be to be kept (anything else is ignored, as a malformed event is).
_TEXT = (str,)
_NUMBER = (int, float, type(None))
_TYPES: dict[str, tuple[type, ...]] = {
    "id": _TEXT,
    "hook": _TEXT,
    "kind": _TEXT,
    "outcome": _TEXT,
    "detail": _TEXT,
    "cwd": _TEXT,
    "signal": (str, type(None)),
    "accepted_at": _NUMBER,
    "started_at": _NUMBER,
    "ended_at": _NUMBER,
    "exit_code": (int, type(None)),
    "pid": (int, type(None)),
    "output_size": (int,),
    "output_truncated": (bool, int),
}
_BIGINT = 1 << 63
_GOING = (PENDING, RUNNING)

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


def _valid(name: str, value: Any) -> bool:
    kinds = _TYPES.get(name)
    if kinds is None or not isinstance(value, kinds):
        return False
    if isinstance(value, float) and value != value:  # NaN
        return False
    return not isinstance(value, int) or isinstance(value, bool) or -_BIGINT <= value < _BIGINT


def _decoded(text: Any) -> bytes | None:
    try:
        return base64.b64decode(text) if isinstance(text, str) else None
    except (binascii.Error, ValueError):
        return None


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

    def catch_up(self, fresh: float = 0.0) -> int:
        """Fold the events every replica has recorded since, unless a fold ended less than `fresh` seconds
        ago; returns how many were folded. Raises StateUnavailable."""
        with self._fold_lock:
            if time.monotonic() - self._folded_at < fresh:
                return 0
            folded = 0
            for _ in range(_MAX_BATCHES):
                with self._hooks_lock:
                    hooks = dict(self._hooks)
                with self._transaction() as cur:
                    cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_CLASS, _FOLD_LOCK))
                    _write_hooks(cur, self.replica, hooks.values())
                    cur.execute(
                        "DELETE FROM hookrunner_events WHERE id IN"
                        " (SELECT id FROM hookrunner_events ORDER BY id LIMIT %s)"
                        " RETURNING id, replica, event",
                        (BATCH,),
                    )
                    events = sorted(cur.fetchall())
                    self._created += _Fold(cur, self.output_limit).apply(events)
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
                if len(events) < BATCH:
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
    if live_size is not None and record["outcome"] in _GOING:
        kept = len(live) if isinstance(live, bytes | bytearray | memoryview) else int(live or 0)
        record.update(output_size=live_size, output_truncated=kept < live_size)
        if "output" in record:
            record["output"] = bytes(live)
    if "output" in record:
        record["output"] = bytes(record["output"])
    record["replica"] = replica
    record["admitted_by"] = admitted_by
    return record


def _record_key(replica: str, key: str) -> str:
    """The record an event of `replica` tells: a key with `@` names its record itself, whichever replica
    tells it (run/history.py's record_key: the admitting replica's name first); any other is the writer's."""
    return key[1:] if key.startswith("@") else f"{replica} {key}"


def _write_hooks(cur: psycopg.Cursor[Any], replica: str, entries: Iterable[dict[str, Any]]) -> None:
    for entry in entries:
        cur.execute(
            "INSERT INTO hookrunner_history_hooks (file, replica, entry) VALUES (%s, %s, %s)"
            " ON CONFLICT (file) DO UPDATE SET replica = EXCLUDED.replica, entry = EXCLUDED.entry",
            (entry["file"], replica, Jsonb(entry)),
        )


class _Fold:
    """One batch of events applied to the records they name, by the embedded store's rules: loaded once,
    changed in memory in the events' order, written back once (new records in the order they began)."""

    def __init__(self, cur: psycopg.Cursor[Any], output_limit: int) -> None:
        self.cur = cur
        self.output_limit = output_limit
        self.rows: dict[str, dict[str, Any]] = {}
        self.dirty: dict[str, dict[str, Any]] = {}
        #: Records of coalesced runs that ran and ended in this batch: the requests they served end too.
        self.served: dict[str, dict[str, Any]] = {}

    def apply(self, events: list[tuple[int, str, Any]]) -> int:
        """Returns how many records the batch began."""
        keys = [
            _record_key(replica, e["key"])
            for _, replica, e in events
            if isinstance(e, dict) and isinstance(e.get("key"), str)
        ]
        if keys:
            self.cur.execute(
                f"SELECT seq, {', '.join(_COLUMNS)} FROM hookrunner_history WHERE key = ANY(%s)", (keys,)
            )
            for seq, *values in self.cur.fetchall():
                row = dict(zip(_COLUMNS, values, strict=True))
                row["seq"] = seq
                self.rows[row["key"]] = row
        created = 0
        for _, replica, event in events:
            if not isinstance(event, dict):
                continue
            kind, key = event.get("event"), event.get("key")
            if kind == "run" and isinstance(key, str):
                created += self._run(_record_key(replica, key), replica, event)
            elif kind == "output" and isinstance(key, str):
                self._output(_record_key(replica, key), event)
            elif kind == "replaying":
                self._replaying(replica, event)
            elif kind == "hooks" and isinstance(event.get("files"), list):
                entries = [
                    e for e in event["files"] if isinstance(e, dict) and isinstance(e.get("file"), str)
                ]
                _write_hooks(self.cur, replica, entries)
        self._flush()
        self._end_displaced()
        return created

    def _run(self, key: str, replica: str, event: Event) -> int:
        """A run event of `replica` (which wrote it) for record `key`: the record of a run admitted by one
        replica and run by another is told by both, so their events may come in either order."""
        row = self.rows.get(key)
        created = row is None
        if row is None:
            admitted_by = key.partition(" ")[0]
            row = self.rows[key] = {
                **_DEFAULTS,
                "key": key,
                "replica": admitted_by,
                "admitted_by": admitted_by,
                "seq": None,
            }
        if (
            event.get("outcome") in FINAL_OUTCOMES
            and row["started_at"] is not None
            and replica != row["replica"]
            and "started_at" not in event
        ):
            # Its admitting replica's end of a run another replica ran (served by a run that ended
            # elsewhere, cancelled by its own stop): the runner's events tell it.
            return int(created)
        values: dict[str, Any] = {n: event[n] for n in EVENT_SCALARS if n in event and _valid(n, event[n])}
        for name in JSON_FIELDS:
            if name in event:
                values[name] = json.dumps(event[name], ensure_ascii=True)
        if "output" in event and (output := _decoded(event["output"])) is not None:
            values["output"] = output
        if "output_truncated" in values:
            values["output_truncated"] = bool(values["output_truncated"])
        outcome = values.pop("outcome", None)
        if event.get("waited") == "queued" and row["kind"] == "immediate":  # the runner's word: it waited
            values["kind"] = "queued"  # (its admitting replica may have died before telling how)
        if outcome == RUNNING:
            row["replica"] = replica  # the replica that ran it
        if outcome in _GOING:
            # An event may come after a later one: an outcome never goes back (final, running, pending).
            if row["outcome"] in _GOING and _GOING.index(outcome) >= _GOING.index(row["outcome"]):
                row["outcome"] = outcome
        elif outcome is not None:
            row["outcome"] = outcome
            if outcome in FINAL_OUTCOMES:
                row["live_output"] = row["live_size"] = None
                self.served[key] = row
        row.update(values)
        if row["ended_at"] is not None and row["started_at"] is not None:
            row["duration"] = row["ended_at"] - row["started_at"]
        self.dirty[key] = row
        return int(created)

    def _output(self, key: str, event: Event) -> None:
        """A running run's output so far: its kept tail grows up to the limit (state/historystore.py's
        _apply_output, the same rule)."""
        offset, size = event.get("offset"), event.get("size")
        row = self.rows.get(key)
        if not isinstance(offset, int) or not isinstance(size, int) or not 0 <= offset <= size < _BIGINT:
            return
        data = _decoded(event.get("output", ""))
        if row is None or row["outcome"] not in _GOING or data is None:
            return
        data = data[: size - offset]
        kept, had = bytes(row["live_output"] or b""), int(row["live_size"] or 0)
        if size <= had:
            return
        kept = kept + data[had - offset :] if offset <= had else data
        row["live_output"] = kept[-self.output_limit :] if self.output_limit else b""
        row["live_size"] = size
        self.dirty[key] = row

    def _replaying(self, replica: str, event: Event) -> None:
        """The earlier record of a run replayed now (by this replica or another): not this record itself."""
        run_id, hook, pid = event.get("id", ""), event.get("hook", ""), event.get("pid")
        if not isinstance(run_id, str) or not isinstance(hook, str) or not _valid("pid", pid):
            return
        self._flush()
        detail = "run again after a restart (see the replayed run with the same id)"
        self.cur.execute(
            "UPDATE hookrunner_history SET outcome = %s, detail = %s WHERE seq ="
            " (SELECT seq FROM hookrunner_history WHERE id = %s AND hook = %s"
            " AND (replica <> %s OR pid IS DISTINCT FROM %s) AND outcome = ANY(%s)"
            " ORDER BY seq DESC LIMIT 1) RETURNING key",
            (REPLAYED, detail, run_id, hook, replica, pid, [PENDING, RUNNING, CANCELLED]),
        )
        for (key,) in self.cur.fetchall():
            if key in self.rows:
                self.rows[key].update(outcome=REPLAYED, detail=detail)

    def _end_displaced(self) -> None:
        """The requests a coalesced run that ran stood for (the run state's rows folded into it) end with
        its outcome, as their own replica ends them (run/history.py's served_by_run): here too, since that
        replica may be gone. Only records still pending change."""
        ran = [r for r in self.served.values() if r["kind"] == COALESCED and r["started_at"] is not None]
        self.served = {}
        for row in ran:
            self.cur.execute(
                "SELECT d.admitted_by, d.request_id, d.accepted_at FROM hookrunner_runs AS t"
                " JOIN hookrunner_runs AS d ON d.coalesced_into = t.id WHERE t.hook_id = %s"
                " AND t.request_id = %s AND t.admitted_by = %s AND t.accepted_at = %s",
                (row["hook"], row["id"], row["admitted_by"], row["accepted_at"]),
            )
            keys = [record_key(*found)[1:] for found in self.cur.fetchall()]
            if not keys:
                continue
            ended = {name: row[name] for name in ("outcome", "exit_code", "signal", "ended_at")}
            ended["detail"] = (f"{SERVED_BY_RUN}; " + row["detail"]).rstrip("; ")
            self.cur.execute(
                "UPDATE hookrunner_history SET outcome = %(outcome)s, exit_code = %(exit_code)s,"
                " signal = %(signal)s, detail = %(detail)s, ended_at = %(ended_at)s"
                " WHERE key = ANY(%(keys)s) AND outcome = 'pending' RETURNING key",
                {**ended, "keys": keys},
            )
            for (key,) in self.cur.fetchall():
                if key in self.rows:
                    self.rows[key].update(ended)

    def _flush(self) -> None:
        """Write the changed records: new ones first, in the order they began (their seq follows it)."""
        new = [row for row in self.dirty.values() if row["seq"] is None]
        changed = [row for row in self.dirty.values() if row["seq"] is not None]
        self.dirty = {}
        names = ", ".join(_COLUMNS)
        marks = ", ".join(["%s"] * len(_COLUMNS))
        for row in new:
            self.cur.execute(
                f"INSERT INTO hookrunner_history ({names}) VALUES ({marks}) RETURNING seq",
                [row[name] for name in _COLUMNS],
            )
            found = self.cur.fetchone()
            row["seq"] = found[0] if found else 0
        if changed:
            sets = ", ".join(f"{name} = %s" for name in _COLUMNS[1:])
            self.cur.executemany(
                f"UPDATE hookrunner_history SET {sets} WHERE key = %s",
                [[*(row[name] for name in _COLUMNS[1:]), row["key"]] for row in changed],
            )
