"""Folding the replicas' history events into records (-state-url): a batch of hookrunner_events applied to
the hookrunner_history records it names, by the embedded store's rules (state/historystore.py), as
state/pghistory.py's PostgresHistory.catch_up takes them out of the events table."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from hookrunner.state.historystore import EVENT_SCALARS, JSON_FIELDS
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

#: A record's columns as the fold writes them (all but `seq`).
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
GOING = (PENDING, RUNNING)


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


def _record_key(replica: str, key: str) -> str:
    """The record an event of `replica` tells: a key with `@` names its record itself, whichever replica
    tells it (run/history.py's record_key: the admitting replica's name first); any other is the writer's."""
    return key[1:] if key.startswith("@") else f"{replica} {key}"


def write_hooks(cur: psycopg.Cursor[Any], replica: str, entries: Iterable[dict[str, Any]]) -> None:
    for entry in entries:
        cur.execute(
            "INSERT INTO hookrunner_history_hooks (file, replica, entry) VALUES (%s, %s, %s)"
            " ON CONFLICT (file) DO UPDATE SET replica = EXCLUDED.replica, entry = EXCLUDED.entry",
            (entry["file"], replica, Jsonb(entry)),
        )


class Fold:
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
                write_hooks(self.cur, replica, entries)
        self._flush()
        self._end_displaced()
        return created

    def _run(self, key: str, replica: str, event: Event) -> int:
        """A run event of `replica` (which wrote it) for record `key`: the record of a run admitted by one
        replica and run by another is told by both, so their events may come in either order."""
        row = self.rows.get(key)
        created = row is None
        if row is None and "id" not in event:
            # Only a request's ticket, or a replica adopting its run, opens a record (both name the run):
            # a later event of a record the retention has deleted since it ended (one replica's end folded
            # before another's last word) opens none, which would show as a run with no id.
            return 0
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
        if outcome in GOING:
            # An event may come after a later one: an outcome never goes back (final, running, pending).
            if row["outcome"] in GOING and GOING.index(outcome) >= GOING.index(row["outcome"]):
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
        if row is None or row["outcome"] not in GOING or data is None:
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
