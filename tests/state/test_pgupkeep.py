"""The shared run state's upkeep (hookrunner/state/pgupkeep.py) on a real, throwaway PostgreSQL
(tests/pg_cluster.py): finished runs' rows are deleted once -state-done-age has passed, in batches, with the
requests coalesced into them, never before a waiting replica or the history's fold could read them; events no
admin listener folds are folded by the owners, under the history's retention; two replicas at it at once
neither fail nor delete or fold anything twice. Two PostgresState instances stand for two replicas."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from hookrunner.hooks.model import Limits
from hookrunner.run.history import Recorder
from hookrunner.state.model import Admission, Outcome, RunSpec
from hookrunner.state.pghistory import PostgresHistory
from hookrunner.state.pgupkeep import Upkeep
from hookrunner.state.postgres import PostgresState

OK = Outcome("exit status 0")
UNLIMITED = Limits()


@pytest.fixture
def made(pg_database: str) -> Iterator[list[Any]]:
    """Everything a test opens on its database, closed at its end."""
    opened: list[Any] = []
    yield opened
    for each in opened:
        each.close()


@pytest.fixture
def state(pg_database: str, made: list[Any]) -> Callable[[str], PostgresState]:
    def make(replica: str) -> PostgresState:
        made.append(PostgresState(pg_database, replica))
        return made[-1]

    return make


@pytest.fixture
def history(pg_database: str, made: list[Any]) -> Callable[..., PostgresHistory]:
    def make(replica: str = "admin", **kwargs: Any) -> PostgresHistory:
        made.append(PostgresHistory(pg_database, replica, **kwargs))
        return made[-1]

    return make


def run_spec(rid: str, hook: str = "deploy") -> RunSpec:
    return RunSpec(hook, rid, "/bin/true", ("/bin/true",), (), (), "/")


def admit(replica: PostgresState, rid: str, limits: Limits = UNLIMITED, hook: str = "deploy") -> Admission:
    return replica.admit(run_spec(rid, hook), limits, None, time.time())


def finished_runs(replica: PostgresState, count: int, prefix: str = "r") -> list[int]:
    """`count` runs admitted, started at once and finished; their ids."""
    ids = []
    for n in range(count):
        admission = admit(replica, f"{prefix}{n}")
        assert admission.claim is not None
        assert replica.finish(admission.claim, OK)
        ids.append(admission.run_id)
    return ids


def rows(database: str, table: str, where: str = "TRUE") -> int:
    with psycopg.connect(database) as conn:
        found = conn.execute(f"SELECT count(*) FROM {table} WHERE {where}").fetchone()
    assert found is not None
    return int(found[0])


def states_left(database: str) -> list[tuple[str, str]]:
    with psycopg.connect(database) as conn:
        return [
            (str(r), str(s))
            for r, s in conn.execute("SELECT request_id, state FROM hookrunner_runs ORDER BY id").fetchall()
        ]


def test_finished_runs_go_once_their_age_has_passed_in_batches_and_open_runs_stay(
    pg_database: str, state: Callable[[str], PostgresState], history: Callable[..., PostgresHistory]
) -> None:
    a = state("a")
    finished_runs(a, 60)
    one = Limits(max_concurrency=1, max_queue=5)
    assert admit(a, "running", one, "slow").claim is not None  # never finished
    queued = [admit(a, f"queued{n}", one, "slow") for n in range(2)]
    assert {q.how for q in queued} == {"queued"}
    patient = Upkeep(a, history("a"), done_age=60.0, batch=7)
    assert patient.prune_runs() == 0  # ended less than done_age ago: kept
    assert rows(pg_database, "hookrunner_runs") == 63
    time.sleep(0.6)
    upkeep = Upkeep(a, history("a"), done_age=0.5, batch=7)
    assert upkeep.prune_runs() == 60
    assert states_left(pg_database) == [("running", "running"), ("queued0", "queued"), ("queued1", "queued")]
    assert upkeep.prune_runs() == 0


def test_a_replica_waiting_for_a_run_another_ran_reads_its_outcome_until_the_age_has_passed(
    state: Callable[[str], PostgresState], history: Callable[..., PostgresHistory]
) -> None:
    a, b = state("a"), state("b")
    one = Limits(max_concurrency=1, max_queue=1)
    first = admit(a, "first", one)
    waited = admit(a, "waited", one)  # a's request waits for this run, which b will run
    assert first.claim is not None and waited.how == "queued"
    assert a.finish(first.claim, OK)
    [claim] = b.claims(5)
    assert claim.run_id == waited.run_id
    assert b.finish(claim, Outcome("exit status 3"))
    assert Upkeep(b, history("b"), done_age=60.0).prune_runs() == 0
    assert a.outcomes([waited.run_id]) == {waited.run_id: Outcome("exit status 3")}
    time.sleep(0.6)
    assert Upkeep(b, history("b"), done_age=0.5).prune_runs() == 2
    assert a.outcomes([waited.run_id]) == {}


def recorder(replica: PostgresState) -> Recorder:
    """The history as `replica`'s run path tells it."""
    tell = Recorder(replica.record, 64 << 10)
    tell.replica = replica.replica
    return tell


def coalesced_run(a: PostgresState, b: PostgresState, tell: bool = False) -> None:
    """Four requests of a coalescing hook: `hold` runs, c1 queues, c2 and c3 (b's) are folded into c1's
    run, which b runs with c3's values after `hold`; every one finished. `tell`: their history too, as
    each replica's run path tells it."""
    recorders = {r.replica: recorder(r) for r in (a, b)}
    limits = Limits(max_concurrency=1, coalesce=True)
    tickets = {}
    for rid, replica, at in (("hold", a, 10.0), ("c1", a, 11.0), ("c2", b, 12.0), ("c3", b, 13.0)):
        admission = replica.admit(RunSpec("h", rid, "/bin/true", (), (), (), "/"), limits, None, at)
        if tell:
            tickets[rid] = recorders[replica.replica].ticket(rid, "h", at)
            tickets[rid].admitted(admission.how)
        if rid == "hold":
            assert admission.claim is not None
            held = admission.claim
    assert a.finish(held, OK)
    [claim] = b.claims(5)
    assert claim.spec.request_id == "c3"
    if tell:
        tickets["hold"].started(run_spec("hold", "h"))
        tickets["hold"].finished(b"", None)
        tickets["c3"].started(run_spec("c3", "h"))
        tickets["c3"].finished(b"", "exit status 1")
    assert b.finish(claim, Outcome("exit status 1"))


def test_requests_coalesced_into_a_run_go_with_it_even_one_row_a_batch(
    pg_database: str, state: Callable[[str], PostgresState], history: Callable[..., PostgresHistory]
) -> None:
    a, b = state("a"), state("b")
    coalesced_run(a, b)
    assert rows(pg_database, "hookrunner_runs", "coalesced_into IS NOT NULL") == 2
    time.sleep(0.6)
    upkeep = Upkeep(a, history("a"), done_age=0.5, batch=1)  # a batch holds one run: its rows go with it
    assert upkeep.prune_runs() == 4
    assert rows(pg_database, "hookrunner_runs") == 0


def test_runs_whose_history_events_are_not_folded_yet_are_kept_for_the_fold(
    pg_database: str, state: Callable[[str], PostgresState], history: Callable[..., PostgresHistory]
) -> None:
    # The fold ends the records of requests coalesced into a run by joining the run state's rows: they
    # stay while any event older than their end (+ the age) waits to be folded, whatever their age.
    a, b = state("a"), state("b")
    coalesced_run(a, b, tell=True)
    upkeep = Upkeep(a, history("a"), done_age=0.3)
    time.sleep(0.5)
    assert upkeep.prune_runs() == 0
    assert rows(pg_database, "hookrunner_runs") == 4
    admin = history()
    assert admin.catch_up() > 0
    records = {r["id"]: r for r in admin.runs()}
    assert [(records[rid]["outcome"], records[rid]["detail"]) for rid in ("c1", "c2")] == [
        ("failed", "coalesced: a later request's run ran instead; exit status 1")
    ] * 2
    assert upkeep.prune_runs() == 4  # folded: their age is counted from now again


def lifecycles(tell: Recorder, count: int, start: int = 0) -> None:
    for n in range(start, start + count):
        ticket = tell.ticket(f"run-{n}", "deploy", 1000.0 + n)
        ticket.admitted("started")
        ticket.started(run_spec(f"run-{n}"))
        ticket.finished(b"out\n", None)


def test_events_no_admin_listener_folds_are_folded_by_the_owners_and_an_admin_listener_reads_them_later(
    pg_database: str, state: Callable[[str], PostgresState], history: Callable[..., PostgresHistory]
) -> None:
    a = state("a")
    tell = recorder(a)
    lifecycles(tell, 50)
    events = rows(pg_database, "hookrunner_events")
    assert events == 200
    patient = Upkeep(a, history("a", keep=10), done_age=40.0)
    assert patient.fold_after == 10.0
    assert patient.fold_unfolded() == 0  # an admin listener would have folded them by now: not the owners'
    upkeep = Upkeep(a, history("a", keep=10), done_age=0.4)
    time.sleep(0.2)
    assert upkeep.run() == (200, 0)
    assert rows(pg_database, "hookrunner_events") == 0
    assert rows(pg_database, "hookrunner_history") == 10  # -state-keep's newest ended runs
    lifecycles(tell, 3, start=50)
    admin = history(keep=10)  # an admin listener started later: the newest records, each once
    assert [(r["id"], r["outcome"]) for r in admin.runs(limit=100)] == [
        (f"run-{n}", "ok") for n in reversed(range(43, 53))
    ]
    assert patient.fold_unfolded() == 0 == rows(pg_database, "hookrunner_events")


def test_the_historys_retention_applies_to_records_the_last_fold_only_ended(
    pg_database: str, state: Callable[[str], PostgresState], history: Callable[..., PostgresHistory]
) -> None:
    a = state("a")
    tell = recorder(a)
    tickets = [tell.ticket(f"run-{n}", "deploy", 1000.0 + n) for n in range(5)]
    upkeep = Upkeep(a, history("a", keep=2), done_age=0.4)
    time.sleep(0.2)
    assert upkeep.run() == (5, 0)  # five records begin, none over: none deleted
    for ticket in tickets:
        ticket.finished(b"", None)
    time.sleep(0.2)
    assert upkeep.run() == (5, 0)  # they end, and no record begins: the fold does not apply the retention
    assert rows(pg_database, "hookrunner_history") == 5
    assert upkeep.run() == (0, 0)  # the next round does
    assert rows(pg_database, "hookrunner_history") == 2


def test_a_late_word_on_a_record_the_retention_deleted_opens_no_record(
    state: Callable[[str], PostgresState], history: Callable[..., PostgresHistory]
) -> None:
    # Replica a admitted the run, b ran it; b's end is folded, then the retention deletes the record
    # (newer runs came); a's own end, written later, must not bring back a record with no id.
    a, b = state("a"), state("b")
    admitted = recorder(a).ticket("early", "deploy", 1.0)
    admitted.admitted("queued")
    ran = recorder(b).adopt("a", "early", "deploy", 1.0)
    ran.started(run_spec("early"))
    ran.finished(b"", None)
    lifecycles(recorder(b), 3)
    admin = history(keep=2)
    admin.catch_up()
    assert [r["id"] for r in admin.runs()] == ["run-2", "run-1"]
    admitted.served_by_run(None)
    admin.catch_up()
    assert [r["id"] for r in admin.runs()] == ["run-2", "run-1"]


def test_two_replicas_at_it_at_once_neither_fail_nor_do_anything_twice(
    pg_database: str, state: Callable[[str], PostgresState], history: Callable[..., PostgresHistory]
) -> None:
    a, b = state("a"), state("b")
    finished_runs(a, 150, "a")
    finished_runs(b, 150, "b")
    tell = recorder(a)
    lifecycles(tell, 100)
    upkeeps = [Upkeep(r, history(r.replica, keep=1000), done_age=0.4, batch=10) for r in (a, b)]
    time.sleep(0.5)
    # The events are older than the runs' ends: fold them first, both at once, then prune, both at once.
    start = threading.Barrier(2)

    def each(upkeep: Upkeep) -> tuple[int, int]:
        start.wait()
        folded = upkeep.fold_unfolded()
        start.wait()
        return folded, upkeep.prune_runs()

    with ThreadPoolExecutor(2) as pool:  # an error in either is raised here
        results = list(pool.map(each, upkeeps))
    assert sum(folded for folded, _ in results) == 400
    assert sum(pruned for _, pruned in results) == 300
    assert rows(pg_database, "hookrunner_runs") == 0
    assert rows(pg_database, "hookrunner_events") == 0
    admin = history()
    assert sorted(r["id"] for r in admin.runs(limit=1000)) == sorted(f"run-{n}" for n in range(100))
