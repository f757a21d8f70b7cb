"""serve/stream.py: the bounded pipe between a run's reader and its streamed answer, on threads and on the
gevent loop; soulteary's answers for a run that ends before its first byte; the body that cuts off a client
whose write makes no progress; and a streamed answer through the app, chunk by chunk."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import Future

import gevent
import pytest

from hookrunner.run.executor import CommandResult, CommandRunner
from hookrunner.run.spawn import Waits
from hookrunner.serve.greenruns import GreenWaits
from hookrunner.serve.stream import (
    MSG_STREAM_CANCELLED,
    MSG_STREAM_ERROR,
    MSG_STREAM_TIMEOUT,
    StreamBody,
    StreamedAnswer,
    StreamPipe,
    stream_answer,
)


def done(result: CommandResult) -> Future[CommandResult]:
    future: Future[CommandResult] = Future()
    future.set_result(result)
    return future


def test_the_pipe_hands_over_what_came_since_the_last_take_and_then_the_end() -> None:
    pipe = StreamPipe(Waits(), limit=10)
    pipe.push(b"ab")
    pipe.push(b"cd")
    assert pipe.take() == b"abcd"
    pipe.push(b"e")
    pipe.end()
    assert (pipe.take(), pipe.take()) == (b"e", None)


def test_a_take_waits_for_a_push_from_another_thread() -> None:
    pipe = StreamPipe(Waits())
    timer = threading.Timer(0.2, pipe.push, (b"late",))
    timer.start()
    started = time.monotonic()
    assert pipe.take() == b"late"
    assert time.monotonic() - started >= 0.15
    timer.join()


def test_on_the_loop_a_take_waits_without_holding_other_greenlets() -> None:
    pipe = StreamPipe(GreenWaits())
    ticks: list[int] = []

    def ticker() -> None:
        for n in range(5):
            ticks.append(n)
            gevent.sleep(0.01)
        pipe.push(b"after the ticks")

    gevent.spawn(ticker)
    assert gevent.spawn(pipe.take).get(timeout=5) == b"after the ticks"
    assert ticks == [0, 1, 2, 3, 4]


def test_an_overrun_pipe_takes_no_more_and_tells_once() -> None:
    told: list[str] = []
    pipe = StreamPipe(Waits(), limit=4)
    pipe.on_overrun = lambda: told.append("behind")
    pipe.push(b"abc")
    pipe.push(b"de")  # 5 bytes held would be past the limit
    pipe.push(b"f")
    assert (pipe.overrun, told) == (True, ["behind"])
    assert (pipe.take(), pipe.take()) == (
        b"abc",
        None,
    )  # what it held, then the end: the run is not waited for


def test_the_pipe_credits_what_its_answer_takes_and_is_cut_when_the_owner_gives_its_client_up() -> None:
    """With the run owner (run/streamflow.py): each take is credited, and the owner's `behind` overruns the
    pipe as its own bound does (told once; what it held is still taken, then the end)."""
    credited: list[int] = []
    told: list[str] = []
    pipe = StreamPipe(Waits())
    pipe.on_taken = credited.append
    pipe.on_overrun = lambda: told.append("behind")
    pipe(b"ab")  # the run owner's client tells it as a listener
    pipe(b"cde")
    assert pipe.take() == b"abcde" and credited == [5]
    pipe(b"f")
    pipe.fell_behind()
    pipe.fell_behind()
    pipe(b"g")
    assert (pipe.overrun, told) == (True, ["behind"])
    assert (pipe.take(), pipe.take(), credited) == (b"f", None, [5, 1])


def test_a_dropped_pipe_keeps_nothing() -> None:
    pipe = StreamPipe(Waits())
    pipe.push(b"kept until dropped")
    pipe.drop()
    pipe.push(b"after")
    assert pipe.take() is None


@pytest.mark.parametrize(
    ("result", "closing", "status", "body"),
    [
        (CommandResult(b"", "exit status 3"), False, 500, MSG_STREAM_ERROR),
        (
            CommandResult(b"", 'exec: "/nope": stat /nope: no such file or directory'),
            False,
            500,
            MSG_STREAM_ERROR,
        ),
        (
            CommandResult(b"", "command timed out after 1s (signal: terminated)"),
            False,
            408,
            MSG_STREAM_TIMEOUT,
        ),
        (CommandResult(b"", "signal: killed"), True, 408, MSG_STREAM_CANCELLED),
    ],
)
def test_a_run_that_ends_badly_before_any_output_gets_soulteary_s_answer(
    result: CommandResult, closing: bool, status: int, body: bytes
) -> None:
    runner = CommandRunner()
    runner._closing = closing
    pipe = StreamPipe(runner.waits)
    response = stream_answer(pipe, done(result), runner, "rid", "h", 201, {"X-Hook": "v"}, 30.0, None)
    assert not isinstance(response, StreamedAnswer)
    assert (response.status_code, response.get_data()) == (status, body)
    assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert response.headers["X-Hook"] == "v"


def test_a_quiet_run_that_succeeds_gets_the_configured_status_and_no_body() -> None:
    runner = CommandRunner()
    response = stream_answer(
        StreamPipe(runner.waits), done(CommandResult(b"")), runner, "r", "h", 201, {}, 30, None
    )
    assert (response.status_code, response.get_data(), "Content-Type" in response.headers) == (
        201,
        b"",
        False,
    )


def test_output_is_streamed_with_a_type_sniffed_from_its_first_piece() -> None:
    runner = CommandRunner()
    pipe = StreamPipe(runner.waits)
    future: Future[CommandResult] = Future()
    pipe.push(b"<html>first")
    response = stream_answer(pipe, future, runner, "r", "h", 0, {"X-Global": "g"}, 30.0, None)
    assert isinstance(response, StreamedAnswer)
    assert response.status_code == 200 and response.headers["Content-Type"] == "text/html; charset=utf-8"
    assert "Content-Length" not in response.headers
    body = response.response
    assert isinstance(body, StreamBody)
    assert next(body) == b"<html>first"
    pipe.push(b" second")
    assert next(body) == b" second"
    future.set_result(CommandResult(b"<html>first second"))
    with pytest.raises(StopIteration):
        next(body)
    body.close()
    assert (body.sent, response.body_size(), response.get_data()) == (18, 18, b"")


def test_a_request_coalesced_into_another_run_gets_that_run_s_output() -> None:
    runner = CommandRunner()
    response = stream_answer(
        StreamPipe(runner.waits), done(CommandResult(b"merged")), runner, "r", "h", 0, {}, 30, None
    )
    assert isinstance(response, StreamedAnswer)
    assert b"".join(response.response) == b"merged"


@pytest.mark.parametrize("waits", [Waits(), GreenWaits()], ids=["threads", "greenlets"])
def test_a_write_that_makes_no_progress_is_cut_off_after_the_write_timeout(waits: Waits) -> None:
    runner = CommandRunner()
    runner.use(waits)
    server, client = socket.socketpair()
    try:
        pipe = StreamPipe(waits)
        body = StreamBody(b"first", pipe, Future(), runner, "r", "h", 0.3, server)
        started = time.monotonic()
        assert next(body) == b"first"  # the worker now writes it, and the client never reads
        client.settimeout(5)
        if isinstance(waits, GreenWaits):
            gevent.sleep(1.0)  # the watch is a greenlet: the loop runs it while this one sleeps
        assert client.recv(100) == b""  # shut under the writer: the client sees the end
        assert 0.3 <= time.monotonic() - started < 3
        with pytest.raises(OSError):
            server.sendall(b"x" * 100000)
        body.close()
        assert pipe.take() is None
    finally:
        server.close()
        client.close()


def test_a_client_that_keeps_up_is_never_cut_off() -> None:
    runner = CommandRunner()
    server, client = socket.socketpair()
    try:
        pipe = StreamPipe(runner.waits)
        future: Future[CommandResult] = Future()
        body = StreamBody(b"a", pipe, future, runner, "r", "h", 0.2, server)
        server.sendall(next(body))
        for _ in range(2):
            # Waiting for output is not writing: a take that waits past the write timeout cuts nothing.
            timer = threading.Timer(0.4, pipe.push, (b"b",))
            timer.start()
            server.sendall(next(body))
            timer.join()
        assert client.recv(10) == b"abb"
        future.set_result(CommandResult(b"abb"))
        pipe.end()
        with pytest.raises(StopIteration):
            next(body)
        body.close()
        server.sendall(b"still open")
        assert client.recv(100).endswith(b"still open")
    finally:
        server.close()
        client.close()
