"""The run state's contract (hookrunner/state/backend.py's RunState), the same cases for every backend:
caps under concurrent admits, the queue's order, coalescing, Busy past the queue, a stale attempt's finish,
a replay claimed once, an unwritable state, the counts.

Every case takes a backend from the `state_backend` fixture (or `durable_backend`, for the cases about what
outlives a RunState: replays, records, an unwritable store). A backend is a factory: `open()` builds a
RunState on this test's own storage (each call a new RunState on the same storage, as a restarted
process's would be), `unwritable()` is a context in which that storage refuses writes. To add a backend
(issue 33's PostgreSQL), write such a class beside `_Embedded` and `_Journaled` (for PostgreSQL: a schema of
its own per test, a new replica name per `open()`, expired leases claimable at once) and add it to
BACKENDS; every case then runs on it too. PostgreSQL (`_Postgres`) is there: a database of its own per test
on the session's throwaway cluster, one replica name for every `open()` (a restarted replica takes its own
runs back at once, as a restarted process takes its journal's), a read-only database for `unwritable()`. A backend that keeps nothing past close() sets `durable = False`
and joins only the cases of `state_backend`. A backend whose runs other processes run and finish (`shares`:
PostgreSQL's replicas) must give their outcomes, with the output kept for a request that waits for it; one
whose runs only its own process runs (`shares = False`: the embedded state) gives none."""

from __future__ import annotations

import dataclasses
import itertools
import select
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Protocol

import pytest
from journal_faults import failing_disk
from pg_cluster import Cluster

from hookrunner.hooks.model import Limits
from hookrunner.state.backend import RunState, StateUnavailable
from hookrunner.state.embedded import EmbeddedState
from hookrunner.state.journal import Journal
from hookrunner.state.model import Admission, Claim, Outcome, ProcessId, RunSpec
from hookrunner.state.slots import COALESCED, QUEUED, STARTED, Busy

OK = Outcome("exit status 0")
UNLIMITED = Limits()


class Backend(Protocol):
    durable: bool
    shares: bool

    def open(
        self, max_running: int = 0, limits: Callable[[str], Limits] = lambda hook: UNLIMITED
    ) -> RunState:
        """A new RunState on this test's storage: `max_running` the global cap, `limits` a hook's limits
        now (for the runs it replays)."""
        ...

    def unwritable(self) -> AbstractContextManager[None]:
        """A context in which the storage refuses writes."""
        ...


class _Embedded:
    """The embedded state without -state-dir: slots in memory, ids from a counter, nothing durable."""

    durable = False
    shares = False

    def __init__(self, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.opened: list[RunState] = []

    def open(
        self, max_running: int = 0, limits: Callable[[str], Limits] = lambda hook: UNLIMITED
    ) -> RunState:
        self.opened.append(EmbeddedState(None, max_running, "boot", limits=limits))
        return self.opened[-1]

    def unwritable(self) -> AbstractContextManager[None]:
        raise NotImplementedError("nothing is written")


class _Journaled(_Embedded):
    """The embedded state with -state-dir: each open() a new boot on the same journal."""

    durable = True

    def __init__(self, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        super().__init__(tmp_path, request)
        self.state_dir = tmp_path / "state"
        self._boots = itertools.count(1)

    def open(
        self, max_running: int = 0, limits: Callable[[str], Limits] = lambda hook: UNLIMITED
    ) -> RunState:
        boot = f"boot-{next(self._boots)}"
        journal = Journal(str(self.state_dir), boot, retry_every=3600)
        self.opened.append(EmbeddedState(journal, max_running, boot, limits=limits))
        return self.opened[-1]

    def unwritable(self) -> AbstractContextManager[None]:
        return failing_disk(self.state_dir)


class _Postgres:
    """PostgresState on a database of this test's own; each open() the same replica started again."""

    durable = True
    shares = True

    def __init__(self, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.opened: list[RunState] = []
        self.cluster: Cluster = request.getfixturevalue("pg_cluster")
        self.conninfo: str = request.getfixturevalue("pg_database")
        self.database = self.conninfo.split("dbname=")[1].split()[0]

    def open(
        self, max_running: int = 0, limits: Callable[[str], Limits] = lambda hook: UNLIMITED
    ) -> RunState:
        from hookrunner.state.postgres import PostgresState  # the postgres extra: only for this backend

        self.opened.append(PostgresState(self.conninfo, "replica", max_running))
        return self.opened[-1]

    @contextmanager
    def unwritable(self) -> Iterator[None]:
        """The database read-only (as a primary demoted by a failover), its sessions cut so that new ones
        see it; writable again, the same way, at the end."""
        self._read_only(True)
        try:
            yield
        finally:
            self._read_only(False)

    def _read_only(self, on: bool) -> None:
        setting = "SET default_transaction_read_only = on" if on else "RESET default_transaction_read_only"
        self.cluster.psql("postgres", f"ALTER DATABASE {self.database} {setting}")
        self.cluster.psql(
            "postgres",
            f"SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE datname = '{self.database}'",
        )


BACKENDS: dict[str, Callable[[Path, pytest.FixtureRequest], Backend]] = {
    "embedded": _Embedded,
    "embedded-journal": _Journaled,
    "postgres": _Postgres,
}
DURABLE = [name for name, make in BACKENDS.items() if getattr(make, "durable", False)]


def _backend(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    backend = BACKENDS[name](tmp_path, request)
    try:
        yield backend
    finally:
        for state in getattr(backend, "opened", []):
            state.close()


@pytest.fixture(params=list(BACKENDS))
def state_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield from _backend(request.param, request, tmp_path)


@pytest.fixture(params=DURABLE)
def durable_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield from _backend(request.param, request, tmp_path)


_numbers = itertools.count(1)


def spec(hook: str = "deploy", n: int | None = None) -> RunSpec:
    n = next(_numbers) if n is None else n
    return RunSpec(
        hook, f"req-{n}", "/bin/true", ("/bin/true", str(n)), (("N", str(n)),), (("F", b"\x00"),), "/"
    )


def admit(
    state: RunState, hook: str = "deploy", limits: Limits = UNLIMITED, key: str | None = None
) -> Admission:
    return state.admit(spec(hook), limits, key, time.time())


def running_and_waiting(state: RunState, key: str, max_queue: int) -> tuple[Limits, Admission, Admission]:
    """A coalescing hook's limits, a run holding its one place and one waiting for it, both of key `key`."""
    limits = Limits(max_concurrency=1, max_queue=max_queue, coalesce=True)
    running, waiting = admit(state, limits=limits, key=key), admit(state, limits=limits, key=key)
    assert (running.how, waiting.how) == (STARTED, QUEUED)
    return limits, running, waiting


# --- caps ---


def test_caps_hold_under_concurrent_admits_from_8_threads(state_backend: Backend) -> None:
    # Three hooks of 2 places each under a cap of 4: when the cap is full, some hook holds both its places.
    # Runs hold until the cap has been seen full (at most 20 s), so that reaching it is the backend's doing,
    # not a race between its admissions and 5 ms runs; after that, each run takes 5 ms.
    cap, per_hook = 4, 2
    limits = Limits(max_concurrency=per_hook, max_queue=1000)
    state = state_backend.open(max_running=cap)
    lock = threading.Lock()
    held: Counter[str] = Counter()
    most: Counter[str] = Counter()
    ran: list[int] = []
    errors: list[str] = []
    full = threading.Event()
    hold_until = time.monotonic() + 20  # one deadline for all: a backend that never fills the cap fails fast

    def run(claim: Claim) -> None:
        hook = claim.spec.hook_id
        with lock:
            held[hook] += 1
            held["all"] += 1
            most[hook] = max(most[hook], held[hook])
            most["all"] = max(most["all"], held["all"])
            ran.append(claim.run_id)
            if held["all"] >= cap:
                full.set()
        full.wait(max(0.0, hold_until - time.monotonic()))
        time.sleep(0.005)
        with lock:  # given back before the finish: the finish hands the places on at once
            held[hook] -= 1
            held["all"] -= 1
        if not state.finish(claim, OK):
            errors.append(f"finish of {claim.run_id} refused")

    admitted: list[int] = []

    def client(n: int) -> None:
        for i in range(25):
            admission = admit(state, f"hook-{(n + i) % 3}", limits)
            with lock:
                admitted.append(admission.run_id)
            if admission.claim is not None:
                run(admission.claim)

    stop = threading.Event()

    def claimer() -> None:
        waiter = state.wake()
        while not stop.is_set():
            for claim in state.claims(8):
                run(claim)
            waiter.wait(0.01)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    helper = threading.Thread(target=claimer)
    helper.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    deadline = time.monotonic() + 60
    while len(ran) < 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    helper.join()
    assert errors == []
    assert most["all"] == cap  # the global cap was reached and never passed
    assert max(most[f"hook-{h}"] for h in range(3)) == per_hook  # as was a hook's, never passed
    assert sorted(ran) == sorted(admitted) and len(set(ran)) == 200  # each admitted run ran once
    counts = state.counts()
    assert (counts.running, counts.queued) == (0, 0)


def test_past_the_global_cap_a_run_waits_in_its_line_and_is_claimed_when_a_place_frees(
    state_backend: Backend,
) -> None:
    state = state_backend.open(max_running=1)
    first = admit(state, "a")
    assert first.how == STARTED and first.claim is not None
    second = admit(state, "b")
    assert (second.how, second.claim) == (STARTED, None)  # its hook's place, not yet the cap's
    assert state.claims(10) == []
    assert state.finish(first.claim, OK)
    assert state.wake().wait(0)
    [claim] = state.claims(10)
    assert claim.run_id == second.run_id


# --- the queue and coalescing ---


def test_queued_runs_are_claimed_first_in_first_out_as_places_free(state_backend: Backend) -> None:
    state = state_backend.open()
    limits = Limits(max_concurrency=1, max_queue=10)
    first = admit(state, limits=limits)
    assert first.how == STARTED and first.claim is not None
    queued = [admit(state, limits=limits) for _ in range(5)]
    assert {a.how for a in queued} == {QUEUED} and all(a.claim is None for a in queued)
    waiter = state.wake()
    waiter.wait(0)  # whatever was set before: from here on, a set means a place came free
    assert state.claims(10) == []
    assert not waiter.wait(0)
    order = []
    current = first.claim
    for _ in queued:
        assert state.finish(current, OK)
        assert waiter.wait(0)
        [current] = state.claims(10)
        assert state.claims(10) == []  # one place, one claim
        order.append(current.run_id)
    assert order == [a.run_id for a in queued]
    assert state.finish(current, OK)
    assert state.claims(10) == []


def test_claims_returns_at_most_its_limit_and_keeps_the_rest(state_backend: Backend) -> None:
    state = state_backend.open()
    limits = Limits(max_concurrency=3, max_queue=10)
    running = [admit(state, limits=limits).claim for _ in range(3)]
    queued = [admit(state, limits=limits).run_id for _ in range(3)]
    for claim in running:
        assert claim is not None and state.finish(claim, OK)
    first = state.claims(2)
    rest = state.claims(2)
    assert [c.run_id for c in first + rest] == queued


def test_runs_coalesce_per_key_into_the_waiting_run_which_starts_with_the_newest(
    state_backend: Backend,
) -> None:
    state = state_backend.open()
    limits, running, waiting = running_and_waiting(state, "main", max_queue=5)
    newest_spec = spec()
    newest = state.admit(newest_spec, limits, "main", time.time())
    other = admit(state, limits=limits, key="dev")  # another key does not coalesce
    other_newer = admit(state, limits=limits, key="dev")
    assert [a.how for a in (running, waiting, newest, other, other_newer)] == [
        STARTED,
        QUEUED,
        COALESCED,
        QUEUED,
        COALESCED,
    ]
    assert newest.run_id == waiting.run_id and newest.claim is None
    assert other.run_id != waiting.run_id and other_newer.run_id == other.run_id
    assert (state.counts().running, state.counts().queued) == (1, 2)
    assert running.claim is not None and state.finish(running.claim, OK)
    [claim] = state.claims(10)
    assert (claim.run_id, claim.spec) == (waiting.run_id, newest_spec)


def test_busy_past_the_queue_keeps_nothing(state_backend: Backend) -> None:
    state = state_backend.open()
    limits = Limits(max_concurrency=1, max_queue=1, retry_after=7)
    running, queued = admit(state, limits=limits), admit(state, limits=limits)
    with pytest.raises(Busy) as busy:
        admit(state, limits=limits)
    assert busy.value.retry_after == 7
    assert (state.counts().running, state.counts().queued) == (1, 1)
    assert running.claim is not None and state.finish(running.claim, OK)
    [claim] = state.claims(10)
    assert claim.run_id == queued.run_id  # the refused run never comes
    assert state.finish(claim, OK)
    assert state.claims(10) == []


# --- attempts ---


def test_a_finish_from_a_stale_attempt_is_refused_and_changes_nothing(state_backend: Backend) -> None:
    state = state_backend.open()
    limits = Limits(max_concurrency=1, max_queue=1)
    running, queued = admit(state, limits=limits), admit(state, limits=limits)
    claim = running.claim
    assert claim is not None and claim.attempt == 1
    stale = dataclasses.replace(claim, attempt=claim.attempt - 1)
    assert not state.finish(stale, OK)
    assert not state.refuse(stale, Outcome("not run: no hook deploy"))
    assert not state.started(stale, [ProcessId(1, 2)])
    assert state.claims(10) == []  # the place is still held
    assert (state.counts().running, state.counts().queued) == (1, 1)
    assert state.started(claim, [ProcessId(1, 2)])
    assert state.finish(claim, OK)
    assert not state.finish(claim, OK)  # a second finish of the same attempt: the run is over
    assert [c.run_id for c in state.claims(10)] == [queued.run_id]


def test_a_refused_run_frees_its_places_once(state_backend: Backend) -> None:
    state = state_backend.open()
    limits = Limits(max_concurrency=1, max_queue=1)
    running, queued = admit(state, limits=limits), admit(state, limits=limits)
    assert running.claim is not None
    assert state.refuse(running.claim, Outcome("not run: no hook deploy"))
    assert not state.refuse(running.claim, Outcome("not run: no hook deploy"))  # over: nothing to end
    assert not state.finish(running.claim, OK)
    [claim] = state.claims(10)
    assert claim.run_id == queued.run_id
    assert state.refuse(claim, Outcome("not run: no hook deploy"))
    assert (state.counts().running, state.counts().queued) == (0, 0)


def test_renew_loses_no_claim(state_backend: Backend) -> None:
    state = state_backend.open()
    claim = admit(state).claim
    assert claim is not None
    assert state.renew([claim]) == []


# --- what outlives a run state ---


def test_a_replay_is_claimed_exactly_once_on_its_next_attempt_with_its_previous_processes(
    durable_backend: Backend,
) -> None:
    first = durable_backend.open()
    limits = Limits(max_concurrency=1, max_queue=5)
    ran = admit(first, limits=limits)
    waited = admit(first, limits=limits)
    assert ran.claim is not None and first.started(ran.claim, [ProcessId(101, 5000), ProcessId(102, 5001)])
    first.close()  # the process dies: nothing finished

    second = durable_backend.open(limits=lambda hook: limits)
    found: list[Claim] = []
    lock = threading.Lock()

    def claim() -> None:
        got = second.claims(10)
        with lock:
            found.extend(got)

    threads = [threading.Thread(target=claim) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    [again] = found  # under the hook's limit now: one at a time, claimed by one caller
    assert (again.run_id, again.attempt, again.replayed) == (ran.run_id, 2, True)
    assert again.previous == (ProcessId(101, 5000), ProcessId(102, 5001))
    assert again.spec == ran.claim.spec
    assert not second.finish(ran.claim, OK)  # attempt 1's late finish
    assert not second.refuse(ran.claim, Outcome("not replayed: no such hook"))  # nor can it end attempt 2
    assert not second.started(ran.claim, [ProcessId(103, 5002)])
    assert second.finish(again, OK)
    [after] = second.claims(10)
    # It only waited: its first claim, on attempt 1 (state/backend.py's RunState.claims).
    assert (after.run_id, after.attempt, after.previous) == (waited.run_id, 1, ())
    assert second.claims(10) == []
    assert second.finish(after, OK)
    second.close()

    third = durable_backend.open()
    assert third.claims(10) == []  # finished: never replayed again


def test_refused_busy_and_coalesced_runs_are_finished_with_their_run_and_not_replayed(
    durable_backend: Backend,
) -> None:
    first = durable_backend.open()
    limits, running, waiting = running_and_waiting(first, "k", max_queue=1)
    admit(first, limits=limits, key="k")  # folded into `waiting`
    with pytest.raises(Busy):
        admit(first, limits=limits, key="other")
    assert running.claim is not None and first.finish(running.claim, OK)
    [claim] = first.claims(10)
    assert claim.run_id == waiting.run_id and first.finish(claim, OK)
    refused = admit(first)
    assert refused.claim is not None
    assert first.refuse(refused.claim, Outcome("not replayed: no such hook"))
    left = admit(first)  # the only run left unfinished
    first.close()
    second = durable_backend.open()
    assert [c.run_id for c in second.claims(10)] == [left.run_id]


def test_the_output_of_a_run_a_request_waits_for_is_kept_for_outcomes(state_backend: Backend) -> None:
    # A capture (keep_output) waits behind a running run; the run that stands for it keeps the output its
    # finish is given, byte for byte; runs nobody waits for keep none. A backend that does not share its
    # runs has nobody elsewhere to tell: outcomes() is empty, and it keeps nothing.
    state = state_backend.open()
    limits = Limits(max_concurrency=1, max_queue=5)
    first = admit(state, limits=limits)
    waited = state.admit(spec(), limits, None, time.time(), keep_output=True)
    unwaited = admit(state, limits=limits)
    assert (waited.how, unwaited.how) == (QUEUED, QUEUED) and first.claim is not None
    assert not first.claim.keep_output
    assert state.finish(first.claim, Outcome("exit status 0", b"nobody waits for this"))
    output = bytes(range(256)) * 300 + b"\x00\xff\n"
    [claim] = state.claims(10)
    assert claim.run_id == waited.run_id and claim.keep_output is state_backend.shares
    assert state.outcomes([waited.run_id]) == {}  # not over yet
    assert state.finish(claim, Outcome("exit status 1", output))
    [last] = state.claims(10)
    assert last.run_id == unwaited.run_id and not last.keep_output
    assert state.finish(last, Outcome("exit status 0", b"nor this"))
    ended = state.outcomes([first.run_id, waited.run_id, unwaited.run_id, unwaited.run_id + 1000])
    if state_backend.shares:
        assert ended == {
            first.run_id: Outcome("exit status 0"),
            waited.run_id: Outcome("exit status 1", output),
            unwaited.run_id: Outcome("exit status 0"),
        }
    else:
        assert ended == {}


def test_an_unwritable_store_admits_nothing_and_says_when_to_come_back(durable_backend: Backend) -> None:
    state = durable_backend.open()
    first = admit(state)
    assert state.ready()
    with durable_backend.unwritable():
        with pytest.raises(StateUnavailable) as unavailable:
            admit(state)
        assert unavailable.value.retry_after == 5
        assert not state.ready()  # the readiness check says so too
        assert (state.counts().running, state.counts().queued) == (1, 0)
    assert first.claim is not None and state.finish(first.claim, OK)
    later = admit(state)
    assert later.claim is not None
    assert state.ready()
    state.close()
    assert [c.run_id for c in durable_backend.open().claims(10)] == [later.run_id]


# --- waiting ---


def _readable(fd: int, timeout: float) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def test_the_waiters_descriptor_becomes_readable_when_a_place_frees(state_backend: Backend) -> None:
    # What an event loop that patches nothing waits on: the descriptor, then wait(0), then claims().
    state = state_backend.open()
    limits = Limits(max_concurrency=1, max_queue=1)
    running, queued = admit(state, limits=limits), admit(state, limits=limits)
    waiter = state.wake()
    fd = waiter.fileno()
    assert waiter.poll is None or waiter.poll > 0
    for _ in range(100):  # earlier wakes (the admissions') consumed, until it stays quiet
        if not _readable(fd, 0.1):
            break
        waiter.wait(0)
    assert not _readable(fd, 0.2)
    assert state.claims(10) == []
    assert running.claim is not None and state.finish(running.claim, OK)
    assert _readable(fd, 5)
    assert waiter.wait(0)
    assert waiter.fileno() == fd  # the same descriptor for the waiter's life
    assert [c.run_id for c in state.claims(10)] == [queued.run_id]


# --- counts ---


def test_counts_in_all_and_per_hook(state_backend: Backend) -> None:
    state = state_backend.open(max_running=3)
    assert (state.counts().running, state.counts().queued, state.counts().per_hook) == (0, 0, ())
    one = Limits(max_concurrency=1, max_queue=5)
    a = [admit(state, "a", one) for _ in range(3)]  # 1 running, 2 queued
    b = [admit(state, "b") for _ in range(3)]  # 2 running, the third in the cap's line
    counts = state.counts()
    assert (counts.running, counts.queued) == (3, 3)
    assert counts.per_hook == (("a", 1, 2), ("b", 2, 1))
    for admission in (a[0], b[0]):
        assert admission.claim is not None and state.finish(admission.claim, OK)
    counts = state.counts()
    assert (counts.running, counts.queued) == (3, 1)
    assert counts.per_hook == (("a", 1, 1), ("b", 2, 0))
