"""A monotonic clock the test moves by hand, for the fairness and rate-limit tests."""

from __future__ import annotations


class Clock:
    """`clock()` is `clock.now`; a test moves it: `clock.now += 0.5`."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
