"""A run's output kept in PostgreSQL for a request that waits for it on another replica (issue 33): a capture
or a stream admitted on one replica whose run another replica claims. The row says whether something
waits (`keep_output`, set at admission); its finish stores the output (`output`, bytea) before the outcome,
and the waiting replica reads both together (docs/run-state.md, "A capture whose run ran elsewhere")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from hookrunner.ops.log import log
from hookrunner.state.model import Claim, Outcome

#: The most of a run's output kept for a waiting replica (bytes); past it, the first OUTPUT_KEPT bytes.
OUTPUT_KEPT = 64 * 1024 * 1024

#: The columns, added in place to a table made before them (schema version 1 all the same: a replica that
#: does not know them writes rows without them, which keep nothing, and reads past them).
_COLUMNS = (
    ("keep_output", "ALTER TABLE hookrunner_runs ADD COLUMN IF NOT EXISTS keep_output boolean NOT NULL"
     " DEFAULT false"),
    ("output", "ALTER TABLE hookrunner_runs ADD COLUMN IF NOT EXISTS output bytea"),
)  # fmt: skip


def add_columns(cur: psycopg.Cursor[Any]) -> None:
    """The output's columns on hookrunner_runs, when missing (under create_schema's lock): a database made
    by an earlier hookrunner is upgraded in place; an ALTER, which waits for every open transaction on the
    table, is run only when a column is missing."""
    cur.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = 'hookrunner_runs'::regclass AND attnum > 0"
        " AND NOT attisdropped AND attname = ANY(%s)",
        ([name for name, _ in _COLUMNS],),
    )
    present = {name for (name,) in cur.fetchall()}
    for name, alter in _COLUMNS:
        if name not in present:
            cur.execute(alter)


def keep(cur: psycopg.Cursor[Any], claim: Claim, outcome: Outcome) -> None:
    """Store `outcome.output` with the run, when a request waits for it and `claim` is still its attempt."""
    output = outcome.output
    if not claim.keep_output or output is None:
        return
    if len(output) > OUTPUT_KEPT:
        log.output(
            f"run {claim.run_id} of hook {claim.spec.hook_id}: {len(output)} bytes of output; "
            f"the first {OUTPUT_KEPT} are kept for the request waiting on another replica"
        )
        output = output[:OUTPUT_KEPT]
    cur.execute(
        "UPDATE hookrunner_runs SET output = %s WHERE id = %s AND attempt = %s AND state = 'running'"
        " AND keep_output",
        (output, claim.run_id, claim.attempt),
    )


def outcomes(cur: psycopg.Cursor[Any], run_ids: Sequence[int]) -> dict[int, Outcome]:
    """The outcomes of those of `run_ids` that are over, each with the output its run kept (None: none)."""
    cur.execute(
        "SELECT id, outcome, CASE WHEN keep_output THEN output END FROM hookrunner_runs"
        " WHERE id = ANY(%s) AND state = 'done'",
        (list(run_ids),),
    )
    return {
        int(run_id): Outcome(str(status), None if output is None else bytes(output))
        for run_id, status, output in cur.fetchall()
    }
