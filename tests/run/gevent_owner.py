"""A run owner on a gevent loop, in a process of its own, for tests/run/test_owner_gevent.py: as the gevent
worker runs commands (serve/greenruns.py's GreenWaits, nothing monkey-patched), serving the connections
whose ends it inherited (argv: the global cap, the epoch, then fd, fd, ...) as workers 101, 102, ...; it
exits once every one has ended."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable

import gevent

from hookrunner.run.executor import CommandRunner
from hookrunner.run.owner import Owner
from hookrunner.serve.greenruns import GreenWaits


def spawn(work: Callable[[], None]) -> None:
    gevent.spawn(work)


def main() -> None:
    runner = CommandRunner(max_concurrent=int(sys.argv[1]))
    runner.use(GreenWaits())
    owner = Owner(runner, spawn, epoch=int(sys.argv[2]))
    for n, fd in enumerate(sys.argv[3:]):
        owner.attach(socket.socket(fileno=int(fd)), 101 + n)
    print("serving", flush=True)
    while owner.workers:
        gevent.sleep(0.05)
    runner.shutdown(5.0)


if __name__ == "__main__":
    main()
