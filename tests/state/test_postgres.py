"""The PostgreSQL run state (hookrunner/state/postgres.py) on a real, throwaway PostgreSQL (tests/pg_cluster.py):
two PostgresState instances on one database stand for two replicas. Caps under concurrent admits from both,
queue order, coalescing across them, Busy, leases taken over after lease + grace with the attempt checked in
every write, NOTIFY waking the other replica, and a database that crashes and comes back."""

from __future__ import annotations

import io
import select
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from pg_cluster import PASSWORD, Cluster

from hookrunner.hooks.model import Limits
from hookrunner.state.backend import RunState, StateUnavailable
from hookrunner.state.model import Claim, Outcome, ProcessId, RunSpec
from hookrunner.state.postgres import SCHEMA_VERSION, PostgresState
from hookrunner.state.slots import COALESCED, QUEUED, STARTED, Busy

OK = Outcome("exit status 0")


def spec(hook: str, n: int) -> RunSpec:
    return RunSpec(hook, f"req-{hook}-{n}", "/bin/true", ("/bin/true", str(n)), (("N", str(n)),), (), "/")


@pytest.fixture
def replicas(pg_database: str) -> Iterator[Callable[..., PostgresState]]:
    """Makes PostgresState instances ("replicas") on the test's database; closes them all at the end."""
    made: list[PostgresState] = []

    def make(name: str, **kwargs: float) -> PostgresState:
        state = PostgresState(pg_database, name, **kwargs)  # type: ignore[arg-type]
        made.append(state)
        return state

    yield make
    for state in made:
        state.close()


def test_it_is_a_run_state(replicas: Callable[..., PostgresState]) -> None:
    state: RunState = replicas("a")
    assert state.replica == "a"
    assert state.counts().running == 0


def test_start_queue_busy_and_nothing_kept_of_a_refusal(replicas: Callable[..., PostgresState]) -> None:
    a, b = replicas("a"), replicas("b")
    limits = Limits(max_concurrency=1, max_queue=1, retry_after=7)
    first = a.admit(spec("h", 1), limits, None, 100.0)
    assert first.how == STARTED and first.claim is not None
    assert (first.claim.attempt, first.claim.accepted_at, first.claim.spec) == (1, 100.0, spec("h", 1))
    assert first.claim.lease_until > time.time() + 20  # the default lease, 30 s, on the database's clock
    second = b.admit(spec("h", 2), limits, None, 101.0)
    assert (second.how, second.claim) == (QUEUED, None)
    with pytest.raises(Busy) as busy:
        a.admit(spec("h", 3), limits, None, 102.0)
    assert (busy.value.hook_id, busy.value.retry_after) == ("h", 7)
    other = b.admit(spec("other", 1), limits, None, 103.0)  # limits are per hook
    assert other.how == STARTED and other.claim is not None
    counts = a.counts()
    assert (counts.running, counts.queued) == (2, 1)
    assert counts.per_hook == (("h", 1, 1), ("other", 1, 0))
    assert b.counts() == counts  # one state for both
    # The refused run left no row: finishing the first lets the second, and only it, be claimed.
    assert a.finish(first.claim, OK)
    (claim,) = b.claims(10)
    assert (claim.run_id, claim.spec, claim.attempt, claim.previous) == (second.run_id, spec("h", 2), 1, ())
    assert a.claims(10) == [] and b.claims(10) == []


def test_caps_hold_under_concurrent_admits_from_both_replicas(replicas: Callable[..., PostgresState]) -> None:
    # Each replica admits from three threads and claims from a fourth; every run "runs" for a few ms in this
    # process, which counts how many run at once: never more than the hook's limit or the global cap.
    states = [replicas("a", max_running=3), replicas("b", max_running=3)]
    limits = {"h1": Limits(max_concurrency=2, max_queue=100), "h2": Limits(max_concurrency=2, max_queue=100)}
    guard = threading.Lock()
    now: dict[str, int] = {"h1": 0, "h2": 0, "all": 0}
    peak: dict[str, int] = {"h1": 0, "h2": 0, "all": 0}
    ran: list[str] = []
    admitted: list[str] = []
    errors: list[BaseException] = []
    admitting = threading.Event()
    admitting.set()

    def run(state: PostgresState, claim: Claim) -> None:
        hook = claim.spec.hook_id
        with guard:
            now[hook] += 1
            now["all"] += 1
            for key in (hook, "all"):
                peak[key] = max(peak[key], now[key])
            ran.append(claim.spec.request_id)
        time.sleep(0.005)
        with guard:
            now[hook] -= 1
            now["all"] -= 1
        assert state.finish(claim, OK)

    def admitter(state: PostgresState, thread: int) -> None:
        try:
            for n in range(8):
                hook = "h1" if n % 2 else "h2"
                run_spec = spec(hook, thread * 100 + n)
                admission = state.admit(run_spec, limits[hook], None, time.time())
                with guard:
                    admitted.append(run_spec.request_id)
                if admission.claim is not None:
                    run(state, admission.claim)
        except BaseException as exc:  # noqa: B036 - reported below, with the thread's
            errors.append(exc)

    def claimer(state: PostgresState) -> None:
        try:
            while admitting.is_set() or state.counts().queued or state.counts().running:
                for claim in state.claims(4):
                    run(state, claim)
                time.sleep(0.002)
        except BaseException as exc:  # noqa: B036
            errors.append(exc)

    admitters = [
        threading.Thread(target=admitter, args=(state, i * 10 + t))
        for i, state in enumerate(states)
        for t in range(3)
    ]
    claimers = [threading.Thread(target=claimer, args=(state,)) for state in states]
    for thread in admitters + claimers:
        thread.start()
    for thread in admitters:
        thread.join(60)
    admitting.clear()
    for thread in claimers:
        thread.join(60)
    assert errors == []
    assert len(admitted) == 48
    assert sorted(ran) == sorted(admitted)  # every admitted run ran, once
    assert peak["h1"] <= 2 and peak["h2"] <= 2 and peak["all"] <= 3, peak
    assert peak["all"] >= 2, peak  # the runs did overlap: the caps, not luck, held them
    assert states[0].counts().running == states[0].counts().queued == 0


def test_the_queue_is_first_in_first_out_across_replicas(replicas: Callable[..., PostgresState]) -> None:
    a, b = replicas("a"), replicas("b")
    limits = Limits(max_concurrency=1, max_queue=10)
    holder = a.admit(spec("h", 0), limits, None, 0.0).claim
    assert holder is not None
    queued = [(a if n % 2 else b).admit(spec("h", n), limits, None, float(n)) for n in range(1, 6)]
    assert [q.how for q in queued] == [QUEUED] * 5
    order = []
    for n in range(5):
        claimer = b if n % 2 else a
        assert claimer.finish(holder, OK)
        claims = claimer.claims(10)
        assert len(claims) == 1, claims  # one place: one run at a time
        holder = claims[0]
        order.append(holder.run_id)
    assert order == [q.run_id for q in queued]


def test_coalescing_across_replicas(replicas: Callable[..., PostgresState], pg_database: str) -> None:
    a, b = replicas("a"), replicas("b")
    limits = Limits(max_concurrency=1, max_queue=2, coalesce=True)
    running = a.admit(spec("h", 0), limits, "dev", 0.0).claim
    assert running is not None
    dev = b.admit(spec("h", 1), limits, "dev", 1.0)
    main = a.admit(spec("h", 2), limits, "main", 2.0)
    assert (dev.how, main.how) == (QUEUED, QUEUED)
    assert a.admit(spec("h", 3), limits, "dev", 3.0).__dict__ == {
        "how": COALESCED,
        "run_id": dev.run_id,
        "claim": None,
    }
    assert b.admit(spec("h", 4), limits, "dev", 4.0).run_id == dev.run_id
    assert b.admit(spec("h", 5), limits, "main", 5.0).run_id == main.run_id
    with pytest.raises(Busy):
        a.admit(spec("h", 6), limits, "tag", 6.0)  # a third group, and the queue holds two
    assert a.counts().queued == 2
    assert a.finish(running, OK)
    (claim,) = b.claims(5)
    assert (claim.run_id, claim.spec) == (dev.run_id, spec("h", 4))  # it runs with the newest request's spec
    assert b.finish(claim, Outcome("exit status 3"))
    # Every request folded into the dev run keeps its row, and ends with the run, with its outcome.
    with psycopg.connect(pg_database) as conn:
        rows = conn.execute(
            "SELECT request_id, state, outcome, accepted_at FROM hookrunner_runs"
            " WHERE coalesced_into = %s OR id = %s ORDER BY request_id",
            (dev.run_id, dev.run_id),
        ).fetchall()
    assert rows == [(f"req-h-{n}", "done", "exit status 3", float(n)) for n in (1, 3, 4)]


def test_the_global_cap_is_one_line_over_replicas_and_hooks(replicas: Callable[..., PostgresState]) -> None:
    a, b = replicas("a", max_running=1), replicas("b", max_running=1)
    free = Limits()
    first = a.admit(spec("x", 1), free, None, 0.0)
    second = b.admit(spec("y", 1), free, None, 1.0)
    third = a.admit(spec("x", 2), free, None, 2.0)
    assert first.claim is not None
    assert (second.how, second.claim, third.how, third.claim) == (STARTED, None, STARTED, None)  # in the line
    assert (a.counts().running, a.counts().queued) == (1, 2)
    assert b.claims(5) == [] and a.claims(5) == []
    assert a.finish(first.claim, OK)
    assert [c.run_id for c in a.claims(5)] == [second.run_id]  # the line's first, whichever replica claims
    assert b.claims(5) == []


def test_a_refused_run_frees_its_places(replicas: Callable[..., PostgresState]) -> None:
    a, b = replicas("a"), replicas("b")
    limits = Limits(max_concurrency=1, max_queue=1)
    first = a.admit(spec("h", 1), limits, None, 0.0)
    second = b.admit(spec("h", 2), limits, None, 1.0)
    assert first.claim is not None and a.refuse(first.claim, Outcome("not run: no hook h"))
    (claim,) = b.claims(5)
    assert claim.run_id == second.run_id
    assert b.refuse(claim, Outcome("not replayed: replay is false"))
    assert a.counts().running == a.counts().queued == 0


def test_a_replica_that_stops_renewing_loses_its_run_to_the_other(
    replicas: Callable[..., PostgresState],
) -> None:
    a = replicas("a", lease=1.0, grace=0.5)
    b = replicas("b", lease=1.0, grace=0.5)
    claim = a.admit(spec("h", 1), Limits(max_concurrency=1), None, 0.0).claim
    assert claim is not None
    assert a.started(claim, [ProcessId(4242, 777), ProcessId(4243, 778)])
    assert a.renew([claim]) == []  # renewed while its lease holds
    assert b.claims(5) == []  # the lease holds: nobody else may take it
    time.sleep(1.1)
    assert b.claims(5) == []  # the lease is over, the grace is not
    assert a.renew([claim]) == [claim]  # past its lease, a holder may not renew: it must kill its command
    time.sleep(0.6)
    (taken,) = b.claims(5)
    assert (taken.run_id, taken.attempt, taken.replayed) == (claim.run_id, 2, True)
    assert taken.previous == (ProcessId(4242, 777), ProcessId(4243, 778))  # to be ended first
    assert a.renew([claim]) == [claim]  # lost
    assert not a.started(claim, [ProcessId(1, 1)])  # a late write from the old attempt is refused
    assert not a.finish(claim, OK)
    assert b.renew([taken]) == []
    assert b.finish(taken, OK)
    assert not b.finish(taken, OK)  # once
    assert a.counts().running == 0


def test_a_take_over_ends_only_processes_of_its_own_pid_space(
    replicas: Callable[..., PostgresState], pg_database: str
) -> None:
    # A pid and a start time name a process only in the kernel boot and pid namespace they were read in:
    # processes recorded by a replica on another node (or in another container) are not handed to the
    # replica that takes the run over, which would end whatever of its own bears those numbers.
    a = replicas("a", lease=0.5, grace=0.2)
    b = replicas("b", lease=0.5, grace=0.2)
    here = a.admit(spec("h", 1), Limits(), None, 0.0).claim
    there = a.admit(spec("h", 2), Limits(), None, 0.0).claim
    assert here is not None and there is not None
    assert a.started(here, [ProcessId(4242, 777)])
    assert a.started(there, [ProcessId(4343, 888)])
    with psycopg.connect(pg_database) as conn:  # as a replica on another node would have recorded it
        conn.execute(
            "UPDATE hookrunner_runs SET processes = '[[4343, 888, \"another-boot/4026531836\"]]' WHERE id = %s",
            (there.run_id,),
        )
    time.sleep(0.8)
    taken = {claim.run_id: claim.previous for claim in b.claims(5)}
    assert taken == {here.run_id: (ProcessId(4242, 777),), there.run_id: ()}


def test_a_restarted_replica_takes_back_its_own_runs_at_once(replicas: Callable[..., PostgresState]) -> None:
    before = replicas("a")
    claim = before.admit(spec("h", 1), Limits(), None, 0.0).claim
    assert claim is not None
    before.close()
    after = replicas("a")  # the same replica's next life: no lease + grace to wait for
    (taken,) = after.claims(5)
    assert (taken.run_id, taken.attempt) == (claim.run_id, 2)
    assert after.claims(5) == []
    mine = after.admit(spec("h", 2), Limits(), None, 0.0).claim
    assert mine is not None and after.claims(5) == []  # its own life's claims are not taken back


def test_notify_wakes_the_other_replica_well_before_the_poll(replicas: Callable[..., PostgresState]) -> None:
    a = replicas("a")
    b = replicas("b", poll=30.0)
    waiter = b.wake()
    assert waiter is b.wake()
    assert waiter.wait(0)  # a new waiter's first wait: look for work now
    assert not waiter.wait(0.2)  # nothing happened: the timeout
    threading.Timer(0.3, lambda: a.admit(spec("h", 1), Limits(max_concurrency=1), None, 0.0)).start()
    started = time.monotonic()
    assert waiter.wait(20.0)
    assert time.monotonic() - started < 3.0
    claim = b.claims(5)
    assert claim == []  # a holds it: the wake said "may be claimable", not "claimed"


def _readable(fd: int, timeout: float) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def test_one_descriptor_covers_notify_and_pokes_and_outlives_a_crash(
    pg_cluster: Cluster, replicas: Callable[..., PostgresState]
) -> None:
    # The Waiter's fileno() (an epoll of the poke pipe and the LISTEN socket), for a loop that patches nothing.
    a = replicas("a")
    b = replicas("b", poll=30.0)
    waiter = b.wake()
    fd = waiter.fileno()
    assert waiter.wait(0) and not _readable(fd, 0.2)
    a.admit(spec("h", 1), Limits(), None, 0.0)  # another replica's NOTIFY: the LISTEN socket
    assert _readable(fd, 5) and waiter.wait(0)
    assert not _readable(fd, 0.2)
    b.admit(spec("h", 2), Limits(), None, 0.0)  # its own admission: the poke
    assert _readable(fd, 5) and waiter.wait(0)
    with pg_cluster.crashed():
        assert _readable(fd, 5)  # the connection's end is input too
        assert not waiter.wait(0)  # nothing claimable came of it: the socket is dropped from the epoll
        assert not b.ready()  # the readiness check: the database does not answer
    assert b.ready()
    waiter.wait(0)  # LISTEN again, on a new connection, watched by the same descriptor
    assert waiter.fileno() == fd
    while _readable(fd, 0.2):  # the replicas' own reconnections may have left input: consumed
        waiter.wait(0)
    a.admit(spec("h", 3), Limits(), None, 0.0)
    assert _readable(fd, 5) and waiter.wait(0)


def test_a_replica_wakes_its_own_waiter_at_once_and_only_once(replicas: Callable[..., PostgresState]) -> None:
    a = replicas("a", poll=30.0)
    waiter = a.wake()
    assert waiter.wait(0) and not waiter.wait(0)  # a new waiter's first wait ends at once, and only the first
    limits = Limits(max_concurrency=1, max_queue=5)
    first = a.admit(spec("h", 1), limits, None, 0.0).claim
    a.admit(spec("h", 2), limits, None, 0.0)
    assert waiter.wait(0)  # poked by its own admissions, without waiting for their NOTIFY
    time.sleep(0.3)  # their NOTIFYs have come back by now, and are its own: no second wake
    assert not waiter.wait(0)
    threading.Timer(0.2, lambda: a.finish(first, OK) if first else None).start()
    started = time.monotonic()
    assert waiter.wait(20.0)  # a poke from another thread ends a wait under way
    assert time.monotonic() - started < 3.0
    assert [c.spec.request_id for c in a.claims(5)] == ["req-h-2"]


def test_without_notify_the_waiter_polls(replicas: Callable[..., PostgresState]) -> None:
    waiter = replicas("a", poll=0.3).wake()
    assert waiter.wait(0)  # a new waiter's first wait
    started = time.monotonic()
    assert waiter.wait(10.0)  # the poll: a lease may have run out, which nobody announces
    assert 0.25 <= time.monotonic() - started < 3.0


def test_a_crashed_database_is_unavailable_then_the_same_instance_recovers(
    pg_cluster: Cluster, replicas: Callable[..., PostgresState], log_lines: io.StringIO
) -> None:
    a = replicas("a")
    b = replicas("b", poll=30.0)
    limits = Limits(max_concurrency=1, max_queue=5)
    claim = a.admit(spec("h", 1), limits, None, 0.0).claim
    waiter = b.wake()
    assert waiter.wait(0)  # a new waiter's first wait
    with pg_cluster.crashed():
        for call in (
            lambda: a.admit(spec("h", 2), limits, None, 0.0),
            lambda: a.claims(5),
            lambda: a.counts(),
            lambda: b.admit(spec("h", 3), limits, None, 0.0),
        ):
            with pytest.raises(StateUnavailable) as away:
                call()
            assert PASSWORD not in str(away.value)
        a.record({"event": "admitted", "run": "1"})  # history is dropped, never raised
        assert waiter.wait(0.2) is False
    # Back: the same instances work again, nothing rebuilt; the run admitted before the crash is kept.
    assert a.admit(spec("h", 4), limits, None, 0.0).how == QUEUED
    assert a.counts().running == 1 and claim is not None
    threading.Timer(0.3, lambda: a.finish(claim, OK)).start()
    assert waiter.wait(20.0)  # LISTEN made again: woken by a's finish (its admission came before the LISTEN)
    assert [c.spec.request_id for c in b.claims(5)] == ["req-h-4"]
    text = log_lines.getvalue()
    assert text.count("PostgreSQL is unavailable") == 2, text  # once per instance, not once per call
    assert text.count("PostgreSQL is reachable again") == 2, text
    assert PASSWORD not in text


def test_a_read_only_database_is_unavailable_until_it_takes_writes_again(
    pg_cluster: Cluster, replicas: Callable[..., PostgresState], pg_database: str
) -> None:
    # What a client of a primary demoted by a failover sees: its transactions are read-only.
    database = pg_database.split("dbname=")[1].split()[0]
    a = replicas("a")
    assert a.admit(spec("h", 1), Limits(), None, 0.0).how == STARTED

    def read_only(on: bool) -> None:
        setting = "SET default_transaction_read_only = on" if on else "RESET default_transaction_read_only"
        pg_cluster.psql("postgres", f"ALTER DATABASE {database} {setting}")
        # Every session of the database ends, waiting until each has, so that new ones see the setting.
        ended = f"SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE datname = '{database}'"
        pg_cluster.psql("postgres", ended)

    read_only(True)
    for _ in range(2):  # the cut connection is seen before it is used: each call meets a read-only one
        with pytest.raises(StateUnavailable, match="read-only transaction"):
            a.admit(spec("h", 2), Limits(), None, 0.0)
    assert a.counts().running == 1  # reads still work
    read_only(False)
    assert a.admit(spec("h", 3), Limits(), None, 0.0).how == STARTED  # at once: no call fails on the cut


def test_the_password_never_shows(pg_cluster: Cluster, pg_database: str, log_lines: io.StringIO) -> None:
    database = pg_database.split("dbname=")[1].split()[0]
    wrong = [
        pg_database.replace(f"password={PASSWORD}", f"password={PASSWORD}x"),
        pg_cluster.url(database).replace(PASSWORD, PASSWORD + "x"),
        pg_database.replace(f"port={pg_cluster.port}", "port=1"),  # nobody listens there
        pg_cluster.url(database).replace(f":{pg_cluster.port}/", ":1/"),
        f"host=127.0.0.1 password={PASSWORD} dbname",  # a conninfo that cannot be read
    ]
    for conninfo in wrong:
        with pytest.raises(StateUnavailable) as away:
            PostgresState(conninfo, "a").counts()
        assert PASSWORD not in str(away.value) and str(away.value), away.value
    assert PASSWORD not in log_lines.getvalue()
    assert "password authentication failed" in log_lines.getvalue()


def test_a_url_works_as_well_as_a_conninfo(pg_cluster: Cluster, pg_database: str) -> None:
    database = pg_database.split("dbname=")[1].split()[0]
    state = PostgresState(pg_cluster.url(database), "a")
    try:
        assert state.admit(spec("h", 1), Limits(), None, 0.0).how == STARTED
    finally:
        state.close()


def test_history_events_are_kept_with_the_replica(
    replicas: Callable[..., PostgresState], pg_database: str
) -> None:
    a = replicas("a")
    a.record({"event": "admitted", "run": "7", "hook": "h", "path": Path("/x")})
    with psycopg.connect(pg_database) as conn:
        rows = conn.execute("SELECT replica, event FROM hookrunner_events").fetchall()
    assert rows == [("a", {"event": "admitted", "run": "7", "hook": "h", "path": "/x"})]


def test_a_newer_schema_is_left_untouched(replicas: Callable[..., PostgresState], pg_database: str) -> None:
    replicas("a").counts()  # creates the schema
    with psycopg.connect(pg_database) as conn:
        conn.execute("UPDATE hookrunner_schema SET version = %s", (SCHEMA_VERSION + 1,))
    with pytest.raises(StateUnavailable, match="newer hookrunner"):
        replicas("b").counts()


def test_replicas_starting_together_make_the_schema_once(replicas: Callable[..., PostgresState]) -> None:
    states = [replicas(f"r{n}") for n in range(6)]
    errors: list[BaseException] = []

    def first_use(state: PostgresState) -> None:
        try:
            state.admit(spec("h", 1), Limits(), None, 0.0)
        except BaseException as exc:  # noqa: B036 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=first_use, args=(state,)) for state in states]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert states[0].counts().running == 6
