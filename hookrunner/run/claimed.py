"""A run's life on a claim of the run state (docs/run-state.md, "The seam"): a run is admitted by the
RunState (state/backend.py), which answers with a claim (start now), a place in a queue or the cap's line,
a coalescing into a waiting run, or Busy; a run starts only on a claim, and its end is the claim's
`finish`, followed by `claims()` for the runs its places went to. The same path serves the embedded state
(one host) and PostgreSQL (every replica): runs this process admitted wait here on their futures, and a
claim of a run it did not admit (the journal's left-overs, another replica's run, a run taken over after
a lapsed lease) is run by `foreign`. With a shared state the claims' leases are renewed, and a claim the
state says is lost, or cannot renew in time, has its processes killed at once (`lose`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from hookrunner.hooks.model import Limits
from hookrunner.ops.log import log
from hookrunner.run.spawn import Waits
from hookrunner.state.backend import RunState, StateUnavailable, Waiter
from hookrunner.state.model import FOREVER, Claim, Outcome, ProcessId, RunSpec
from hookrunner.state.slots import COALESCED, STARTED

#: How many runs one claims() may hand out at once.
CLAIM_BATCH = 64

#: How often a state that announces nothing but this process's own finishes is looked at (watch).
LOOK_AGAIN = 5.0
#: How often the watch looks for work while the state cannot wake it (its database away).
WAKE_AGAIN = 1.0

#: What the runs waiting here get when the process stops before they start.
NOT_STARTED = "not started: hookrunner is shutting down"


@dataclass(eq=False)
class Held:
    """A claimed run while this process runs it: its claim, the processes it recorded, and (once started)
    the tracker's handle on them, for a lost lease's kill."""

    claim: Claim
    state: RunState
    processes: list[ProcessId] = field(default_factory=list)
    handle: object | None = None
    #: When the lease runs out by this process's clock (monotonic); renewed by the lease keeper.
    deadline: float = FOREVER
    lost: bool = False
    #: The run's combined output once it has ended (None: no command ran), for a finish that keeps it.
    output: bytes | None = None

    def started(self, leader: ProcessId, handle: object) -> None:
        """The attempt's leader has started: recorded on the claim (a later attempt ends it first)."""
        self.handle = handle
        self.processes = [leader]
        self._record()

    def found(self, process: ProcessId) -> None:
        """A process of the run found outside the leader's group: recorded with the others."""
        self.processes.append(process)
        self._record()

    def _record(self) -> None:
        try:
            if not self.state.started(self.claim, list(self.processes)):
                log.output(f"run {self.claim.run_id}: its claim is no longer this process's")
        except StateUnavailable:
            pass  # the renewal decides: a claim that cannot be kept has its processes killed


#: What runs a claimed run: the claim and its Held; returns the run's result and the status its finish
#: records.
Work = Callable[[Claim, Held], tuple[object, str]]


@dataclass(eq=False)
class _Waiting:
    """A run admitted here that waits for its claim: its future, and the work of the newest request folded
    into it (a coalesced request's run starts with the newest request's)."""

    future: Future[object]
    work: Work


class ClaimedRuns:
    """The runs of one process on a RunState; see the module's docstring."""

    def __init__(self, state: RunState, waits: Waits | None = None) -> None:
        self.state = state
        self.waits = waits or Waits()
        #: Runs a claim this process did not admit (replays, other replicas' runs); returns its status.
        self.foreign: Callable[[Claim, Held], str] = lambda claim, held: "not run: no runner"
        #: Kills a lost claim's processes at once.
        self.lose: Callable[[Held], None] = lambda held: None
        #: The result a run waiting here gets when another replica ran it, from the outcome it finished with
        #: (its output too, when the state kept it for the request waiting here).
        self.ended_elsewhere: Callable[[Outcome], object] = lambda outcome: outcome.status
        self._lock = threading.Lock()
        self._waiting: dict[int, _Waiting] = {}
        self._held: dict[int, Held] = {}
        self._admitting = 0  # admits under way: a claim of an unknown run may be one of theirs
        self._early: dict[int, Claim] = {}  # claims of runs whose admit has not registered them yet
        self._closing = False
        self._idle = threading.Condition(self._lock)

    # --- admitting ---

    def admit(
        self,
        spec: RunSpec,
        limits: Limits,
        group: str | None,
        work: Work,
        accepted_at: float | None = None,
        keep_output: bool = False,
    ) -> tuple[Future[object], str, bool]:
        """Admit `spec` through the state; returns the future of the run that stands for it, how it was
        admitted (started, queued or coalesced) and whether it holds a claim now (False in the cap's line).
        Raises Busy or StateUnavailable as the state does (nothing is kept). `keep_output`: the request
        waits for the run's output, which a shared state then keeps for it when another replica runs it."""
        with self._lock:
            self._admitting += 1
        try:
            admission = self.state.admit(
                spec, limits, group, time.time() if accepted_at is None else accepted_at, keep_output
            )
        except BaseException:
            self._admitted_one(None)
            raise
        with self._lock:
            if admission.how == COALESCED and admission.run_id in self._waiting:
                waiting = self._waiting[admission.run_id]
                waiting.work = work
            else:
                waiting = _Waiting(Future(), work)
                self._waiting[admission.run_id] = waiting
                if admission.how == COALESCED:  # folded into a run this process did not admit
                    log.output(f"run {admission.run_id}: coalesced into a run admitted elsewhere")
        early = self._admitted_one(admission.run_id)
        if admission.claim is not None:
            self._launch(admission.claim)
        for claim in early:
            self._launch(claim)
        return waiting.future, admission.how, admission.how == STARTED and admission.claim is not None

    def _admitted_one(self, run_id: int | None) -> list[Claim]:
        """An admit is over: the claims that came early for it, and, once no admit is under way, those of
        runs no admit here registered (other processes' runs)."""
        with self._lock:
            self._admitting -= 1
            found = [self._early.pop(run_id)] if run_id in self._early else []
            if not self._admitting:
                found += self._early.values()
                self._early.clear()
        return found

    # --- claiming and running ---

    def claim_now(self) -> int:
        """Start what the state lets this process start now; returns how many. Never raises."""
        if self._closing:
            return 0
        try:
            claims = self.state.claims(CLAIM_BATCH)
        except StateUnavailable:
            return 0
        for claim in claims:
            self._launch(claim)
        return len(claims)

    def _launch(self, claim: Claim) -> None:
        with self._lock:
            if claim.run_id not in self._waiting and self._admitting:
                self._early[claim.run_id] = claim  # perhaps the run an admit under way is registering
                return
            held = Held(claim, self.state)
            if claim.lease_until != FOREVER:
                held.deadline = time.monotonic() + max(claim.lease_until - time.time(), 0.0)
            self._held[claim.run_id] = held
        self.waits.launch(lambda: self._run(held))

    def _run(self, held: Held) -> None:
        claim = held.claim
        with self._lock:
            waiting = self._waiting.get(claim.run_id)
        status = "error running command"
        result: object = None
        error: BaseException | None = None
        try:
            if waiting is not None:
                result, status = waiting.work(claim, held)
            else:
                status = self.foreign(claim, held)
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
            error = exc
            status = f"error: {type(exc).__name__}"
        finally:
            with self._lock:
                self._held.pop(claim.run_id, None)
                self._waiting.pop(claim.run_id, None)
                closing = self._closing
            # Shutdown gave up on it (closing): left unfinished, for the next start (or another replica).
            recorded = closing or held.lost or self._finish(claim, Outcome(status, held.output))
            if waiting is not None:
                if error is not None:
                    waiting.future.set_exception(error)
                else:
                    waiting.future.set_result(result)
            if not recorded:
                self._finish_later(held, Outcome(status, held.output))
            with self._lock:
                self._idle.notify_all()
            self.claim_now()

    def _finish(self, claim: Claim, outcome: Outcome) -> bool:
        """Finish the claim; False when the state cannot be reached now."""
        try:
            self.state.finish(claim, outcome)
        except StateUnavailable:
            return False
        return True

    def _finish_later(self, held: Held, outcome: Outcome) -> None:
        """Try the finish again every second while the claim's lease lasts; past it, the run is another
        replica's to run again (at least once, never two at a time)."""
        while time.monotonic() < held.deadline:
            self.waits.sleep(min(1.0, max(held.deadline - time.monotonic(), 0.0)))
            if self._finish(held.claim, outcome):
                return
        log.output(
            f"run {held.claim.run_id}: its end could not be recorded before its lease ran out; "
            "it may run again"
        )

    # --- waiting for work, keeping leases ---

    def watch(self) -> None:
        """Wait for claimable work on the state's Waiter and start it, for ever (a greenlet or thread). A
        state whose every claimable run comes from a finish here (the embedded one: `poll` None) is only
        looked at every LOOK_AGAIN seconds (its left-overs, when the disk refused their claim at start):
        the run that finished claims what it freed, and no wake per run is paid."""
        waiter = self._waiter()
        if waiter is None:
            return
        poll = waiter.poll
        while not self._closing:
            if poll is None:
                self.waits.sleep(LOOK_AGAIN)
                self.claim_now()
                continue
            try:
                self.waits.readable(waiter.fileno(), poll)
                waiter.wait(0)
            except (OSError, ValueError):  # closed at the stop
                return
            except StateUnavailable:  # the waiter's connection: made again at its next wait
                self.waits.sleep(WAKE_AGAIN)
            self.claim_now()
            self._ended_elsewhere()  # a shared state: another replica may have run what waits here

    def _waiter(self) -> Waiter | None:
        """The state's Waiter; while the state cannot make one (the database away at the owner's start),
        look for work every WAKE_AGAIN seconds meanwhile, so the watch outlives the outage. None: stopped."""
        while not self._closing:
            try:
                return self.state.wake()
            except StateUnavailable:
                self.waits.sleep(WAKE_AGAIN)
                self.claim_now()
                self._ended_elsewhere()
        return None

    def _ended_elsewhere(self) -> None:
        """End the runs waiting here that another replica claimed and finished, with their outcome (and the
        output the state kept for them)."""
        with self._lock:
            waiting = [run_id for run_id in self._waiting if run_id not in self._held]
        if not waiting:
            return
        try:
            ended = self.state.outcomes(waiting)
        except StateUnavailable:
            return
        for run_id, outcome in ended.items():
            with self._lock:
                if run_id in self._held:
                    continue
                found = self._waiting.pop(run_id, None)
                self._idle.notify_all()
            if found is not None:
                found.future.set_result(self.ended_elsewhere(outcome))

    def keep_leases(self, lease: float) -> None:
        """Renew every held claim's lease every lease/3, for ever; a claim the state says is lost, or whose
        lease runs out before a renewal reaches the state (the renewal failed, or is still waiting for the
        database when the lease ends), is killed at once (one log line each)."""
        while not self._closing:
            self.waits.sleep(lease / 3)
            with self._lock:
                held = [h for h in self._held.values() if not h.lost and h.claim.lease_until != FOREVER]
            if held:
                self._renew(held, lease)

    def _renew(self, held: list[Held], lease: float) -> None:
        asked = time.monotonic()
        answer: list[list[Claim] | None] = []
        done = self.waits.event()

        def renew() -> None:
            try:
                answer.append(self.state.renew([h.claim for h in held]))
            except StateUnavailable:
                answer.append(None)
            finally:
                done.set()

        self.waits.launch(renew)
        # Wait no longer than the first lease lasts: past it, its run is killed while the renewal still waits.
        while not done.wait(max(min(h.deadline for h in held if not h.lost) - time.monotonic(), 0.0)):
            self._lose([h for h in held if not h.lost and h.deadline <= time.monotonic()])
            if all(h.lost for h in held):
                return
        lost_claims = answer[0]
        if lost_claims is None:  # unreachable: what would run out before the next try is lost now
            self._lose([h for h in held if h.deadline <= time.monotonic() + lease / 3])
            return
        lost = {(c.run_id, c.attempt) for c in lost_claims}
        self._lose([h for h in held if (h.claim.run_id, h.claim.attempt) in lost])
        for h in held:
            h.deadline = asked + lease

    def _lose(self, held: list[Held]) -> None:
        for h in held:
            if h.lost:
                continue
            h.lost = True
            log.output(
                f"run {h.claim.run_id} of hook {h.claim.spec.hook_id}: its lease is lost; "
                "killing its processes (another replica may run it)"
            )
            self.lose(h)

    # --- counts and the stop ---

    @property
    def busy(self) -> bool:
        """Whether runs of this process run or wait here."""
        with self._lock:
            return bool(self._held or self._waiting)

    def wait_idle(self, timeout: float, sleep: Callable[[float], None] | None = None) -> bool:
        """Wait until no run of this process runs or waits, at most `timeout`; with `sleep`, by looking every
        50 ms (launched runs need the caller's loop)."""
        deadline = time.monotonic() + timeout
        if sleep is None:
            with self._idle:
                return self._idle.wait_for(lambda: not (self._held or self._waiting), timeout)
        while self.busy:
            if time.monotonic() >= deadline:
                return False
            sleep(min(0.05, deadline - time.monotonic()))
        return True

    def close(self, result: Callable[[], object]) -> None:
        """Stop claiming; the runs waiting here for a claim end with `result()` (not started), their rows
        left unfinished in the state for the next start."""
        with self._lock:
            self._closing = True
            unclaimed = [w for run_id, w in self._waiting.items() if run_id not in self._held]
            for run_id in [r for r in self._waiting if r not in self._held]:
                del self._waiting[run_id]
        for waiting in unclaimed:
            waiting.future.set_result(result())

    @property
    def held(self) -> list[Held]:
        with self._lock:
            return list(self._held.values())
