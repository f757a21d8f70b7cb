"""Which runs may run: per-hook `max-concurrency`, a bounded queue and coalescing, and the global cap
(`-max-concurrent-commands`) with its one first-in, first-out line. Only counts and lines of opaque runs:
no threads, processes or futures; the run state that holds it (state/embedded.py) says what this lets run,
and tells it when a run is over. One copy of this accounting per run state (docs/run-state.md). Not
thread-safe: its caller holds a lock around every call."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from hookrunner.errors import HookrunnerError
from hookrunner.hooks.model import Limits

R = TypeVar("R")

#: How a run was admitted: it holds its places now (or waits for the global cap's line), waits in its hook's
#: queue, or was folded into the waiting run of its hook (and coalesce-by value).
STARTED, QUEUED, COALESCED = "started", "queued", "coalesced"


class Busy(HookrunnerError):
    """The hook is at its concurrency limit and its queue is full: answer 429 with Retry-After."""

    def __init__(self, hook_id: str, retry_after: int) -> None:
        super().__init__(f"hook {hook_id} is busy")
        self.hook_id = hook_id
        self.retry_after = retry_after


class _Gate(Generic[R]):
    """One hook's runs: how many hold its places, and those waiting in its queue with their group."""

    def __init__(self) -> None:
        self.running = 0
        self.pending: deque[tuple[str | None, R]] = deque()


class Slots(Generic[R]):
    """The places of every hook and the global cap; a run is any object the caller gives."""

    def __init__(self, max_running: int = 0) -> None:
        self._gates: dict[str, _Gate[R]] = {}
        self._cap = max(max_running, 0)
        self._capped = 0  # runs holding one of the cap's places
        self._line: deque[tuple[str, R]] = deque()  # admitted past the cap: waiting for one of its places
        self.active = 0  # runs admitted and not over (in the cap's line included)

    # --- counts ---

    @property
    def running(self) -> int:
        """Runs holding their places now (those in the cap's line not counted)."""
        return sum(g.running for g in self._gates.values()) - len(self._line)

    @property
    def queued(self) -> int:
        """Runs waiting: in their hook's queue, or in the cap's line."""
        return sum(len(g.pending) for g in self._gates.values()) + len(self._line)

    @property
    def idle(self) -> bool:
        return not self.active and not any(g.pending for g in self._gates.values())

    def in_line(self, matches: Callable[[R], bool]) -> bool:
        """Whether a run that `matches` waits in the global cap's line."""
        return any(matches(run) for _, run in self._line)

    # --- admitting and ending ---

    def admit(
        self, key: str, limits: Limits, run: R, group: str | None = None, admitted: bool = False
    ) -> tuple[str, R, bool]:
        """Admit `run` of hook `key`: returns how (STARTED, QUEUED or COALESCED), the run that now stands for
        it (for COALESCED, the waiting run of its group, which the caller gives the newest request), and
        whether that run may start at once (False for one in the cap's line, or waiting). Raises Busy when
        the hook is at its limit and its queue is full, unless the run was `admitted` before (a replayed
        run, already answered): that one joins the queue past its bound."""
        gate = self._gates.setdefault(key, _Gate())
        if not (limits.max_concurrency > 0 and gate.running >= limits.max_concurrency):
            return STARTED, run, self._take_places(key, gate, run)
        if limits.coalesce:
            waiting = _newest_of(gate.pending, group)
            if waiting is not None:
                return COALESCED, waiting, False
        capacity = max(limits.max_queue, 1 if limits.coalesce else 0)
        if len(gate.pending) >= capacity and not admitted:
            raise Busy(key, limits.retry_after)
        gate.pending.append((group, run))
        return QUEUED, run, False

    def finished(self, key: str) -> tuple[str, R] | None:
        """A run of `key` is over: its places go to the next runs; returns the run that now holds them and
        may start (its hook's next, or under a global cap the first in the cap's line), if any."""
        gate = self._gates[key]
        gate.running -= 1
        self.active -= 1
        following: tuple[str, R] | None = None
        if gate.pending:
            gate.running += 1
            self.active += 1
            following = (key, gate.pending.popleft()[1])
        if self._cap:
            self._capped -= 1
            if following is not None:
                self._line.append(following)
            following = None
            if self._line:
                self._capped += 1
                following = self._line.popleft()
        return following

    def _take_places(self, key: str, gate: _Gate[R], run: R) -> bool:
        """The hook's place, and the cap's if there is one free (else the end of the cap's line)."""
        gate.running += 1
        self.active += 1
        if self._cap:
            if self._capped >= self._cap:
                self._line.append((key, run))
                return False
            self._capped += 1
        return True


def _newest_of(pending: deque[tuple[str | None, R]], group: str | None) -> R | None:
    """The newest waiting run of `group`, if any."""
    found: Iterator[R] = (run for run_group, run in reversed(pending) if run_group == group)
    return next(found, None)
