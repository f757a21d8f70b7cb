"""A background run's answer held until its process has started (the gevent worker's `start()`): how long it
waits, and how many runs may be answered ahead of their start."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

from hookrunner.run.spawn import StartSignal

#: How long a background run's answer waits for its process to start, at most (the gevent worker). Under
#: load the start waits for a core (the child's exec) behind everything else on the machine; past this the
#: push is answered anyway and its process starts as soon as it can, as webhook's always does.
START_WAIT = 0.05

#: Background runs answered before their start without waiting for it: one. A push is answered at once when
#: no run answered before it is still starting, else waits for its own start (START_WAIT at most): answers
#: still come no faster than starts, and one run, not a backlog, is answered and not started. A lone push
#: skips its start's wait, under load most of its answer's time (docs/limits.md, "A flooded neighbour").
STARTS_AHEAD = 1

T = TypeVar("T")


class StartWaits:
    """The answers of one runner's background runs that wait for their start, and those answered ahead of
    it; each run is known by its request id."""

    def __init__(self) -> None:
        # Requests answered once their run has started, by request id.
        self._waiters: dict[str, StartSignal] = {}
        # Requests answered before their run started (at most STARTS_AHEAD of them, but for those whose start
        # took longer than the wait), by request id; each leaves when its run starts (or will not).
        self._ahead: set[str] = set()

    @property
    def ahead(self) -> int:
        """Background runs answered before their process started that have not started yet."""
        return len(self._ahead)

    def answer(
        self, request_id: str, started: StartSignal, admit: Callable[[], tuple[Future[T], bool]], wait: float
    ) -> Future[T]:
        """Admit a run with `admit` (its future, and whether it holds its claim now) and return once it may be
        answered: a run admitted to start now has started, or waited `wait` for a core, unless no other run
        is answered and not yet started (STARTS_AHEAD)."""
        self._waiters[request_id] = started
        try:
            future, now = admit()
            if now:  # in the cap's line (not claimed yet): answered now
                if len(self._ahead) >= STARTS_AHEAD:
                    started.wait(wait)
                if request_id in self._waiters:  # not started yet: answered ahead of its start
                    self._ahead.add(request_id)
        finally:
            self._waiters.pop(request_id, None)
        return future

    def started(self, request_id: str) -> None:
        """The run of `request_id` has started its process (or will not): its answer may go."""
        self._ahead.discard(request_id)
        waiter = self._waiters.pop(request_id, None)
        if waiter is not None:
            waiter.set()
