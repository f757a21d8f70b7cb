"""A run's start handed to another thread (the run owner's, while commands get a session of their own: a
native thread of its gevent loop): only the spawn goes there, and the tracker's lock stays on the caller's
thread; with gevent's patching as the owner has it with -state-url, many runs started at once, on the loop
or on its threads, all end (docs/run-state.md, "A run stuck running" and "The start on the loop")."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from hookrunner.run.processes import ProcessTracker

T = TypeVar("T")


def test_a_start_handed_to_another_thread_takes_the_trackers_lock_on_the_callers_thread_only() -> None:
    """The run owner hands a start to a native thread of its loop (with a terminal); only the spawn goes
    there. With gevent's patching the tracker's lock is the loop's, and taken on a pool thread it lost
    wakeups."""
    takers: list[str] = []  # thread names: an ident may be reused once the pool's thread has ended

    class Spy:  # the tracker's lock, telling which thread takes it
        def __init__(self) -> None:
            self._lock = threading.Lock()

        def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
            takers.append(threading.current_thread().name)
            return self._lock.acquire(blocking, timeout)

        def release(self) -> None:
            self._lock.release()

        __enter__ = acquire

        def __exit__(self, *exc: object) -> None:
            self.release()

    tracker = ProcessTracker()
    spy = Spy()
    tracker._lock = spy  # type: ignore[assignment]
    tracker._work = threading.Condition(spy)  # type: ignore[arg-type]
    spawned_on: list[str] = []

    def spawn() -> subprocess.Popen[bytes]:
        spawned_on.append(threading.current_thread().name)
        return subprocess.Popen(["true"], stdout=subprocess.PIPE)

    def offload(work: Callable[[], T]) -> T:
        done: list[T] = []
        thread = threading.Thread(target=lambda: done.append(work()), name="pool")
        thread.start()
        thread.join()
        return done[0]

    process, run = tracker.start(spawn, None, offload)
    process.wait()
    process.stdout.close()  # type: ignore[union-attr]
    tracker.done(run)
    assert spawned_on == ["pool"]
    # The caller's thread, and the poll's (a native thread here, a greenlet of the loop in the owner).
    assert takers and set(takers) <= {threading.current_thread().name, "run-processes"}, takers
    assert run.leader.pid == process.pid and run.leader.start > 0 and run.pipe.startswith("pipe:[")


def patched_runs(command: str, runs: int, at_once: int, where: str) -> str:
    """What tests/run/gevent_starts.py prints for `runs` runs of `command`, `at_once` at a time (10 s each
    at most), started `where` ("loop" or "thread")."""
    script = Path(__file__).with_name("gevent_starts.py")
    argv = [sys.executable, str(script), command, str(runs), str(at_once), "10", where]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    return f"{out.stdout.strip()} (exit status {out.returncode}){out.stderr}"


@pytest.mark.parametrize("where", ["loop", "thread"])
def test_many_runs_started_at_once_on_the_owners_patched_loop_all_end(where: str) -> None:
    """tests/run/gevent_starts.py: the owner's runner as -state-url runs it (gevent's patching, processes
    started on the loop or on its native threads). Before the tracker's lock stayed on the loop, 7 or 8 of
    300 runs (8 at once) started on the threads never got past their start, in every try."""
    true = shutil.which("true")
    assert true is not None
    assert patched_runs(true, 500, 20, where) == "ended 500 of 500, stuck 0, zombies 0 (exit status 0)"


@pytest.mark.parametrize("where", ["loop", "thread"])
def test_on_the_owners_patched_loop_the_orphans_a_run_leaves_are_reaped(tmp_path: Path, where: str) -> None:
    """The tracker's poll, started by the first start, must be a greenlet of the loop that runs (gevent's
    patching makes a thread a greenlet of the hub it is started on): else the orphans this process adopts
    stay zombies. Each run here leaves a child that exits 0.2 s after its parent; with the whole start
    handed to a native thread of the loop's pool, as before the tracker's lock stayed on the loop, they
    were left unreaped."""
    command = tmp_path / "leave-orphan"
    command.write_text("#!/bin/sh\n(sleep 0.2 &)\n")
    command.chmod(0o755)
    assert patched_runs(str(command), 20, 5, where) == "ended 20 of 20, stuck 0, zombies 0 (exit status 0)"
