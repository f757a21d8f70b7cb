"""Polling until a condition holds, for tests that watch other threads or processes act."""

from __future__ import annotations

import time
from collections.abc import Callable


def eventually(check: Callable[[], bool], timeout: float = 5.0, interval: float = 0.01) -> bool:
    """Whether `check()` holds within `timeout` seconds (asked every `interval`, and once more at the end)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return check()
