"""What tests/integration/test_replicas_failover.py needs around the installed `hookrunner`: a fleet of replicas
(each a real process tree in a folder of its own, with its own hooks file and log), a node's loss (every
process of one replica's tree, its commands included, killed at once), pushes that flow while a fault
happens, and the runs' own record of themselves, read back as copies of a run with their lifetimes.

A command records `start`/`end` lines with the run's identity (the payload's id), the replica that ran it and
its own pid, so "no two copies alive at once" and "ran at least once" are read from what the commands did,
not from what any replica says about itself."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from test_limits import alive, python_command
from test_serving import Server, wait_until

# Appends `start|end <monotonic ns> <id> <replica> <pid>` to a file, one write each (O_APPEND: lines from
# several processes never interleave), and between the two waits until the gate file exists (bounded by
# the wait, in seconds), or, without a gate, `hold` seconds. The replica is the one that started this copy:
# the folder its run owner (the command's parent) works in, since the run's argv and environment are the
# admitting replica's, carried over to whichever replica claims it. CLOCK_MONOTONIC is one clock for every
# process of the host, so times from commands and from the test compare.
RUN_RECORDER = """
import os, sys, time
record, gate, wait, hold, run_id = sys.argv[1:6]
replica = os.path.basename(os.readlink(f"/proc/{os.getppid()}/cwd"))
def write(what):
    fd = os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{what} {time.monotonic_ns()} {run_id} {replica} {os.getpid()}\\n".encode())
    os.close(fd)
write("start")
deadline = time.monotonic() + float(wait)
while gate and not os.path.exists(gate) and time.monotonic() < deadline:
    time.sleep(0.01)
time.sleep(float(hold))
write("end")
"""


def recording_hook(
    hook_id: str,
    record: Path,
    gate: Path | None = None,
    wait: float = 120.0,
    hold: float = 0.0,
    **limits: object,
) -> dict[str, object]:
    """A hook whose command records its runs in `record`; the run's identity is the `id` query parameter."""

    def string(value: object) -> dict[str, str]:
        return {"source": "string", "name": str(value)}

    return {
        "id": hook_id,
        **python_command(
            RUN_RECORDER,
            string(record),
            string(gate or ""),
            string(wait),
            string(hold),
            {"source": "url", "name": "id"},
        ),
        "response-message": "accepted",
        **limits,
    }


# ---------------------------------------------------------------------------------------- the records


@dataclass(frozen=True)
class Copy:
    """One process that ran a run: from its `start` line to its `end` line (None: it never wrote one)."""

    run_id: str
    replica: str
    pid: int
    start: int
    end: int | None


def copies(record: Path) -> list[Copy]:
    """Every copy the commands recorded, in the order they started."""
    if not record.exists():
        return []
    starts: dict[int, tuple[str, str, int]] = {}
    ends: dict[int, int] = {}
    for line in record.read_text().splitlines():
        what, stamp, run_id, replica, pid = line.split(" ")
        if what == "start":
            starts[int(pid)] = (run_id, replica, int(stamp))
        else:
            ends[int(pid)] = int(stamp)
    found = [
        Copy(run_id, replica, pid, start, ends.get(pid)) for pid, (run_id, replica, start) in starts.items()
    ]
    return sorted(found, key=lambda copy: copy.start)


def finished(record: Path) -> dict[str, list[Copy]]:
    """The copies that wrote their end, by run."""
    done: dict[str, list[Copy]] = {}
    for copy in copies(record):
        if copy.end is not None:
            done.setdefault(copy.run_id, []).append(copy)
    return done


def lifetimes(found: Sequence[Copy], killed: dict[int, int]) -> list[tuple[Copy, int]]:
    """Each copy with the last moment it was alive: its end, or for a copy of a killed tree the moment its
    death was seen. A copy with neither is an error: it is still running, or something lost it."""
    spans = []
    for copy in found:
        if copy.end is not None:
            spans.append((copy, copy.end))
        elif copy.pid in killed:
            spans.append((copy, killed[copy.pid]))
        else:
            raise AssertionError(f"{copy} never ended and was not killed")
    return spans


def overlaps(found: Sequence[Copy], killed: dict[int, int], same_run_only: bool) -> list[tuple[Copy, Copy]]:
    """Pairs of copies alive at one moment: of any run (a `max-concurrency: 1` hook), or only of one run
    (two copies of the same run). An end and a start at the same instant do not overlap."""
    spans = sorted(lifetimes(found, killed), key=lambda span: span[0].start)
    found_pairs = []
    for index, (first, first_end) in enumerate(spans):
        for second, _ in spans[index + 1 :]:
            if second.start >= first_end:
                break
            if not same_run_only or second.run_id == first.run_id:
                found_pairs.append((first, second))
    return found_pairs


# ------------------------------------------------------------------------------------------ the fleet


@dataclass
class Fleet:
    """Replicas of one service, each `hookrunner` in `tmp/<name>` with the hooks `hooks(name)` gives and the
    flags `flags(name)` gives (after every test's HOOKRUNNER_TEST_FLAGS). Started ones are in `servers`, the
    test's fixture, so that whatever the test leaves running is killed."""

    tmp: Path
    servers: list[Server]
    hooks: Callable[[str], list[dict[str, object]]]
    flags: Callable[[str], Sequence[str]]
    replicas: dict[str, Server] = field(default_factory=dict)

    def start(self, *names: str) -> list[Server]:
        started = []
        for name in names:
            folder = self.tmp / name
            folder.mkdir(exist_ok=True)
            server = Server(folder, self.hooks(name), *self.flags(name))
            self.servers.append(server)
            self.replicas[name] = server
            started.append(server)
        for server in started:
            server.ready()
        return started

    def name_of(self, server: Server) -> str:
        return next(name for name, known in self.replicas.items() if known is server)

    def logs(self) -> dict[str, str]:
        """Every replica's log, each life of it included (a restarted replica writes a new file)."""
        return {
            name: "".join(
                path.read_text(errors="replace") for path in sorted((self.tmp / name).glob("stderr-*"))
            )
            for name in self.replicas
        }


def postgres_flags(url: str, lease: str, grace: str) -> Callable[[str], tuple[str, ...]]:
    """Every replica on one database, each under its own name, with the lease and grace given."""

    def flags(name: str) -> tuple[str, ...]:
        return ("-state-url", url, "-state-replica", name, "-state-lease", lease, "-state-grace", grace)

    return flags


# --------------------------------------------------------------------------------------- a node's loss


def process_tree(root: int) -> set[int]:
    """`root` and every process below it (each thread's children: a process is the child of the thread that
    forked it)."""
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                todo += [
                    int(child) for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split()
                ]
            except OSError:
                pass
    return found


def freeze(server: Server) -> set[int]:
    """SIGSTOP every process of the replica's tree, again until no new one shows, so that nothing forks,
    moves to another parent or notices the others going; returns them."""
    frozen: set[int] = set()
    while True:
        new = process_tree(server.process.pid) - frozen
        if not new:
            return frozen
        for pid in new:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        frozen |= new


def deaths(pids: set[int], timeout: float = 10) -> dict[int, int]:
    """When each of `pids` was seen dead (monotonic ns), watched until all are."""
    seen: dict[int, int] = {}

    def all_gone() -> bool:
        for pid in pids - seen.keys():
            if not alive(pid):
                seen[pid] = time.monotonic_ns()
        return len(seen) == len(pids)

    assert wait_until(all_gone, timeout=timeout, interval=0.005), sorted(pids - seen.keys())
    return seen


def kill(pids: set[int]) -> int:
    """SIGKILL each of `pids`; when the kills were sent (monotonic ns)."""
    sent = time.monotonic_ns()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return sent


def lose_node(server: Server) -> tuple[int, dict[int, int]]:
    """A node's loss, as a pod's PID namespace ends (hookrunner's master is the container's PID 1) or a
    machine goes, or as systemd ends what is left of the unit's cgroup once its main process died: every
    process of the replica's tree (master, run owner, workers, admin listener, and every command with what
    it started) dies at once, so none can renew a lease, end a command or write a last word. The tree is
    frozen first, then killed. Returns when the kills were sent (monotonic ns) and, for each process, when
    its death was seen."""
    frozen = freeze(server)
    sent = kill(frozen)
    server.process.wait(timeout=10)
    return sent, deaths(frozen)


def lose_hookrunner_only(server: Server) -> tuple[int, set[int]]:
    """kill -9 of hookrunner's own processes alone (master, run owner, workers), on a host that goes on: the
    commands, and what they started, are left running as orphans (the master, the last child subreaper
    above them, is gone too). Returns when the kills were sent and the orphans' pids."""
    frozen = freeze(server)
    master = server.process.pid
    own = {master, *(int(pid) for pid in Path(f"/proc/{master}/task/{master}/children").read_text().split())}
    orphans = frozen - own
    # Resumed before their parents die: a process group left orphaned with a stopped member is sent SIGHUP.
    for pid in orphans:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    sent = kill(own)
    server.process.wait(timeout=10)
    deaths(own)
    return sent, orphans


class DeathWatch:
    """When each of some processes died (monotonic ns), watched on a thread every 5 ms."""

    def __init__(self, pids: set[int]) -> None:
        self.seen: dict[int, int] = {}
        self._pids = set(pids)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set() and len(self.seen) < len(self._pids):
            for pid in self._pids - self.seen.keys():
                if not alive(pid):
                    self.seen[pid] = time.monotonic_ns()
            self._stop.wait(0.005)

    def close(self) -> dict[int, int]:
        self._stop.set()
        self._thread.join(timeout=5)
        return dict(self.seen)


# ------------------------------------------------------------------------------- pushes while it happens


@dataclass(frozen=True)
class Sent:
    """One request of a flow and its answer (status 0: no answer, with why in `body`): sent `at`, answered
    by `done` (monotonic ns)."""

    run_id: str
    replica: str
    kind: str
    at: int
    status: int
    headers: dict[str, str]
    body: bytes
    done: int


@dataclass
class Flow:
    """Requests sent one after another to one replica on a thread until stopped, each `pause` apart: pushes
    (kind `push`, each with a new id) and, between them, requests that run nothing (`others`: kind, method,
    path)."""

    server: Server
    replica: str
    path: str
    others: Sequence[tuple[str, str, str]] = ()
    pause: float = 0.1
    sent: list[Sent] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def run(self) -> None:
        number = 0
        while not self.stopping.is_set():
            run_id = f"{self.replica}-{number}"
            self._send(run_id, "push", "POST", f"{self.path}?id={run_id}")
            for kind, method, path in self.others:
                self._send(run_id, kind, method, path)
            number += 1
            self.stopping.wait(self.pause)

    def _send(self, run_id: str, kind: str, method: str, path: str) -> None:
        at = time.monotonic_ns()
        try:
            status, headers, body = self.server.request(method, path)
        except OSError as err:
            status, headers, body = 0, {}, repr(err).encode()
        self.sent.append(Sent(run_id, self.replica, kind, at, status, headers, body, time.monotonic_ns()))

    def __enter__(self) -> Flow:
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        assert self.thread is not None
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), f"the flow to {self.replica} did not stop"
