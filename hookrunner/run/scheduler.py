"""When commands run: the runs that the run state's places (state/slots.py: per-hook concurrency limits, a
bounded queue, coalescing, a global cap) let run, each on a command thread or launched on the serving loop."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from hookrunner.hooks.model import Limits
from hookrunner.ops.log import log
from hookrunner.state.slots import COALESCED, Busy, Slots

__all__ = ["Busy", "Job", "Scheduler"]

T = TypeVar("T")

#: How long a command thread with nothing to run waits for the next run before it exits.
IDLE_THREAD_SECONDS = 10.0


@dataclass
class Job(Generic[T]):
    """One admitted run; `work` is swapped for the newest request's while the job is still queued."""

    work: Callable[[], T]
    future: Future[T] = field(default_factory=Future)
    coalesced: int = 0


#: An admitted run: the hook id and the job.
_Task = tuple[str, Job[T]]


class Scheduler(Generic[T]):
    """Admits jobs per key (the hook id) and runs each on its own thread, within a global cap."""

    def __init__(self, max_running: int = 0) -> None:
        self._lock = threading.Lock()
        # The places (under the lock). Past the global cap, runs wait in one first-in, first-out line,
        # without a thread each; a finishing run's thread takes the first in line.
        self._slots: Slots[Job[T]] = Slots(max_running)
        # The command threads waiting for a run: a finished run's thread waits a while for the next run
        # instead of exiting, since starting a thread costs the request that needs it a wait for the new
        # thread to be scheduled.
        self._idle_threads = 0
        self._handover: queue.SimpleQueue[_Task[T]] = queue.SimpleQueue()
        self._idle = threading.Condition(self._lock)
        #: Where runs run when not on command threads: `launch(work)` runs `work` apart from the caller
        #: (the gevent worker: a greenlet on its loop; run/spawn.py). None: command threads.
        self.launch: Callable[[Callable[[], None]], None] | None = None

    # --- counts, for logs and metrics ---

    @property
    def running(self) -> int:
        with self._lock:
            return self._slots.running

    @property
    def queued(self) -> int:
        with self._lock:
            return self._slots.queued

    def submit(
        self,
        key: str,
        limits: Limits,
        work: Callable[[], T],
        admitted: bool = False,
        group: str | None = None,
    ) -> tuple[Future[T], str]:
        """Admit `work`; returns its future and how it was admitted: `started`, `queued` or `coalesced`.

        Raises Busy when the key is at its limit and its queue is full, unless the run was `admitted`
        before (a replayed run, already answered): that one joins the queue past its bound. With coalescing,
        a run coalesces into the waiting run of its `group` (the hook's coalesce-by value; None: one group).
        """
        with self._lock:
            how, job, now = self._slots.admit(key, limits, Job(work), group, admitted)
            if how == COALESCED:  # a run of its group is already waiting: it will see the newest request
                job.work = work
                job.coalesced += 1
            thread = self._thread_for((key, job)) if now else None
            if thread is None:  # queued, coalesced, in the cap's line, or handed to a waiting thread
                return job.future, how
        # Started outside the lock: Thread.start() waits until the new thread runs, which under load takes
        # long enough to stall every other submit and finish queued behind the lock.
        if not self._start(thread, (key, job)):
            raise job.future.exception() or RuntimeError("no thread for the run")
        return job.future, how

    def _thread_for(self, task: _Task[T]) -> threading.Thread | _Launch | None:
        """Hand an admitted run to a waiting thread, or return a new thread to start once the lock is
        released (or, with `launch`, what launches it). Called with the lock held."""
        if self.launch is not None:
            return _Launch(self.launch, lambda: self._chain(task))
        if self._idle_threads:
            self._idle_threads -= 1
            self._handover.put(task)
            return None
        return threading.Thread(target=self._serve, args=(task,), name="command", daemon=True)

    def _start(self, thread: threading.Thread | _Launch, task: _Task[T]) -> bool:
        """Start a new command thread for `task`; returns whether it started.

        When the process cannot start another thread, the run fails with that error (on its future) and
        gives up its place in the hook's gate and under the cap, as a finished run does; a run that then
        gets the place needs a thread too, and fails the same way if there is none. So nothing is left
        waiting for a place that is never given back.
        """
        own = True  # the thread is for the caller's run
        while True:
            try:
                thread.start()
                return own
            except RuntimeError as exc:  # "can't start new thread": out of memory or of processes
                key, job = task
                log.output(f"cannot start a thread to run hook {key}: {exc}")
                if job.future.set_running_or_notify_cancel():
                    job.future.set_exception(exc)
                with self._lock:
                    following = self._finished(key)
                    new = self._thread_for(following) if following is not None else None
                if new is None or following is None:
                    return False
                thread, task, own = new, following, False

    def _chain(self, task: _Task[T]) -> None:
        """A launched run, then the runs whose places it hands on, one after the other."""
        following: _Task[T] | None = task
        while following is not None:
            following = self._run(*following)

    def _serve(self, task: _Task[T]) -> None:
        """A command thread: runs its run, then the runs handed to it, until idle for IDLE_THREAD_SECONDS."""
        while True:
            following = self._run(*task)
            if following is not None:
                task = following
                continue
            with self._lock:
                self._idle_threads += 1
            try:
                task = self._handover.get(timeout=IDLE_THREAD_SECONDS)
            except queue.Empty:
                with self._lock:
                    try:  # a run handed over just as the wait ended was counted on this thread
                        task = self._handover.get_nowait()
                    except queue.Empty:
                        self._idle_threads -= 1
                        return

    def _run(self, key: str, job: Job[T]) -> _Task[T] | None:
        """Run one job; returns the next run for this same thread: the hook's next queued run, or under a
        global cap the first run in the global line (the hook's next run joins the line at its end)."""
        if self.launch is None:  # a command thread (a launched run runs on its launcher's thread)
            threading.current_thread().name = f"command-{key}"
        try:
            if job.future.set_running_or_notify_cancel():
                try:
                    job.future.set_result(job.work())
                except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                    job.future.set_exception(exc)
        finally:
            with self._lock:
                following = self._finished(key)
        return following

    def _finished(self, key: str) -> _Task[T] | None:
        """A run of `key` is over: its places go to the next runs; returns the run that now has them, for
        the caller's thread. Called with the lock held."""
        following = self._slots.finished(key)
        self._idle.notify_all()
        return following

    def in_line(self, future: Future[T]) -> bool:
        """Whether the run of `future` waits in the global cap's line (admitted, not started)."""
        with self._lock:
            return self._slots.in_line(lambda job: job.future is future)

    def wait_idle(self, timeout: float, sleep: Callable[[float], None] | None = None) -> bool:
        """Wait until nothing runs or waits, at most `timeout` seconds; returns whether it got idle. With
        `sleep`, by looking every 50 ms and sleeping so in between (launched runs need the caller's loop)."""

        def idle() -> bool:
            return self._slots.idle

        if sleep is None:
            with self._idle:
                return self._idle.wait_for(idle, timeout)
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if idle():
                    return True
            if time.monotonic() >= deadline:
                return False
            sleep(min(0.05, deadline - time.monotonic()))


class _Launch:
    """A run to launch once the scheduler's lock is released, started as a thread is."""

    def __init__(self, launch: Callable[[Callable[[], None]], None], work: Callable[[], None]) -> None:
        self._launch = launch
        self._work = work

    def start(self) -> None:
        self._launch(self._work)
