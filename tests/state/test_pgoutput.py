"""state/pgoutput.py with PostgresState on a real, throwaway PostgreSQL (tests/pg_cluster.py): the output of a
run that a request waits for (a capture or a stream admitted with keep_output) is kept with its row by the
replica that runs it and read, byte for byte, by the replica where the request waits; coalescing carries the
wish; a stale attempt writes nothing; runs nobody waits for keep nothing; past the bound, the first
OUTPUT_KEPT bytes and one log line; a database made by the schema before the output columns is upgraded in
place (and an up-to-date one is not altered again)."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable

import psycopg
import pytest
import test_postgres

from hookrunner.hooks.model import Limits
from hookrunner.state import pgoutput
from hookrunner.state.model import Admission, Claim, Outcome
from hookrunner.state.postgres import _SCHEMA, SCHEMA_VERSION, PostgresState
from hookrunner.state.slots import COALESCED, QUEUED, STARTED

#: Every byte, NUL and invalid UTF-8 included, and more than one frame of the owner's wire.
OUTPUT = bytes(range(256)) * 1200 + b"\x00\xff\xfe end\n"

#: The schema as hookrunner wrote it before the output columns (schema version 1, issue 33's first cut):
#: state/postgres.py's tables, to which state/pgoutput.py adds its columns.
SCHEMA_BEFORE = _SCHEMA + "INSERT INTO hookrunner_schema (version) VALUES (1);"
assert "output" not in SCHEMA_BEFORE

replicas = test_postgres.replicas  # the fixture: PostgresState instances on the test's database
spec = test_postgres.spec
OK = test_postgres.OK

#: A queued run as a replica of that schema admits it (the columns it knows).
OLD_ADMIT = (
    "INSERT INTO hookrunner_runs (hook_id, request_id, spec, state, max_concurrency, accepted_at, admitted_by)"
    " VALUES ('h', %s, %s, 'queued', 1, 1.0, 'old')"
)


ONE = Limits(max_concurrency=1, max_queue=5)
ONE_COALESCING = Limits(max_concurrency=1, max_queue=5, coalesce=True)


def waited_elsewhere(here: PostgresState, there: PostgresState, n: int) -> tuple[Admission, Claim]:
    """A capture admitted `here` behind a run holding the hook's place, then claimed `there`."""
    holding = there.admit(spec("h", 1000 + n), ONE, None, 0.0).claim
    waiting = here.admit(spec("h", n), ONE, None, float(n), keep_output=True)
    assert holding is not None and waiting.how == QUEUED and there.finish(holding, OK)
    (claim,) = there.claims(5)
    assert (claim.run_id, claim.keep_output) == (waiting.run_id, True)
    return waiting, claim


def test_a_capture_waiting_on_one_replica_reads_the_output_of_its_run_on_another(
    replicas: Callable[..., PostgresState],
) -> None:
    a, b = replicas("a"), replicas("b")
    holding = a.admit(spec("h", 0), ONE, None, 0.0, keep_output=True).claim
    assert holding is not None
    waiting = b.admit(spec("h", 1), ONE, None, 1.0, keep_output=True)
    assert waiting.how == QUEUED
    assert a.finish(holding, Outcome("exit status 0", b"a's own\n"))  # answered on a, from the run
    (claim,) = a.claims(5)  # a runs the run b admitted
    assert (claim.run_id, claim.keep_output) == (waiting.run_id, True)
    assert b.outcomes([waiting.run_id]) == {}  # running: not over
    assert a.finish(claim, Outcome("exit status 2", OUTPUT))
    assert b.outcomes([waiting.run_id]) == {waiting.run_id: Outcome("exit status 2", OUTPUT)}
    # Empty output is output: a command that printed nothing gives b"" (not None, "nothing kept").
    third, claim = waited_elsewhere(a, b, 2)
    assert b.finish(claim, Outcome("exit status 0", b""))
    assert a.outcomes([third.run_id]) == {third.run_id: Outcome("exit status 0", b"")}


def test_coalescing_keeps_the_output_when_any_folded_request_waits_for_it(
    replicas: Callable[..., PostgresState],
) -> None:
    a, b = replicas("a"), replicas("b")
    holding = a.admit(spec("h", 0), ONE_COALESCING, "k", 0.0).claim
    assert holding is not None
    queued = a.admit(spec("h", 1), ONE_COALESCING, "k", 1.0)  # nobody waits for it...
    folded = b.admit(spec("h", 2), ONE_COALESCING, "k", 2.0, keep_output=True)  # ...until a capture folds in
    late = a.admit(spec("h", 3), ONE_COALESCING, "k", 3.0)  # a background request after it changes nothing
    assert (queued.how, folded.how, late.how) == (QUEUED, COALESCED, COALESCED)
    assert folded.run_id == late.run_id == queued.run_id
    assert a.finish(holding, Outcome("exit status 0", b"not kept"))
    (claim,) = a.claims(5)
    assert claim.keep_output
    assert a.finish(claim, Outcome("exit status 0", OUTPUT))
    assert b.outcomes([folded.run_id, holding.run_id]) == {
        folded.run_id: Outcome("exit status 0", OUTPUT),
        holding.run_id: Outcome("exit status 0", None),
    }


def test_a_stale_attempt_writes_no_output(replicas: Callable[..., PostgresState], pg_database: str) -> None:
    a = replicas("a", lease=0.5, grace=0.2)
    b = replicas("b", lease=0.5, grace=0.2)
    holding = b.admit(spec("h", 0), ONE, None, 0.0).claim
    waiting = b.admit(spec("h", 1), ONE, None, 0.0, keep_output=True)
    assert holding is not None and waiting.how == QUEUED and b.finish(holding, OK)
    (old,) = a.claims(5)
    assert (old.run_id, old.keep_output) == (waiting.run_id, True)
    time.sleep(0.8)
    (taken,) = b.claims(5)
    assert (taken.run_id, taken.attempt, taken.keep_output) == (old.run_id, 2, True)
    assert not a.finish(old, Outcome("exit status 1", b"stale"))
    with psycopg.connect(pg_database) as conn:
        row = conn.execute(
            "SELECT output, state FROM hookrunner_runs WHERE id = %s", (old.run_id,)
        ).fetchone()
    assert row == (None, "running")
    assert b.finish(taken, Outcome("exit status 0", b"fresh"))
    assert a.outcomes([old.run_id]) == {old.run_id: Outcome("exit status 0", b"fresh")}


def test_past_the_bound_the_first_bytes_are_kept_with_one_line(
    replicas: Callable[..., PostgresState], monkeypatch: pytest.MonkeyPatch, log_lines: io.StringIO
) -> None:
    monkeypatch.setattr(pgoutput, "OUTPUT_KEPT", 1000)
    a, b = replicas("a"), replicas("b")
    _, claim = waited_elsewhere(a, b, 1)
    assert b.finish(claim, Outcome("exit status 0", OUTPUT))
    assert a.outcomes([claim.run_id]) == {claim.run_id: Outcome("exit status 0", OUTPUT[:1000])}
    lines = [line for line in log_lines.getvalue().splitlines() if "of output" in line]
    assert len(lines) == 1 and f"{len(OUTPUT)} bytes of output; the first 1000 are kept" in lines[0], lines


def test_a_database_of_the_schema_before_the_output_columns_is_upgraded_in_place(
    replicas: Callable[..., PostgresState], pg_database: str
) -> None:
    with psycopg.connect(pg_database) as conn:
        conn.execute(SCHEMA_BEFORE)
        conn.execute(OLD_ADMIT, ("old-1", spec("h", 1).to_json()))
    a, b = replicas("a"), replicas("b")
    (claim,) = a.claims(5)  # the old replica's run, claimed after the upgrade: nobody waits for its output
    assert (claim.spec.request_id, claim.keep_output) == ("old-1", False)
    waiting = b.admit(spec("h", 2), ONE, None, 2.0, keep_output=True)
    assert waiting.how == QUEUED
    assert a.finish(claim, Outcome("exit status 0", b"old"))
    (second,) = a.claims(5)
    assert second.keep_output and a.finish(second, Outcome("exit status 0", OUTPUT))
    assert b.outcomes([claim.run_id, waiting.run_id]) == {
        claim.run_id: Outcome("exit status 0", None),
        waiting.run_id: Outcome("exit status 0", OUTPUT),
    }
    with psycopg.connect(pg_database) as conn:
        assert conn.execute("SELECT version FROM hookrunner_schema").fetchall() == [(SCHEMA_VERSION,)]
        # A replica of the schema before still admits into the upgraded table (its columns have defaults).
        conn.execute(OLD_ADMIT, ("old-3", spec("h", 3).to_json()))
    (third,) = a.claims(5)
    assert (third.spec.request_id, third.keep_output) == ("old-3", False)


def test_an_up_to_date_database_is_not_altered_again(
    replicas: Callable[..., PostgresState], pg_database: str
) -> None:
    # An ALTER waits for every open transaction on the table; a replica starting beside a long transaction
    # (a reader's, a pruning's) must not queue behind it, nor make every other transaction queue behind it.
    replicas("a").counts()  # the schema, with its columns
    with psycopg.connect(pg_database) as reader:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM hookrunner_runs")  # holds ACCESS SHARE until it ends
        done = threading.Event()

        def first_use() -> None:
            replicas("b").counts()
            done.set()

        threading.Thread(target=first_use, daemon=True).start()
        assert done.wait(10), "a replica's start waited for an open transaction on hookrunner_runs"
        reader.execute("ROLLBACK")


def test_a_run_started_at_admission_keeps_no_output(
    replicas: Callable[..., PostgresState],
) -> None:
    # Its one waiting request is on the replica that runs it (nothing is folded into a running run), which
    # answers from the run's own result: no round trip, no bytes sent. In the cap's line, another replica
    # may claim it: kept.
    a = replicas("a", max_running=1)
    admission = a.admit(spec("h", 1), Limits(), None, 0.0, keep_output=True)
    assert admission.how == STARTED and admission.claim is not None and not admission.claim.keep_output
    lined = a.admit(spec("h", 2), Limits(), None, 0.0, keep_output=True)
    assert lined.how == STARTED and lined.claim is None
    assert a.finish(admission.claim, Outcome("exit status 0", b"not kept"))
    (claim,) = replicas("b", max_running=1).claims(5)
    assert (claim.run_id, claim.keep_output) == (lined.run_id, True)
    assert a.outcomes([admission.run_id]) == {admission.run_id: Outcome("exit status 0")}
