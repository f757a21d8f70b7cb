"""The gevent worker's pieces on a real event loop: the wait for a command's output, and the reader's
three states (waiting for a request, reading it under -read-timeout, draining its body)."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import time
import weakref
from concurrent.futures import Future
from types import SimpleNamespace

import gevent
import gevent.pool
import gevent.socket
import pytest

from hookrunner.serve import greenworker
from hookrunner.serve.greenworker import accept_error_text, go_ms, parse_on, wait_for_run, write


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
    assert len(ticks) >= 3


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


class _Partial(list):  # what a parse built before it failed (a list cannot be weakly referenced)
    pass


def test_a_failed_parse_on_a_parser_thread_is_raised_and_freed_at_once() -> None:
    """A parse's error is raised in the greenlet that waited for it; once handled, nothing of the parse is
    left for the cyclic collector (a cycle through the raising frame kept a 4 MiB body and its partial parse
    on the gevent worker, whose collector runs seldom)."""
    import gevent.threadpool

    parsers = gevent.threadpool.ThreadPool(1)
    built: list[weakref.ref[_Partial]] = []

    def fail() -> None:
        partial = _Partial([[0]] * 100)
        built.append(weakref.ref(partial))
        raise ValueError("invalid character")

    thresholds = gc.get_threshold()
    try:
        assert parse_on(parsers, lambda: "parsed") == "parsed"
        gc.collect()
        gc.set_threshold(10**9)  # no collection meanwhile (the parse itself pauses and resumes the collector)
        try:
            parse_on(parsers, fail)
        except ValueError as exc:
            assert str(exc) == "invalid character"
        else:
            raise AssertionError("the parse's error was not raised")
        gevent.sleep(0)  # the pool's result is let go by a callback on the loop
        assert built[0]() is None
    finally:
        gc.set_threshold(*thresholds)
        parsers.kill()


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


def test_a_failed_accept_is_logged_in_net_https_words() -> None:
    import errno
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        text = accept_error_text(listener, OSError(errno.EMFILE, "Too many open files"))
    assert text == f"accept tcp 127.0.0.1:{port}: accept4: too many open files"
    assert [go_ms(d) for d in (0.005, 0.01, 0.64, 1.0)] == ["5ms", "10ms", "640ms", "1s"]


def test_dismantle_empties_a_parsed_request_and_every_big_container_in_it() -> None:
    small = [{"b": [1, 2]}, [3], []]  # few objects in all: freed with their step, not walked
    big = list(range(2 * greenworker.DISMANTLE_BUDGET))  # more than a step may free: emptied step by step
    scalars = list(range(3 * greenworker.DISMANTLE_STEP))
    # Taken from the end: a step holding `big`, two of scalars only, the small containers with a scalar.
    payload = {"a": [*small, *scalars, [big]], "c": {"d": [4]}}
    req = SimpleNamespace(payload=payload)
    parsed: list[object] = [req]
    greenworker._dismantle(parsed)
    assert parsed == [] and req.payload is None
    assert payload == {} and big == []
    assert small == [{"b": [1, 2]}, [3], []]


def test_held_apart_counts_what_containers_hold_all_the_way_down() -> None:
    held_apart = greenworker._held_apart
    assert held_apart(["a", "", None, True, [], {}] * 1000, 10, 100) == []
    assert held_apart([[[1, 2]], {"k": [3]}], 5, 100) == []  # [1, 2] and [3], then 1, 2 and 3
    assert held_apart([[[1, 2]], {"k": [3]}], 4, 100) == [[[1, 2]], {"k": [3]}]
    deep = [[[[[list(range(100))]]]]]
    assert held_apart([deep, "x"], 50, 100) == [deep]
    assert held_apart([{"d": {"e": "x" * 10_000}}], 4, 100) == []  # a string is one object, however long


def test_held_apart_cuts_a_deep_step_where_its_depth_runs_out() -> None:
    """A step deeper than `depth` levels leaves what is `depth` levels down to later steps, and frees the
    levels above with it; the one-value levels of a chain are followed too (nested XML elements)."""
    held_apart = greenworker._held_apart
    bottom = {"a": "", "b": ""}
    chain: object = bottom
    for _ in range(10):
        chain = {"a": chain}
    assert held_apart([chain], 1000, 3) == [chain["a"]["a"]["a"]]  # type: ignore[index]
    assert held_apart([chain], 1000, 10) == [bottom]
    assert held_apart([chain], 1000, 11) == []
    wide = [[0, 1], [2, [3, [4, [5]]]]]
    assert held_apart([wide], 1000, 2) == [[3, [4, [5]]]]


_DEEP_CHAIN = """
import sys
from types import SimpleNamespace
from hookrunner.serve import greenworker

chain = ""
for _ in range(int(sys.argv[1])):
    chain = {"a": chain}
greenworker._dismantle([SimpleNamespace(payload=chain)])
assert chain == {}
"""


def test_dismantle_takes_apart_a_chain_of_many_nested_maps_level_by_level() -> None:
    """issue 34: a 25 MiB body of 3.7 million nested XML elements is a chain of as many one-key maps. Each
    level counted what it held `DISMANTLE_BUDGET` levels down again, so a chain of half a million was still
    being taken apart hours after the answer, holding the memory and the collector paused (about 0.05 s
    now for this one, in a process of its own so that a slow one can be stopped)."""
    depth = 8 * greenworker.DISMANTLE_BUDGET
    try:
        run = subprocess.run(
            [sys.executable, "-c", _DEEP_CHAIN, str(depth)], capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"a chain of {depth} maps was not taken apart within 60 s") from None
    assert run.returncode == 0, run.stderr


class _Client:
    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_connections_whose_client_has_gone_are_served_a_few_at_a_time_after_live_ones() -> None:
    """Thousands of held connections cut at once are each still served (a hook whose body was cut runs),
    but GONE_AT_ONCE at a time: a live client's connection gets its greenlet at once, not after them."""
    serving: list[str] = []
    most = 0
    order: list[str] = []

    def handle(client: _Client, peer: object, accepted: float, head: bytes) -> None:
        nonlocal most
        serving.append(client.name)
        most = max(most, sum(1 for name in serving if name.startswith("gone")))
        order.append(client.name)
        gevent.sleep(0.01)
        serving.remove(client.name)

    with gevent.socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        server = greenworker._Listener(listener, handle, gevent.pool.Pool(None))
        gone = [_Client(f"gone{i}") for i in range(5 * greenworker.GONE_AT_ONCE)]
        for client in gone:
            server._woken(client, None, 0.0, b"", True)
        assert server.waiting == len(gone) - greenworker.GONE_AT_ONCE
        live = _Client("live")
        server._woken(live, None, 0.0, b"POST /hooks/ping HTTP/1.1\r\n")
        deadline = time.monotonic() + 10
        while not all(c.closed for c in [*gone, live]) and time.monotonic() < deadline:
            gevent.sleep(0.01)
    assert most == greenworker.GONE_AT_ONCE
    assert sorted(order) == sorted(c.name for c in [*gone, live])
    assert order.index("live") <= greenworker.GONE_AT_ONCE  # among the first turns, not the last
    assert all(c.closed for c in [*gone, live]) and server.waiting == 0
