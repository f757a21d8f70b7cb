"""Runs on the gevent worker's event loop: each run a greenlet that has its process started on a native
thread of the loop's pool (Popen blocks until the child execs), waits on its pipe and pidfd with the loop's
watchers, sleeps with gevent, and hands what else blocks for long (ending a replayed run's previous
attempt) to a native thread too. The
threaded worker keeps run/spawn.py's default: a command thread per run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import gevent
import gevent.event
import gevent.socket

from hookrunner.run.spawn import StartSignal, Waits

T = TypeVar("T")


class _TimedOut(Exception):
    pass


class GreenWaits(Waits):
    """run/spawn.py's Waits on the gevent loop: no native thread and no hand-off of the GIL per run."""

    launches = True

    def readable(self, fd: int, seconds: float) -> bool:
        try:
            gevent.socket.wait_read(fd, timeout=max(seconds, 0.0), timeout_exc=_TimedOut)
        except _TimedOut:
            return False
        return True

    def sleep(self, seconds: float) -> None:
        gevent.sleep(max(seconds, 0.0))

    def launch(self, work: Callable[[], None]) -> None:
        gevent.spawn(work)

    def event(self) -> StartSignal:
        return gevent.event.Event()

    def offload(self, work: Callable[..., T], *args: Any) -> T:
        result: T = gevent.get_hub().threadpool.apply(work, args)
        return result
