"""The embedded run state's own ways (hookrunner/state/embedded.py), beyond the contract every backend keeps
(tests/state/test_contract.py): built from the config, its history feed, how the journal's rows end, and
left-overs of a coalescing hook replayed as one run."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
from journal_faults import failing_disk

from hookrunner.config import Config
from hookrunner.hooks.model import Limits
from hookrunner.state.backend import StateUnavailable
from hookrunner.state.embedded import BUSY_STATUS, EmbeddedState
from hookrunner.state.journal import FILE_NAME, Journal
from hookrunner.state.model import Outcome, ProcessId, RunSpec
from hookrunner.state.opener import open_state
from hookrunner.state.slots import Busy


def spec(n: int, hook: str = "deploy") -> RunSpec:
    return RunSpec(hook, f"req-{n}", "/bin/true", ("/bin/true", str(n)), (), (), "/")


def rows(state_dir: Path) -> list[tuple[int, str, str | None, int]]:
    db = sqlite3.connect(state_dir / FILE_NAME)
    try:
        return db.execute("SELECT id, state, exit_status, attempt FROM runs ORDER BY id").fetchall()
    finally:
        db.close()


def test_without_a_state_dir_ids_come_from_a_counter_and_the_cap_from_the_config() -> None:
    state = open_state(Config(max_concurrent_commands=1), "boot-1")
    assert isinstance(state, EmbeddedState) and state.replica == "boot-1"
    first = state.admit(spec(1, "a"), Limits(), None, time.time())
    second = state.admit(spec(2, "b"), Limits(), None, time.time())
    assert (first.run_id, second.run_id) == (1, 2)
    assert first.claim is not None and second.claim is None  # the global cap of 1
    state.close()


def test_with_a_state_dir_each_run_is_a_journal_row_before_it_is_admitted(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state = open_state(Config(state_dir=str(state_dir), state_keep=10), "boot-1")
    admission = state.admit(spec(1), Limits(), None, time.time())
    assert rows(state_dir) == [(admission.run_id, "accepted", None, 1)]
    assert admission.claim is not None
    assert state.started(admission.claim, [ProcessId(7, 8)])
    assert state.finish(admission.claim, Outcome("exit status 3"))
    assert rows(state_dir) == [(admission.run_id, "finished", "exit status 3", 1)]
    state.close()


def test_a_busy_run_is_finished_in_the_journal_and_the_refusal_raised(tmp_path: Path) -> None:
    state = EmbeddedState(Journal(str(tmp_path), "boot"))
    limits = Limits(max_concurrency=1)
    first = state.admit(spec(1), limits, None, time.time())
    with pytest.raises(Busy):
        state.admit(spec(2), limits, None, time.time())
    assert rows(tmp_path) == [
        (first.run_id, "accepted", None, 1),
        (first.run_id + 1, "finished", BUSY_STATUS, 1),
    ]
    state.close()


def test_history_events_go_to_the_feed_given_and_are_dropped_without_one() -> None:
    fed: list[dict[str, object]] = []
    EmbeddedState(feed=fed.append).record({"event": "admitted", "run": 1})
    assert fed == [{"event": "admitted", "run": 1}]
    EmbeddedState().record({"event": "admitted"})  # no feed: nothing, and no error


def test_left_overs_of_a_coalescing_hook_replay_as_one_run_that_ends_every_previous_attempt(
    tmp_path: Path,
) -> None:
    first = EmbeddedState(Journal(str(tmp_path), "boot-1"))
    ids = []
    for n in (1, 2, 3):  # unlimited then: all three ran, each with its process
        admission = first.admit(spec(n), Limits(), None, time.time())
        assert admission.claim is not None and first.started(admission.claim, [ProcessId(100 + n, n)])
        ids.append(admission.run_id)
    first.close()

    coalescing = Limits(max_concurrency=1, coalesce=True)
    second = EmbeddedState(Journal(str(tmp_path), "boot-2"), limits=lambda hook: coalescing)
    [claim] = second.claims(10)
    assert claim.run_id == ids[0] and claim.previous == (ProcessId(101, 1),)
    assert second.finish(claim, Outcome("exit status 0"))
    [folded] = second.claims(10)  # runs 2 and 3 waited as one, with the newest request's spec
    assert (folded.run_id, folded.spec, folded.attempt) == (ids[1], spec(3), 2)
    assert folded.previous == (ProcessId(102, 2), ProcessId(103, 3))
    assert second.finish(folded, Outcome("exit status 0"))
    assert [(row[1], row[3]) for row in rows(tmp_path)] == [("finished", 2)] * 3
    second.close()


def test_close_wakes_a_waiting_owner() -> None:
    state = EmbeddedState()
    waiter = state.wake()
    assert not waiter.wait(0)
    state.close()
    assert waiter.wait(0)


def test_an_event_loop_waits_on_the_waiters_descriptor_and_keeps_running_meanwhile() -> None:
    import gevent
    import gevent.socket

    state = EmbeddedState()
    limits = Limits(max_concurrency=1, max_queue=1)
    running = state.admit(spec(1), limits, None, time.time())
    queued = state.admit(spec(2), limits, None, time.time())
    assert running.claim is not None
    claim = running.claim
    waiter = state.wake()
    assert not waiter.wait(0)
    claimed: list[int] = []
    ticks: list[int] = []
    ticked = threading.Event()  # the other greenlet ran 5 times while the owner waited
    ticked_first: list[bool] = []

    def owner() -> None:  # the owner's loop: not monkey-patched, so it waits on the descriptor
        gevent.socket.wait_read(waiter.fileno(), timeout=10)
        assert waiter.wait(0)
        claimed.extend(c.run_id for c in state.claims(10))

    def ticker() -> None:  # another greenlet of the loop, which must run while the owner waits
        while not claimed:
            ticks.append(1)
            if len(ticks) == 5:
                ticked.set()
            gevent.sleep(0.01)

    def finish() -> None:
        # The run ends on another thread (whoever finishes it: not the waiting loop) once the loop has shown
        # that it goes on while the owner waits: counted, not timed (a fixed 0.2 s saw 3 or 4 ticks when the
        # process got a ninth of a core, as at load 14 on 2 cores). A loop held by the wait never ticks 5
        # times: the run then ends after 10 s so that the owner wakes, and the test fails on `ticked_first`.
        ticked_first.append(ticked.wait(10))
        state.finish(claim, Outcome("exit status 0"))

    finisher = threading.Thread(target=finish)
    finisher.start()
    greenlets = [gevent.spawn(owner), gevent.spawn(ticker)]
    gevent.joinall(greenlets, timeout=20, raise_error=True)
    finisher.join()
    assert claimed == [queued.run_id]
    assert ticked_first == [True], len(ticks)  # the loop went on while the owner waited on the descriptor
    state.close()
    assert waiter.wait(0)  # close wakes a waiter, and gives the descriptor back


def test_ready_while_the_journal_can_write(tmp_path: Path) -> None:
    assert EmbeddedState().ready()  # nothing to write
    state = EmbeddedState(Journal(str(tmp_path), "boot", retry_every=0))
    state.admit(spec(1), Limits(), None, time.time())
    with failing_disk(tmp_path):
        with pytest.raises(StateUnavailable):
            state.admit(spec(2), Limits(), None, time.time())
        assert not state.ready()
    assert state.ready()
    state.close()
