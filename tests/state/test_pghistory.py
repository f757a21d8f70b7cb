"""The shared run history (hookrunner/state/pghistory.py) on a real, throwaway PostgreSQL (tests/pg_cluster.py):
two PostgresState instances stand for two replicas and record a run's events as the run path tells them
(run/history.py's Recorder); the reader gives the embedded store's records (the same JSON, field for field,
for the same events), each naming its replica, pages and filters them, follows a running run's output,
applies the retention rules, and tells a database that is away (StateUnavailable) and then recovers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from pg_cluster import Cluster
from waiting import eventually

from hookrunner.hooks.model import Limits
from hookrunner.run.history import Recorder
from hookrunner.state.backend import HistoryReader, StateUnavailable
from hookrunner.state.historystore import HistoryStore
from hookrunner.state.model import Event, RunSpec
from hookrunner.state.pghistory import DOWN_FOR, PostgresHistory
from hookrunner.state.postgres import PostgresState


def spec(n: int, hook: str = "deploy") -> RunSpec:
    return RunSpec(
        hook, f"r{n}", "/bin/echo", ("/bin/echo", str(n)), (("TOKEN", "s3cret"),), (("F", b"xy"),), "/srv"
    )


@pytest.fixture
def states(pg_database: str) -> Iterator[Callable[[str], PostgresState]]:
    made: list[PostgresState] = []

    def make(name: str) -> PostgresState:
        made.append(PostgresState(pg_database, name))
        return made[-1]

    yield make
    for state in made:
        state.close()


@pytest.fixture
def readers(pg_database: str) -> Iterator[Callable[..., PostgresHistory]]:
    made: list[PostgresHistory] = []

    def make(**kwargs: Any) -> PostgresHistory:
        made.append(PostgresHistory(pg_database, "admin", **kwargs))
        return made[-1]

    yield make
    for reader in made:
        reader.close()


def recorder(*sinks: Callable[[Event], None], keep: int = 64 << 10) -> Recorder:
    def sink(event: Event) -> None:
        for each in sinks:
            each(event)

    return Recorder(sink, keep)


def lifecycle(history: Recorder, n: int, hook: str = "deploy", error: str | None = None) -> None:
    """One run, as the run path tells it: accepted, admitted, started, its output, ended."""
    ticket = history.ticket(f"run-{n}", hook, 1000.0 + n)
    ticket.admitted("started")
    ticket.started(spec(n, hook))
    ticket.finished(f"line {n}\n".encode(), error)


def without_replica(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records as the embedded store gives them: no `replica`, and `seq` left out (each store numbers its
    own records: growing, unique, but SQLite's counts every event)."""
    return [
        {k: v for k, v in record.items() if k not in ("replica", "admitted_by", "seq")} for record in records
    ]


def test_the_same_records_as_the_embedded_store_for_the_same_events(
    states: Callable[[str], PostgresState], readers: Callable[..., PostgresHistory]
) -> None:
    embedded = HistoryStore("", keep=100)
    state = states("a")
    history = recorder(embedded.apply, state.record)
    history.hooks([{"file": "/etc/hooks.yaml", "hooks": ["deploy", "build"], "loaded_at": 1000.5}])
    lifecycle(history, 1)
    lifecycle(history, 2, error="exit status 3")
    lifecycle(history, 3, hook="build", error="signal: killed")
    lifecycle(history, 4, error="command timed out after 1s")
    history.ticket("run-5", "deploy", 1005.0).refused("hook deploy is busy: its queue is full")
    queued = history.ticket("run-6", "build", 1006.0)
    queued.admitted("queued")
    coalesced = history.ticket("run-7", "build", 1007.0)
    coalesced.admitted("coalesced")
    coalesced.served_by_run("exit status 1")
    running = history.ticket("run-8", "deploy", 1008.0)
    running.started(spec(8))

    reader: HistoryReader = readers()
    shared = reader.runs(limit=500)
    assert [r["replica"] for r in shared] == ["a"] * 8
    # The same fields, in order, then who ran it and who admitted it.
    assert list(shared[0]) == [*embedded.runs(limit=1)[0], "replica", "admitted_by"]
    assert without_replica(shared) == without_replica(embedded.runs(limit=500))
    for n in range(1, 9):
        assert without_replica([reader.run(f"run-{n}") or {}]) == without_replica(
            [embedded.run(f"run-{n}") or {}]
        )
        assert (reader.run(f"run-{n}") or {}).get("replica") == "a"
    assert without_replica([h["last_run"] for h in reader.hooks()]) == without_replica(
        [h["last_run"] for h in embedded.hooks()]
    )
    assert [{**h, "last_run": None} for h in reader.hooks()] == [
        {**h, "last_run": None} for h in embedded.hooks()
    ]
    for query in ({"hook": "build"}, {"outcome": "failed"}, {"limit": 3}):
        assert without_replica(reader.runs(**query)) == without_replica(embedded.runs(**query)), query
    older = [store.runs(limit=2, before=store.runs(limit=4)[-1]["seq"]) for store in (reader, embedded)]
    assert [r["id"] for r in older[0]] == [r["id"] for r in older[1]] == ["run-4", "run-3"]
    record = reader.run("run-2")
    assert record is not None
    assert (record["outcome"], record["exit_code"], record["output"]) == ("failed", 3, b"line 2\n")
    assert record["env"] == [["TOKEN", 6]] and b"s3cret" not in repr(record).encode()
    assert reader.run("no-such-run") is None
    embedded.close()


def test_two_replicas_each_named_paged_and_filtered(
    states: Callable[[str], PostgresState], readers: Callable[..., PostgresHistory]
) -> None:
    a, b = recorder(states("replica-a").record), recorder(states("replica-b").record)
    for n in range(10):
        lifecycle(
            a if n % 2 else b, n, hook="odd" if n % 2 else "even", error=None if n % 3 else "exit status 1"
        )
    reader, other = readers(), readers()
    runs = reader.runs(limit=500)
    assert [r["id"] for r in runs] == [f"run-{n}" for n in reversed(range(10))]
    assert {r["id"]: r["replica"] for r in runs} == {
        f"run-{n}": "replica-a" if n % 2 else "replica-b" for n in range(10)
    }
    seqs = [r["seq"] for r in runs]
    assert seqs == sorted(seqs, reverse=True) and len(set(seqs)) == 10
    assert other.runs(limit=500) == runs  # a second admin listener sees the same records, the same seqs

    page, pages = reader.runs(limit=4), []
    while page:
        pages += page
        page = reader.runs(limit=4, before=page[-1]["seq"]) if len(page) == 4 else []
    assert pages == runs
    assert [r["id"] for r in reader.runs(hook="odd")] == ["run-9", "run-7", "run-5", "run-3", "run-1"]
    assert [r["id"] for r in reader.runs(outcome="failed")] == ["run-9", "run-6", "run-3", "run-0"]
    assert [r["id"] for r in reader.runs(hook="even", outcome="failed")] == ["run-6", "run-0"]
    one = reader.run("run-3")
    assert one is not None and one["replica"] == "replica-a" and one["output"] == b"line 3\n"
    assert reader.run("run-42") is None and reader.runs(hook="none") == []


def test_an_id_sent_twice_gives_its_newest_record(
    states: Callable[[str], PostgresState], readers: Callable[..., PostgresHistory]
) -> None:
    a, b = recorder(states("a").record), recorder(states("b").record)
    a.ticket("same", "deploy", 1.0).finished(b"first", None)
    b.ticket("same", "deploy", 2.0).finished(b"second", "exit status 1")
    reader = readers()
    one = reader.run("same")
    assert one is not None and (one["replica"], one["output"]) == ("b", b"second")
    assert [r["replica"] for r in reader.runs()] == ["b", "a"]


def test_a_running_runs_output_grows_then_its_end_keeps_the_tail(
    states: Callable[[str], PostgresState], readers: Callable[..., PostgresHistory]
) -> None:
    history = recorder(states("a").record, keep=8)
    reader = readers(output_limit=8)
    ticket = history.ticket("live", "deploy")
    ticket.started(spec(1))
    ticket.output(b"hello ")
    history.batcher.flush()
    first = reader.run("live")
    assert first is not None
    assert (first["outcome"], first["output"], first["output_size"]) == ("running", b"hello ", 6)
    ticket.output(b"world, again")
    history.batcher.flush()
    assert reader.catch_up() == 1  # a read within FRESH of the last fold reads without folding
    second = reader.runs()[0]
    assert (second["output_size"], second["output_truncated"]) == (18, True)
    followed = reader.followed("live")
    assert followed is not None and followed["output"] == b"d, again" and followed["key"].startswith("a ")
    assert reader.outcomes([followed["key"], "nobody"]) == {followed["key"]: "running"}
    ticket.finished(b"hello world, again!", None)
    reader.catch_up()
    done = reader.by_key(followed["key"])
    assert done is not None
    assert (done["outcome"], done["output"], done["output_size"]) == ("ok", b", again!", 19)


def test_a_replay_by_another_replica_marks_the_earlier_record(
    states: Callable[[str], PostgresState], readers: Callable[..., PostgresHistory]
) -> None:
    a, b = recorder(states("a").record), recorder(states("b").record)
    a.ticket("r1", "deploy", 5.0).started(spec(1))
    b.replaying("r1", "deploy", 5.0)
    again = b.ticket("r1", "deploy", 5.0)
    again.admitted("replayed")
    again.finished(b"", None)
    runs = readers().runs()
    assert [(r["replica"], r["kind"], r["outcome"]) for r in runs] == [
        ("b", "replayed", "ok"),
        ("a", "immediate", "replayed"),
    ]


def replica_recorders(states: Callable[[str], PostgresState]) -> tuple[Recorder, Recorder]:
    """The recorders of two replicas, a and b, each writing to the database through its own state."""
    made = []
    for name in ("a", "b"):
        made.append(recorder(states(name).record, keep=64))
        made[-1].replica = name
    return made[0], made[1]


def test_a_run_admitted_by_one_replica_and_run_by_another_is_one_record_in_any_order(
    states: Callable[[str], PostgresState], readers: Callable[..., PostgresHistory]
) -> None:
    # Replica a admits (its ticket is the record), replica b runs it on an adopted ticket; a then learns
    # that the run ended elsewhere and ends its ticket as served by it, which the runner's events outrank.
    a, b = replica_recorders(states)
    reader = readers()
    b_first = b.adopt("a", "early", "deploy", 7.0)  # b's events folded before a's own
    b_first.started(spec(1))
    reader.catch_up()
    # Until a's own events come, the record is the runner's: a run another replica admitted and this one
    # claims first has waited (its admitting replica may have died before its events were written).
    assert [(r["id"], r["kind"], r["outcome"]) for r in reader.runs()] == [("early", "queued", "running")]
    admitted = a.ticket("early", "deploy", 7.0)
    admitted.admitted("queued")
    b_first.output(b"half")
    b.batcher.flush()
    reader.catch_up()
    running = reader.run("early")
    assert running is not None and (running["outcome"], running["replica"], running["output"]) == (
        "running",
        "b",
        b"half",
    )
    b_first.finished(b"half and all\n", None)
    admitted.served_by_run(None)  # a's word, after the runner's: ignored
    admitted_only = a.ticket("late", "deploy", 8.0)
    admitted_only.admitted("queued")
    reader.catch_up()
    late = b.adopt("a", "late", "deploy", 8.0)
    late.started(spec(2))
    late.finished(b"", "exit status 2")
    admitted_only.served_by_run("exit status 2")
    reader.catch_up()
    runs = reader.runs()
    assert [
        (r["id"], r["kind"], r["outcome"], r["replica"], r["admitted_by"], r["detail"], r["exit_code"])
        for r in runs
    ] == [
        ("late", "queued", "failed", "b", "a", "exit status 2", 2),
        ("early", "queued", "ok", "b", "a", "", 0),
    ]
    early = reader.run("early")
    assert early is not None and early["output"] == b"half and all\n" and early["started_at"] is not None


def test_a_run_whose_admitting_replica_died_before_telling_how_is_told_as_queued(
    states: Callable[[str], PostgresState], readers: Callable[..., PostgresHistory]
) -> None:
    # Replica a opened the request's record and was killed before its `admitted` event was written; b,
    # claiming on its first attempt a run a admitted, knows it waited.
    a, b = replica_recorders(states)
    reader = readers()
    a.ticket("lost", "deploy", 9.0)
    reader.catch_up()
    adopted = b.adopt("a", "lost", "deploy", 9.0)
    adopted.started(spec(3))
    adopted.finished(b"", None)
    reader.catch_up()
    assert [(r["id"], r["kind"], r["outcome"], r["replica"], r["admitted_by"]) for r in reader.runs()] == [
        ("lost", "queued", "ok", "b", "a")
    ]


def test_requests_coalesced_into_a_run_end_with_it_though_their_replica_is_gone(
    states: Callable[[str], PostgresState], readers: Callable[..., PostgresHistory]
) -> None:
    # Replica a admits c1 (queued behind `hold`) and dies; b's c2 and c3 are coalesced into its run, which
    # b runs with c3's values: c1's and c2's records end with it, c1's though nobody is left to end it.
    limits = Limits(max_concurrency=1, coalesce=True)
    a_state, b_state = states("a"), states("b")
    a, b = recorder(a_state.record), recorder(b_state.record)
    a.replica, b.replica = "a", "b"
    tickets = {}
    for rid, state, history, at in (
        ("hold", a_state, a, 10.0),
        ("c1", a_state, a, 11.0),
        ("c2", b_state, b, 12.0),
        ("c3", b_state, b, 13.0),
    ):
        tickets[rid] = history.ticket(rid, "h", at)
        admission = state.admit(RunSpec("h", rid, "/bin/true", (), (), (), "/"), limits, None, at)
        tickets[rid].admitted(admission.how)
    tickets["c3"].started(spec(3, "h"))
    tickets["c3"].finished(b"", "exit status 1")
    reader = readers()
    reader.catch_up()
    runs = {r["id"]: r for r in reader.runs()}
    assert [(r["kind"], r["outcome"], r["detail"]) for r in (runs["c1"], runs["c2"], runs["c3"])] == [
        ("queued", "failed", "coalesced: a later request's run ran instead; exit status 1"),
        ("coalesced", "failed", "coalesced: a later request's run ran instead; exit status 1"),
        ("coalesced", "failed", "exit status 1"),
    ]
    assert runs["c1"]["exit_code"] == 1 and runs["c1"]["started_at"] is None
    assert (runs["hold"]["outcome"], runs["hold"]["kind"]) == ("pending", "immediate")  # not served by it


def test_malformed_events_are_ignored_and_folding_goes_on(
    states: Callable[[str], PostgresState], readers: Callable[..., PostgresHistory]
) -> None:
    state = states("a")
    for event in (
        {"event": "run", "key": "k1", "id": "bad", "exit_code": "three", "accepted_at": "x", "pid": 1 << 70},
        {"event": "run", "key": 5},
        {"event": "output", "key": "k1", "offset": 9, "size": 3, "output": "!!"},
        {"event": "output", "key": "k1", "offset": 0, "size": 3, "output": "not base64!"},
        {"event": "replaying", "id": ["x"]},
        {"event": "hooks", "files": "nope"},
        {"event": "whatever"},
        ["not", "a", "dict"],
    ):
        state.record(event)  # type: ignore[arg-type]
    recorder(state.record).ticket("good", "deploy", 1.0).finished(b"ok", None)
    runs = readers().runs()
    assert [(r["id"], r["outcome"], r["exit_code"], r["accepted_at"]) for r in runs] == [
        ("good", "ok", 0, 1.0),
        ("bad", "pending", None, None),
    ]


def test_retention_by_count_and_by_age(
    states: Callable[[str], PostgresState], readers: Callable[..., PostgresHistory], pg_database: str
) -> None:
    history = recorder(states("a").record)
    now = time.time()
    for n in range(12):
        ticket = history.ticket(f"run-{n}", "deploy", now - 3600 if n < 3 else now)
        if n != 0:  # run-0 never ends: retention leaves a run that is not over alone
            ticket.finished(b"", None)
    reader = readers(keep=5, max_age=600.0)
    reader.runs()
    assert reader.prune() == 0  # the first fold applied the rules already
    assert [r["id"] for r in reader.runs(limit=100)] == [f"run-{n}" for n in (11, 10, 9, 8, 7, 0)]
    with psycopg.connect(pg_database) as conn:
        assert conn.execute("SELECT count(*) FROM hookrunner_events").fetchone() == (0,)  # folded once
    by_age = readers(keep=100, max_age=600.0)
    history.ticket("old", "deploy", now - 3600).finished(b"", None)
    assert by_age.prune() == 0 and by_age.runs()[0]["id"] == "old"  # not folded before this read
    assert by_age.prune() == 1 and by_age.run("old") is None


def test_the_hooks_this_replicas_workers_report(
    states: Callable[[str], PostgresState], readers: Callable[..., PostgresHistory]
) -> None:
    reader = readers()
    reader.note_hooks(
        {"event": "hooks", "pid": 1, "files": [{"file": "/b.yaml", "hooks": ["b"], "loaded_at": 2.0}]}
    )
    states("x").record(
        {"event": "hooks", "pid": 2, "files": [{"file": "/a.yaml", "hooks": ["a1", "a2"], "loaded_at": 1.0}]}
    )
    recorder(states("y").record).ticket("r", "a2", 3.0).finished(b"", None)
    hooks = reader.hooks()
    assert [(h["id"], h["file"], h["loaded_at"]) for h in hooks] == [
        ("a1", "/a.yaml", 1.0),
        ("a2", "/a.yaml", 1.0),
        ("b", "/b.yaml", 2.0),
    ]
    assert [h["last_run"] and (h["last_run"]["id"], h["last_run"]["replica"]) for h in hooks] == [
        None,
        ("r", "y"),
        None,
    ]
    reader.note_hooks(
        {"event": "hooks", "pid": 1, "files": [{"file": "/a.yaml", "hooks": ["a3"], "loaded_at": 4.0}]}
    )
    reader.catch_up()  # writes this replica's report
    assert [h["id"] for h in readers().hooks()] == ["a3", "b"]  # the latest report of a file wins


def test_a_database_away_is_state_unavailable_then_it_recovers(
    pg_cluster: Cluster, states: Callable[[str], PostgresState], readers: Callable[..., PostgresHistory]
) -> None:
    history = recorder(states("a").record)
    lifecycle(history, 1)
    reader = readers()
    assert [r["id"] for r in reader.runs()] == ["run-1"]
    with pg_cluster.crashed():
        for read in (reader.runs, reader.hooks, lambda: reader.run("run-1"), lambda: reader.outcomes(["k"])):
            started = time.monotonic()
            with pytest.raises(StateUnavailable, match="PostgreSQL is unavailable"):
                read()
            assert time.monotonic() - started < 6

    def answers() -> bool:
        try:
            return [r["id"] for r in reader.runs()] == ["run-1"]
        except StateUnavailable:
            return False  # still recovering from the crash, or within DOWN_FOR of the last failure

    assert eventually(answers, timeout=30, interval=0.2)
    lifecycle(history, 2)
    reader.catch_up()
    assert [r["id"] for r in reader.runs()] == ["run-2", "run-1"]


def test_a_statement_held_by_a_lock_ends_at_the_timeout(
    states: Callable[[str], PostgresState], readers: Callable[..., PostgresHistory], pg_database: str
) -> None:
    lifecycle(recorder(states("a").record), 1)
    reader = readers(timeout=1.0)
    reader.runs()
    with psycopg.connect(pg_database) as locker:
        locker.execute("LOCK TABLE hookrunner_history IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        with pytest.raises(StateUnavailable, match="statement timeout"):
            reader.runs()
        assert time.monotonic() - started < 4
    time.sleep(DOWN_FOR)
    assert [r["id"] for r in reader.runs()] == ["run-1"]


def test_two_admin_listeners_folding_at_once_fold_each_event_once(
    states: Callable[[str], PostgresState], readers: Callable[..., PostgresHistory]
) -> None:
    history = recorder(states("a").record)
    first, second = readers(), readers()
    done = threading.Event()

    def keep_folding(reader: PostgresHistory) -> None:
        while not done.is_set():
            reader.catch_up()

    threads = [threading.Thread(target=keep_folding, args=(r,)) for r in (first, second)]
    for thread in threads:
        thread.start()
    for n in range(40):
        lifecycle(history, n)
    done.set()
    for thread in threads:
        thread.join()
    runs = first.runs(limit=100)
    assert {(r["outcome"], r["kind"]) for r in runs} == {("ok", "immediate")}
    assert [r["id"] for r in runs] == [f"run-{n}" for n in reversed(range(40))]
    assert second.runs(limit=100) == runs


def test_arguments_jsonb_cannot_hold_are_recorded_replaced(
    states: Callable[[str], PostgresState], readers: Callable[..., PostgresHistory]
) -> None:
    # An argument's undecodable byte (kept by surrogateescape) or a NUL: jsonb refuses both, and the event
    # must neither raise out of record() (the run path) nor be lost.
    history = recorder(states("a").record)
    ticket = history.ticket("odd", "deploy", 1.0)
    ticket.started(
        RunSpec("deploy", "odd", "/bin/echo", ("/bin/echo", "x\udcff", "a\x00b", "é"), (), (), "/")
    )
    ticket.finished(b"", "exit status 1: \x00")
    record = readers().run("odd")
    assert record is not None
    assert record["argv"] == ["/bin/echo", "x\ufffd", "a\ufffdb", "é"]
    assert (record["outcome"], record["detail"]) == ("failed", "exit status 1: \ufffd")
