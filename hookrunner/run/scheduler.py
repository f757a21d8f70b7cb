"""When commands run: per-hook concurrency limits, a bounded queue, coalescing, and a global cap."""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from hookrunner.errors import HookrunnerError
from hookrunner.hooks.model import Limits
from hookrunner.ops.log import log

T = TypeVar("T")

#: How long a command thread with nothing to run waits for the next run before it exits.
IDLE_THREAD_SECONDS = 10.0


class Busy(HookrunnerError):
    """The hook is at its concurrency limit and its queue is full: answer 429 with Retry-After."""

    def __init__(self, hook_id: str, retry_after: int) -> None:
        super().__init__(f"hook {hook_id} is busy")
        self.hook_id = hook_id
        self.retry_after = retry_after


@dataclass
class Job(Generic[T]):
    """One admitted run; `work` is swapped for the newest request's while the job is still queued."""

    work: Callable[[], T]
    future: Future[T] = field(default_factory=Future)
    coalesced: int = 0
    group: str | None = None  # the coalesce-by value of its requests


def _waiting_of(pending: deque[Job[T]], group: str | None) -> Job[T] | None:
    """The newest waiting run of `group`, if any."""
    for job in reversed(pending):
        if job.group == group:
            return job
    return None


class _Gate(Generic[T]):
    def __init__(self) -> None:
        self.running = 0
        self.pending: deque[Job[T]] = deque()


#: An admitted run: the hook id, its gate and the job.
_Task = tuple[str, _Gate[T], Job[T]]


class Scheduler(Generic[T]):
    """Admits jobs per key (the hook id) and runs each on its own thread, within a global cap."""

    def __init__(self, max_running: int = 0) -> None:
        self._lock = threading.Lock()
        self._gates: dict[str, _Gate[T]] = {}
        # The global cap (0: none): runs past it wait in one first-in, first-out line, without a thread
        # each; a finishing run's thread takes the first in line.
        self._cap = max(max_running, 0)
        self._capped = 0  # runs holding one of the cap's slots
        self._waiting: deque[_Task[T]] = deque()
        # Admitted runs not yet finished, and the command threads waiting for one: a finished run's
        # thread waits a while for the next run instead of exiting, since starting a thread costs the
        # request that needs it a wait for the new thread to be scheduled.
        self._active = 0
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
            return sum(g.running for g in self._gates.values()) - len(self._waiting)

    @property
    def queued(self) -> int:
        with self._lock:
            return sum(len(g.pending) for g in self._gates.values()) + len(self._waiting)

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
            gate = self._gates.setdefault(key, _Gate())
            at_limit = limits.max_concurrency > 0 and gate.running >= limits.max_concurrency
            if not at_limit:
                job: Job[T] = Job(work)
                thread = self._admit(key, gate, job)
                if thread is None:
                    return job.future, "started"
            elif limits.coalesce and (waiting := _waiting_of(gate.pending, group)) is not None:
                # A run of its group is already waiting: it will see the newest request instead.
                waiting.work = work
                waiting.coalesced += 1
                return waiting.future, "coalesced"
            else:
                capacity = max(limits.max_queue, 1 if limits.coalesce else 0)
                if len(gate.pending) >= capacity and not admitted:
                    raise Busy(key, limits.retry_after)
                job = Job(work, group=group)
                gate.pending.append(job)
                return job.future, "queued"
        # Started outside the lock: Thread.start() waits until the new thread runs, which under load takes
        # long enough to stall every other submit and finish queued behind the lock.
        if not self._start(thread, (key, gate, job)):
            raise job.future.exception() or RuntimeError("no thread for the run")
        return job.future, "started"

    def _admit(self, key: str, gate: _Gate[T], job: Job[T]) -> threading.Thread | _Launch | None:
        """Start the run under the global cap: hand it to a waiting thread, or return a new thread for the
        caller to start once the lock is released, or put it in the global line. Called with the lock
        held."""
        gate.running += 1
        self._active += 1
        if self._cap:
            if self._capped >= self._cap:
                self._waiting.append((key, gate, job))
                return None
            self._capped += 1
        return self._thread_for((key, gate, job))

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
                key, gate, job = task
                log.output(f"cannot start a thread to run hook {key}: {exc}")
                if job.future.set_running_or_notify_cancel():
                    job.future.set_exception(exc)
                with self._lock:
                    following = self._finished(key, gate)
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

    def _run(self, key: str, gate: _Gate[T], job: Job[T]) -> _Task[T] | None:
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
                following = self._finished(key, gate)
        return following

    def _finished(self, key: str, gate: _Gate[T]) -> _Task[T] | None:
        """A run of `key` is over: its places go to the next runs; returns the run that now has them, for
        the caller's thread. Called with the lock held."""
        gate.running -= 1
        self._active -= 1
        following = None
        if gate.pending:
            gate.running += 1
            self._active += 1
            following = (key, gate, gate.pending.popleft())
        if self._cap:
            self._capped -= 1
            if following is not None:
                self._waiting.append(following)
            following = None
            if self._waiting:
                self._capped += 1
                following = self._waiting.popleft()
        self._idle.notify_all()
        return following

    def in_line(self, future: Future[T]) -> bool:
        """Whether the run of `future` waits in the global cap's line (admitted, not started)."""
        with self._lock:
            return any(job.future is future for _, _, job in self._waiting)

    def wait_idle(self, timeout: float, sleep: Callable[[float], None] | None = None) -> bool:
        """Wait until nothing runs or waits, at most `timeout` seconds; returns whether it got idle. With
        `sleep`, by looking every 50 ms and sleeping so in between (launched runs need the caller's loop)."""

        def idle() -> bool:
            return not self._active and not any(g.pending for g in self._gates.values())

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
