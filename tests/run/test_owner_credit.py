"""A streamed run's flow control (run/streamflow.py) between the run owner (run/owner.py) and its workers'
clients (run/ownerclient.py), in one process over real SOCK_SEQPACKET pairs with real commands: the owner
sends a stream at most a window past its worker's credit, holds the rest up to the stream's bound and then
gives its client up, and one stalled stream holds back no other run, on its connection or another."""

from __future__ import annotations

import io
import socket
import threading
import time
from pathlib import Path

from owner_support import hook, host, request, script, wait_until

from hookrunner.run import wire
from hookrunner.run.executor import CommandResult
from hookrunner.run.owner import Owner
from hookrunner.run.prepare import prepare
from hookrunner.run.runorder import run_messages
from hookrunner.run.streamflow import WINDOW, StreamFlow

MiB = 1024 * 1024


def send_stream(raw: socket.socket, number: int, hook_: object, n: str) -> None:
    """Run `number` of `hook_`, streamed, with the owner's default bound (4 MiB)."""
    spec = prepare(hook_, request(f"r{number}", n=n))  # type: ignore[arg-type]
    messages = run_messages(number, hook_, spec, None, capture=False, stream=True)  # type: ignore[arg-type]
    for message in messages:
        wire.send(raw, message)


def outbox_of(owner: Owner, pid: int) -> int:
    """Bytes of messages the owner holds unsent for worker `pid`'s connection (0: it has none)."""
    connection = owner._connections.get(pid)  # noqa: SLF001 - the bound under test
    return 0 if connection is None else connection._held  # noqa: SLF001


def drain(raw: socket.socket) -> list[wire.Message]:
    """Every message waiting on `raw` now, without waiting for more."""
    raw.setblocking(False)
    got = []
    while True:
        try:
            got.append(wire.receive(raw)[0])
        except BlockingIOError:
            raw.setblocking(True)
            return got


def test_a_stream_whose_worker_reads_nothing_holds_a_window_then_is_given_up(
    tmp_path: Path, log_lines: io.StringIO
) -> None:
    """20 MiB written to a stream whose worker reads nothing: the owner's outbox for that connection never
    holds more than the window and one frame (today it held the whole output until the connection was cut
    at its bound); past the stream's bound (4 MiB) the stream is given up and its worker told `behind`,
    while another worker's run and a second run on the stalled connection are answered."""
    loud = hook(script(tmp_path / "loud", "head -c 20971520 /dev/zero\n"), stream_output=True)
    echo = hook(script(tmp_path / "echo", 'echo "$1"\n'), "echo", capture_output=True)
    with host(1) as made:
        stalled = made.raw_worker(201)
        send_stream(stalled, 1, loud, "x")
        most = 0
        done = threading.Event()

        def sample() -> None:
            nonlocal most
            while not done.is_set():
                most = max(most, outbox_of(made.owner, 201))
                time.sleep(0.001)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        # Another worker is served while the stream stalls.
        assert made.clients[0].run(echo, request("other", n="served")) == CommandResult(b"served\n")
        assert wait_until(lambda: made.owner.runner.running == 0 and made.owner.runner.queued == 0, 30)
        # The stalled connection is still served: a second run on it is answered once it reads.
        spec = prepare(echo, request("second", n="again"))
        for message in run_messages(2, echo, spec, None, capture=True, stream=False):
            wire.send(stalled, message)
        stalled.settimeout(10)
        got: list[wire.Message] = []
        while sum(m.kind == "exit" for m in got) < 2:
            got.append(wire.receive(stalled)[0])
        done.set()
        sampler.join()
        assert 201 in made.owner.workers
        assert most <= WINDOW + wire.FRAME + 4096, most  # the window, one frame, the hello and the answers
        streamed = sum(len(m.data) for m in got if m.kind == "out" and m["id"] == 1)
        assert 0 < streamed <= WINDOW + wire.FRAME
        kinds = [m.kind for m in got if m.get("id") == 1]
        assert kinds[0] == "admitted" and kinds[-2:] == ["behind", "exit"]
        assert next(m for m in got if m.kind == "behind")["bytes"] == 4 * MiB
        assert next(m for m in got if m.kind == "exit" and m["id"] == 1).data == b""  # streamed, not resent
        assert next(m for m in got if m.kind == "exit" and m["id"] == 2).data == b"again\n"
        assert "cutting it off" not in log_lines.getvalue()


def test_a_reader_that_resumes_gets_the_output_credit_by_credit(tmp_path: Path) -> None:
    """1 MiB written, then the command waits: the worker gets a window and nothing more until it credits;
    each credit lets as much again come, and the whole output arrives in order, byte for byte."""
    data = bytes(range(256)) * 4096
    (tmp_path / "blob").write_bytes(data)
    gate = tmp_path / "go"
    command = script(
        tmp_path / "paced", f"cat {tmp_path}/blob\nwhile [ ! -e {gate} ]; do sleep 0.01; done\necho end\n"
    )
    with host(0) as made:
        raw = made.raw_worker(301)
        assert wire.receive(raw)[0].kind == "hello"
        send_stream(raw, 1, hook(command, stream_output=True), "x")
        received = b""
        rounds = 0
        while len(received) < len(data):
            rounds += 1
            assert rounds < 100
            time.sleep(0.2)  # the owner has long had all of it from the command
            assert outbox_of(made.owner, 301) <= WINDOW + wire.FRAME  # the rest is held, not queued to send
            got = b"".join(m.data for m in drain(raw) if m.kind == "out")
            assert len(got) <= WINDOW + wire.FRAME, len(got)  # never more than the credit allows
            assert got or rounds == 1 or len(received) == 0, "a credit let nothing come"
            received += got
            wire.send(raw, wire.Message("credit", {"id": 1, "bytes": len(got)}))
        assert received == data
        assert rounds >= len(data) // (WINDOW + wire.FRAME)
        gate.touch()
        raw.settimeout(10)
        rest = []
        while not rest or rest[-1].kind != "exit":
            rest.append(wire.receive(raw)[0])
        assert b"".join(m.data for m in rest if m.kind == "out") == b"end\n"
        assert rest[-1].data == b""


class Taker(StreamFlow):
    """A streamed answer's side, in the worker: takes (and credits) each chunk at once, or, with `stalled`,
    takes nothing."""

    def __init__(self, limit: int, stalled: bool = False) -> None:
        super().__init__(limit)
        self.stalled = stalled
        self.chunks: list[bytes] = []
        self.behind = threading.Event()

    def __call__(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        if not self.stalled:
            self.taken(len(chunk))

    def fell_behind(self) -> None:
        self.behind.set()


def test_through_the_client_a_stalled_answer_is_told_behind_and_a_taking_one_gets_every_byte(
    tmp_path: Path,
) -> None:
    """The worker's client credits what its answer takes: an answer that takes nothing is told its client
    fell its bound behind, and holds no more than a window; one that takes as it comes gets 20 MiB whole,
    in order, while a capture of another worker is answered."""
    data = bytes(range(256)) * (80 * 1024)
    (tmp_path / "blob").write_bytes(data)
    loud = hook(script(tmp_path / "loud", f"cat {tmp_path}/blob\n"), stream_output=True)
    echo = hook(script(tmp_path / "echo", 'echo "$1"\n'), "echo", capture_output=True)
    with host(2) as made:
        stalled = Taker(1 * MiB, stalled=True)
        stalled_run = made.clients[0].submit(loud, request("s", n="x"), on_output=stalled)
        taking = Taker(64 * MiB)  # a bound the owner's reads cannot outrun on a loaded machine
        taking_run = made.clients[0].submit(loud, request("t", n="x"), on_output=taking)
        assert made.clients[1].run(echo, request("o", n="served")) == CommandResult(b"served\n")
        assert stalled.behind.wait(30)
        assert stalled_run.result(timeout=30).ok
        assert sum(map(len, stalled.chunks)) <= WINDOW + wire.FRAME
        assert taking_run.result(timeout=30).ok
        assert b"".join(taking.chunks) == data
        assert not taking.behind.is_set()
