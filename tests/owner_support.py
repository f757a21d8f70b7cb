"""What the run owner's tests share: an Owner on threads with OwnerClients over real SOCK_SEQPACKET pairs,
hooks of real commands (shell scripts) and requests."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from waiting import eventually

from hookrunner.hooks.argument import Argument
from hookrunner.hooks.model import Hook, Limits
from hookrunner.hooks.request import Request
from hookrunner.run import wire
from hookrunner.run.executor import CommandRunner
from hookrunner.run.owner import Owner
from hookrunner.run.ownerclient import OwnerClient
from hookrunner.run.spawn import Waits


class LaunchingWaits(Waits):
    """Waits on threads that say runs are launched on the serving loop, as the gevent worker's do: the
    client then waits for a background run's start (started_first), as the gevent worker's runner does."""

    launches = True


def spawn(work: Callable[[], None]) -> None:
    """Readers and flushers on threads, as a gthread-style owner or worker runs them."""
    threading.Thread(target=work, daemon=True, name="owner-test").start()


def request(rid: str, **payload: object) -> Request:
    return Request(id=rid, method="POST", remote_addr="127.0.0.1:1", payload=dict(payload), body=b"")


def script(path: Path, body: str) -> Path:
    """An executable /bin/sh script at `path`."""
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def hook(command: Path | str, hook_id: str = "h", **fields: object) -> Hook:
    """A hook of `command` given the request's `n` as its first argument."""
    fields.setdefault("pass_arguments", (Argument("payload", "n"),))
    return Hook(id=hook_id, execute_command=str(command), **fields)  # type: ignore[arg-type]


def limits(**fields: object) -> Limits:
    return Limits(**fields)  # type: ignore[arg-type]


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    return eventually(condition, timeout)


@dataclass
class Host:
    """An owner and the clients of its workers (fake pids 101, 102, ...), all on threads."""

    owner: Owner
    clients: list[OwnerClient] = field(default_factory=list)
    raw: list[socket.socket] = field(default_factory=list)

    def client(self, pid: int) -> OwnerClient:
        worker_end, owner_end = wire.pair()
        self.owner.attach(owner_end, pid)
        client = OwnerClient(worker_end, spawn)
        client.connect()
        self.clients.append(client)
        return client

    def raw_worker(self, pid: int) -> socket.socket:
        """A worker's end with no client on it: the test reads and writes its packets itself."""
        worker_end, owner_end = wire.pair()
        self.owner.attach(owner_end, pid)
        self.raw.append(worker_end)
        return worker_end

    def close(self) -> None:
        for client in self.clients:
            client.close()
        for end in self.raw:
            end.close()
        self.owner.close()


@contextlib.contextmanager
def host(clients: int, max_concurrent: int = 0, **outbox: float) -> Iterator[Host]:
    """An owner on threads with `clients` workers' clients; `outbox`: its outbox_bound, outbox_stall."""
    runner = CommandRunner(max_concurrent=max_concurrent)
    owner = Owner(runner, spawn, epoch=1, **outbox)  # type: ignore[arg-type]
    made = Host(owner)
    for n in range(clients):
        made.client(101 + n)
    try:
        yield made
    finally:
        made.close()
        runner.shutdown(5.0)


def runs_of(log: Path) -> list[tuple[str, float, float]]:
    """(n, start, end) of each run a script logged as `start <n> <ns>` and `end <n> <ns>` lines."""
    starts: dict[str, float] = {}
    runs: list[tuple[str, float, float]] = []
    for line in log.read_text().splitlines():
        what, n, when = line.split()
        if what == "start":
            assert n not in starts, f"run {n} started twice"
            starts[n] = int(when) / 1e9
        else:
            runs.append((n, starts[n], int(when) / 1e9))
    return runs


def most_at_once(runs: list[tuple[str, float, float]]) -> int:
    edges = sorted([(start, 1) for _, start, _ in runs] + [(end, -1) for _, _, end in runs])
    now = most = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most
