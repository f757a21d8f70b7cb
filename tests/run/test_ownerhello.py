"""The hello exchange of issue 32's step 5 (run/ownerhello.py) over real SOCK_SEQPACKET pairs: the owner's
side greets a worker and logs its hello, survives a worker that dies or sends garbage; the worker's side
greets each new owner again and says when none answers."""

from __future__ import annotations

import io
import os
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from waiting import eventually

from hookrunner.ops.log import log
from hookrunner.run import wire
from hookrunner.run.ownerhello import Greeter, greet_owner
from hookrunner.run.wire import VERSION, Message


@pytest.fixture
def logged() -> Iterator[io.StringIO]:
    text = io.StringIO()
    enabled = log.enabled
    log.set_output(text)
    log.enabled = True
    yield text
    log.set_output(sys.stderr)
    log.enabled = enabled


def test_the_owner_says_hello_first_and_logs_the_workers(logged: io.StringIO) -> None:
    worker, owner_end = wire.pair()
    greeter = Greeter(epoch=3)
    greeter.attach(owner_end, 4242)
    hello, _ = wire.receive(worker)
    assert hello == Message("hello", {"version": VERSION, "owner": os.getpid(), "epoch": 3})
    wire.send(worker, Message("hello", {"version": VERSION, "pid": 4242, "generation": 0}))
    assert eventually(
        lambda: "worker 4242 connected to the run owner (epoch 3, protocol 1)" in logged.getvalue()
    )
    assert greeter.attached() == [4242]
    worker.close()


def test_a_worker_that_dies_or_sends_garbage_is_only_its_own_end(logged: io.StringIO) -> None:
    greeter = Greeter(epoch=1)
    dying, dying_end = wire.pair()
    rude, rude_end = wire.pair()
    greeter.attach(dying_end, 1)
    greeter.attach(rude_end, 2)
    rude.send(b"not a message")  # no header line: dropped, the connection goes on
    wire.send(dying, Message("hello", {"version": VERSION, "pid": 1}))
    dying.close()  # with the owner's hello unread: a reset, not a clean end of file
    assert eventually(lambda: greeter.attached() == [2])
    wire.send(rude, Message("hello", {"version": VERSION, "pid": 2}))
    assert eventually(lambda: "worker 2 connected to the run owner" in logged.getvalue())
    greeter.detach(1)  # the master's word after the reader saw the end
    greeter.detach(2)
    assert "worker 1 is gone; the run owner let its connection go" in logged.getvalue()
    assert eventually(lambda: greeter.attached() == [])
    assert eventually(lambda: rude.recv(10) == b"")  # hello read; then the owner let it go
    rude.close()


def test_the_worker_greets_each_new_owner_once(logged: io.StringIO) -> None:
    worker_end, owner = wire.pair()
    thread = greet_owner(worker_end, 77, wait=5.0)
    first, _ = wire.receive(owner)
    assert first == Message("hello", {"version": VERSION, "pid": 77, "generation": 0})
    wire.send(owner, Message("hello", {"version": VERSION, "owner": 1, "epoch": 1}))
    wire.send(owner, Message("hello", {"version": VERSION, "owner": 1, "epoch": 1}))  # the same owner
    wire.send(owner, Message("hello", {"version": VERSION, "owner": 2, "epoch": 2}))  # a new one
    again, _ = wire.receive(owner)
    assert again == first
    owner.settimeout(0.3)
    with pytest.raises(TimeoutError):
        owner.recv(100)  # greeted once per epoch, not per hello
    owner.close()  # the master's end gone: the worker's reader ends
    thread.join(timeout=5)
    assert not thread.is_alive()
    worker_end.close()


def test_a_silent_owner_is_logged_and_does_not_hold_the_worker(logged: io.StringIO) -> None:
    worker_end, owner = wire.pair()
    began = time.monotonic()
    thread = greet_owner(worker_end, 78, wait=0.2)
    assert time.monotonic() - began < 0.2  # greet_owner returns at once: the worker serves meanwhile
    assert eventually(lambda: "worker 78: no hello from the run owner within 0.2s" in logged.getvalue())
    wire.send(owner, Message("hello", {"version": VERSION, "owner": 1, "epoch": 1}))  # a late owner is fine
    time.sleep(0.1)
    assert thread.is_alive()
    owner.close()
    thread.join(timeout=5)
    assert not thread.is_alive()
    worker_end.close()
    assert logged.getvalue().count("no hello from the run owner") == 1


def test_a_greeter_thread_never_blocks_attach() -> None:
    # The owner's loop calls attach for each worker: it must return at once, whatever the worker does.
    greeter = Greeter(epoch=1)
    ends = [wire.pair() for _ in range(20)]
    began = time.monotonic()
    for pid, (_, owner_end) in enumerate(ends):
        greeter.attach(owner_end, pid)
    assert time.monotonic() - began < 1.0
    assert threading.active_count() >= 20
    for worker, _ in ends:
        worker.close()
    assert eventually(lambda: greeter.attached() == [])
