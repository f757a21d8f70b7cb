"""The run journal's attempts (schema 3, hookrunner/state/journal.py): each claim of left-overs starts the
run's next attempt, and a write that names an older attempt (its processes, its finish) changes nothing and
says so; journals of schema 1 and 2 are brought to schema 3 with every row on its first attempt."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from journal_faults import failing_disk

from hookrunner.state.journal import FILE_NAME, SCHEMA_VERSION, Journal, JournalError, RunSpec
from hookrunner.state.model import ProcessId


def spec(n: int = 1) -> RunSpec:
    return RunSpec("deploy", f"req-{n}", "/bin/deploy", ("/bin/deploy", str(n)), (("N", str(n)),), (), "/srv")


def row(state: Path, run_id: int) -> tuple[str, str | None, str, int]:
    """(state, exit_status, processes, attempt) of a row, read by another connection."""
    db = sqlite3.connect(state / FILE_NAME)
    try:
        found = db.execute(
            "SELECT state, exit_status, processes, attempt FROM runs WHERE id = ?", (run_id,)
        ).fetchone()
    finally:
        db.close()
    assert found is not None
    return found[0], found[1], found[2], found[3]


def left_running(state: Path) -> int:
    """A run of a first boot that died with it running (attempt 1, process 101); returns its id."""
    first = Journal(str(state), "boot-1")
    run_id = first.record(spec())
    assert run_id is not None and first.attempt(run_id) == 1
    assert first.started(run_id, ProcessId(101, 5000), attempt=1)
    first.close()
    return run_id


def test_a_run_is_on_attempt_1_and_each_claim_of_left_overs_starts_the_next(tmp_path: Path) -> None:
    state = tmp_path / "state"
    run_id = left_running(state)

    second = Journal(str(state), "boot-2")
    [left] = second.claim_left_overs() or []
    assert (left.run_id, left.attempt, left.processes) == (run_id, 2, (ProcessId(101, 5000),))
    assert second.attempt(run_id) == 2
    second.close()  # the second boot dies too, its attempt never started

    third = Journal(str(state), "boot-3")
    [left] = third.claim_left_overs() or []
    assert left.attempt == 3
    assert third.finished([run_id], "exit status 0", attempt=3)
    assert row(state, run_id)[:2] == ("finished", "exit status 0")
    third.close()


def test_a_late_write_from_an_old_attempt_changes_nothing_and_says_so(tmp_path: Path) -> None:
    state = tmp_path / "state"
    run_id = left_running(state)
    second = Journal(str(state), "boot-2")
    [left] = second.claim_left_overs() or []
    assert second.started(run_id, ProcessId(202, 6000), attempt=left.attempt)
    before = row(state, run_id)
    assert before == ("running", None, "[[202, 6000]]", 2)

    # Attempt 1's writes, arriving late: refused, nothing written.
    assert not second.started(run_id, ProcessId(303, 7000), attempt=1)
    assert not second.add_process(run_id, ProcessId(304, 7001), attempt=1)
    assert not second.finished([run_id], "exit status 1", attempt=1)
    assert row(state, run_id) == before

    # The current attempt's still go through.
    assert second.add_process(run_id, ProcessId(203, 6001), attempt=2)
    assert row(state, run_id)[2] == "[[202, 6000], [203, 6001]]"
    assert second.finished([run_id], "exit status 0", attempt=2)
    assert row(state, run_id) == ("finished", "exit status 0", "[]", 2)
    second.close()


def test_a_finish_of_an_attempt_finishes_the_runs_folded_into_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    journal = Journal(str(state), "boot")
    ran, folded = journal.record(spec(1)), journal.record(spec(2))
    assert ran is not None and folded is not None
    assert not journal.finished([ran, folded], "exit status 0", attempt=2)  # ran is on attempt 1
    assert journal.counts() == {"accepted": 2}
    assert journal.finished([ran, folded], "exit status 0", attempt=1)
    assert journal.counts() == {"finished": 2}
    journal.close()


def test_a_finish_for_a_row_that_is_gone_is_refused(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path), "boot")
    assert not journal.finished([12345], "exit status 0", attempt=1)
    assert not journal.started(12345, ProcessId(1, 2), attempt=1)
    assert journal.finished([12345], "exit status 0")  # no attempt named: today's unconditional write
    journal.close()


def test_callers_that_name_no_attempt_write_as_before(tmp_path: Path) -> None:
    state = tmp_path / "state"
    journal = Journal(str(state), "boot")
    run_id = journal.record(spec())
    assert run_id is not None
    assert journal.started(run_id, ProcessId(1, 2))
    assert journal.add_process(run_id, ProcessId(3, 4))
    assert journal.finished([run_id], "exit status 0")
    assert row(state, run_id) == ("finished", "exit status 0", "[]", 1)
    journal.close()


SCHEMA_1 = """
CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, hook TEXT NOT NULL, request_id TEXT NOT NULL,
    accepted_at REAL NOT NULL, state TEXT NOT NULL, owner TEXT NOT NULL, spec TEXT NOT NULL, exit_status TEXT);
CREATE INDEX runs_state ON runs (state, id);
PRAGMA user_version=1;
"""

SCHEMA_2 = """
CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, hook TEXT NOT NULL, request_id TEXT NOT NULL,
    accepted_at REAL NOT NULL, state TEXT NOT NULL, owner TEXT NOT NULL, spec TEXT NOT NULL, exit_status TEXT,
    processes TEXT NOT NULL DEFAULT '[]');
CREATE INDEX runs_state ON runs (state, id);
PRAGMA user_version=2;
"""


@pytest.mark.parametrize(("schema", "processes"), [(SCHEMA_1, None), (SCHEMA_2, "[[101, 5000]]")])
def test_an_older_journal_is_brought_to_schema_3_and_its_runs_replayed_as_attempt_2(
    tmp_path: Path, schema: str, processes: str | None
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    db = sqlite3.connect(state / FILE_NAME)
    db.executescript(schema)
    columns = "hook, request_id, accepted_at, state, owner, spec" + (", processes" if processes else "")
    values = ["deploy", "req-1", 1.0, "running", "old-boot:1", spec(1).to_json()] + (
        [processes] if processes else []
    )
    db.execute(f"INSERT INTO runs ({columns}) VALUES ({', '.join('?' * len(values))})", values)
    db.execute(
        "INSERT INTO runs (hook, request_id, accepted_at, state, owner, spec, exit_status) "
        "VALUES ('deploy', 'req-0', 0.5, 'finished', 'old-boot:1', '', 'exit status 0')"
    )
    db.commit()
    db.close()

    journal = Journal(str(state), "boot-2")
    [left] = journal.claim_left_overs() or []
    expected = (ProcessId(101, 5000),) if processes else ()
    assert (left.spec, left.processes, left.attempt) == (spec(1), expected, 2)
    assert not journal.finished([left.run_id], "exit status 0", attempt=1)
    assert journal.finished([left.run_id], "exit status 0", attempt=2)
    journal.close()
    db = sqlite3.connect(state / FILE_NAME)
    try:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,) == (3,)
        assert db.execute("SELECT request_id, attempt FROM runs ORDER BY id").fetchall() == [
            ("req-1", 2),
            ("req-0", 1),
        ]
    finally:
        db.close()


def test_a_journal_of_schema_4_is_still_refused(tmp_path: Path) -> None:
    Journal(str(tmp_path), "boot").close()
    db = sqlite3.connect(tmp_path / FILE_NAME)
    db.execute("PRAGMA user_version=4")
    db.commit()
    db.close()
    with pytest.raises(JournalError, match=r"schema version 4, this one knows 3"):
        Journal(str(tmp_path), "boot-2")


def test_an_attempts_finish_kept_while_the_disk_fails_is_written_once_it_takes_it(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path), "boot", retry_every=0)
    run_id = journal.record(spec())
    assert run_id is not None
    assert journal.started(run_id, ProcessId(1, 2), attempt=1)
    with failing_disk(tmp_path):
        assert journal.finished([run_id], "exit status 0", attempt=1)  # kept, to be written on that condition
        assert not journal.finished([run_id], "exit status 1", attempt=2)  # not the row's attempt
        assert row(tmp_path, run_id)[0] == "running"
    assert journal.writable()  # tries again now: the kept finish is written
    assert row(tmp_path, run_id) == ("finished", "exit status 0", "[]", 1)
    journal.close()


def test_a_finished_row_never_goes_back_to_running(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path), "boot")
    run_id = journal.record(spec())
    assert run_id is not None
    assert journal.finished([run_id], "exit status 0", attempt=1)
    assert not journal.started(run_id, ProcessId(1, 2), attempt=1)  # a start that lost a race with its finish
    assert not journal.started(run_id, ProcessId(1, 2))
    assert row(tmp_path, run_id) == ("finished", "exit status 0", "[]", 1)
    journal.close()


def test_a_left_over_that_never_started_is_claimed_on_attempt_1_then_counts_on(tmp_path: Path) -> None:
    # The rule of state/backend.py's RunState.claims: a run that only waited is claimed on attempt 1 (as the
    # PostgreSQL backend claims a queued run of a replica that is gone); once a replay has claimed it, the
    # next claim is the next attempt, started or not.
    state = tmp_path / "state"
    first = Journal(str(state), "boot-1")
    run_id = first.record(spec())
    assert run_id is not None
    first.close()  # died with the run accepted: it only waited

    second = Journal(str(state), "boot-2")
    [left] = second.claim_left_overs() or []
    assert (left.run_id, left.attempt, left.processes) == (run_id, 1, ())
    assert second.attempt(run_id) == 1
    second.close()  # the replay's claim dies too, before it started anything

    third = Journal(str(state), "boot-3")
    [left] = third.claim_left_overs() or []
    assert left.attempt == 2
    assert not third.finished([run_id], "exit status 0", attempt=1)  # the second boot's claim, late
    assert third.finished([run_id], "exit status 0", attempt=2)
    third.close()
