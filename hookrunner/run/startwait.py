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

#: Told once of one run's start: its process's pid, or None when the run ended without starting one. Given
#: per submitted run, so that it reaches that run alone (two runs may carry one request id: a client's own
#: X-Request-Id with -x-request-id).
OnStarted = Callable[[int | None], None]


def told_once(on_started: OnStarted | None) -> OnStarted | None:
    """`on_started`, told at most once (the start, or else the run's end)."""
    if on_started is None:
        return None
    told = False

    def once(pid: int | None) -> None:
        nonlocal told
        if not told:
            told = True
            on_started(pid)

    return once


class _Notice:
    """One background run's answer waiting for its start: set when its process has started (or will not)."""

    def __init__(self, ahead: set[_Notice], signal: StartSignal) -> None:
        self._ahead = ahead
        self.signal = signal
        self.told = False

    def tell(self, pid: int | None) -> None:
        self.told = True
        self._ahead.discard(self)
        self.signal.set()


class StartWaits:
    """The background runs of one runner whose answers wait for their start, and those answered ahead of it
    and not started yet; each known by its submit, not by its request id."""

    def __init__(self) -> None:
        # Runs answered before their start (at most STARTS_AHEAD of them, but for those whose start took
        # longer than the wait); each leaves when its run starts (or will not).
        self._ahead: set[_Notice] = set()

    @property
    def ahead(self) -> int:
        """Background runs answered before their process started that have not started yet."""
        return len(self._ahead)

    def answer(
        self, started: StartSignal, admit: Callable[[OnStarted], tuple[Future[T], bool]], wait: float
    ) -> Future[T]:
        """Admit a run with `admit`, given what its start tells (it returns the run's future, and whether it
        holds its claim now), and return once it may be answered: a run admitted to start now has started,
        or waited `wait` for a core, unless no other run is answered and not yet started (STARTS_AHEAD)."""
        notice = _Notice(self._ahead, started)
        future, now = admit(notice.tell)
        if now and not notice.told:  # in the cap's line (not claimed yet): answered now
            if len(self._ahead) >= STARTS_AHEAD:
                started.wait(wait)
            if not notice.told:  # not started yet: answered ahead of its start
                self._ahead.add(notice)
                if notice.told:  # it started meanwhile (on another thread)
                    self._ahead.discard(notice)
        return future
