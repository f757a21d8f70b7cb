"""The gevent worker's pieces on a real event loop: the wait for a command's output, and the reader's
three states (waiting for a request, reading it under -read-timeout, draining its body)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from types import SimpleNamespace

import gevent
import gevent.socket
import pytest

from hookrunner.serve import greenworker
from hookrunner.serve.greenworker import _RequestReader, accept_error_text, go_ms, wait_for_run, write
from hookrunner.serve.worker import ClientReadTimeout


def finish_later(future: Future[str], delay: float, value: str | None = None,
                 error: Exception | None = None) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value or "")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_waiting_for_a_run_lets_other_greenlets_run() -> None:
    future: Future[str] = Future()
    thread = finish_later(future, 0.3, "output")
    ticks = []

    def ticker() -> None:
        while True:
            ticks.append(time.monotonic())
            gevent.sleep(0.01)

    other = gevent.spawn(ticker)
    try:
        assert wait_for_run(future) == "output"
    finally:
        other.kill()
    thread.join()
    # The loop went on while the native thread ran: a blocking wait would have allowed no tick.
    assert len(ticks) >= 10


def test_waiting_for_a_run_that_failed_raises_its_error() -> None:
    future: Future[str] = Future()
    finish_later(future, 0.05, error=RuntimeError("boom")).join()
    with pytest.raises(RuntimeError, match="boom"):
        wait_for_run(future)
    pending: Future[str] = Future()
    finish_later(pending, 0.05, error=ValueError("late"))
    with pytest.raises(ValueError, match="late"):
        wait_for_run(pending)


def test_a_finished_run_needs_no_wait() -> None:
    future: Future[str] = Future()
    future.set_result("ready")
    assert wait_for_run(future) == "ready"


@pytest.fixture
def pair() -> Iterator[tuple[gevent.socket.socket, gevent.socket.socket]]:
    server, client = gevent.socket.socketpair()
    try:
        yield server, client
    finally:
        server.close()
        client.close()


def after_one_request(reader: _RequestReader, client: gevent.socket.socket) -> None:
    """A first request read and answered: the reader now waits for the next one."""
    client.sendall(b"one")
    assert reader.recv(100) == b"one"
    reader.request_done()
    reader.next_request()


def test_the_first_request_has_the_read_timeout_from_the_start(
    pair: tuple[gevent.socket.socket, gevent.socket.socket],
) -> None:
    server, _client = pair
    reader = _RequestReader(server, 0.2, 5.0, ("127.0.0.1", 1))
    began = time.monotonic()
    with pytest.raises(ClientReadTimeout):
        reader.recv(100)
    assert 0.15 <= time.monotonic() - began < 1


def test_a_request_shares_one_deadline_from_its_first_byte(
    pair: tuple[gevent.socket.socket, gevent.socket.socket],
) -> None:
    server, client = pair
    reader = _RequestReader(server, 0.3, 5.0, ("127.0.0.1", 1))
    client.sendall(b"G")
    assert reader.recv(100) == b"G"
    assert not reader.waiting
    began = time.monotonic()

    def trickle() -> None:
        for _ in range(20):
            client.sendall(b"x")
            gevent.sleep(0.05)

    feeder = gevent.spawn(trickle)
    try:
        with pytest.raises(ClientReadTimeout):
            while True:
                reader.recv(100)
    finally:
        feeder.kill()
    assert time.monotonic() - began < 0.6


def test_between_requests_the_wait_is_the_keepalive_time_and_then_the_end(
    pair: tuple[gevent.socket.socket, gevent.socket.socket],
) -> None:
    server, client = pair
    reader = _RequestReader(server, 0.0, 0.2, ("127.0.0.1", 1))
    after_one_request(reader, client)
    assert reader.waiting
    began = time.monotonic()
    assert reader.recv(100) == b""  # idle past the keep-alive time: the connection ends quietly
    assert 0.15 <= time.monotonic() - began < 1


def test_a_later_request_gets_a_whole_read_timeout_from_its_first_byte(
    pair: tuple[gevent.socket.socket, gevent.socket.socket],
) -> None:
    server, client = pair
    reader = _RequestReader(server, 0.3, 5.0, ("127.0.0.1", 1))
    after_one_request(reader, client)
    gevent.sleep(0.4)  # idle for longer than the read timeout: that is keep-alive time, not the request's
    client.sendall(b"two")
    assert reader.recv(100) == b"two"
    client.sendall(b"more")
    assert reader.recv(100) == b"more"


def test_draining_reads_are_bounded_by_the_callers_timeout_only(
    pair: tuple[gevent.socket.socket, gevent.socket.socket],
) -> None:
    server, client = pair
    reader = _RequestReader(server, 0.1, 5.0, ("127.0.0.1", 1))
    client.sendall(b"head")
    assert reader.recv(100) == b"head"
    reader.request_done()
    gevent.sleep(0.2)  # past the request's deadline: the drain is not the request
    client.sendall(b"rest")
    reader.settimeout(0.5)
    assert reader.gettimeout() == 0.5
    assert reader.recv(100) == b"rest"
    with pytest.raises(TimeoutError):
        reader.recv(100)


def test_stopping_ends_a_connection_waiting_for_a_request_only(
    pair: tuple[gevent.socket.socket, gevent.socket.socket],
) -> None:
    server, client = pair
    reader = _RequestReader(server, 0.0, 5.0, ("127.0.0.1", 1))
    client.sendall(b"GET")
    assert reader.recv(100) == b"GET"
    reader.close_if_waiting()  # mid-request: left alone
    client.sendall(b" /")
    assert reader.recv(100) == b" /"
    reader.request_done()
    reader.next_request()
    waiter = gevent.spawn(reader.recv, 100)
    gevent.sleep(0.05)
    reader.close_if_waiting()
    assert waiter.get(timeout=2) == b""


def test_write_sends_everything_in_one_send_or_more(
    pair: tuple[gevent.socket.socket, gevent.socket.socket],
) -> None:
    server, client = pair
    write(server, b"HTTP/1.1 200 OK\r\n\r\n")
    assert client.recv(100) == b"HTTP/1.1 200 OK\r\n\r\n"
    write(server, b"")  # nothing at all is sent
    big = bytes(range(256)) * 16384  # 4 MiB: more than a socket buffer takes at once
    received = bytearray()

    def read() -> None:
        while len(received) < len(big):
            received.extend(client.recv(1 << 20))

    reader = gevent.spawn(read)
    write(server, big)
    reader.get(timeout=10)
    assert bytes(received) == big
    write(server, b"abc", chunked=True)
    assert client.recv(100) == b"3\r\nabc\r\n"


def test_a_pipelined_request_is_read_under_the_deadline_not_the_keepalive_time(
    pair: tuple[gevent.socket.socket, gevent.socket.socket],
) -> None:
    server, client = pair
    reader = _RequestReader(server, 0.3, 0.1, ("127.0.0.1", 1))
    after_one_request(reader, client)
    # The next request's head was already buffered: the parser has it without reading the socket.
    reader.request_started()
    assert not reader.waiting
    gevent.sleep(0.15)  # longer than keep-alive: a waiting read would have ended the connection
    client.sendall(b"body")
    assert reader.recv(100) == b"body"
    with pytest.raises(ClientReadTimeout):  # and the request's deadline still holds
        reader.recv(100)


def test_a_failed_accept_is_logged_in_net_https_words() -> None:
    import errno
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        text = accept_error_text(listener, OSError(errno.EMFILE, "Too many open files"))
    assert text == f"accept tcp 127.0.0.1:{port}: accept4: too many open files"
    assert [go_ms(d) for d in (0.005, 0.01, 0.64, 1.0)] == ["5ms", "10ms", "640ms", "1s"]


def test_dismantle_empties_a_parsed_request_and_every_container_in_it() -> None:
    inner = [{"b": [1, 2]}, [3]]
    scalars = list(range(3 * greenworker.DISMANTLE_STEP))  # steps of scalars only, then a step with containers
    payload = {"a": [*inner, *scalars], "c": {"d": [4]}}
    req = SimpleNamespace(payload=payload)
    parsed: list[object] = [req]
    greenworker._dismantle(parsed)
    assert parsed == [] and req.payload is None
    assert payload == {} and inner == [{}, []]
