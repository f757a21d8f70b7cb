"""run/claimed.py: a run's life on a claim, against a scripted run state: a claim that comes while its own
admission is still under way runs that admission's work; a claim of a run nobody here admitted runs as
foreign; a lease the state refuses, or one whose renewal outlasts it, has its run killed once; a run that
waits here and another replica ran ends with that run's outcome (and the output the state kept for it); a
finish the state cannot take is tried again while the lease lasts; a run's output, as its work left it on
its Held, goes to its finish, and whether its request waits for it goes to the admission."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from waiting import eventually

from hookrunner.hooks.model import Limits
from hookrunner.ops.log import log
from hookrunner.run.claimed import ClaimedRuns, Held
from hookrunner.state.backend import StateUnavailable
from hookrunner.state.model import Admission, Claim, Outcome, RunSpec
from hookrunner.state.slots import QUEUED, STARTED


def spec(n: int) -> RunSpec:
    return RunSpec("h", f"req{n}", "/bin/true", ("/bin/true",), (), (), "")


class Waiter:
    poll = 0.05

    def __init__(self) -> None:
        self._r, self._w = os.pipe()

    def fileno(self) -> int:
        return self._r

    def wait(self, timeout: float | None) -> bool:
        return False


class ScriptedState:
    """A RunState whose answers the test sets."""

    replica = "test"

    def __init__(self) -> None:
        self.admissions: list[Admission] = []
        self.pending_claims: list[Claim] = []
        self.finished: list[tuple[int, str]] = []
        self.finish_fails = 0
        self.renew_answer: list[Claim] | None = []
        self.renew_blocks = threading.Event()
        self.renew_blocks.set()
        self.ended: dict[int, Outcome] = {}
        self.kept: list[bool] = []  # each admission's keep_output
        self.outputs: dict[int, bytes | None] = {}  # each finish's output, by run
        self.before_admit_returns: Any = None
        self.waiter = Waiter()

    def admit(
        self, run: RunSpec, limits: Limits, key: str | None, at: float, keep_output: bool = False
    ) -> Admission:
        self.kept.append(keep_output)
        admission = self.admissions.pop(0)
        if self.before_admit_returns is not None:
            self.before_admit_returns()
        return admission

    def claims(self, limit: int) -> list[Claim]:
        found, self.pending_claims = self.pending_claims, []
        return found

    def started(self, claim: Claim, processes: Sequence[object]) -> bool:
        return True

    def renew(self, claims: Sequence[Claim]) -> list[Claim]:
        self.renew_blocks.wait(30)
        if self.renew_answer is None:
            raise StateUnavailable("away")
        return [c for c in claims if c in self.renew_answer]

    def finish(self, claim: Claim, outcome: Outcome) -> bool:
        if self.finish_fails:
            self.finish_fails -= 1
            raise StateUnavailable("away")
        self.finished.append((claim.run_id, outcome.status))
        self.outputs[claim.run_id] = outcome.output
        return True

    def outcomes(self, run_ids: Sequence[int]) -> dict[int, Outcome]:
        return {run_id: self.ended[run_id] for run_id in run_ids if run_id in self.ended}

    def wake(self) -> Waiter:
        return self.waiter


@pytest.fixture
def lines(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    said: list[str] = []
    monkeypatch.setattr(log, "output", lambda message, **_: said.append(message))
    return said


def work_of(tag: str, gate: threading.Event | None = None, output: bytes | None = None) -> Any:
    def work(claim: Claim, held: Held) -> tuple[str, str]:
        if gate is not None:
            gate.wait(30)
        held.output = output  # as the executor leaves a command's output
        return f"{tag}:{claim.run_id}", "exit status 0"

    return work


def test_a_claim_during_its_own_admission_runs_that_admissions_work() -> None:
    state = ScriptedState()
    runs = ClaimedRuns(state)  # type: ignore[arg-type]
    runs.foreign = lambda claim, held: "foreign"
    # While run 7's admission is under way (queued), another run's end hands run 7's claim out.
    state.admissions = [Admission(QUEUED, 7)]
    state.before_admit_returns = lambda: runs._launch(Claim(7, spec(7)))
    future, how, now = runs.admit(spec(7), Limits(max_concurrency=1), None, work_of("mine"))
    assert (how, now) == (QUEUED, False)
    assert future.result(timeout=10) == "mine:7"
    assert eventually(lambda: state.finished == [(7, "exit status 0")])


def test_a_claim_of_a_run_nobody_here_admitted_runs_as_foreign() -> None:
    state = ScriptedState()
    runs = ClaimedRuns(state)  # type: ignore[arg-type]
    ran: list[int] = []
    runs.foreign = lambda claim, held: ran.append(claim.run_id) or "exit status 3"
    state.pending_claims = [Claim(11, spec(11), attempt=2, replayed=True)]
    assert runs.claim_now() == 1
    assert eventually(lambda: state.finished == [(11, "exit status 3")])
    assert ran == [11]


def held_run(state: ScriptedState, runs: ClaimedRuns, lease: float) -> tuple[Claim, threading.Event]:
    gate = threading.Event()
    claim = Claim(5, spec(5), lease_until=time.time() + lease)
    state.admissions = [Admission(STARTED, 5, claim)]
    runs.admit(spec(5), Limits(), None, work_of("long", gate))
    assert eventually(lambda: len(runs.held) == 1)
    return claim, gate


def test_a_lease_the_state_refuses_is_lost_once_and_not_finished(lines: list[str]) -> None:
    state = ScriptedState()
    runs = ClaimedRuns(state)  # type: ignore[arg-type]
    lost: list[int] = []
    runs.lose = lambda held: lost.append(held.claim.run_id)
    claim, gate = held_run(state, runs, 30.0)
    state.renew_answer = [claim]
    threading.Thread(target=runs.keep_leases, args=(0.3,), daemon=True).start()
    assert eventually(lambda: lost == [5])
    time.sleep(0.3)
    assert lost == [5] and sum("its lease is lost" in line for line in lines) == 1
    gate.set()
    assert eventually(lambda: not runs.busy)
    assert state.finished == []  # another replica holds it now: this one writes nothing


def test_a_renewal_that_outlasts_the_lease_loses_the_run_at_the_lease(lines: list[str]) -> None:
    state = ScriptedState()
    runs = ClaimedRuns(state)  # type: ignore[arg-type]
    lost: list[float] = []
    runs.lose = lambda held: lost.append(time.monotonic())
    claim, gate = held_run(state, runs, 0.6)
    state.renew_blocks.clear()  # the database does not answer
    began = time.monotonic()
    threading.Thread(target=runs.keep_leases, args=(0.6,), daemon=True).start()
    assert eventually(lambda: lost)
    assert lost[0] - began <= 0.6 + 0.3
    state.renew_blocks.set()
    gate.set()


def elsewhere(outcome: Outcome) -> tuple[str, str, bytes | None]:
    return "elsewhere", outcome.status, outcome.output


def test_a_run_another_replica_ran_ends_here_with_its_outcome_and_kept_output() -> None:
    state = ScriptedState()
    runs = ClaimedRuns(state)  # type: ignore[arg-type]
    runs.ended_elsewhere = elsewhere
    state.admissions = [Admission(QUEUED, 9)]
    future, _, _ = runs.admit(spec(9), Limits(max_concurrency=1), None, work_of("mine"), keep_output=True)
    assert state.kept == [True]
    threading.Thread(target=runs.watch, daemon=True).start()
    time.sleep(0.2)
    assert not future.done()
    state.ended[9] = Outcome("exit status 2", b"\xffout\x00put")
    assert future.result(timeout=10) == ("elsewhere", "exit status 2", b"\xffout\x00put")
    assert not runs.busy


def test_a_finish_is_given_the_output_its_work_left_and_admissions_say_who_waits() -> None:
    state = ScriptedState()
    runs = ClaimedRuns(state)  # type: ignore[arg-type]
    state.admissions = [Admission(STARTED, 1, Claim(1, spec(1))), Admission(STARTED, 2, Claim(2, spec(2)))]
    first, _, _ = runs.admit(spec(1), Limits(), None, work_of("mine", output=b"one\n"), keep_output=True)
    second, _, _ = runs.admit(spec(2), Limits(), None, work_of("mine"))
    assert (first.result(timeout=10), second.result(timeout=10)) == ("mine:1", "mine:2")
    assert state.kept == [True, False]
    assert eventually(lambda: state.outputs == {1: b"one\n", 2: None})


def test_a_finish_the_state_cannot_take_is_tried_again_while_the_lease_lasts() -> None:
    state = ScriptedState()
    runs = ClaimedRuns(state)  # type: ignore[arg-type]
    state.finish_fails = 2
    claim = Claim(3, spec(3), lease_until=time.time() + 30)
    state.admissions = [Admission(STARTED, 3, claim)]
    future, _, _ = runs.admit(spec(3), Limits(), None, work_of("mine"))
    assert future.result(timeout=10) == "mine:3"  # answered before the finish is written
    assert eventually(lambda: state.finished == [(3, "exit status 0")], timeout=10)


def test_a_watch_started_while_the_state_cannot_wake_it_lives_through_the_outage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The run owner's watch starts while the database is away (its LISTEN connection cannot be made): it
    # keeps looking for work meanwhile, and waits on the waiter once the state can make one.
    monkeypatch.setattr("hookrunner.run.claimed.WAKE_AGAIN", 0.05)
    state = ScriptedState()
    away = {"wakes": 3}

    def wake() -> Waiter:
        if away["wakes"]:
            away["wakes"] -= 1
            raise StateUnavailable("away")
        return state.waiter

    state.wake = wake  # type: ignore[method-assign]
    runs = ClaimedRuns(state)  # type: ignore[arg-type]
    runs.ended_elsewhere = elsewhere
    state.admissions = [Admission(QUEUED, 4), Admission(QUEUED, 5)]
    first, _, _ = runs.admit(spec(4), Limits(max_concurrency=1), None, work_of("mine"))
    watch = threading.Thread(target=runs.watch, daemon=True)
    watch.start()
    state.ended[4] = Outcome("exit status 0")  # seen while the waiter still cannot be made
    assert first.result(timeout=10) == ("elsewhere", "exit status 0", None)
    assert eventually(lambda: away["wakes"] == 0, timeout=10)
    second, _, _ = runs.admit(spec(5), Limits(max_concurrency=1), None, work_of("mine"))
    state.ended[5] = Outcome("exit status 1")  # seen through the waiter's polls, once it is made
    assert second.result(timeout=10) == ("elsewhere", "exit status 1", None)
    assert watch.is_alive()
