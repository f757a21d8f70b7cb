"""The master's side of the run owner (serve/runowner.py) with a real forked owner: a worker's connection
passed over the control channel is greeted, the owner killed is forked again (the next epoch) with every
live connection, a worker gone is let go, an owner that dies as fast as it starts is forked once a second,
and stop() leaves nothing running."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator

import pytest
from waiting import eventually

from hookrunner.config import Config
from hookrunner.hooks.generation import SharedGeneration
from hookrunner.hooks.load import HookRegistry
from hookrunner.run import wire
from hookrunner.run.wire import Message
from hookrunner.serve.context import ctx
from hookrunner.serve.runowner import RESTART_SPACING, RunOwner


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def as_serve_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    """What serve() sets before it forks the owner, which builds its runner from it, and the hooks it
    reloads for every worker, with the generation counter they share (serve/ownerprocess.py)."""
    monkeypatch.setattr(ctx, "config", Config(), raising=False)
    monkeypatch.setattr(ctx, "registry", HookRegistry([]), raising=False)
    monkeypatch.setattr(ctx, "hooks_generation", SharedGeneration(), raising=False)


@pytest.fixture
def owner(monkeypatch: pytest.MonkeyPatch) -> Iterator[RunOwner]:
    as_serve_sets(monkeypatch)
    started = RunOwner()
    started.start()
    yield started
    started.stop()


def fork_worker(owner: RunOwner, pid: int) -> socket.socket:
    """What the master does for a worker: a connection made, the owner's end passed on with `pid`."""
    worker_end = owner.new_connection()
    owner.connect_worker(pid)
    worker_end.settimeout(5)
    return worker_end


def hello_epoch(worker_end: socket.socket) -> int:
    message, _ = wire.receive(worker_end)
    assert message.kind == "hello" and message["owner"] > 0
    return int(message["epoch"])


def restarted(owner: RunOwner, old: int, timeout: float = 5.0) -> bool:
    def check() -> bool:
        owner.restart_if_gone()
        return owner.pid != old

    return eventually(check, timeout)


def test_a_worker_is_greeted_and_greeted_again_by_the_next_owner(owner: RunOwner) -> None:
    a, b = fork_worker(owner, 101), fork_worker(owner, 102)
    assert (hello_epoch(a), hello_epoch(b)) == (1, 1)
    first = owner.pid
    os.kill(first, signal.SIGKILL)
    began = time.monotonic()
    assert restarted(owner, first)
    assert time.monotonic() - began < 1.0
    assert owner.epoch == 2 and alive(owner.pid) and not alive(first)
    assert (hello_epoch(a), hello_epoch(b)) == (2, 2)  # the same connections, passed to the new owner
    wire.send(a, Message("hello", {"version": wire.VERSION, "pid": 101}))
    a.close()
    b.close()


def test_a_gone_worker_is_let_go_and_the_owner_goes_on(owner: RunOwner) -> None:
    a, b = fork_worker(owner, 201), fork_worker(owner, 202)
    assert (hello_epoch(a), hello_epoch(b)) == (1, 1)
    a.close()  # the worker died
    owner.keep_workers([202])  # the master reaped it
    assert alive(owner.pid)
    c = fork_worker(owner, 203)  # its replacement
    assert hello_epoch(c) == 1
    os.kill(owner.pid, signal.SIGKILL)
    old = owner.pid
    assert restarted(owner, old)
    assert (hello_epoch(b), hello_epoch(c)) == (2, 2)  # only the live workers' connections were passed again
    b.close()
    c.close()


def test_an_owner_dying_as_it_starts_is_forked_once_a_second(owner: RunOwner) -> None:
    old = owner.pid
    os.kill(old, signal.SIGKILL)  # one quick end: replaced at once
    assert restarted(owner, old, timeout=0.9)
    old = owner.pid  # the second in a row: a second after its end
    os.kill(old, signal.SIGKILL)
    began = time.monotonic()
    assert restarted(owner, old)
    assert time.monotonic() - began >= RESTART_SPACING * 0.9
    assert owner.epoch == 3


def test_stop_ends_the_owner_and_closes_the_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    as_serve_sets(monkeypatch)
    owner = RunOwner()
    owner.start()
    a = fork_worker(owner, 301)
    assert hello_epoch(a) == 1
    pid = owner.pid
    owner.stop()
    assert not alive(pid)
    with pytest.raises(wire.PeerGone):
        wire.receive(a)  # the owner's end was held by the owner and the master alone
    owner.restart_if_gone()
    assert owner.pid == pid  # stopping: never forked again
    a.close()
