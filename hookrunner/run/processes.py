"""The processes of a run, found and ended whatever they do (Linux /proc): a command's descendants that leave
its process group and session (setsid, a double fork) are still the run's, and each process is named by its
pid and start time, so that a pid the kernel has given to another process is never taken for it.

The serving worker makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER): an orphaned descendant
is re-parented to the worker, not to init, so every process a run starts stays in the worker's subtree,
where a poll finds it, and the worker reaps those orphans when they exit.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial

from hookrunner.run.spawn import Process
from hookrunner.state.model import ProcessId

PR_SET_CHILD_SUBREAPER = 36

#: How often the processes of running runs are looked for while any run is running, and how often
#: orphans the worker adopted are looked at for reaping once none is.
POLL_SECONDS = 0.025
ORPHAN_POLL_SECONDS = 1.0
#: How many pids of finished runs' processes are remembered (see ProcessTracker._retired).
RETIRED_KEPT = 4096


@dataclass(frozen=True)
class _Stat:
    pid: int
    ppid: int
    pgid: int
    sid: int
    start: int
    zombie: bool

    @property
    def id(self) -> ProcessId:
        return ProcessId(self.pid, self.start)


def _stat(pid: int) -> _Stat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: the fields after it follow the last ')'.
    rest = data[data.rfind(b")") + 2 :].split()
    try:  # rest[0] is field 3 (state): field n is rest[n - 3]
        return _Stat(pid, int(rest[1]), int(rest[2]), int(rest[3]), int(rest[19]), rest[0] in (b"Z", b"X"))
    except (IndexError, ValueError):
        return None


def identify(pid: int) -> ProcessId | None:
    """The process that has `pid` now, or None when there is none (or only its zombie)."""
    stat = _stat(pid)
    return None if stat is None or stat.zombie else stat.id


def is_running(process: ProcessId) -> bool:
    """Whether `process` (that very one, not a later holder of its pid) is alive and not a zombie."""
    stat = _stat(process.pid)
    return stat is not None and stat.start == process.start and not stat.zombie


def _all_processes() -> dict[int, _Stat]:
    found: dict[int, _Stat] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None:
                found[stat.pid] = stat
    return found


def _children(pid: int) -> list[int] | None:
    """The children of `pid` from /proc/<pid>/task/*/children; None when the kernel has no such files."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    pids: list[int] = []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as handle:
                pids.extend(int(p) for p in handle.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{task}"):
                continue  # the thread ended
            return None  # CONFIG_PROC_CHILDREN is off
        except OSError:
            continue
    return pids


def _subtree(root: int) -> dict[int, _Stat]:
    """`root`'s descendants (by the children files, or a scan of all of /proc when there are none)."""
    found: dict[int, _Stat] = {}
    todo = [root]
    while todo:
        children = _children(todo.pop())
        if children is None:
            everything = _all_processes()
            return {pid: stat for pid, stat in everything.items() if _descends(stat, root, everything)}
        for pid in children:
            stat = _stat(pid)
            if stat is not None and pid not in found:
                found[pid] = stat
                todo.append(pid)
    return found


def _descends(stat: _Stat, root: int, everything: dict[int, _Stat]) -> bool:
    seen: set[int] = set()
    while stat.ppid not in seen:
        if stat.ppid == root:
            return True
        seen.add(stat.pid)
        parent = everything.get(stat.ppid)
        if parent is None:
            return False
        stat = parent
    return False


def pipes_held(pid: int) -> set[str]:
    """The pipes process `pid` has descriptors on, as readlink names them (`pipe:[inode]`)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return set()
    held = set()
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("pipe:"):
            held.add(target)
    return held


def send(process: ProcessId, sig: signal.Signals) -> bool:
    """Signal `process` if it is still that process; through a pidfd where the kernel has them, so that the
    pid cannot be given to another process between the check and the signal. Returns whether it was sent."""
    pidfd_open = getattr(os, "pidfd_open", None)
    fd = -1
    if pidfd_open is not None:
        try:
            fd = pidfd_open(process.pid)
        except OSError as exc:
            if exc.errno != errno.ENOSYS:
                return False  # gone
    try:
        stat = _stat(process.pid)
        if stat is None or stat.start != process.start:
            return False
        if fd >= 0:
            signal.pidfd_send_signal(fd, sig)
        else:  # no pidfds (not Linux, or a kernel before 5.3): as close as a pid allows
            os.kill(process.pid, sig)
        return True
    except OSError:
        return False
    finally:
        if fd >= 0:
            os.close(fd)


def _boot_ticks() -> int:
    """Now, in the unit of a process's start time: clock ticks since boot."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def become_subreaper() -> bool:
    """Make this process the child subreaper of its descendants; returns whether the kernel agreed."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


@dataclass(eq=False)
class RunProcesses:
    """One run's processes: its leader (the head of a process group of its own, and of a session too while
    the server has a terminal: spawn.own_session) and every process found to be the run's since."""

    leader: ProcessId
    #: The run's output pipe as /proc names a descriptor on it: a process holding it is the run's.
    pipe: str
    #: Told of each process found outside the leader's group (the journal records it).
    on_found: Callable[[ProcessId], None] | None = None
    _members: set[ProcessId] = field(default_factory=set)
    # The poll and an ending run add members from two threads.
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._members.add(self.leader)

    @property
    def members(self) -> frozenset[ProcessId]:
        with self._lock:
            return frozenset(self._members)

    def add(self, process: ProcessId) -> bool:
        """Count `process` as the run's; returns whether it was new."""
        with self._lock:
            new = process not in self._members
            self._members.add(process)
        return new

    def running(self) -> list[ProcessId]:
        return [process for process in self.members if is_running(process)]


#: What a leader's start gives: its Popen, its id (pid and start time) and its output pipe's /proc name.
_Started = tuple[Process, ProcessId, str]


def _launch(spawn: Callable[[], Process]) -> _Started:
    """Start a leader and name it; touches nothing shared, so that it may run on any thread."""
    process = spawn()
    stat = _stat(process.pid)
    pipe = f"pipe:[{os.fstat(process.stdout.fileno()).st_ino}]" if process.stdout is not None else ""
    return process, ProcessId(process.pid, stat.start if stat is not None else 0), pipe


def _here(launch: Callable[[], _Started]) -> _Started:
    return launch()


class ProcessTracker:
    """The processes of every running run of this worker, kept up to date by a poll while any runs."""

    def __init__(self, adopt_orphans: bool = False) -> None:
        #: Whether this process makes itself a subreaper (only a process whose every child is a command's:
        #: the reaper would otherwise take the exit status of a child that someone else waits for).
        self.adopt_orphans = adopt_orphans
        self._lock = threading.Lock()
        self._runs: list[RunProcesses] = []
        self._leaders: set[int] = set()  # pids whose exit status their Popen waits for: never reaped here
        # The pids of the processes of finished runs (the newest RETIRED_KEPT): an adopted orphan in a
        # process group or session one of them heads belongs to a finished run (a daemon it started), not
        # to a running one.
        self._retired: dict[int, None] = {}
        self._subreaper_of = 0  # the pid that made itself subreaper (a forked worker must do it again)
        # When each leader being started began (clock ticks after boot): their pids are not in _leaders yet.
        self._starting: list[int] = []
        # The poll's thread, and the pid it was started in (a forked worker starts its own). Between runs
        # it waits on `_work` instead of ending, so a run does not pay for a new thread.
        self._poller_of = 0
        self._work = threading.Condition(self._lock)

    def start(
        self,
        spawn: Callable[[], Process],
        on_found: Callable[[ProcessId], None] | None,
        offload: Callable[[Callable[[], _Started]], _Started] = _here,
    ) -> tuple[Process, RunProcesses]:
        """Start a run's leader with `spawn` and track it. While a leader is being started (its pid not yet
        known as a leader) the reaper leaves alone every zombie that started since, so a leader's exit
        status stays its Popen's. The lock is not held across the start, which waits for the child to
        exec: a run ending meanwhile on another thread (or on the gevent worker's loop) does not wait.

        `offload(launch)` runs the start (the spawn, and the new process's start time and pipe looked up)
        where the caller wants it: the run owner's, on its loop itself, or on one of its native threads
        while commands get a session of their own (serve/greenruns.py, `GreenWaits.start`). Only that goes
        there; this tracker's lock is taken on the caller's thread alone, and the poll's thread is started
        there too. With gevent's patching (the owner with -state-url) the lock is a lock of the loop, and
        one taken on a native thread lost wakeups: the thread waited forever for a lock nobody held, and its
        run never went past its start (docs/run-state.md, "A run stuck running"); a patched thread started
        there would be a greenlet of a loop that never runs."""
        with self._lock:
            if self.adopt_orphans and self._subreaper_of != os.getpid():
                become_subreaper()
                self._subreaper_of = os.getpid()
            since = _boot_ticks()
            self._starting.append(since)
        try:
            process, leader, pipe = offload(partial(_launch, spawn))
        except BaseException:
            with self._lock:
                self._starting.remove(since)
            raise
        run = RunProcesses(leader, pipe, on_found)
        with self._lock:
            self._starting.remove(since)
            self._runs.append(run)
            self._leaders.add(process.pid)
            if self._poller_of != os.getpid():
                threading.Thread(target=self._poll, name="run-processes", daemon=True).start()
                self._poller_of = os.getpid()
            else:
                self._work.notify()
        return process, run

    def done(self, run: RunProcesses) -> None:
        """The run is over and its leader waited for: what it left running is no longer looked after
        (a daemon it started on purpose is left alone, as webhook leaves it)."""
        with self._lock:
            if run in self._runs:
                self._runs.remove(run)
            self._leaders.discard(run.leader.pid)
            for process in run.members:
                self._retired[process.pid] = None
            while len(self._retired) > RETIRED_KEPT:
                del self._retired[next(iter(self._retired))]

    @property
    def runs(self) -> list[RunProcesses]:
        with self._lock:
            return list(self._runs)

    def refresh(self, everywhere: bool = False) -> None:
        """Find the runs' new processes: in this worker's subtree, or with `everywhere` in all of /proc,
        also by the descriptors they hold on a run's output (slower: done when a run is ended)."""
        me = os.getpid()
        snapshot = _all_processes() if everywhere else _subtree(me)
        with self._lock:
            runs = list(self._runs)
        _attribute(snapshot, runs, me, self._adopting(), everywhere)

    def end(self, runs: Sequence[RunProcesses], grace: float, wait: Callable[[float], None]) -> None:
        """TERM every process of `runs` (none when `grace` is 0), KILL those left after `grace`, and wait
        until none is left (bounded). `wait(seconds)` is how the caller spends the time (reading output)."""
        self.refresh(everywhere=True)
        if grace > 0:
            _signal_all(runs, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and any(run.running() for run in runs):
                wait(min(0.05, max(deadline - time.monotonic(), 0.0)))
                self.refresh()
                _signal_all(runs, signal.SIGTERM, only_new=True)
        # Whatever is left, and whatever forks while this goes on, is killed until nothing is left.
        deadline = time.monotonic() + 2.0
        while True:
            _signal_all(runs, signal.SIGKILL)
            if not any(run.running() for run in runs) or time.monotonic() >= deadline:
                break
            wait(0.02)
            self.refresh(everywhere=True)

    def _adopting(self) -> frozenset[int] | None:
        """The retired group ids when this process adopts orphans, else None."""
        if not self.adopt_orphans:
            return None
        with self._lock:
            return frozenset(self._retired)

    def _poll(self) -> None:
        me = os.getpid()
        while True:
            with self._lock:
                running = bool(self._runs)
            snapshot = _subtree(me)
            if running:
                with self._lock:
                    runs = list(self._runs)
                _attribute(snapshot, runs, me, self._adopting(), False)
            adopted = self._reap(snapshot, me)
            if not running and not adopted:
                with self._lock:
                    self._work.wait_for(lambda: self._runs)
                continue
            time.sleep(POLL_SECONDS if running else ORPHAN_POLL_SECONDS)

    def _reap(self, snapshot: dict[int, _Stat], me: int) -> bool:
        """Reap the adopted orphans that exited; returns whether any adopted orphan is still alive."""
        if not self.adopt_orphans:
            return False
        alive = False
        with self._lock:
            # A zombie that started after a start began may be that leader: left for a later poll.
            newest = min(self._starting) - 1 if self._starting else None
            for stat in snapshot.values():
                if stat.ppid != me or stat.pid in self._leaders:
                    continue
                if newest is not None and stat.start >= newest:
                    alive = True
                    continue
                if not stat.zombie:
                    alive = True
                    continue
                try:
                    os.waitpid(stat.pid, os.WNOHANG)
                except ChildProcessError:
                    pass
        return alive


def _attribute(
    snapshot: dict[int, _Stat],
    runs: Sequence[RunProcesses],
    me: int,
    retired: frozenset[int] | None,
    by_pipe: bool,
) -> None:
    """Add to each run the processes of `snapshot` that are its: known members, members of its leader's
    group or session, children of its processes, and (`by_pipe`) holders of its output. When this process
    adopts orphans (`retired` is not None), an adopted orphan whose parent was never seen is the run's when
    only one running run is older than it, unless it is in a group or session of a finished run's."""
    if not runs:
        return
    owners = _Owners(snapshot, runs, me, retired, by_pipe)
    for pid in snapshot:
        run = owners.of(pid)
        if run is None:
            continue
        process = snapshot[pid].id
        if run.add(process):
            if run.on_found is not None and snapshot[pid].pgid != run.leader.pid:
                run.on_found(process)


@dataclass
class _Owners:
    """The run each process of one snapshot belongs to, found once per process (see _attribute).

    A class, not a closure that calls itself: such a closure refers to itself through its cell, and that
    cycle kept each poll's snapshot, runs and indexes (40 times a second while runs run) until the cyclic
    collector came by; on the gevent worker, whose collector runs seldom, 16 MiB of them were still there
    after a load (docs/performance.md, memory at rest)."""

    snapshot: dict[int, _Stat]
    runs: Sequence[RunProcesses]
    me: int
    retired: frozenset[int] | None
    by_pipe: bool

    def __post_init__(self) -> None:
        runs = self.runs
        self._by_id = {member: run for run in runs for member in run.members}
        self._by_group = {run.leader.pid: run for run in runs}
        # Commands share this process's session unless it has a terminal (spawn.own_session): a process in
        # it is nobody's by its session, even should a run's leader have been given that id (a dead leader's).
        self._session = os.getsid(0)
        self._by_session = {leader: run for leader, run in self._by_group.items() if leader != self._session}
        # Each process's descriptors are listed once, however many runs there are (a stop with thousands).
        self._by_output = {run.pipe: index for index, run in reversed(list(enumerate(runs))) if run.pipe}
        self._owner: dict[int, RunProcesses | None] = {}

    def of(self, pid: int) -> RunProcesses | None:
        owner = self._owner
        if pid in owner:
            return owner[pid]
        stat = self.snapshot.get(pid)
        owner[pid] = None  # a guard against a parent loop in a torn snapshot
        me = self.me
        if stat is None or stat.zombie or pid == me:
            return None
        run = self._by_id.get(stat.id) or self._by_group.get(stat.pgid) or self._by_session.get(stat.sid)
        if run is None and stat.ppid != me:
            run = self.of(stat.ppid)
        retired = self.retired
        heads = {stat.pgid, stat.sid} - {self._session}
        if run is None and retired is not None and stat.ppid == me and not heads & retired:
            older = [r for r in self.runs if r.leader.start <= stat.start]
            run = older[0] if len(older) == 1 else None
        if run is None and self.by_pipe:
            holding = [self._by_output[pipe] for pipe in pipes_held(pid) if pipe in self._by_output]
            run = self.runs[min(holding)] if holding else None
        owner[pid] = run
        return run


def _signal_all(runs: Iterable[RunProcesses], sig: signal.Signals, only_new: bool = False) -> None:
    """`sig` to every process of `runs`; a TERM is followed by a CONT, so that a stopped process handles it
    now and not at the KILL after the grace. A command heads a process group in the server's session (no
    terminal: spawn.own_session), which is not orphaned while the server lives: a SIGTSTP stops it there
    (SIGTTIN and SIGTTOU too, once it sets them back from ignored: serve/runowner.py), where the kernel
    ignored them in a session of its own, an orphaned group."""
    follow = (sig, signal.SIGCONT) if sig == signal.SIGTERM else (sig,)
    for run in runs:
        if not only_new:
            for each in follow:
                try:
                    os.killpg(run.leader.pid, each)  # the leader's group, members not seen yet included
                except OSError:
                    pass
        for process in run.running():
            for each in follow:
                send(process, each)


def previous_attempt(recorded: Sequence[ProcessId]) -> list[ProcessId]:
    """What is still running of an attempt whose processes were recorded (by a worker that is gone): the
    recorded processes that are still those processes, the processes of the leader's group and session,
    and their descendants."""
    if not recorded:
        return []
    everything = _all_processes()
    leader = recorded[0]
    now = everything.get(leader.pid)
    # The leader's pid names its group and session only while it is not another process's pid, and never
    # this process's own group or session: the kernel hands out no pid in use as a group or session id, so
    # a leader's pid names ours only when it went, once free, to the process that made ours (exited since).
    group = (now is None or now.start == leader.start) and leader.pid not in (os.getpgid(0), os.getsid(0))
    found = {p.pid for p in recorded if (s := everything.get(p.pid)) is not None and s.start == p.start}
    for stat in everything.values():
        if group and leader.pid in (stat.pgid, stat.sid) and stat.start >= leader.start:
            found.add(stat.pid)
    changed = True
    while changed:
        changed = False
        for stat in everything.values():
            if stat.pid not in found and stat.ppid in found:
                found.add(stat.pid)
                changed = True
    return [everything[pid].id for pid in sorted(found) if not everything[pid].zombie]


def end_previous_attempt(recorded: Sequence[ProcessId], grace: float) -> list[ProcessId]:
    """End what is left of a previous attempt: TERM, then KILL after `grace`; returns what was found
    running (nothing: nothing was done). Returns once none of it runs (bounded by grace + 5 s)."""
    found = previous_attempt(recorded)
    if not found:
        return []
    for process in found:
        send(process, signal.SIGTERM)
    deadline = time.monotonic() + grace
    left = found
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [p for p in previous_attempt([recorded[0], *left]) if is_running(p)]
    deadline = time.monotonic() + 5.0
    while left and time.monotonic() < deadline:
        for process in left:
            send(process, signal.SIGKILL)
        time.sleep(0.02)
        left = [p for p in previous_attempt([recorded[0], *left]) if is_running(p)]
    return found
