"""The embedded run state: one per host, in the process that owns the runs (docs/run-state.md, "The
hookrunner/state/ room"). Its places (per-hook concurrency, the queue, coalescing, the global cap) are
state/slots.py's, in memory; with -state-dir each run is also a row of the journal (state/journal.py),
written before the run is admitted, and the rows a dead process left unfinished come back, once, as the
first claims, each on its next attempt (a run that only waited, on attempt 1: state/backend.py's rule).
Without -state-dir run ids come from a counter and nothing outlives the process. There is no other claimer
on the host (the master holds -state-dir's lock), so a claim lasts the owner's life: `renew` never loses
one, and attempts change only across a restart's replay. state/opener.py's open_state builds it.

Thread-safe: every call takes one lock, but for the journal's writes, made outside it (each an fsync) on
rows that only the caller's run can reach; so `counts` and `claims` never wait for the disk."""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hookrunner.hooks.model import Limits
from hookrunner.state.backend import StateUnavailable
from hookrunner.state.journal import Journal, JournalUnwritable, LeftOver, accepts_runs
from hookrunner.state.model import (
    FOREVER,
    Admission,
    Claim,
    Counts,
    Event,
    Outcome,
    ProcessId,
    RunSpec,
)
from hookrunner.state.slots import COALESCED, QUEUED, STARTED, Busy, Slots

__all__ = ["COALESCED", "QUEUED", "STARTED", "Busy", "EmbeddedState"]

#: What a run refused at its hook's full queue is finished with in the journal.
BUSY_STATUS = "not run: busy"


@dataclass(eq=False)
class _Run:
    """A run admitted and not finished: what its claim will carry, and the requests folded into it."""

    run_id: int
    spec: RunSpec
    accepted_at: float
    attempt: int = 1
    previous: tuple[ProcessId, ...] = ()
    replayed: bool = False
    #: Holding its places (it may start, or has); False while it waits in its queue or the cap's line.
    placed: bool = False  # a claimed run always is
    #: Handed out as a claim (by admit or claims); a finish or a process record needs this.
    claimed: bool = False
    #: Runs coalesced into this one (their rows are finished with it).
    folded: list[int] = field(default_factory=list)

    def claim(self) -> Claim:
        return Claim(
            run_id=self.run_id,
            spec=self.spec,
            attempt=self.attempt,
            lease_until=FOREVER,
            accepted_at=self.accepted_at,
            previous=self.previous,
            replayed=self.replayed,
        )


class _Wake:
    """The run owner's Waiter: set whenever something may be claimable. A thread waits with wait(); an event
    loop that is not monkey-patched (the gevent owner's) must not block on a threading.Event, so it may
    wait instead for fileno() to be readable (an eventfd, made on first use), then call wait(0), then
    claim (state/backend.py's Waiter). Every new claimable run sets it: no poll is needed."""

    poll: float | None = None

    def __init__(self) -> None:
        self._event = threading.Event()
        self._fd = -1
        self._fd_lock = threading.Lock()

    def set(self) -> None:
        self._event.set()
        with self._fd_lock:  # never a descriptor that close() gave back (its number may be another's now)
            if self._fd >= 0:
                os.eventfd_write(self._fd, 1)

    def fileno(self) -> int:
        """A descriptor readable once set, until wait() returns."""
        with self._fd_lock:
            if self._fd < 0:
                self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
                if self._event.is_set():
                    os.eventfd_write(self._fd, 1)
        return self._fd

    def wait(self, timeout: float | None) -> bool:
        # Cleared after the wait: a set between the two is not lost, since what it announced was added
        # before it, and the caller claims after this returns.
        woken = self._event.wait(timeout)
        self._event.clear()
        with self._fd_lock, contextlib.suppress(BlockingIOError):
            if self._fd >= 0:
                os.eventfd_read(self._fd)
        return woken

    def close(self) -> None:
        """Wake every waiter for the last time, and give the descriptor back."""
        self.set()
        with self._fd_lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def _no_feed(event: Event) -> None:
    """The default history feed: events are dropped."""


def _no_limits(hook_id: str) -> Limits:
    """The default limits of a replayed run's hook: none."""
    return Limits()


class EmbeddedState:
    """RunState in memory, with the journal (when given) for durability; see the module's docstring."""

    def __init__(
        self,
        journal: Journal | None = None,
        max_running: int = 0,
        replica: str = "",
        feed: Callable[[Event], None] = _no_feed,
        limits: Callable[[str], Limits] = _no_limits,
        on_left_overs: Callable[[list[LeftOver]], None] | None = None,
    ) -> None:
        """`journal`: the run journal, owned from now on (closed by close()); None: nothing durable.
        `max_running`: -max-concurrent-commands. `replica`: the host's boot id. `feed`: where record() sends
        the history's events. `limits`: a hook's limits now, for the journal's left-overs (replayed under
        them, past their queue's bound). `on_left_overs`: told the journal's left-overs once claimed, in the
        journal's order, before any of them is handed out (the run owner announces them: the log, the run
        history), under this state's lock: it must not call back into this state."""
        self.replica = replica
        self._journal = journal
        self._feed = feed
        self._limits = limits
        self._on_left_overs = on_left_overs
        self._lock = threading.Lock()
        self._slots: Slots[_Run] = Slots(max_running)
        self._runs: dict[int, _Run] = {}
        #: Runs that got their places after a finish, oldest first, for the next claims().
        self._claimable: deque[_Run] = deque()
        #: The journal's left-overs are still to be claimed (the first claims(), or a later one after a
        #: full disk refused the claim).
        self._replay_due = journal is not None
        self._ids = itertools.count(1)
        self._wake = _Wake()
        if self._replay_due:
            self._wake.set()

    # --- admitting ---

    def admit(
        self,
        run: RunSpec,
        limits: Limits,
        coalesce_key: str | None,
        accepted_at: float,
        keep_output: bool = False,
    ) -> Admission:
        run_id = self._record(run)
        entry = _Run(run_id, run, accepted_at)
        try:
            with self._lock:
                how, holder, now = self._slots.admit(run.hook_id, limits, entry, coalesce_key)
                if how == COALESCED:
                    holder.folded.append(run_id)
                    holder.spec = run  # the waiting run starts with the newest request's
                    return Admission(COALESCED, holder.run_id)
                self._runs[run_id] = entry
                entry.placed = now
                if now:
                    entry.claimed = True
                    return Admission(how, run_id, entry.claim())
                return Admission(how, run_id)
        except Busy:
            if self._journal is not None:
                self._journal.finished([run_id], BUSY_STATUS)
            raise

    def _record(self, run: RunSpec) -> int:
        """The run's id: its journal row, written durably first; else the next of the counter."""
        journal = self._journal
        if journal is None:
            return next(self._ids)
        try:
            run_id = journal.record(run)
        except JournalUnwritable as exc:
            raise StateUnavailable(str(exc), exc.retry_after) from exc
        if run_id is None:
            raise StateUnavailable(f"run journal {journal.path} is closed")
        return run_id

    # --- claiming ---

    def claims(self, limit: int) -> list[Claim]:
        with self._lock:
            if self._replay_due:
                self._claim_left_overs()
            found: list[Claim] = []
            while self._claimable and len(found) < limit:
                entry = self._claimable.popleft()
                entry.claimed = True
                found.append(entry.claim())
            return found

    def _claim_left_overs(self) -> None:
        """The journal's unfinished rows of a dead process, admitted past their queue's bound under their
        hooks' limits now; those that may start join the claimable (under the lock)."""
        assert self._journal is not None
        left_overs = self._journal.claim_left_overs()
        if left_overs is None:  # the disk refused the claim: tried again by a later call
            return
        self._replay_due = False
        if self._on_left_overs is not None:
            self._on_left_overs(left_overs)
        for left in left_overs:
            entry = _Run(
                left.run_id,
                left.spec,
                left.accepted_at,
                attempt=left.attempt,
                previous=left.processes,
                replayed=True,
            )
            how, holder, now = self._slots.admit(
                left.spec.hook_id, self._limits(left.spec.hook_id), entry, admitted=True
            )
            if how == COALESCED:  # as a new request would be: the waiting run starts with this one's spec
                holder.folded.append(left.run_id)
                holder.spec = left.spec
                holder.previous += left.processes  # both attempts' processes are ended first
                continue
            self._runs[left.run_id] = entry
            if now:
                entry.placed = True
                self._claimable.append(entry)

    def started(self, claim: Claim, processes: Sequence[ProcessId]) -> bool:
        with self._lock:
            if self._held(claim) is None:
                return False
        journal = self._journal
        if journal is None or not processes:
            return True
        if not journal.started(claim.run_id, processes[0], claim.attempt):
            return False
        for process in processes[1:]:
            journal.add_process(claim.run_id, process, claim.attempt)
        return True

    def renew(self, claims: Sequence[Claim]) -> list[Claim]:
        return []  # no other claimer on the host: nothing is lost while the owner lives

    # --- ending ---

    def finish(self, claim: Claim, outcome: Outcome) -> bool:
        """As RunState.finish. The attempt is checked against this state's own runs (a claim of another
        attempt, or of a run already finished, is refused with nothing changed); the journal's write is
        made on the same attempt, so it never overwrites a row a later attempt holds."""
        with self._lock:
            entry = self._held(claim)
            if entry is None:
                return False
            rows = self._end(entry)
        if self._journal is not None:
            self._journal.finished(rows, outcome.status, claim.attempt)
        return True

    def refuse(self, claim: Claim, outcome: Outcome) -> bool:
        """As RunState.refuse: the end finish makes, on the same attempt check; the outcome says why it
        did not run."""
        return self.finish(claim, outcome)

    def _held(self, claim: Claim) -> _Run | None:
        """The run `claim` stands for, if it is that run's current, claimed attempt (under the lock)."""
        entry = self._runs.get(claim.run_id)
        if entry is None or not entry.claimed or entry.attempt != claim.attempt:
            return None
        return entry

    def _end(self, entry: _Run) -> list[int]:
        """Free `entry`'s places, to the runs waiting for them; returns its rows (under the lock)."""
        del self._runs[entry.run_id]
        following = self._slots.finished(entry.spec.hook_id)
        if following is not None:
            nxt = following[1]
            nxt.placed = True
            self._claimable.append(nxt)
            self._wake.set()
        return [entry.run_id, *entry.folded]

    def outcomes(self, run_ids: Sequence[int]) -> dict[int, Outcome]:
        """As RunState.outcomes: no other process runs this state's runs, so none ends elsewhere (and no
        output is kept: `keep_output` is ignored, the waiting request has its run's own result)."""
        return {}

    # --- what the owner reads ---

    def wake(self) -> _Wake:
        return self._wake

    def counts(self) -> Counts:
        with self._lock:
            per_hook: dict[str, list[int]] = {}
            for entry in self._runs.values():
                counts = per_hook.setdefault(entry.spec.hook_id, [0, 0])
                counts[0 if entry.placed else 1] += 1
            return Counts(
                running=self._slots.running,
                queued=self._slots.queued,
                per_hook=tuple(
                    (hook, running, queued) for hook, (running, queued) in sorted(per_hook.items())
                ),
            )

    def ready(self) -> bool:
        """As RunState.ready: whether the journal can record a run now (true without one), trying a failing
        journal's writes again at most once a second."""
        return accepts_runs(self._journal)

    def record(self, event: Event) -> None:
        self._feed(event)

    def close(self) -> None:
        """Close the journal (claims still held stay unfinished there: the next start replays them)."""
        self._wake.close()
        if self._journal is not None:
            self._journal.close()
