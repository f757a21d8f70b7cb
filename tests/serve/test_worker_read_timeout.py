"""-read-timeout's deadline socket: one deadline over all reads of a request, writes left unbounded."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from hookrunner.serve.worker import ClientReadTimeout
from hookrunner.serve.worker import DeadlineSocket as _DeadlineSocket


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    server, client = socket.socketpair()
    try:
        yield server, client
    finally:
        server.close()
        client.close()


def trickle(sock: socket.socket, stop: threading.Event, every: float = 0.05) -> threading.Thread:
    def run() -> None:
        deadline = time.monotonic() + 5
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                sock.sendall(b"x")
            except OSError:
                return
            time.sleep(every)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_trickling_client_is_cut_at_the_deadline(pair: tuple[socket.socket, socket.socket]) -> None:
    server, client = pair
    reader = _DeadlineSocket(server, 0.4, ("127.0.0.1", 1234))
    stop = threading.Event()
    thread = trickle(client, stop)
    began = time.monotonic()
    received = b""
    try:
        with pytest.raises(ClientReadTimeout):
            for _ in range(1000):  # bounded; each read gets a byte well within a per-read timeout
                received += reader.recv(1)
    finally:
        stop.set()
        thread.join(timeout=5)
    assert 0.35 <= time.monotonic() - began < 2
    assert len(received) >= 2  # it was reading all along: only the total time was too long
    # Nothing more is read from this client: it is shut down for reading. Bytes that arrived just before the
    # shut-down may still be queued; after them the read ends (b"") instead of waiting on the client, which
    # is still connected (without the shut-down this raises TimeoutError).
    server.settimeout(2)
    while server.recv(10):
        pass


def test_each_request_gets_the_whole_time_again(pair: tuple[socket.socket, socket.socket]) -> None:
    server, client = pair
    reader = _DeadlineSocket(server, 0.3, ("127.0.0.1", 1234))
    for _ in range(3):
        client.sendall(b"GET")
        assert reader.recv(3) == b"GET"
        time.sleep(0.2)
        reader.new_request()
    assert server.gettimeout() is None  # blocking again after each read: answers are written unbounded


def test_the_callers_own_shorter_timeout_still_applies(pair: tuple[socket.socket, socket.socket]) -> None:
    server, _ = pair
    reader = _DeadlineSocket(server, 5.0, None)
    reader.settimeout(0.1)
    assert reader.gettimeout() == 0.1
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        reader.recv(1)
    assert time.monotonic() - began < 1
