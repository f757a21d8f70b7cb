"""The run owner's `started` (run/owner.py): told to the run it belongs to, even when two runs carry the
same request id at once (a client's own X-Request-Id with -x-request-id, or two workers)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from owner_support import Host, LaunchingWaits, hook, host, limits, request, script, wait_until

from hookrunner.run import wire
from hookrunner.run.prepare import prepare
from hookrunner.run.runorder import run_messages


@pytest.fixture
def two() -> Iterator[Host]:
    with host(2) as made:
        yield made


def pid_script(tmp_path: Path) -> tuple[Path, Path]:
    """A command that writes its pid to `pid-<its argument>`, then, for `block` and `a`, waits for `go`."""
    gate = tmp_path / "go"
    command = script(
        tmp_path / "pid",
        f"echo $$ > {tmp_path}/pid-$1.tmp && mv {tmp_path}/pid-$1.tmp {tmp_path}/pid-$1\n"
        f'if [ "$1" != b ]; then while [ ! -e {gate} ]; do sleep 0.01; done; fi\n',
    )
    return command, gate


def send_run(raw: socket.socket, number: int, hook_: object, rid: str, n: str) -> None:
    spec = prepare(hook_, request(rid, n=n))  # type: ignore[arg-type]
    for message in run_messages(number, hook_, spec, None, capture=False, stream=False, tell_start=True):  # type: ignore[arg-type]
        wire.send(raw, message)


def messages_until(raw: socket.socket, done: object, seconds: float = 10.0) -> list[wire.Message]:
    """The messages `raw` receives until one equal to `done` (kind, id) has come, or `seconds` pass."""
    raw.settimeout(0.2)
    got: list[wire.Message] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            message = wire.receive(raw)[0]
        except TimeoutError:
            continue
        got.append(message)
        if (message.kind, message.get("id")) == done:
            break
    return got


def starts(messages: list[wire.Message]) -> dict[int, int]:
    return {m["id"]: m["pid"] for m in messages if m.kind == "started"}


def test_two_runs_of_one_request_id_each_get_their_own_start(two: Host, tmp_path: Path) -> None:
    """Run `a` is queued behind a blocker; run `b`, of the same request id on another hook, starts at once.
    `b` is told of its own start, with its own process's pid; `a` only once its own process starts."""
    command, gate = pid_script(tmp_path)
    serial = hook(command, "serial", limits=limits(max_concurrency=1, max_queue=5))
    other = hook(command, "other")
    raw = two.raw_worker(301)
    assert wire.receive(raw)[0].kind == "hello"
    send_run(raw, 1, serial, "blocker", "block")
    seen = messages_until(raw, ("started", 1))
    assert wait_until(lambda: (tmp_path / "pid-block").exists())  # told at its exec, before it writes
    send_run(raw, 2, serial, "same", "a")  # queued behind the blocker
    seen += messages_until(raw, ("admitted", 2))
    send_run(raw, 3, other, "same", "b")  # starts at once
    seen += messages_until(raw, ("exit", 3))
    pid_b = int((tmp_path / "pid-b").read_text())
    assert starts(seen) == {1: int((tmp_path / "pid-block").read_text()), 3: pid_b}
    assert {m["id"]: m["how"] for m in seen if m.kind == "admitted"} == {
        1: "started",
        2: "queued",
        3: "started",
    }
    gate.touch()
    seen += messages_until(raw, ("exit", 2))
    assert starts(seen)[2] == int((tmp_path / "pid-a").read_text()) != pid_b


def test_a_second_run_of_one_request_id_started_first_is_not_answered_by_the_first(
    two: Host, tmp_path: Path
) -> None:
    """Through the client, as the gevent worker's background answer waits for its start: the queued run of
    the request id counts as queued (not started by the other's start), and the run that started is not
    left counted as answered ahead of its start."""
    command, gate = pid_script(tmp_path)
    serial = hook(command, "serial", limits=limits(max_concurrency=1, max_queue=5))
    client = two.clients[0]
    client.use(LaunchingWaits())
    client.start_wait = 5.0
    client.start(serial, request("blocker", n="block"))
    assert wait_until(lambda: (tmp_path / "pid-block").exists())
    client.start(serial, request("same", n="a"))  # queued
    client.start(hook(command, "other"), request("same", n="b"))  # started at once, ends at once
    assert wait_until(lambda: (tmp_path / "pid-b").exists())
    assert wait_until(lambda: client.running == 1)  # the blocker alone: b has ended
    assert client.queued == 1  # a: not taken for started by b's start
    assert client.ahead == 0
    gate.touch()
    assert wait_until(lambda: client.running == 0 and client.queued == 0)
