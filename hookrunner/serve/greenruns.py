"""Runs on a gevent loop (the run owner's, serve/ownerprocess.py): each run a greenlet that starts its
process on the loop itself (vfork: the loop waits only until the child execs; on a native thread while
commands get a session of their own), waits on its pipe and pidfd with the loop's watchers, sleeps with
gevent, and hands what blocks for long (ending a replayed run's previous attempt; in the gevent worker,
parsing a hooks file) to a native thread: the process's own threads (`_Offload`: a queue in C and one
watcher of the loop), not gevent's pool. The threaded worker keeps run/spawn.py's default: a command thread
per run.
"""

from __future__ import annotations

import os
from _queue import SimpleQueue
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

import gevent
import gevent.event
import gevent.hub
import gevent.socket

from hookrunner.run.spawn import StartSignal, Waits, own_session

T = TypeVar("T")

#: Native threads that run offloaded work, at most: as many as gevent's own pool of the loop keeps.
OFFLOAD_THREADS = 10


class _TimedOut(Exception):
    pass


class _Offload:
    """The native threads that run a loop's blocking work (ending a replayed run's previous attempt; a
    process's start while commands get a session of their own).

    gevent's pool (`hub.threadpool.apply`) does the same with a watcher, an event and a lock made per task,
    and a queue written in Python; under load, when every start was handed over, that was an eighth of the
    run owner's GIL (the starts run on the loop now: docs/run-state.md, "The start on the loop"). Here the
    tasks go through a queue written in C, and one watcher of the loop brings every finished task back to
    the greenlet that waits for it. Threads are started as the work needs them (none is idle), up to
    `limit`, and live as long as the process; they are native even where gevent has patched threading."""

    def __init__(self, limit: int, hub: gevent.hub.Hub) -> None:
        from gevent.monkey import get_original  # as gevent's pool does, at the first task: not at rest

        self._limit = limit
        self._pid = os.getpid()
        self._hub = hub
        self._tasks: SimpleQueue[tuple[gevent.hub.Waiter[Any], Callable[..., Any], tuple[Any, ...]]]
        self._tasks = SimpleQueue()
        self._done: deque[tuple[gevent.hub.Waiter[Any], bool, Any]] = deque()
        self._lock = get_original("_thread", "allocate_lock")()
        self._start_thread = get_original("_thread", "start_new_thread")
        self._threads = 0
        self._idle = 0
        self._pending = 0  # tasks handed over and not yet brought back (on the loop's thread only)
        # Started only while a task is out: a started watcher keeps the loop alive.
        self._back = self._hub.loop.async_()
        self._listening = False

    def serves(self, hub: gevent.hub.Hub) -> bool:
        """Whether this pool is `hub`'s in this process (a forked child makes its own: no thread is there)."""
        return self._hub is hub and self._pid == os.getpid()

    def run(self, work: Callable[..., T], args: tuple[Any, ...]) -> T:
        """`work(*args)` on a native thread; the calling greenlet waits for it, the loop runs meanwhile."""
        waiter: gevent.hub.Waiter[T] = gevent.hub.Waiter()
        with self._lock:
            start = self._idle <= 0 and self._threads < self._limit
            if start:
                self._threads += 1
                self._idle += 1
            self._idle -= 1
        if start:
            try:
                self._start_thread(self._serve, ())
            except BaseException:  # no thread to be had (RuntimeError): the task waits for a busy one
                with self._lock:
                    self._threads -= 1
                    alone = self._threads == 0
                    if not alone:
                        self._idle -= 1  # a task queued with no thread of its own
                if alone:
                    raise  # none would ever take it
        if not self._listening:
            self._back.start(self._bring_back)
            self._listening = True
        self._pending += 1
        self._tasks.put((waiter, work, args))
        return waiter.get()

    def _serve(self) -> None:
        """One native thread: run tasks as they come, forever."""
        while True:
            waiter, work, args = self._tasks.get()
            try:
                self._done.append((waiter, True, work(*args)))
            except BaseException as exc:  # noqa: BLE001 - the waiting greenlet's, raised there
                self._done.append((waiter, False, exc))
            del waiter, work, args  # nothing of a task is kept while the thread waits for the next
            with self._lock:
                self._idle += 1
            self._back.send()

    def _bring_back(self) -> None:
        """On the loop: each finished task's result (or exception) to the greenlet that waits for it. Only
        the tasks done when it began: a greenlet that hands over task after task, each done at once, does
        not hold the loop here; what finished meanwhile is brought back on the loop's next turn."""
        for _ in range(len(self._done)):
            waiter, ok, value = self._done.popleft()
            self._pending -= 1
            if ok:
                waiter.switch(value)
            else:
                waiter.throw(value)
        if self._done:
            self._back.send()
        elif not self._pending and self._listening:  # (a greenlet switched to may have handed one over)
            self._back.stop()
            self._listening = False


#: Each loop's native threads (as gevent keeps a pool a hub), made at its first offloaded task.
_pools: dict[int, _Offload] = {}


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

    def start(self, launch: Callable[[], T]) -> T:
        """A process's start: on the loop itself (vfork: the loop waits until the child execs, which costs
        less than a hand-off to a native thread and back), unless each command heads a session of its own
        (this process has a terminal: run/spawn.py's `own_session`). Such a child leaves this process's
        scheduling group before its exec, and under load the loop would wait for it to be given a core
        (up to half the work, measured: docs/run-state.md, "The start on the loop")."""
        if own_session():
            return self.offload(launch)
        return launch()

    def offload(self, work: Callable[..., T], *args: Any) -> T:
        hub = gevent.get_hub()
        pool = _pools.get(id(hub))
        if pool is None or not pool.serves(hub):
            pool = _pools[id(hub)] = _Offload(OFFLOAD_THREADS, hub)
        return pool.run(work, args)
