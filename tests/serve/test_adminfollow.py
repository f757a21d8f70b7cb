"""Followers of a run's output on a real admin listener (AdminConnections, the app, FollowApp): Server-Sent
Events from the first byte kept to the end event; many followers on one thread; one that stops reading is
dropped and the others get everything; a run already ended, an unknown one, the token; runs that end
without an event of their own."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from sse_support import sse_events, sse_output

from hookrunner.config import Config
from hookrunner.serve.admin import api_record, create_admin_app
from hookrunner.serve.adminconns import AdminConnections
from hookrunner.serve.adminfollow import FollowApp, Followers, frame, output_frame
from hookrunner.state.historystore import HistoryStore


def wait_until(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


@dataclass
class Listener:
    port: int
    store: HistoryStore
    followers: Followers

    def apply(self, event: dict[str, Any]) -> None:
        """What the feed does with a worker's event."""
        self.store.apply(event)
        self.followers.publish(event)

    def start_run(self, key: str, rid: str) -> None:
        self.apply({"event": "run", "key": key, "id": rid, "hook": "h", "accepted_at": time.time(),
                    "outcome": "running", "started_at": time.time(), "pid": 1})

    def output(self, key: str, offset: int, data: bytes) -> None:
        self.apply({"event": "output", "key": key, "offset": offset, "size": offset + len(data),
                    "output": base64.b64encode(data).decode()})

    def end(self, key: str, whole: bytes, outcome: str = "ok") -> None:
        tail = whole[-self.store.output_limit:]
        self.apply({"event": "run", "key": key, "outcome": outcome, "ended_at": time.time(), "exit_code": 0,
                    "output": base64.b64encode(tail).decode(), "output_size": len(whole),
                    "output_truncated": len(tail) < len(whole)})


@contextmanager
def serve(token: bytes | None = None, stall: float = 30.0, buffer: int = 1 << 20,
          output_limit: int = 1 << 20) -> Iterator[Listener]:
    store = HistoryStore(output_limit=output_limit)
    followers = Followers(store, api_record, stall, buffer)
    app = create_admin_app(store, token, Config(), followers)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    server = AdminConnections(sock, FollowApp(app, followers), 30.0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Listener(sock.getsockname()[1], store, followers)
    finally:
        server.stop()
        followers.stop()
        thread.join(10)
        sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    with serve() as served:
        yield served


@dataclass
class Stream:
    """One follower's connection, read on a thread of its own until the listener closes it."""

    sock: socket.socket
    received: bytearray = field(default_factory=bytearray)
    closed: threading.Event = field(default_factory=threading.Event)

    def read_all(self) -> None:
        try:
            while chunk := self.sock.recv(65536):
                self.received += chunk
        except OSError:
            pass
        self.closed.set()

    @property
    def head(self) -> bytes:
        return bytes(self.received).partition(b"\r\n\r\n")[0]

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        return sse_events(bytes(self.received))

    def output(self) -> bytes:
        return sse_output(self.events())


OPENED: list[socket.socket] = []


@pytest.fixture(autouse=True)
def close_clients() -> Iterator[None]:
    yield
    while OPENED:
        OPENED.pop().close()


def follow(port: int, path: str, token: str = "", read: bool = True, rcvbuf: int = 0) -> Stream:
    sock = socket.socket()
    OPENED.append(sock)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode())
    stream = Stream(sock)
    if read:
        threading.Thread(target=stream.read_all, daemon=True).start()
    return stream


def get(port: int, path: str) -> tuple[int, bytes]:
    stream = follow(port, path)
    assert stream.closed.wait(10)
    status = int(stream.received.split(b" ", 2)[1])
    return status, bytes(stream.received).partition(b"\r\n\r\n")[2]


def test_frames_are_one_line_of_json_each() -> None:
    assert frame("end", {"a": "x\ny\r\u2028é"}) == 'event: end\ndata: {"a":"x\\ny\\r\u2028é"}\n\n'.encode()
    text = output_frame(3, b"\xffok\n", 7).decode()
    assert text.startswith("event: output\ndata: ") and text.count("\n") == 3
    assert json.loads(text.split("data: ")[1]) == {"offset": 3, "size": 7, "output": "\ufffdok\n",
                                                    "output_base64": "/29rCg=="}
    # UTF-8 (a character whole) needs no base64; one cut between two events does.
    assert json.loads(output_frame(0, "é\n".encode(), 3).decode().split("data: ")[1]) == {
        "offset": 0, "size": 3, "output": "é\n"}
    assert "output_base64" in output_frame(0, "é".encode()[:1], 1).decode()


def test_fifty_followers_get_everything_then_the_outcome_on_one_thread(listener: Listener) -> None:
    listener.start_run("k", "r1")
    listener.output("k", 0, b"before anyone followed\n")
    threads = threading.active_count()
    streams = [follow(listener.port, "/api/v1/runs/r1/output?follow=1") for _ in range(50)]
    assert wait_until(lambda: all(b"before anyone followed" in s.received for s in streams))
    whole = bytearray(b"before anyone followed\n")
    for n in range(40):
        data = f"line {n} <b>x</b>\n".encode() * 50
        listener.output("k", len(whole), data)
        whole += data
        time.sleep(0.005)
    listener.end("k", bytes(whole))
    assert all(s.closed.wait(10) for s in streams)
    # The admin listener's threads: its pool and one writer; the readers' own threads are the test's.
    assert threading.active_count() - threads <= 50 + 8 + 1
    for stream in streams:
        assert stream.head.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"Content-Type: text/event-stream; charset=utf-8" in stream.head
        assert b"Content-Security-Policy: default-src 'self'" in stream.head
        assert b"Content-Length" not in stream.head and b"Connection: close" in stream.head
        assert stream.output() == bytes(whole)
        name, record = stream.events()[-1]
        assert name == "end" and record["outcome"] == "ok" and record["id"] == "r1"
        assert "output" not in record and "key" not in record and record["output_size"] == len(whole)
    assert listener.followers.dropped == 0


def test_a_follower_that_stops_reading_is_dropped_and_the_others_get_everything() -> None:
    with serve(buffer=256 << 10) as listener:
        listener.start_run("k", "r")
        slow = follow(listener.port, "/api/v1/runs/r/output?follow=1", read=False, rcvbuf=4096)
        fast = [follow(listener.port, "/api/v1/runs/r/output?follow=1") for _ in range(5)]
        assert wait_until(lambda: all(s.received for s in fast))
        whole = bytearray()
        for n in range(120):
            data = bytes([65 + n % 26]) * 16384
            listener.output("k", len(whole), data)
            whole += data
            time.sleep(0.025)  # 640 KiB/s: ten batches of 64 KiB a second, the most a run sends
        assert wait_until(lambda: listener.followers.dropped == 1)
        listener.end("k", bytes(whole))
        assert all(s.closed.wait(10) for s in fast)
        for stream in fast:
            assert stream.output() == bytes(whole) and stream.events()[-1][0] == "end"
        slow.read_all()  # what it had in its buffers, then the close: no end event
        assert slow.closed.is_set() and len(slow.received) < len(whole)
        assert b"event: end" not in slow.received


def test_a_stalled_follower_is_dropped_after_the_stall_time() -> None:
    with serve(stall=0.5) as listener:
        listener.start_run("k", "r")
        slow = follow(listener.port, "/api/v1/runs/r/output?follow=1", read=False, rcvbuf=4096)
        assert wait_until(lambda: listener.followers.attached == 1)
        listener.output("k", 0, b"x" * (300 << 10))  # more than its socket's buffers take, less than its queue
        started = time.monotonic()
        assert wait_until(lambda: listener.followers.dropped == 1, timeout=5)
        assert 0.4 < time.monotonic() - started < 3.0
        assert wait_until(lambda: not listener.followers.attached)
        slow.sock.close()


def test_a_run_already_ended_gets_what_is_kept_and_its_outcome_at_once(listener: Listener) -> None:
    listener.start_run("k", "done")
    listener.end("k", b"all of it\n", outcome="failed")
    stream = follow(listener.port, "/api/v1/runs/done/output?follow=1")
    assert stream.closed.wait(5)
    assert stream.output() == b"all of it\n"
    assert [name for name, _ in stream.events()] == ["output", "end"]
    assert stream.events()[-1][1]["outcome"] == "failed"


def test_unknown_runs_and_the_api_without_follow(listener: Listener) -> None:
    status, body = get(listener.port, "/api/v1/runs/nope/output?follow=1")
    assert (status, json.loads(body)) == (404, {"error": "no run nope in the history"})
    listener.start_run("k", "r")
    status, body = get(listener.port, "/api/v1/runs/r/output")  # without follow: as before, an id with a slash
    assert (status, json.loads(body)) == (404, {"error": "no run r/output in the history"})
    listener.start_run("k2", "x/output")
    status, body = get(listener.port, "/api/v1/runs/x/output")
    assert status == 200 and json.loads(body)["id"] == "x/output"
    status, body = get(listener.port, "/api/v1/runs/r")
    assert status == 200 and json.loads(body)["outcome"] == "running"


def test_the_token_is_needed_to_follow() -> None:
    with serve(token=b"s3cret") as listener:
        listener.start_run("k", "r")
        listener.end("k", b"out")
        status, body = get(listener.port, "/api/v1/runs/r/output?follow=1")
        assert status == 401 and b"Bearer" in body
        stream = follow(listener.port, "/api/v1/runs/r/output?follow=1", token="wrong")
        assert stream.closed.wait(5) and stream.received.startswith(b"HTTP/1.1 401 ")
        stream = follow(listener.port, "/api/v1/runs/r/output?follow=1", token="s3cret")
        assert stream.closed.wait(5) and stream.output() == b"out"


def test_a_run_ended_without_an_event_ends_its_followers(listener: Listener) -> None:
    listener.start_run("k", "r")
    stream = follow(listener.port, "/api/v1/runs/r/output?follow=1")
    assert wait_until(lambda: b"event: output" in stream.received)
    listener.store.worker_gone(1)  # the worker died: the store cancels its runs, no event comes
    assert stream.closed.wait(5)
    assert stream.events()[-1][0] == "end" and stream.events()[-1][1]["outcome"] == "cancelled"


def test_a_follower_that_goes_away_is_closed_and_others_are_answered_meanwhile(listener: Listener) -> None:
    listener.start_run("k", "r")
    streams = [follow(listener.port, "/api/v1/runs/r/output?follow=1") for _ in range(200)]
    assert wait_until(lambda: listener.followers.attached == 200)
    started = time.monotonic()
    for _ in range(20):
        status, _ = get(listener.port, "/api/v1/runs")
        assert status == 200
    assert time.monotonic() - started < 5.0  # the pool is not held by the 200 followers
    for stream in streams[:100]:
        stream.sock.shutdown(socket.SHUT_RDWR)
    assert wait_until(lambda: listener.followers.attached == 100)
    listener.end("k", b"")
    assert all(s.closed.wait(10) for s in streams[100:])
    assert listener.followers.dropped == 0


def test_one_event_larger_than_the_queue_still_goes_out() -> None:
    """-history-output above the follower's queue: the kept output is one event, and it is sent whole."""
    with serve(buffer=64 << 10, output_limit=1 << 20) as listener:
        listener.start_run("k", "big")
        listener.end("k", b"y" * (500 << 10))
        stream = follow(listener.port, "/api/v1/runs/big/output?follow=1")
        assert stream.closed.wait(10)
        assert stream.output() == b"y" * (500 << 10) and stream.events()[-1][0] == "end"
        assert listener.followers.dropped == 0


def test_an_idle_stream_gets_a_comment_now_and_then(monkeypatch: pytest.MonkeyPatch) -> None:
    from hookrunner.serve import adminfollow

    monkeypatch.setattr(adminfollow, "HEARTBEAT", 0.3)
    with serve() as listener:
        listener.start_run("k", "quiet")
        stream = follow(listener.port, "/api/v1/runs/quiet/output?follow=1")
        assert wait_until(lambda: stream.received.count(b": keep-alive\n\n") >= 2, timeout=5)
        assert [name for name, _ in stream.events()] == ["output"]  # comments are no events
        listener.end("k", b"")
        assert stream.closed.wait(5) and stream.events()[-1][0] == "end"
