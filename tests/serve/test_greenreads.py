"""The gevent worker's reads on a real event loop: the reader's three states (waiting for a request,
reading it under -read-timeout, draining its body), reads woken only when they can go on, the one sweeping
timer for deadlines, and connections that wait for their first byte without a greenlet."""

from __future__ import annotations

import time

import gevent
import gevent.socket
import pytest
from gunicorn.http.unreader import SocketUnreader

from hookrunner.ops.log import log
from hookrunner.serve import greenreads
from hookrunner.serve.greenreads import LINE, DormantConnection, GatedUnreader
from hookrunner.serve.greenreads import RequestReader as _RequestReader
from hookrunner.serve.worker import ClientReadTimeout

#: The `pair` fixture (tests/serve/conftest.py): two connected gevent sockets, the server's first.
Pair = tuple[gevent.socket.socket, gevent.socket.socket]


def after_one_request(reader: _RequestReader, client: gevent.socket.socket) -> None:
    """A first request read and answered: the reader now waits for the next one."""
    client.sendall(b"one")
    assert reader.recv(100) == b"one"
    reader.request_done()
    reader.next_request()


def test_the_first_request_has_the_read_timeout_from_the_start(pair: Pair) -> None:
    server, _client = pair
    reader = _RequestReader(server, 0.2, 5.0, ("127.0.0.1", 1))
    began = time.monotonic()
    with pytest.raises(ClientReadTimeout):
        reader.recv(100)
    assert 0.15 <= time.monotonic() - began < 1


def test_a_request_shares_one_deadline_from_its_first_byte(pair: Pair) -> None:
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
    assert time.monotonic() - began < 1.0  # a per-read timeout would read the whole 1 s trickle, then wait


def test_between_requests_the_wait_is_the_keepalive_time_and_then_the_end(pair: Pair) -> None:
    server, client = pair
    reader = _RequestReader(server, 0.0, 0.2, ("127.0.0.1", 1))
    after_one_request(reader, client)
    assert reader.waiting
    began = time.monotonic()
    assert reader.recv(100) == b""  # idle past the keep-alive time: the connection ends quietly
    assert 0.15 <= time.monotonic() - began < 1


def test_a_later_request_gets_a_whole_read_timeout_from_its_first_byte(pair: Pair) -> None:
    server, client = pair
    reader = _RequestReader(server, 0.3, 5.0, ("127.0.0.1", 1))
    after_one_request(reader, client)
    gevent.sleep(0.4)  # idle for longer than the read timeout: that is keep-alive time, not the request's
    client.sendall(b"two")
    assert reader.recv(100) == b"two"
    client.sendall(b"more")
    assert reader.recv(100) == b"more"


def test_draining_reads_are_bounded_by_the_callers_timeout_only(pair: Pair) -> None:
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


def test_stopping_ends_a_connection_waiting_for_a_request_only(pair: Pair) -> None:
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


def test_a_pipelined_request_is_read_under_the_deadline_not_the_keepalive_time(pair: Pair) -> None:
    server, client = pair
    reader = _RequestReader(server, 1.0, 0.1, ("127.0.0.1", 1))
    after_one_request(reader, client)
    # The next request's head was already buffered: the parser has it without reading the socket.
    reader.request_started()
    assert not reader.waiting
    gevent.sleep(0.15)  # longer than keep-alive: a waiting read would have ended the connection
    client.sendall(b"body")
    assert reader.recv(100) == b"body"
    with pytest.raises(ClientReadTimeout):  # and the request's deadline still holds
        reader.recv(100)


def trickle(client: gevent.socket.socket, data: bytes, pause: float = 0.01) -> gevent.Greenlet:
    def send() -> None:
        for i in range(len(data)):
            client.sendall(data[i : i + 1])
            gevent.sleep(pause)

    return gevent.spawn(send)


def test_a_head_read_wakes_only_when_a_line_has_ended(pair: Pair) -> None:
    server, client = pair
    reader = _RequestReader(server, 5.0, 5.0, ("127.0.0.1", 1))
    reader.gate = LINE
    feeder = trickle(client, b"GET / HTTP/1.1\r\nHos")
    # One read returns the whole line: twenty bytes arrived one by one, and the parser saw none of them alone.
    assert reader.recv(8192) == b"GET / HTTP/1.1\r\n"
    assert not reader.waiting
    feeder.get(timeout=5)
    reader.gate = None
    assert reader.recv(8192) == b"Hos"  # an ungated read takes what is there


def test_a_body_read_wakes_when_the_bytes_it_needs_are_there(pair: Pair) -> None:
    server, client = pair
    reader = _RequestReader(server, 5.0, 5.0, ("127.0.0.1", 1))
    reader.request_started()
    reader.gate = 10
    feeder = trickle(client, b"0123456789ab")
    data = reader.recv(65536)
    assert data[:10] == b"0123456789"
    feeder.get(timeout=5)


def test_a_gated_read_returns_at_the_end_with_what_came(pair: Pair) -> None:
    server, client = pair
    reader = _RequestReader(server, 5.0, 5.0, ("127.0.0.1", 1))
    reader.gate = LINE
    client.sendall(b"GET / HT")
    client.shutdown(2)
    assert reader.recv(8192) == b"GET / HT"
    assert reader.recv(8192) == b""


def test_a_gated_read_still_ends_at_the_deadline(pair: Pair) -> None:
    server, client = pair
    reader = _RequestReader(server, 0.3, 5.0, ("127.0.0.1", 1))
    reader.gate = LINE
    client.sendall(b"GET / HTTP/1.1\r\n")
    began = time.monotonic()
    assert reader.recv(8192) == b"GET / HTTP/1.1\r\n"
    feeder = trickle(client, b"X-a: " + b"a" * 100, pause=0.02)
    with pytest.raises(ClientReadTimeout):
        reader.recv(8192)
    assert time.monotonic() - began < 0.3 + 2 * greenreads.SWEEP + 0.8  # the trickle lasts 2 s
    feeder.kill()


def test_the_unreader_tells_the_reader_what_each_read_needs() -> None:
    seen: list[int | None] = []

    class Source:
        gate: int | None = None

        def recv(self, size: int) -> bytes:
            seen.append(self.gate)
            return b"abcd"

    source = Source()
    unreader = GatedUnreader(source)
    assert isinstance(unreader, SocketUnreader)
    assert unreader.read() == b"abcd"
    assert unreader.read(6) == b"abcdab"  # needed 6, then the 2 still missing
    assert seen == [LINE, 6, 2]
    assert source.gate is None  # only while a read waits


def test_a_dormant_connection_starts_at_its_first_byte(pair: Pair) -> None:
    server, client = pair
    started: list[tuple[float, bytes, bool]] = []
    dormant: set[DormantConnection] = set()
    connection = DormantConnection(server, ("127.0.0.1", 1), 5.0, lambda *a: started.append(a), dormant)
    assert dormant == {connection}
    gevent.sleep(0.05)
    assert not started
    client.sendall(b"G")
    gevent.sleep(0.05)
    assert not started  # a head part-way: still dormant
    client.sendall(b"ET / HTTP/1.1\r\nHost: x\r\n\r\n")
    gevent.sleep(0.05)
    assert started == [(connection.accepted, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", False)]  # the head, for the reader
    assert not dormant


def test_a_head_already_there_at_the_accept_starts_the_greenlet_without_waiting_for_a_poll(pair: Pair) -> None:
    server, client = pair
    client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # sent before the server accepts, as a client does
    gevent.sleep(0.05)
    started: list[tuple[float, bytes, bool]] = []
    dormant: set[DormantConnection] = set()
    connection = DormantConnection(server, ("127.0.0.1", 1), 5.0, lambda *a: started.append(a), dormant)
    # Read in the accept's own turn of the loop: no poll has run since (this greenlet did not yield).
    assert started == [(connection.accepted, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", False)]
    assert not dormant


def test_a_dormant_connection_is_closed_at_the_read_timeout_with_the_log_line(
    pair: Pair, monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, client = pair
    lines: list[str] = []
    monkeypatch.setattr(log, "output", lambda message, **_: lines.append(message))
    started: list[tuple[float, bytes, bool]] = []
    dormant: set[DormantConnection] = set()
    DormantConnection(server, ("127.0.0.1", 7), 0.2, lambda *a: started.append(a), dormant)
    client.sendall(b"GET / HTTP/1.1\r\nX-a: ")  # a head that never ends
    began = time.monotonic()
    client.settimeout(3)
    assert client.recv(10) == b""  # closed, no answer
    assert 0.15 <= time.monotonic() - began < 1
    assert not started and not dormant
    assert lines == ["closing the connection from 127.0.0.1:7: request not received within 0.2s"]


def test_stopping_closes_a_dormant_connection(pair: Pair) -> None:
    server, client = pair
    started: list[tuple[float, bytes, bool]] = []
    dormant: set[DormantConnection] = set()
    connection = DormantConnection(server, ("127.0.0.1", 1), 0.0, lambda *a: started.append(a), dormant)
    connection.close()
    client.settimeout(3)
    assert client.recv(10) == b""
    assert not started and not dormant


@pytest.mark.parametrize(
    "head",
    [
        b"GET /%zz HTTP/1.1\r\n",  # a target net/http may refuse: the parser looks at once
        b"BREW / HTTP/1.1\r\n",
        b"GET / HTTP/1.1\r\nHost: x\nX-a: ",  # a bare LF
        b"GET / HTTP/1.1\n",
        b"GET / HTTP/1.1\r\nX-a: " + b"a" * 9000,  # past DORMANT_HEAD_BYTES
    ],
)
def test_a_dormant_connection_hands_over_what_the_parser_must_answer_at_once(
    pair: Pair, head: bytes,
) -> None:
    server, client = pair
    started: list[tuple[float, bytes, bool]] = []
    dormant: set[DormantConnection] = set()
    DormantConnection(server, ("127.0.0.1", 1), 5.0, lambda *a: started.append(a), dormant)
    client.sendall(head)
    gevent.sleep(0.05)
    assert [h for _, h, _ in started] == [head] and not dormant


def test_a_reader_starts_with_the_head_a_dormant_connection_read(pair: Pair) -> None:
    server, client = pair
    accepted = time.monotonic() - 0.2
    reader = _RequestReader(server, 0.3, 5.0, ("127.0.0.1", 1), accepted, b"GET / HTTP/1.1\r\n")
    assert reader.recv(8192) == b"GET / HTTP/1.1\r\n"
    assert not reader.waiting
    with pytest.raises(ClientReadTimeout):  # the first request's deadline counts from the accept
        reader.recv(8192)
    assert time.monotonic() - accepted < 0.3 + 2 * greenreads.SWEEP + 0.3


def _waits_for(method: bytes, target: bytes, length: int) -> bool:
    """A stand-in for routes.body_first: POSTs to /hooks/ wait for their body."""
    return method == b"POST" and target.startswith(b"/hooks/")


PUSH_HEAD = b"POST /hooks/a HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n\r\n"


def test_a_dormant_connection_holds_a_body_answered_after_it_until_it_has_come(pair: Pair) -> None:
    server, client = pair
    started: list[tuple[float, bytes, bool]] = []
    dormant: set[DormantConnection] = set()
    DormantConnection(server, ("127.0.0.1", 1), 5.0, lambda *a: started.append(a), dormant, _waits_for)
    client.sendall(PUSH_HEAD + b"01\n34")  # a body's LF is not a bare LF of the head
    gevent.sleep(0.05)
    assert not started and dormant  # the head is whole, half of the body has come
    for byte in b"5678":
        client.sendall(bytes([byte]))
        gevent.sleep(0.01)
    assert not started
    client.sendall(b"9")
    gevent.sleep(0.05)
    assert [h for _, h, _ in started] == [PUSH_HEAD + b"01\n3456789"] and not dormant


@pytest.mark.parametrize(
    "head",
    [
        PUSH_HEAD.replace(b"POST", b"PUT"),  # body_first says no
        PUSH_HEAD.replace(b"Content-Length: 10", b"Content-Length: 0"),
        PUSH_HEAD.replace(b"Content-Length: 10", b"Content-Length: +10"),  # the parser refuses it
        PUSH_HEAD.replace(b"Content-Length: 10", b"Content-Length: 10\r\nContent-Length: 10"),
        PUSH_HEAD.replace(b"Content-Length: 10", b"Transfer-Encoding: chunked"),
        PUSH_HEAD.replace(b"Host: x", b"Host: x\r\nExpect: 100-continue"),  # answered 100 before the body
        PUSH_HEAD.replace(b"Host: x\r\n", b""),
        PUSH_HEAD.replace(b"Host: x", b"Host: x y"),
        PUSH_HEAD.replace(b"Content-Type:", b"Content-Type :"),  # a head the parser refuses
        PUSH_HEAD.replace(b"text/plain", b"text/\x01plain"),
    ],
)
def test_a_dormant_connection_hands_over_a_head_whose_body_it_does_not_hold(pair: Pair, head: bytes) -> None:
    server, client = pair
    started: list[tuple[float, bytes, bool]] = []
    dormant: set[DormantConnection] = set()
    DormantConnection(server, ("127.0.0.1", 1), 5.0, lambda *a: started.append(a), dormant, _waits_for)
    client.sendall(head + b"01")
    gevent.sleep(0.05)
    assert [h for _, h, _ in started] == [head + b"01"] and not dormant


def test_a_dormant_body_is_held_up_to_its_bound(pair: Pair) -> None:
    server, client = pair
    started: list[tuple[float, bytes, bool]] = []
    head = PUSH_HEAD.replace(b"Length: 10", b"Length: 1000000")
    DormantConnection(server, ("127.0.0.1", 1), 5.0, lambda *a: started.append(a), set(), _waits_for)
    client.sendall(head + b"a" * (greenreads.DORMANT_BODY_BYTES - 1))
    gevent.sleep(0.05)
    assert not started
    client.sendall(b"bc")
    gevent.sleep(0.05)
    assert len(started) == 1 and len(started[0][1]) >= len(head) + greenreads.DORMANT_BODY_BYTES


@pytest.mark.parametrize("stop", ["deadline", "end", "stopping"])
def test_a_body_part_way_starts_its_greenlet_at_the_deadline_the_end_or_a_stop(pair: Pair, stop: str) -> None:
    server, client = pair
    started: list[tuple[float, bytes, bool]] = []
    dormant: set[DormantConnection] = set()
    connection = DormantConnection(
        server, ("127.0.0.1", 1), 0.2 if stop == "deadline" else 5.0, lambda *a: started.append(a), dormant,
        _waits_for,
    )
    client.sendall(PUSH_HEAD + b"012")
    gevent.sleep(0.05)
    assert not started
    if stop == "end":
        client.shutdown(2)
    elif stop == "stopping":
        connection.close()
    gevent.sleep(0.2 + 2 * greenreads.SWEEP + 0.1)
    # Not closed quietly as a head part-way would be: the reader meets the deadline or the end itself.
    assert [h for _, h, _ in started] == [PUSH_HEAD + b"012"] and not dormant
    assert [gone for _, _, gone in started] == [stop == "end"]  # only at the end has its client gone


def test_share_loop_lets_the_others_run_and_comes_back_while_they_stay_busy() -> None:
    """Between two requests of a pipelining client, the loop serves the others once; it does not wait for
    them all to be done (an idle watcher would, and a flood of new connections is never done)."""
    ran: list[int] = []
    stop = False

    def busy() -> None:
        while not stop:
            ran.append(1)
            gevent.sleep(0)  # always something ready to run

    hog = gevent.spawn(busy)
    gevent.sleep(0.01)
    try:
        greenreads._slice_started = time.monotonic() - greenreads.SLICE  # this slice is used up
        before = len(ran)
        sharing = gevent.spawn(greenreads.share_loop)
        sharing.join(timeout=2)
        assert sharing.dead, "share_loop waited for the busy greenlet to finish"
        assert len(ran) > before  # the others had their turn
    finally:
        stop = True
        hog.join(1)
