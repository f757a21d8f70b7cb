"""The run state's interface: where runs are admitted, claimed and finished (RunState) and where the run
history is read (HistoryReader), whichever backend holds them: the embedded one (slots in memory and the
SQLite journal, one per host) or PostgreSQL (one per fleet, issue 33). docs/run-state.md, "The
hookrunner/state/ room", is the design; tests/state/test_contract.py runs every backend through the same
cases. Callers (the run owner) see only these protocols."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from hookrunner.hooks.model import Limits
from hookrunner.state.model import Admission, Claim, Counts, Event, Outcome, ProcessId, RunSpec


class StateUnavailable(Exception):
    """The run state cannot record a run now (the journal cannot be written, the database is away): the
    request that asked for it is answered 503 with Retry-After, never 200. Nothing unrecorded is admitted."""

    def __init__(self, why: str, retry_after: int = 5) -> None:
        super().__init__(why)
        self.retry_after = retry_after


class Waiter(Protocol):
    """What the owner's loop waits on for new claimable work: on a thread, with wait(); on an event loop that
    patches nothing (the gevent owner's), on fileno() becoming readable, then wait(0), then claims()."""

    @property
    def poll(self) -> float | None:
        """Seconds after which work may be claimable with no wake at all (PostgreSQL's leases run out and
        announce nothing, and its LISTEN may be down): a loop that waits on fileno() claims at least this
        often. None: every new claimable work wakes the waiter (embedded)."""
        ...

    def wait(self, timeout: float | None) -> bool:
        """True when woken (work may be claimable), or at `poll`; False at the timeout. Consumes the wake."""
        ...

    def fileno(self) -> int:
        """A descriptor, the same for the waiter's life, that becomes readable when the waiter is woken (it
        may also be readable for a wake that wait(0) then finds was nothing: it returns False) and stays
        readable until wait() consumes the wake. Closed by RunState.close()."""
        ...


class RunState(Protocol):
    """Where runs are admitted, claimed and finished: one per host (embedded) or one per fleet (PostgreSQL).
    Each method is one transaction; its docstring says what it guarantees. Called on the run owner's loop:
    a backend that waits on the network must wait cooperatively (psycopg >= 3.1.14 under gevent)."""

    #: Who claims: the host's boot id (embedded) or the replica's name (PostgreSQL).
    replica: str

    def admit(
        self,
        run: RunSpec,
        limits: Limits,
        coalesce_key: str | None,
        accepted_at: float,
        keep_output: bool = False,
    ) -> Admission:
        """Record `run` (durably, when the backend journals) and, in the same transaction, count the hook's
        and the global running runs over every replica: start it (an Admission with a Claim, attempt 1),
        queue it, or coalesce it into the hook's newest queued run of the same `coalesce_key` (whose finish
        then also finishes this one's record). Raises state.slots.Busy when the hook is at its limit with a
        full queue (nothing is kept), StateUnavailable when it cannot record. `keep_output`: the request
        waits for the run's output (a capture, a stream); the run that stands for it (its own, or the one
        it is coalesced into) then keeps the output its finish is given, for `outcomes` (its claims say
        so: Claim.keep_output), but for a run started at its admission, whose one waiting request is here.
        A backend whose runs only this process runs keeps nothing."""
        ...

    def claims(self, limit: int) -> list[Claim]:
        """Runs this replica may start now, claimed for it, oldest first, at most `limit`: queued runs whose
        places are now free, and (at start, or when a holder's lease and grace have passed) unfinished runs
        of an earlier claim, with `previous` set to what that claim recorded as started.

        Attempts number a run's claims, by the same rule in every backend: a run's first claim is attempt 1,
        whether admit hands it out or it waited first (in its queue, or across the death of the replica or
        process that admitted it: a run that only waited is claimed on attempt 1); every later claim, a
        take-over or a replay, is one more than any earlier claim that may have written. So every write a
        claim makes (started, renew, finish, refuse) names an attempt that no other live claim holds, and a
        late write from an old attempt is refused. One latitude, the embedded backend's: a claim of its
        dead process that wrote nothing (it started no process) is not counted, since its holder, gone, can
        never write; PostgreSQL counts every claim, since a holder that lost its lease may still be alive."""
        ...

    def started(self, claim: Claim, processes: Sequence[ProcessId]) -> bool:
        """Record the attempt's processes (the leader first, then any it starts), so that a later attempt
        can end them first. False: the claim is no longer this replica's (nothing written)."""
        ...

    def renew(self, claims: Sequence[Claim]) -> list[Claim]:
        """Extend the leases of `claims`; returns those this replica no longer holds, whose process trees
        must be killed at once. Embedded: nothing is lost while the owner lives (returns [])."""
        ...

    def finish(self, claim: Claim, outcome: Outcome) -> bool:
        """Free the run's places, keep its outcome (and that of every request coalesced into it), only if
        `claim.attempt` is the run's current attempt. False, and nothing written, for a late write from an
        old attempt. A run that keeps its output (`claim.keep_output`, with a shared state) keeps
        `outcome.output` with it, whole up to the backend's bound, written no later than the outcome."""
        ...

    def refuse(self, claim: Claim, outcome: Outcome) -> bool:
        """Finish a claimed run that will not run (no such hook any more, `replay: false`), freeing its
        places, as finish does: only if `claim.attempt` is the run's current attempt, so that a replica
        whose claim another took over cannot end the run that one now holds. False, and nothing written,
        otherwise."""
        ...

    def outcomes(self, run_ids: Sequence[int]) -> dict[int, Outcome]:
        """The outcomes of those of `run_ids` that are over, whoever ran them: a process whose request waits
        for a run another replica claimed learns its end here, with its output when the run kept it (the
        bytes its finish was given), else `output` None. Embedded: none ({})."""
        ...

    def wake(self) -> Waiter:
        """What to wait on for new claimable work: a local event (embedded); LISTEN/NOTIFY with polling as
        the fallback (PostgreSQL)."""
        ...

    def counts(self) -> Counts:
        """Running and queued runs, in all and per hook, over every replica that shares this state."""
        ...

    def ready(self) -> bool:
        """Whether a run can be recorded now (the readiness check): the journal can write (embedded, or
        true without one), the database answers and takes writes (PostgreSQL). Never raises."""
        ...

    def record(self, event: Event) -> None:
        """A run history event (state/model.py's words); never blocks the run path."""
        ...

    def close(self) -> None:
        """Release what the backend holds (connections, files); claims still held are left to a later
        claimer (embedded: the next start's replay)."""
        ...


class HistoryReader(Protocol):
    """What the admin listener reads: the embedded store fed by the owner (state/historystore.py), or the
    shared tables of PostgreSQL (state/pghistory.py: every replica's runs, each naming its `replica`). Both
    give the same records (docs/history.md's fields, in that order), newest first, paged by `seq`. A reader
    that cannot read now (its database is away) raises StateUnavailable: the admin API answers 503."""

    def runs(
        self, hook: str = "", outcome: str = "", limit: int = 50, before: int = 0
    ) -> list[dict[str, Any]]:
        """Runs newest first, without their output; `before` a seq, for the next page."""
        ...

    def run(self, run_id: str) -> dict[str, Any] | None:
        """One run with its output (the newest of that id), or None."""
        ...

    def hooks(self) -> list[dict[str, Any]]:
        """Each loaded hook: its file, when that was loaded, and its last run (or None)."""
        ...

    def followed(self, run_id: str) -> dict[str, Any] | None:
        """One run as `run` gives it, with the `key` its events carry (what a follower of it listens to)."""
        ...

    def by_key(self, key: str) -> dict[str, Any] | None:
        """The run whose events carry `key`, with its output and key, or None."""
        ...

    def outcomes(self, keys: list[str]) -> dict[str, str]:
        """The outcome of each run of `keys` still in the history."""
        ...
