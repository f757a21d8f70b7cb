"""The run owner's process (issue 32, docs/run-state.md step 5): one per host, forked by the master after
-setuid/-setgid and before the workers, restarted by the master if it dies. The master keeps, for each
worker, the owner's end of that worker's private connection (run/wire.py) and passes it to the owner over
a control socketpair; the owner takes it and serves it (`attach`), and lets it go when the master says the
worker is gone (`detach`). Every run of every worker is admitted, started and waited for there
(serve/ownerprocess.py, step 6)."""

from __future__ import annotations

import ctypes
import gc
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Collection
from types import FrameType

from hookrunner.ops.log import log
from hookrunner.run.wire import EVENT, Message, PeerGone, pair, send
from hookrunner.serve.context import RELOAD_SIGNALS

#: What the master sends its workers (the terminal's keys, gunicorn's own): the owner does nothing on them;
#: the master stops it with SIGTERM, after the workers. Caught by a handler that does nothing rather than
#: ignored: an ignored signal stays ignored through exec, and every command started with SIGINT, SIGQUIT,
#: SIGUSR2 and SIGWINCH ignored (webhook's with none; a shell script cannot even trap one it began with
#: ignored), where a caught one is back to its default in the command.
_SWALLOWED = (signal.SIGINT, signal.SIGQUIT, signal.SIGUSR2, signal.SIGWINCH)
#: Ignored, and so in commands too: caught, a write to the terminal from a background process group (with
#: `stty tostop`) would have the kernel send SIGTTOU to the whole group, the master's, which gunicorn
#: takes for "one worker fewer", and retry the write.
_IGNORED = (signal.SIGTTIN, signal.SIGTTOU)
#: Signals blocked across the owner's fork until its own handlers are in place: a stop sent meanwhile
#: would otherwise reach the master's copied handlers and be lost.
_HELD = {signal.SIGTERM, signal.SIGCHLD, *_SWALLOWED, *_IGNORED, *RELOAD_SIGNALS}
#: How long stop() waits for the owner to end after SIGTERM before SIGKILL.
STOP_WAIT = 5.0
#: An owner that ends is replaced at once, unless it and the one before it each ended within this long of
#: their start: then it is replaced this long after its end. An owner that cannot start is forked about
#: once a second (the master's loop wakes at least that often), not as fast as it dies.
RESTART_SPACING = 1.0
#: The owner's process name (/proc/<pid>/comm, what ps and top show): the master's other children are
#: the workers and the admin listener.
PROCESS_NAME = b"run-owner"
PR_SET_NAME = 15


class RunOwner:
    """The master's side: the owner's pid and epoch, the control channel, and the owner's end of each live
    worker's connection, kept for the worker's whole life so that a new owner can be given them again."""

    def __init__(self, keep_out: Collection[int] = ()) -> None:
        #: Descriptors of the master's that no owner may hold (the hooks socket, the -state-dir lock).
        self.keep_out = tuple(keep_out)
        self.pid = 0
        self.epoch = 0
        self.started_at = 0.0
        self._ended_at = 0.0  # when the master saw the current owner's end; 0: it has not
        self._quick_ends = 0  # owners in a row that ended within RESTART_SPACING of their start
        self.stopping = False
        self._control: socket.socket | None = None
        self._pidfd = -1
        self._links: dict[int, socket.socket] = {}
        self._pending: socket.socket | None = None  # the owner's end for the worker being forked

    # ---------------------------------------------------------------------------------------- the owner

    def start(self) -> None:
        """Fork a new owner (the next epoch) and give it every live worker's connection."""
        self._forget_owner()
        self.epoch += 1
        master_end, owner_end = pair()
        signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
        try:
            pid = os.fork()
            if pid == 0:  # the owner: never returns
                status = 1
                try:
                    master_end.close()
                    for link in self._links.values():
                        link.close()
                    status = _serve_owner(owner_end, self.epoch, self.keep_out)
                except SystemExit:
                    status = 0  # SIGTERM
                except BaseException as exc:  # noqa: BLE001 - the child must end here, whatever happened
                    log.output(f"run owner: {exc}", level="error", event=EVENT)
                finally:
                    os._exit(status)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)
        owner_end.close()
        master_end.setblocking(False)  # the master never waits on the owner
        self.pid, self._control, self.started_at = pid, master_end, time.monotonic()
        try:
            self._pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self._pidfd = -1
        for worker_pid, link in list(self._links.items()):
            self._tell(Message("worker", {"pid": worker_pid}), [link.fileno()])

    def gone(self) -> bool:
        """Whether the owner has ended (reaped here if gunicorn's reaping has not already)."""
        if not self.pid:
            return False
        if self._pidfd >= 0:
            readable = select.poll()  # a pidfd is readable once its process has ended
            readable.register(self._pidfd, select.POLLIN)
            ended = bool(readable.poll(0))
        else:
            try:
                ended = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
            except ChildProcessError:
                ended = True  # reaped by gunicorn's waitpid(-1) already
        if ended:
            try:
                os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                pass
        return ended

    def restart_if_gone(self) -> None:
        """Called from the master's loop: an owner that ended is replaced at once (the next epoch)."""
        if self.stopping or not self.pid:
            return
        now = time.monotonic()
        if not self._ended_at:
            if not self.gone():
                return
            self._ended_at = now
            self._quick_ends = self._quick_ends + 1 if now - self.started_at < RESTART_SPACING else 0
            log.output(f"run owner (pid {self.pid}, epoch {self.epoch}) ended; starting another", event=EVENT)
        if self._quick_ends > 1 and now - self._ended_at < RESTART_SPACING:
            return  # dying as fast as it starts: once a second
        self._ended_at = 0.0
        self.start()

    def forward(self, signum: int) -> None:
        """A reload signal for the owner (lost while no owner runs: the next one reads every file again)."""
        if self.pid and not self._ended_at:
            _signal(self.pid, signum)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after STOP_WAIT; closes every connection the master kept."""
        self.stopping = True
        if self.pid and not self.gone():
            _signal(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_WAIT
            while not self.gone() and time.monotonic() < deadline:
                time.sleep(0.02)
            if not self.gone():
                _signal(self.pid, signal.SIGKILL)
                try:
                    os.waitpid(self.pid, 0)
                except ChildProcessError:
                    pass
        self._close_all()

    # ------------------------------------------------------------------------------------------ workers

    def new_connection(self) -> socket.socket:
        """Before a worker's fork: its connection to the owner; the worker's end is returned, the owner's
        kept for connect_worker (or closed by drop_connection if the fork fails)."""
        self.drop_connection()
        worker_end, self._pending = pair()
        return worker_end

    def connect_worker(self, worker_pid: int) -> None:
        """The worker was forked with the connection new_connection made: pass the owner's end on."""
        owner_end, self._pending = self._pending, None
        if owner_end is None:
            return
        self._links[worker_pid] = owner_end
        self._tell(Message("worker", {"pid": worker_pid}), [owner_end.fileno()])

    def drop_connection(self) -> None:
        if self._pending is not None:
            self._pending.close()
            self._pending = None

    def keep_workers(self, live: Collection[int]) -> None:
        """Let go of the connections of workers no longer in `live` (the master reaped them)."""
        for worker_pid in [pid for pid in self._links if pid not in live]:
            self._links.pop(worker_pid).close()
            self._tell(Message("worker_gone", {"pid": worker_pid}))

    def in_worker(self) -> None:
        """In a newly forked worker: close what only the master may hold (the control channel, and every
        worker's owner end: an owner must see the master's end when it dies)."""
        self._close_all()

    # -------------------------------------------------------------------------------------------- inner

    def _tell(self, message: Message, fds: list[int] | None = None) -> None:
        if self._control is None:
            return  # no owner now: the next one gets every live connection at its start
        try:
            send(self._control, message, fds)
        except (BlockingIOError, PeerGone, OSError):
            # An owner that does not read its control channel is of no use: it is replaced, and the new
            # one is given every live connection.
            if self.pid and not self.stopping:
                _signal(self.pid, signal.SIGKILL)

    def _close_all(self) -> None:
        self._forget_owner()
        self.drop_connection()
        for link in self._links.values():
            link.close()
        self._links.clear()

    def _forget_owner(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _name_process(name: bytes) -> None:
    try:
        ctypes.CDLL(None).prctl(PR_SET_NAME, name, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _close_inherited(keep: set[int]) -> None:
    """Close every descriptor this process inherited but those in `keep`."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor, closed already


def _nothing(signum: int, frame: FrameType | None) -> None:
    """A swallowed signal's handler (_SWALLOWED)."""


def _serve_owner(control: socket.socket, epoch: int, keep_out: tuple[int, ...]) -> int:
    """The owner process: set up, then serve the runs of the workers the master passes on
    (serve/ownerprocess.py) until SIGTERM or the master's end."""
    for signum in _SWALLOWED:
        signal.signal(signum, _nothing)
    for signum in _IGNORED:
        signal.signal(signum, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD - RELOAD_SIGNALS)
    for fd in keep_out:
        try:
            os.close(fd)
        except OSError:
            pass
    keep = {0, 1, 2, control.fileno()}
    if (log_fd := log.fileno()) is not None:
        keep.add(log_fd)
    _close_inherited(keep)
    gc.freeze()  # the master's objects: a collection here would write to (and so copy) every page of them
    _name_process(PROCESS_NAME)
    log.output(f"run owner started (pid {os.getpid()}, epoch {epoch})", event=EVENT)
    # Loaded after the fork: the master never holds gevent or the command runner (with -setuid the master
    # loaded them before the drop: cli.py).
    from hookrunner.serve.ownerprocess import serve_runs

    return serve_runs(control, epoch)
