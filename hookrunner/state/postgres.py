"""The PostgreSQL run state (issue 33): one per fleet. Every replica that points at the same database admits,
claims and finishes runs in it, so per-hook `max-concurrency`, the queue, coalescing and the global cap hold
over all of them; a claim is a lease its replica renews, and each attempt's writes carry its number. Needs the
`postgres` extra (psycopg 3.1.14 or later, which waits cooperatively under gevent's monkey patching).
docs/run-state.md, "The PostgreSQL backend: what landed", gives the schema and the transactions."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from hookrunner.hooks.model import Limits
from hookrunner.state import pgoutput
from hookrunner.state.backend import StateUnavailable
from hookrunner.state.model import Admission, Claim, Counts, Event, Outcome, ProcessId, RunSpec
from hookrunner.state.pgconn import Connections
from hookrunner.state.pgwake import Listener
from hookrunner.state.slots import COALESCED, QUEUED, STARTED, Busy

#: The schema this hookrunner writes; a database with a higher version is refused, left untouched.
SCHEMA_VERSION = 1
#: How long a claim holds unless renewed, and how much longer another replica waits before taking it over
#: (the holder kills its command when it cannot renew before the lease ends).
LEASE = 30.0
GRACE = 10.0
#: How often a Waiter wakes by itself: leases that run out send no NOTIFY, and LISTEN may be down.
POLL = 5.0
CHANNEL = "hookrunner_runs"
#: Advisory lock keys, (class, object): a hook's places are (_HOOK_LOCK, hashtext(hook id)); the global
#: cap's (_CAP_LOCK, 0); the schema's creation (_CAP_LOCK, 1). Taken in one order: the cap, then hooks by key.
_HOOK_LOCK = 0x686B72
_CAP_LOCK = 0x686B73
#: The database's clock, so that replicas' leases do not depend on theirs.
_NOW = "extract(epoch FROM clock_timestamp())"


def _process_space() -> str:
    """Which pids this process sees: the kernel's boot and its pid namespace. A pid and a start time name
    one process only there: a take-over on another node, or in another container, must not end a process
    of its own that happens to bear a recorded pid and start time."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot = handle.read().strip()
        return f"{boot}/{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return ""


#: This process's pid space (_process_space), recorded with every process a run starts.
PROCESS_SPACE = _process_space()

_SCHEMA = """
CREATE TABLE IF NOT EXISTS hookrunner_schema (version integer NOT NULL);
CREATE TABLE IF NOT EXISTS hookrunner_runs (
    id bigserial PRIMARY KEY,
    hook_id text NOT NULL,
    request_id text NOT NULL,
    spec text NOT NULL,
    -- waiting in its hook's queue; holding its hook's place, waiting for the cap's or a claimer; claimed;
    -- folded into a queued run (coalesced_into); over
    state text NOT NULL CHECK (state IN ('queued', 'line', 'running', 'coalesced', 'done')),
    coalesce_key text,
    coalesced_into bigint REFERENCES hookrunner_runs (id),
    max_concurrency integer NOT NULL,
    line_seq bigint,
    attempt integer NOT NULL DEFAULT 0,
    holder text,
    instance text,
    lease_until double precision,
    processes jsonb NOT NULL DEFAULT '[]',
    accepted_at double precision NOT NULL,
    admitted_by text NOT NULL,
    outcome text,
    finished_at double precision
);
CREATE INDEX IF NOT EXISTS hookrunner_runs_open ON hookrunner_runs (hook_id, state, id)
    WHERE state IN ('queued', 'line', 'running');
CREATE INDEX IF NOT EXISTS hookrunner_runs_coalesced ON hookrunner_runs (coalesced_into)
    WHERE coalesced_into IS NOT NULL;
CREATE SEQUENCE IF NOT EXISTS hookrunner_line_seq;
CREATE TABLE IF NOT EXISTS hookrunner_events (
    id bigserial PRIMARY KEY,
    replica text NOT NULL,
    at double precision NOT NULL,
    event jsonb NOT NULL
);
"""


class PostgresState:
    """The run state of every replica that shares one PostgreSQL database (state/backend.py's RunState).
    Thread-safe: each call one transaction on a connection of its own (up to `connections` at once, then
    calls wait for one), ordered against every other replica's by advisory locks. A call that meets a
    database that is away raises StateUnavailable and drops its connection; the next call connects again,
    so the same instance recovers by itself."""

    def __init__(
        self,
        conninfo: str,
        replica: str,
        max_running: int = 0,
        lease: float = LEASE,
        grace: float = GRACE,
        poll: float = POLL,
        connections: int = 4,
    ) -> None:
        self.replica = replica
        self._connections = Connections(conninfo, connections)
        self._cap = max(max_running, 0)
        self.lease = lease
        self.grace = grace
        self.poll = poll
        self._lock = threading.Lock()
        self._ready = False  # the schema checked
        self._fresh = True  # no claims() yet: runs still held under this replica's name are its past life's
        self._instance = uuid.uuid4().hex  # which life of the replica holds a claim
        self._waiter: Listener | None = None
        self._local = threading.local()  # `notified`: the transaction under way sent a NOTIFY

    # --- transactions ---

    def _create_schema(self, conn: psycopg.Connection[Any]) -> None:
        create_schema(conn)

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Cursor[Any]]:
        """One transaction on a lent connection; an exception rolls it back (a Busy keeps nothing)."""
        self._local.notified = False
        with self._connections.lent() as conn:
            if not self._ready:
                self._create_schema(conn)
                self._ready = True
            with conn.transaction(), conn.cursor() as cur:
                yield cur
        if self._local.notified and self._waiter is not None:
            self._waiter.poke()  # this process's own waiter, at once, once committed

    def transaction(self) -> AbstractContextManager[psycopg.Cursor[Any]]:
        """One transaction on this replica's connections, for the tables' upkeep (state/pgupkeep.py)."""
        return self._transaction()

    def _notify(self, cur: psycopg.Cursor[Any]) -> None:
        """Wake every replica's waiter at commit (NOTIFY; this instance's own ignores it and is poked)."""
        cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, self._instance))
        self._local.notified = True

    def _lock_places(self, cur: psycopg.Cursor[Any], hooks: Sequence[str]) -> None:
        """The global cap's lock (when there is a cap) and each hook's, in the one order every transaction
        uses, so that two never wait on each other."""
        if self._cap:
            cur.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_CAP_LOCK,))
        if hooks:  # one round trip: the keys sorted in a subquery, locked row by row in that order
            cur.execute(
                "SELECT pg_advisory_xact_lock(%s, key) FROM"
                " (SELECT DISTINCT hashtext(h) AS key FROM unnest(%s::text[]) AS h ORDER BY 1) AS keys",
                (_HOOK_LOCK, list(hooks)),
            )

    # --- admitting ---

    def admit(
        self,
        run: RunSpec,
        limits: Limits,
        coalesce_key: str | None,
        accepted_at: float,
        keep_output: bool = False,
    ) -> Admission:
        """Insert the run and, under the hook's advisory lock (and the cap's), count the hook's places and the
        cap's over every replica: start it (running, attempt 1, this replica's lease), put it in the cap's
        line, fold it into the hook's newest queued run of the same key, or queue it; Busy rolls back.
        `keep_output` marks the run that stands for the request (its own, or the one it is folded into),
        but for a run started here at once: its one waiting request is this replica's, answered from the
        run itself (a take-over of it comes only once this replica has lost it, and answered it killed)."""
        hook = run.hook_id
        with self._transaction() as cur:
            self._lock_places(cur, [hook])
            cur.execute(
                "SELECT count(*) FILTER (WHERE hook_id = %(hook)s AND state IN ('running', 'line')),"
                " count(*) FILTER (WHERE hook_id = %(hook)s AND state = 'queued'),"
                " count(*) FILTER (WHERE state = 'running'), count(*) FILTER (WHERE state = 'line')"
                " FROM hookrunner_runs WHERE state IN ('queued', 'line', 'running')",
                {"hook": hook},
            )
            holding, queued, running, lined = _row(cur)
            if not (limits.max_concurrency > 0 and holding >= limits.max_concurrency):
                if self._cap and running + lined >= self._cap:
                    run_id, _ = self._insert(
                        cur, run, limits, coalesce_key, accepted_at, "line", keep=keep_output
                    )
                    return Admission(STARTED, run_id)
                run_id, lease = self._insert(cur, run, limits, coalesce_key, accepted_at, "running")
                claim = Claim(run_id, run, 1, lease, accepted_at, admitted_by=self.replica)
                return Admission(STARTED, run_id, claim)
            if limits.coalesce:
                cur.execute(
                    "SELECT id, request_id, spec, accepted_at, admitted_by FROM hookrunner_runs"
                    " WHERE hook_id = %s"
                    " AND state = 'queued'"
                    " AND coalesce_key IS NOT DISTINCT FROM %s ORDER BY id DESC LIMIT 1 FOR UPDATE",
                    (hook, coalesce_key),
                )
                target = cur.fetchone()
                if target is not None:
                    # The waiting run starts with the newest request's spec (as state/slots.py's caller
                    # does); the row of the request it displaces is kept, folded into it: one row a request.
                    into, displaced = target[0], RunSpec.from_json(hook, target[1], target[2])
                    # Its admitting replica goes with the request: the run's history record is the newest
                    # request's, on the replica that admitted it (pghistory.py).
                    cur.execute(
                        "UPDATE hookrunner_runs SET request_id = %s, spec = %s, accepted_at = %s,"
                        " admitted_by = %s, keep_output = keep_output OR %s WHERE id = %s",
                        (run.request_id, run.to_json(), accepted_at, self.replica, keep_output, into),
                    )
                    self._insert(
                        cur, displaced, limits, coalesce_key, target[3], "coalesced", into, target[4]
                    )
                    return Admission(COALESCED, into)
            if queued >= max(limits.max_queue, 1 if limits.coalesce else 0):
                raise Busy(hook, limits.retry_after)
            run_id, _ = self._insert(cur, run, limits, coalesce_key, accepted_at, "queued", keep=keep_output)
            return Admission(QUEUED, run_id)

    def _insert(
        self,
        cur: psycopg.Cursor[Any],
        run: RunSpec,
        limits: Limits,
        coalesce_key: str | None,
        accepted_at: float,
        state: str,
        into: int | None = None,
        admitted_by: str | None = None,
        keep: bool = False,
    ) -> tuple[int, float]:
        """The run's row in `state` (a running one held by this replica, attempt 1); its id and lease;
        `admitted_by`: the replica that admitted it, when not this one (a displaced coalesced request);
        `keep`: a request waits for its output (state/pgoutput.py)."""
        cur.execute(
            "INSERT INTO hookrunner_runs (hook_id, request_id, spec, state, coalesce_key, coalesced_into,"
            " max_concurrency, line_seq, attempt, holder, instance, lease_until, accepted_at, admitted_by,"
            " keep_output)"
            " VALUES (%(hook)s, %(request)s, %(spec)s, %(state)s, %(key)s, %(into)s, %(max)s,"
            " CASE WHEN %(state)s = 'line' THEN nextval('hookrunner_line_seq') END,"
            " CASE WHEN %(state)s = 'running' THEN 1 ELSE 0 END,"
            " CASE WHEN %(state)s = 'running' THEN %(me)s END,"
            " CASE WHEN %(state)s = 'running' THEN %(instance)s END,"
            f" CASE WHEN %(state)s = 'running' THEN {_NOW} + %(lease)s END,"
            " %(accepted)s, %(admitted_by)s, %(keep)s)"
            " RETURNING id, lease_until, pg_notify(%(channel)s, %(instance)s)::text",
            {
                "hook": run.hook_id,
                "request": run.request_id,
                "spec": run.to_json(),
                "state": state,
                "key": coalesce_key,
                "into": into,
                "max": limits.max_concurrency,
                "me": self.replica,
                "instance": self._instance,
                "lease": self.lease,
                "accepted": accepted_at,
                "admitted_by": admitted_by or self.replica,
                "keep": keep,
                "channel": CHANNEL,
            },
        )
        run_id, lease, _ = _row(cur)
        self._local.notified = True  # the NOTIFY went with the insert
        return run_id, lease

    # --- claiming ---

    def claims(self, limit: int) -> list[Claim]:
        """In one transaction: take over running runs whose holder's lease and grace have passed (and, on
        this instance's first call, those still held under its own name), attempt + 1, with the processes
        their last attempt recorded; move queued runs into their hook's free places; then claim runs that
        hold their hook's place, oldest in the cap's line first, while the cap has room. Rows are locked
        FOR UPDATE SKIP LOCKED, so two replicas never claim the same run. The advisory locks come first: a
        transaction that waits for one never holds a row another waits for."""
        if limit <= 0:
            return []
        with self._transaction() as cur:
            cur.execute("SELECT DISTINCT hook_id FROM hookrunner_runs WHERE state = 'queued'")
            hooks = [hook for (hook,) in cur.fetchall()]
            self._lock_places(cur, hooks)
            taken = self._take_over(cur, limit)
            for hook in hooks:
                self._promote(cur, hook)
            room = limit - len(taken)
            if self._cap:
                cur.execute("SELECT count(*) FROM hookrunner_runs WHERE state = 'running'")
                room = min(room, self._cap - _row(cur)[0])
            if room > 0:
                cur.execute(
                    "SELECT id FROM hookrunner_runs WHERE state = 'line' ORDER BY line_seq LIMIT %s"
                    " FOR UPDATE SKIP LOCKED",
                    (room,),
                )
                ids = [run_id for (run_id,) in cur.fetchall()]
                taken += self._hold(cur, ids, "state = 'line'")
            self._fresh = False
            return taken

    def _take_over(self, cur: psycopg.Cursor[Any], limit: int) -> list[Claim]:
        cur.execute(
            "SELECT id FROM hookrunner_runs WHERE state = 'running'"
            f" AND (lease_until + %s < {_NOW} OR (%s AND holder = %s AND instance <> %s)) ORDER BY id"
            " LIMIT %s FOR UPDATE SKIP LOCKED",
            (self.grace, self._fresh, self.replica, self._instance, limit),
        )
        ids = [run_id for (run_id,) in cur.fetchall()]
        return self._hold(cur, ids, "state = 'running'")

    def _hold(self, cur: psycopg.Cursor[Any], ids: list[int], where: str) -> list[Claim]:
        """Rows `ids` (locked by the caller) become this replica's: running, the next attempt, a lease."""
        if not ids:
            return []
        cur.execute(
            "UPDATE hookrunner_runs SET state = 'running', attempt = attempt + 1, holder = %s,"
            f" instance = %s, lease_until = {_NOW} + %s WHERE id = ANY(%s) AND {where}"
            " RETURNING id, hook_id, request_id, spec, attempt, lease_until, accepted_at, processes,"
            " admitted_by, keep_output",
            (self.replica, self._instance, self.lease, ids),
        )
        claims = []
        for run_id, hook, request, spec, attempt, lease, accepted, processes, by, keep in sorted(
            cur.fetchall()
        ):
            # Only what ran in this pid space can be ended from here: the lost holder ends the rest itself
            # (a replica that cannot renew its lease kills its commands) or died with its node.
            previous = tuple(
                ProcessId(int(entry[0]), int(entry[1]))
                for entry in processes
                if PROCESS_SPACE and len(entry) == 3 and entry[2] == PROCESS_SPACE
            )
            claims.append(
                Claim(
                    run_id,
                    RunSpec.from_json(hook, request, spec),
                    attempt,
                    lease,
                    accepted,
                    previous,
                    replayed=attempt > 1,
                    admitted_by=by,
                    keep_output=keep,
                )
            )
        return claims

    @staticmethod
    def _promote(cur: psycopg.Cursor[Any], hook: str) -> None:
        """The hook's oldest queued runs take its free places (its lock held): they join the cap's line."""
        while True:
            cur.execute(
                "SELECT (SELECT count(*) FROM hookrunner_runs WHERE hook_id = %(hook)s"
                " AND state IN ('running', 'line')), id, max_concurrency FROM hookrunner_runs"
                " WHERE hook_id = %(hook)s AND state = 'queued' ORDER BY id LIMIT 1",
                {"hook": hook},
            )
            row = cur.fetchone()
            if row is None or (row[2] > 0 and row[0] >= row[2]):
                return
            cur.execute(
                "UPDATE hookrunner_runs SET state = 'line', line_seq = nextval('hookrunner_line_seq')"
                " WHERE id = %s",
                (row[1],),
            )

    # --- a claimed run's life ---

    def started(self, claim: Claim, processes: Sequence[ProcessId]) -> bool:
        """Record the attempt's processes, only while the run is this attempt's and this replica's."""
        with self._transaction() as cur:
            cur.execute(
                "UPDATE hookrunner_runs SET processes = %s WHERE id = %s AND attempt = %s AND holder = %s"
                " AND state = 'running'",
                (
                    Jsonb([[p.pid, p.start, PROCESS_SPACE] for p in processes]),
                    claim.run_id,
                    claim.attempt,
                    self.replica,
                ),
            )
            return cur.rowcount == 1

    def renew(self, claims: Sequence[Claim]) -> list[Claim]:
        """Extend the leases of the claims that are still this replica's attempt and whose lease has not run
        out (past it, the holder must already have killed the command); returns the others."""
        if not claims:
            return []
        with self._transaction() as cur:
            cur.execute(
                f"UPDATE hookrunner_runs AS r SET lease_until = {_NOW} + %s"
                " FROM unnest(%s::bigint[], %s::integer[]) AS c (id, attempt)"
                f" WHERE r.id = c.id AND r.attempt = c.attempt AND r.holder = %s AND r.state = 'running'"
                f" AND r.lease_until >= {_NOW} RETURNING r.id, r.attempt",
                (self.lease, [c.run_id for c in claims], [c.attempt for c in claims], self.replica),
            )
            kept = set(cur.fetchall())
        return [c for c in claims if (c.run_id, c.attempt) not in kept]

    def finish(self, claim: Claim, outcome: Outcome) -> bool:
        """Under the hook's lock (and the cap's): the run is over, with every request coalesced into it, only
        if `claim.attempt` is still its attempt; the hook's next queued run takes the freed place; NOTIFY.
        A run a request waits for has its output stored first, in a transaction of its own that takes no
        advisory lock (no hook waits on its transfer), on the same attempt check (state/pgoutput.py)."""
        if claim.keep_output and outcome.output is not None:
            with self._transaction() as cur:
                pgoutput.keep(cur, claim, outcome)
        with self._transaction() as cur:
            self._lock_places(cur, [claim.spec.hook_id])
            cur.execute(
                f"UPDATE hookrunner_runs SET state = 'done', outcome = %s, finished_at = {_NOW}"
                " WHERE id = %s AND attempt = %s AND state = 'running' RETURNING hook_id",
                (outcome.status, claim.run_id, claim.attempt),
            )
            row = cur.fetchone()
            if row is None:
                return False
            self._over(cur, claim.run_id, row[0], outcome)
            return True

    def refuse(self, claim: Claim, outcome: Outcome) -> bool:
        """A claimed run that will not run is over, as finish ends it, on the same attempt check: a replica
        whose claim was taken over cannot end the run the other now holds."""
        return self.finish(claim, outcome)

    def _over(self, cur: psycopg.Cursor[Any], run_id: int, hook: str, outcome: Outcome) -> None:
        cur.execute(
            f"UPDATE hookrunner_runs SET state = 'done', outcome = %s, finished_at = {_NOW}"
            " WHERE coalesced_into = %s AND state = 'coalesced'",
            (outcome.status, run_id),
        )
        self._promote(cur, hook)
        self._notify(cur)

    def outcomes(self, run_ids: Sequence[int]) -> dict[int, Outcome]:
        """The outcomes of those of `run_ids` that are over, by id, whichever replica ran them (a replica
        whose request waits for a run another replica claimed learns its end here), each with the output
        the run kept (state/pgoutput.py). One read."""
        if not run_ids:
            return {}
        with self._transaction() as cur:
            return pgoutput.outcomes(cur, run_ids)

    # --- waiting, counting, readiness, history ---

    def wake(self) -> Listener:
        """A Waiter on LISTEN hookrunner_runs (its own connection), with polling every `poll` seconds; the
        same one at every call."""
        with self._lock:
            if self._waiter is None:
                self._waiter = Listener(
                    lambda: self._connections.connect(autocommit=True), CHANNEL, self.poll, self._instance
                )
                self._waiter.poke()  # a new waiter's first wait ends at once: look for work now
            return self._waiter

    def counts(self) -> Counts:
        """Runs holding their places and runs waiting, per hook and in all, as state/slots.py counts them: a
        run in the cap's line holds its places once the cap has room for it (the line's first, as many as
        the cap has free), claimed or not yet; the rest of the line and the hooks' queues wait."""
        with self._transaction() as cur:
            cur.execute(
                "WITH open AS (SELECT hook_id, state,"
                "   row_number() OVER (PARTITION BY state ORDER BY line_seq) AS place"
                "   FROM hookrunner_runs WHERE state IN ('queued', 'line', 'running')),"
                " free AS (SELECT CASE WHEN %(cap)s > 0"
                "   THEN %(cap)s - count(*) FILTER (WHERE state = 'running') END AS room FROM open),"
                " placed AS (SELECT hook_id,"
                "   state = 'running' OR (state = 'line' AND place <= coalesce(room, place)) AS holds"
                "   FROM open, free)"
                " SELECT hook_id, count(*) FILTER (WHERE holds), count(*) FILTER (WHERE NOT holds)"
                " FROM placed GROUP BY hook_id ORDER BY hook_id",
                {"cap": self._cap},
            )
            per_hook = tuple((str(h), int(r), int(q)) for h, r, q in cur.fetchall())
        return Counts(sum(r for _, r, _ in per_hook), sum(q for _, _, q in per_hook), per_hook)

    def ready(self) -> bool:
        """As RunState.ready: the database answers, and takes writes (a primary demoted by a failover, or a
        read-only database, does not). One round trip; never raises."""
        try:
            with self._transaction() as cur:
                cur.execute(
                    "SELECT current_setting('transaction_read_only') = 'off' AND NOT pg_is_in_recovery()"
                )
                return bool(_row(cur)[0])
        except StateUnavailable:
            return False

    def record(self, event: Event) -> None:
        """A history event, into hookrunner_events with this replica's name. The history is not the journal:
        an event the database cannot take now is dropped (the unavailability is logged once), never raised."""
        try:
            with self._transaction() as cur:
                cur.execute(
                    f"INSERT INTO hookrunner_events (replica, at, event) VALUES (%s, {_NOW}, %s)",
                    (self.replica, Jsonb(_jsonb_text(json.loads(json.dumps(event, default=str))))),
                )
        except StateUnavailable:
            pass

    def close(self) -> None:
        """Close the connections; claims still held are taken over by another replica after lease + grace."""
        with self._lock:
            self._connections.close()
            if self._waiter is not None:
                self._waiter.close()
                self._waiter = None


def create_schema(conn: psycopg.Connection[Any]) -> None:
    """The run state's tables, in a transaction of their own under an advisory lock (two replicas starting
    together do not race); StateUnavailable for a database written by a newer hookrunner (left untouched).
    The run history's reader (state/pghistory.py) calls it too, before its own tables."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s, 1)", (_CAP_LOCK,))
        cur.execute(_SCHEMA)
        pgoutput.add_columns(cur)
        cur.execute("SELECT max(version) FROM hookrunner_schema")
        row = cur.fetchone()
        version = row[0] if row else None
        if version is None:
            cur.execute("INSERT INTO hookrunner_schema (version) VALUES (%s)", (SCHEMA_VERSION,))
        elif version > SCHEMA_VERSION:
            raise StateUnavailable(
                f"the database was written by a newer hookrunner (schema version {version}, this one "
                f"knows {SCHEMA_VERSION}); leaving it untouched"
            )


def _jsonb_text(value: Any) -> Any:
    """`value` with every string jsonb can hold: a lone surrogate (an undecodable byte of an argument, as
    Python's surrogateescape keeps it) and NUL become U+FFFD; jsonb refuses both, and an event it refused
    would raise out of record() into the run path."""
    if isinstance(value, str):
        if value.isascii() and "\x00" not in value:
            return value
        try:
            data = value.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            data = value.encode("utf-8", "replace")
        return data.decode("utf-8", "replace").replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [_jsonb_text(item) for item in value]
    if isinstance(value, dict):
        return {_jsonb_text(key): _jsonb_text(item) for key, item in value.items()}
    return value


def _row(cur: psycopg.Cursor[Any]) -> tuple[Any, ...]:
    row = cur.fetchone()
    assert row is not None
    return tuple(row)
