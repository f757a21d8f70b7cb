"""The worker's side of the run owner (run/ownerclient.py) against a scripted owner on the other end of a real
SOCK_SEQPACKET pair, and a prepared run's trip through the wire (run/runorder.py): every answer the owner
can give becomes the error serving branches on, and an owner that is gone, restarted or silent fails the
runs waiting on it at once, never hangs them."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from owner_support import LaunchingWaits, hook, limits, request, spawn, wait_until

from hookrunner.hooks.argument import Argument
from hookrunner.run import wire
from hookrunner.run.executor import CommandResult
from hookrunner.run.ownerclient import OwnerClient, OwnerUnavailable, RunRefused
from hookrunner.run.prepare import prepare
from hookrunner.run.runorder import run_messages, run_order
from hookrunner.run.wire import Message, WireError
from hookrunner.state.backend import StateUnavailable
from hookrunner.state.journal import JournalUnwritable
from hookrunner.state.model import RunSpec
from hookrunner.state.slots import Busy


class ScriptedOwner:
    """The owner's end, played by the test: it says hello and reads the worker's runs."""

    def __init__(self, end: socket.socket) -> None:
        self.end = end
        end.settimeout(10)

    def hello(self, epoch: int = 1) -> None:
        wire.send(self.end, Message("hello", {"version": wire.VERSION, "owner": 4242, "epoch": epoch}))

    def next_run(self) -> Message:
        """The next `run` message (after the worker's hello and any parts)."""
        while True:
            message, _ = wire.receive(self.end)
            if message.kind == "run":
                return message

    def answer(self, kind: str, number: int, data: bytes = b"", **fields: object) -> None:
        wire.send(self.end, Message(kind, {"id": number, **fields}, data))

    def admit(
        self, asked: Future[Future[CommandResult]], how: str = "started"
    ) -> tuple[Future[CommandResult], int]:
        """Admit the next run (`asked`: its submit, on another thread); its future and its number."""
        number = self.next_run()["id"]
        self.answer("admitted", number, how=how)
        return asked.result(timeout=5), number


@pytest.fixture
def pair() -> Iterator[tuple[OwnerClient, ScriptedOwner]]:
    worker_end, owner_end = wire.pair()
    client = OwnerClient(worker_end, spawn)
    client.hello_wait = 0.3
    client.connect()
    owner = ScriptedOwner(owner_end)
    assert wire.receive(owner_end)[0].kind == "hello"
    owner.hello()
    yield client, owner
    client.close()
    owner_end.close()


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as threads:
        yield threads


ECHO = hook("/bin/echo", capture_output=True)


def test_an_admitted_run_resolves_with_its_output_and_exit(
    pair: tuple[OwnerClient, ScriptedOwner], pool
) -> None:
    client, owner = pair
    future, number = owner.admit(pool.submit(client.submit, ECHO, request("r1", n="x")))
    owner.answer("started", number, pid=99)
    assert wait_until(lambda: client.running == 1)
    owner.answer("result", number, b"part one, ")
    owner.answer("exit", number, b"part two", error="exit status 3")
    assert future.result(timeout=5) == CommandResult(b"part one, part two", "exit status 3")
    assert client.running == 0


def test_an_exit_before_the_answer_still_resolves_the_run(
    pair: tuple[OwnerClient, ScriptedOwner], pool
) -> None:
    client, owner = pair
    asked = pool.submit(client.submit, ECHO, request("r1", n="x"))
    run = owner.next_run()
    owner.answer("started", run["id"], pid=99)
    owner.answer("exit", run["id"], b"done", error=None)
    owner.answer("admitted", run["id"], how="started")
    assert asked.result(timeout=5).result(timeout=5) == CommandResult(b"done")


@pytest.mark.parametrize(
    ("kind", "fields", "error", "text"),
    [
        ("busy", {"retry_after": 7}, Busy, "hook h is busy"),
        (
            "unavailable",
            {"retry_after": 9, "journal": "/state/runs.db"},
            JournalUnwritable,
            "run journal /state/runs.db cannot be written",
        ),
        ("unavailable", {"retry_after": 9, "why": "database away"}, StateUnavailable, "database away"),
        (
            "refused",
            {"why": "a run message that does not say what to run"},
            RunRefused,
            "a run message that does not say what to run",
        ),
    ],
)
def test_each_refusal_is_raised_as_the_error_serving_branches_on(
    pair: tuple[OwnerClient, ScriptedOwner],
    pool,
    kind: str,
    fields: dict[str, object],
    error: type,
    text: str,
) -> None:
    client, owner = pair
    asked = pool.submit(client.submit, ECHO, request("r1", n="x"))
    owner.answer(kind, owner.next_run()["id"], **fields)
    with pytest.raises(error) as raised:
        asked.result(timeout=5)
    assert str(raised.value) == text
    if "retry_after" in fields:
        assert raised.value.retry_after == fields["retry_after"]  # type: ignore[attr-defined]


def test_a_new_epoch_fails_what_the_old_owner_left_unanswered(
    pair: tuple[OwnerClient, ScriptedOwner], pool
) -> None:
    client, owner = pair
    lost, _ = owner.admit(pool.submit(client.submit, ECHO, request("r1", n="x")), "queued")
    owner.hello(epoch=2)  # the master restarted the owner
    with pytest.raises(OwnerUnavailable, match="restarted"):
        lost.result(timeout=5)
    served, number = owner.admit(pool.submit(client.submit, ECHO, request("r2", n="y")))  # by the new owner
    owner.answer("exit", number, b"y\n", error=None)
    assert served.result(timeout=5) == CommandResult(b"y\n")


def test_a_run_no_owner_answered_waits_for_the_next_one(
    pair: tuple[OwnerClient, ScriptedOwner], pool
) -> None:
    """Unread by the dead owner, its packets wait in the connection: the new owner answers it."""
    client, owner = pair
    asked = pool.submit(client.submit, ECHO, request("r1", n="x"))
    number = owner.next_run()["id"]  # read by the owner that says hello next, not by the first one
    owner.hello(epoch=2)
    time.sleep(0.1)
    assert not asked.done()
    owner.answer("admitted", number, how="started")
    owner.answer("exit", number, b"x\n", error=None)
    assert asked.result(timeout=5).result(timeout=5) == CommandResult(b"x\n")


def test_the_owner_gone_fails_waiting_runs_and_refuses_new_ones_without_a_hang(
    pair: tuple[OwnerClient, ScriptedOwner], pool
) -> None:
    client, owner = pair
    waiting, _ = owner.admit(pool.submit(client.submit, ECHO, request("r1", n="x")))
    unanswered = pool.submit(client.submit, ECHO, request("r2", n="y"))
    owner.next_run()
    owner.end.close()
    with pytest.raises(OwnerUnavailable, match="gone"):
        waiting.result(timeout=5)
    with pytest.raises(OwnerUnavailable, match="gone"):
        unanswered.result(timeout=5)
    started = time.monotonic()
    with pytest.raises(OwnerUnavailable, match="no run owner"):
        client.submit(ECHO, request("r3", n="z"))
    assert time.monotonic() - started < 5  # hello_wait (0.3 s), not a hang


def test_an_owner_that_does_not_answer_fails_the_run(pair: tuple[OwnerClient, ScriptedOwner]) -> None:
    client, owner = pair
    client.answer_wait = 0.3
    with pytest.raises(OwnerUnavailable, match="did not answer"):
        client.submit(ECHO, request("r1", n="x"))


def test_started_first_waits_for_the_start_once_one_run_is_answered_ahead(
    pair: tuple[OwnerClient, ScriptedOwner], pool
) -> None:
    client, owner = pair
    client.use(LaunchingWaits())  # the gevent worker's
    client.start_wait = 5.0
    owner.admit(pool.submit(client.start, ECHO, request("r1", n="x")))  # answered before its start
    assert client.ahead == 1
    second = pool.submit(client.start, ECHO, request("r2", n="y"))
    run = owner.next_run()
    assert run["started"] is True  # asks to be told
    owner.answer("admitted", run["id"], how="started")
    time.sleep(0.2)
    assert not second.done()  # waits for its start
    owner.answer("started", run["id"], pid=77)
    second.result(timeout=5)


def test_started_first_on_threads_asks_for_no_start_and_waits_for_none(
    pair: tuple[OwnerClient, ScriptedOwner], pool
) -> None:
    """As CommandRunner on the threaded worker: a background run is answered once admitted."""
    client, owner = pair
    client.start_wait = 5.0
    for rid in ("r1", "r2", "r3"):
        asked = pool.submit(client.start, ECHO, request(rid, n="x"))
        run = owner.next_run()
        assert run["started"] is False
        owner.answer("admitted", run["id"], how="started")
        asked.result(timeout=1)  # no start told, none waited for
    assert client.ahead == 0 and client.running == 3


def test_stream_chunks_reach_on_output_as_they_come(pair: tuple[OwnerClient, ScriptedOwner], pool) -> None:
    client, owner = pair
    chunks: list[bytes] = []
    future, number = owner.admit(pool.submit(client.submit, ECHO, request("r1", n="x"), False, chunks.append))
    owner.answer("out", number, b"one ")
    assert wait_until(lambda: chunks == [b"one "])
    owner.answer("out", number, b"two")
    owner.answer("exit", number, error=None)
    assert future.result(timeout=5) == CommandResult(b"one two")
    assert chunks == [b"one ", b"two"]


# --- a prepared run through the wire -----------------------------------------------------------------


def test_a_prepared_run_round_trips_whole_in_parts() -> None:
    files = (("HOOK_BLOB", bytes(range(256)) * 1000), ("HOOK_EMPTY", b""), ("HOOK_TEXT", b"x\ny"))
    spec = RunSpec("h", "rid", "cmd", ("cmd", "\udcff", "é" * 50_000), (("HOOK_A", "a=b"),), files, "/tmp")
    coalescing = hook(
        "cmd", command_timeout=2.5, replay=False, limits=limits(max_concurrency=2, coalesce=True)
    )
    messages = list(run_messages(7, coalescing, spec, "main", capture=True, stream=False))
    assert [m.kind for m in messages[:-1]] == ["part"] * (len(messages) - 1) and len(messages) > 3
    assert all(len(wire.encode(m)) <= wire.MAX_PACKET for m in messages)
    order = run_order(messages[-1], b"".join(m.data for m in messages[:-1]))
    assert order.spec == spec
    assert (order.number, order.group, order.capture, order.stream) == (7, "main", True, False)
    assert (order.hook.command_timeout, order.hook.replay, order.hook.limits) == (
        2.5,
        False,
        coalescing.limits,
    )


def test_a_request_prepares_the_same_run_in_the_owner() -> None:
    h = hook("/bin/echo", pass_environment=(Argument("payload", "n"),), pass_file=(Argument("payload", "n"),))
    spec = prepare(h, request("r", n="v"))
    (message,) = run_messages(1, h, spec, None, capture=False, stream=False)
    order = run_order(message)
    assert order.spec == spec and order.group is None


BODY = b'{"command":"c","argv":["c"],"env":[],"cwd":"","group":null}'
GOOD = {
    "id": 1, "spec": len(BODY), "files": [], "hook": "h", "request": "r", "timeout": 1, "replay": True,
    "limits": [0, 0, False, 5], "capture": False, "stream": False,
}  # fmt: skip


def test_the_run_message_the_next_test_spoils_is_a_good_one() -> None:
    assert run_order(Message("run", GOOD, BODY)).spec == RunSpec("h", "r", "c", ("c",), (), (), "")


@pytest.mark.parametrize(
    ("fields", "body"),
    [
        ({}, BODY),
        ({**GOOD, "id": "1"}, BODY),
        ({**GOOD, "id": True}, BODY),
        ({**GOOD, "timeout": "1"}, BODY),
        ({**GOOD, "files": [["X", 5]]}, BODY),
        ({**GOOD, "files": [["X", -1]]}, BODY + b"x"),
        ({**GOOD, "limits": [0, 0, "no", 5]}, BODY),
        ({**GOOD, "limits": [0, 0]}, BODY),
        ({**GOOD, "spec": len(BODY) + 1}, BODY),
        (GOOD, b'["c"]' + b" " * (len(BODY) - 5)),
        (GOOD, b"\xff" * len(BODY)),
        ({**GOOD, "hook": None}, BODY),
    ],
)
def test_a_run_message_that_does_not_say_what_to_run_is_a_wire_error(
    fields: dict[str, object], body: bytes
) -> None:
    with pytest.raises(WireError):
        run_order(Message("run", fields, body))


def test_a_listener_that_fails_costs_only_its_own_chunks(
    pair: tuple[OwnerClient, ScriptedOwner], pool
) -> None:
    client, owner = pair

    def broken(chunk: bytes) -> None:
        raise RuntimeError("a client that went away")

    future, number = owner.admit(pool.submit(client.submit, ECHO, request("r1", n="x"), False, broken))
    owner.answer("out", number, b"lost on the listener, kept in the result")
    owner.answer("exit", number, error=None)
    assert future.result(timeout=5) == CommandResult(b"lost on the listener, kept in the result")
    after = pool.submit(client.submit, ECHO, request("r2", n="y"))  # the reader reads on
    run = owner.next_run()
    owner.answer("busy", run["id"], retry_after=1)
    with pytest.raises(Busy):
        after.result(timeout=5)


def test_a_new_owner_is_greeted_again(pair: tuple[OwnerClient, ScriptedOwner]) -> None:
    """Each owner learns of a worker from its hello: a restarted one (a new epoch) is sent it again."""
    client, owner = pair
    owner.hello(epoch=2)
    while True:
        message, _ = wire.receive(owner.end)
        if message.kind == "hello":
            break
    assert message["version"] == wire.VERSION and message["pid"] == os.getpid()


def test_a_question_unanswered_is_no_answer(pair: tuple[OwnerClient, ScriptedOwner]) -> None:
    client, _owner = pair
    assert wait_until(lambda: client.owner_pid == 4242)  # the owner said hello: questions are asked
    client.answer_wait = client.metrics_wait = 0.2
    assert client.run_metrics() is None
    assert not client.accepts_runs()


def test_a_scrape_before_the_owners_hello_waits_for_it_a_bounded_moment(pool: ThreadPoolExecutor) -> None:
    """/metrics asked before the owner's hello (the worker's start, an owner replaced) is asked once the hello
    comes within `hello_wait`; with none, it is no answer (a 503, not an empty 200: ops/metrics.py)."""
    worker_end, owner_end = wire.pair()
    client = OwnerClient(worker_end, spawn)
    client.hello_wait = 0.3
    client.connect()
    owner = ScriptedOwner(owner_end)
    try:
        assert wire.receive(owner_end)[0].kind == "hello"
        started = time.monotonic()
        assert client.run_metrics() is None  # no hello: nothing asked
        assert time.monotonic() - started >= 0.3
        client.hello_wait = 10
        asked = pool.submit(client.run_metrics)
        time.sleep(0.2)
        owner.hello()
        while (message := wire.receive(owner_end)[0]).kind != "metrics":
            pass
        owner.answer("metrics", message["id"], b"# EOF\n")
        assert asked.result(timeout=5) == b"# EOF\n"
    finally:
        client.close()
        owner_end.close()
