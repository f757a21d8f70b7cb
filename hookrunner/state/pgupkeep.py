"""The shared run state's upkeep (-state-url): what keeps its tables from growing with every request, done
by every replica's run owner on a schedule of its own, apart from any request. Finished runs' rows are
deleted once nothing can still read them, and the history's events are folded into records when no admin
listener has folded them for a while. docs/run-state.md, "The shared state's upkeep", gives the rules."""

from __future__ import annotations

from typing import Any

import psycopg

from hookrunner.state.pghistory import PostgresHistory
from hookrunner.state.postgres import PostgresState

#: How long after its end a finished run's row is kept by default (-state-done-age): well past any wait for
#: its outcome (a waiting replica reads it at the end's NOTIFY, or at its poll, every 5 s).
DONE_AGE = 600.0
#: Finished runs deleted in one transaction.
BATCH = 500
#: Events this old mean that no admin listener folds them (one folds every half second); the owners fold
#: them then. At most this, and at most a quarter of -state-done-age.
FOLD_AFTER = 30.0
#: Events a fold takes in one transaction on the owner's loop (an admin listener's take 1,000).
FOLD_BATCH = 200
_NOW = "extract(epoch FROM clock_timestamp())"


class Upkeep:
    """One replica's upkeep of the shared tables. Replicas may run it at once: the runs to delete are taken
    FOR UPDATE SKIP LOCKED (each row deleted by one of them), and a fold takes the history's advisory lock
    without waiting for it (a replica that does not get it leaves the fold to the one that did)."""

    def __init__(
        self,
        state: PostgresState,
        history: PostgresHistory,
        done_age: float = DONE_AGE,
        batch: int = BATCH,
    ) -> None:
        self.state = state
        self.history = history
        self.done_age = max(done_age, 0.0)
        self.batch = max(batch, 1)
        self.fold_after = min(FOLD_AFTER, self.done_age / 4)
        self._folded = False  # folded since the history's retention was last applied
        history.batch = FOLD_BATCH  # a fold on the owner's loop holds it for a smaller batch at a time

    @property
    def every(self) -> float:
        """Seconds between two rounds: often enough that neither table holds much more than its bound."""
        return max(self.fold_after, 0.1)

    def run(self) -> tuple[int, int]:
        """One round: fold events no admin listener has folded, then delete the finished runs nothing needs;
        returns (events folded, runs deleted). Raises StateUnavailable."""
        return self.fold_unfolded(), self.prune_runs()

    def fold_unfolded(self) -> int:
        """Fold every event when the oldest waiting is older than `fold_after` (no admin listener folds
        them); returns how many were folded. The history's retention (-state-keep, -state-keep-age) is
        applied by the fold, as an admin listener applies it, and again at the next round with nothing to
        fold, for the records the last fold ended."""
        with self.state.transaction() as cur:
            cur.execute(f"SELECT {_NOW} - at FROM hookrunner_events ORDER BY id LIMIT 1")
            row = cur.fetchone()
        if row is None or row[0] < self.fold_after:
            if self._folded:  # the fold applies it only as records begin; the last may only have ended some
                self.history.prune()
                self._folded = False
            return 0
        folded = self.history.catch_up(wait=False)
        self._folded = self._folded or folded > 0
        return folded

    def prune_runs(self) -> int:
        """Delete finished runs, with the requests coalesced into them, that ended more than `done_age`
        before the oldest history event not folded yet (before now, when every one is): a replica waiting
        for one has read its outcome long before, the fold that joins a coalesced run's requests has read
        them, and a take-over reads running rows only. In batches of `batch`, one transaction each; returns
        how many rows went."""
        deleted = 0
        while True:
            with self.state.transaction() as cur:
                ids = self._finished(cur)
                if ids:  # the rows folded into them first: they point at them
                    cur.execute("DELETE FROM hookrunner_runs WHERE coalesced_into = ANY(%s)", (ids,))
                    deleted += cur.rowcount
                    cur.execute("DELETE FROM hookrunner_runs WHERE id = ANY(%s)", (ids,))
                    deleted += cur.rowcount
            if len(ids) < self.batch:
                return deleted

    def _finished(self, cur: psycopg.Cursor[Any]) -> list[int]:
        cur.execute(
            "SELECT id FROM hookrunner_runs WHERE state = 'done' AND coalesced_into IS NULL"
            f" AND finished_at < least({_NOW},"
            "   (SELECT at FROM hookrunner_events ORDER BY id LIMIT 1)) - %s"
            " ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED",
            (self.done_age, self.batch),
        )
        return [int(run_id) for (run_id,) in cur.fetchall()]
