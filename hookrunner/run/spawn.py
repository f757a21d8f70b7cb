"""Starting a command's process and waiting on it: its output read until every holder of the pipe has closed
it, its exit seen through a pidfd, each within a deadline, and how a run waits and where it runs.

A run waits through a `Waits`: by default on a native thread of its own (a command thread of the
scheduler), blocking in poll(2). The run owner replaces it (serve/greenruns.py) so that each run is a
greenlet on its event loop: its process is started on the loop itself (the start blocks only until the child
execs: vfork; on a native thread while commands get a session of their own), then its pipe and pidfd are
waited on by the loop's watchers, with no command thread per run.
"""

from __future__ import annotations

import functools
import io
import os
import select
import subprocess
import threading
import time
from collections.abc import Callable
from typing import IO, Any, Protocol, TypeVar

from hookrunner.run.forkexec import fork_exec_process

T = TypeVar("T")


class Process(Protocol):
    """A started command's process as the run path uses it: a subprocess.Popen, or forkexec.py's own."""

    pid: int
    stdout: IO[bytes] | None
    returncode: int | None

    def poll(self) -> int | None: ...


class StartSignal(Protocol):
    """Set once a run's process has started (or will not); waited for by its request."""

    def set(self) -> None: ...

    def wait(self, timeout: float) -> bool: ...


class Waits:
    """How runs wait and where they run: native threads, blocking calls (the threaded worker, tests)."""

    #: Whether each run is started with `launch` (a greenlet) rather than on a scheduler's command thread.
    launches = False

    def readable(self, fd: int, seconds: float) -> bool:
        """Wait until `fd` can be read (or has hung up), at most `seconds`; returns whether it can."""
        poll = select.poll()
        poll.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        return bool(poll.poll(max(seconds, 0.0) * 1000))

    def sleep(self, seconds: float) -> None:
        time.sleep(max(seconds, 0.0))

    def launch(self, work: Callable[[], None]) -> None:
        """Run `work` (a run, then those its place is handed to) apart from the caller."""
        threading.Thread(target=work, name="command", daemon=True).start()

    def event(self) -> StartSignal:
        return threading.Event()

    def offload(self, work: Callable[..., T], *args: Any) -> T:
        """Run blocking `work` (one that sleeps in time.sleep) and return its result."""
        return work(*args)

    def start(self, launch: Callable[[], T]) -> T:
        """Run a process's start, which blocks until the child execs, and return what it returns."""
        return launch()


def start_process(path: str, argv: list[str], env: dict[str, str], cwd: str | None) -> Process:
    """A command's process: argv (never a shell) with `path` as the executable, no stdin, stdout and stderr
    on one pipe, in a process group of its own (a timeout or shutdown ends all of it; a session of its own
    too while this process has a terminal: `own_session`), and no other descriptor of ours. Popen's child
    code starts it, without Popen's Python where forkexec.py can (Popen otherwise); with vfork(), waiting
    until the child has exec'd: nothing here forces a fork."""
    session = own_session()
    spawned = fork_exec_process(path, argv, env, cwd, session)
    return spawned if spawned is not None else popen_process(path, argv, env, cwd, session)


@functools.cache
def own_session() -> bool:
    """Whether each command gets a session of its own besides its process group: only while this process has
    a controlling terminal, which a command in a session of its own can neither read nor be stopped for (a
    background process group of the terminal's session is stopped when it reads it). Without a terminal a
    session would change one thing only: with Linux's autogroups (on by default, for processes outside a
    CPU cgroup) each session is a scheduling group of its own, as heavy as the whole server, and a load of
    commands then starves the server (docs/performance.md, "Commands and the scheduler's autogroups")."""
    try:
        tty = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:  # ENXIO: no controlling terminal
        return False
    os.close(tty)
    return True


def popen_process(
    path: str, argv: list[str], env: dict[str, str], cwd: str | None, session: bool = True
) -> subprocess.Popen[bytes]:
    """start_process's child, started by Popen itself (where forkexec.py does not start it)."""
    return subprocess.Popen(
        argv,
        executable=path,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=session,
        process_group=None if session else 0,
    )


#: Told each chunk of a run's output as it is read, on the reader's thread (or greenlet); must not block.
Listener = Callable[[bytes], None]


class Output:
    """A run's combined output, read from its pipe with a deadline: a process that holds the pipe open never
    holds the reader past it. A `listener` is told each chunk as it comes (a streamed answer, a live log).

    The output is kept in one buffer grown in place as it comes (CPython's BytesIO: realloc, up to an eighth
    over its size), which `data` hands over without a copy: a list of chunks joined at the end held the
    output twice at its peak (docs/run-state.md, "What the run owner holds of a run's output")."""

    def __init__(self, fd: int, waits: Waits, listener: Listener | None = None) -> None:
        self._fd = fd
        self._waits = waits
        self._listener = listener
        self._kept = io.BytesIO()
        self.eof = False

    @property
    def data(self) -> bytes:
        """The output read so far: the buffer itself, once trimmed to its size (no copy)."""
        return self._kept.getvalue()

    def read(self, deadline: float | None, stop: Callable[[], bool] = lambda: False) -> bool:
        """Read until end of file (returns True), or until `deadline` or `stop()` (False)."""
        while not self.eof:
            wait = 0.25 if deadline is None else min(0.25, deadline - time.monotonic())
            if wait <= 0 or stop():
                return False
            if not self._waits.readable(self._fd, wait):
                continue
            chunk = os.read(self._fd, 65536)
            if chunk:
                self._kept.write(chunk)
                if self._listener is not None:
                    self._listener(chunk)
            else:
                self.eof = True
        return True

    def spend(self, seconds: float) -> None:
        """Spend `seconds` reading (sleeping once the output has ended)."""
        deadline = time.monotonic() + seconds
        if self.read(deadline):
            self._waits.sleep(deadline - time.monotonic())


class Exit:
    """Waits for a started process's exit through a pidfd (readable once it has exited), or, on a kernel
    without them, by polling; the exit status is then collected by its `poll`, at once."""

    def __init__(self, process: Process, waits: Waits) -> None:
        self._process = process
        self._waits = waits
        self._pidfd = -1
        try:
            self._pidfd = os.pidfd_open(process.pid)
        except (AttributeError, OSError):
            pass  # no pidfds: polled

    def wait(self, deadline: float | None, stop: Callable[[], bool] = lambda: False) -> bool:
        """Wait for the process to exit, until `deadline` or `stop()`; returns whether it exited."""
        pause = 0.0005
        while self._process.poll() is None:
            wait = 0.25 if deadline is None else min(0.25, deadline - time.monotonic())
            if wait <= 0 or stop():
                return False
            if self._pidfd >= 0:
                self._waits.readable(self._pidfd, wait)
            else:
                self._waits.sleep(min(pause, wait))
                pause = min(pause * 2, 0.05)
        return True

    @property
    def code(self) -> int:
        """The process's exit code (-N for a signal N), once `wait` has returned True."""
        code = self._process.returncode
        assert code is not None, "the process has not been seen to exit"
        return code

    def close(self) -> None:
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1
