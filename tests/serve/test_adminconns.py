"""The admin listener's connections: heads read by one selector thread, requests answered on a bounded pool,
heads that never end cut off at -read-timeout, oversized heads refused without a thread, refusals counted
in the log rather than written one line each."""

from __future__ import annotations

import io
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hookrunner.serve.adminconns import HANDLER_THREADS, HEAD_BYTES, AdminConnections, Refusals


def wait_until(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    body = f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']}".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def serve(read_timeout: float) -> Iterator[tuple[int, AdminConnections]]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    server = AdminConnections(listener, app, read_timeout)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], server
    finally:
        server.stop()
        thread.join(10)
        listener.close()


@pytest.fixture
def admin() -> Iterator[tuple[int, AdminConnections]]:
    yield from serve(read_timeout=30.0)


def exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


def test_a_request_is_answered_once_its_head_is_whole(admin: tuple[int, AdminConnections]) -> None:
    port, _ = admin
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        for piece in (b"GET /api/v1/ho", b"oks HTTP/1.1\r\nHost: x\r\n", b"\r\n"):
            sock.sendall(piece)
            time.sleep(0.05)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"GET /api/v1/hooks")
    assert b"Server: hookrunner-admin\r\n" in answer and b"Connection: close\r\n" in answer


def test_idle_and_slowloris_connections_take_no_thread(admin: tuple[int, AdminConnections]) -> None:
    """300 connections that never finish a head: the process has no more threads than the pool's, and a
    request is answered meanwhile (a thread per connection had 300 more threads)."""
    port, _ = admin
    before = threading.active_count()
    held = []
    try:
        for n in range(300):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            if n % 2:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-a: ")
            held.append(sock)
        for _ in range(5):
            assert exchange(port, b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n").endswith(b"GET /x")
        for sock in held[1::2]:
            sock.sendall(b"a")
        assert exchange(port, b"GET /y HTTP/1.1\r\nHost: x\r\n\r\n").endswith(b"GET /y")
        assert threading.active_count() <= before + HANDLER_THREADS
    finally:
        for sock in held:
            sock.close()


@pytest.mark.parametrize(
    ("head", "status"),
    [(b"GET /" + b"a" * (HEAD_BYTES + 10) + b" HTTP/1.1\r\n\r\n", b"414 Request-URI Too Long"),
     (b"GET / HTTP/1.1\r\nX-Big: " + b"a" * (HEAD_BYTES + 10) + b"\r\n\r\n", b"431 Request Header Fields Too Large")],
)
def test_a_head_over_the_limit_is_refused_and_counted(
    admin: tuple[int, AdminConnections], log_lines: io.StringIO, head: bytes, status: bytes
) -> None:
    port, _ = admin
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(head)
        except OSError:
            pass  # refused before the client had sent it all
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 " + status + b"\r\n") and answer.endswith(status)
    assert wait_until(lambda: "admin listener: refused a request (code" in log_lines.getvalue())


def test_refusals_after_the_first_are_one_line_per_interval(log_lines: io.StringIO) -> None:
    refusals = Refusals(every=60.0)
    refusals.note("code 414, message Request-URI Too Long")
    assert log_lines.getvalue().count("\n") == 1
    for _ in range(500):
        refusals.note("code 400, message Bad request syntax")
    assert log_lines.getvalue().count("\n") == 1  # within the interval: counted, not written
    due = refusals.due()
    assert due is not None
    refusals.flush(due)
    lines = log_lines.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[1].endswith("admin listener: refused 500 requests in the last 60s "
                             "(the last: code 400, message Bad request syntax)")
    assert refusals.due() is None


def test_the_handlers_own_refusals_are_counted(
    admin: tuple[int, AdminConnections], log_lines: io.StringIO
) -> None:
    port, _ = admin
    for _ in range(20):
        assert b"505 - Cannot fulfill request" in exchange(port, b"GET / HTTP/9.9\r\n\r\n")
    assert wait_until(lambda: "refused a request" in log_lines.getvalue())
    assert log_lines.getvalue().count("\n") == 1, log_lines.getvalue()


def test_a_head_not_whole_within_read_timeout_is_closed_silently(log_lines: io.StringIO) -> None:
    for port, _ in serve(read_timeout=0.5):
        idle = socket.create_connection(("127.0.0.1", port), timeout=10)
        trickle = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            began = time.monotonic()
            trickle.sendall(b"GET / HTTP/1.1\r\n")
            for _ in range(20):  # a byte every 0.1 s: no single read waits 0.5 s
                time.sleep(0.1)
                try:
                    trickle.sendall(b"a")
                except OSError:
                    break
            for sock in (idle, trickle):
                assert sock.recv(100) == b""
            assert time.monotonic() - began < 10
        finally:
            idle.close()
            trickle.close()
    assert log_lines.getvalue() == ""


_OUT_OF_DESCRIPTORS = """
import resource, socket, threading, time
from hookrunner.serve.adminconns import AdminConnections

def app(environ, start_response):
    start_response("200 OK", [("Content-Length", "2")])
    return [b"ok"]

resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(64)
server = AdminConnections(listener, app, 30.0)
threading.Thread(target=server.serve_forever, daemon=True).start()
held = []
try:
    while True:
        held.append(socket.create_connection(listener.getsockname(), timeout=5))
except OSError:
    pass
time.sleep(1.5)
errors = server.accept_errors
for sock in held:
    sock.close()
with socket.create_connection(listener.getsockname(), timeout=5) as sock:
    sock.sendall(b"GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
    answer = b""
    while chunk := sock.recv(4096):
        answer += chunk
print(errors, answer.split(b"\\r\\n", 1)[0].decode())
"""


def test_out_of_descriptors_the_listener_rests_instead_of_spinning() -> None:
    """At the descriptor limit every accept fails while the backlog keeps the listener readable: without a
    rest between tries the selector spins (thousands of failed accepts a second); with net/http's 5 ms
    doubled up to 1 s, a handful. A request is answered once descriptors are free again."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _OUT_OF_DESCRIPTORS], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    errors, status = done.stdout.split(" ", 1)
    assert 1 <= int(errors) <= 30, done.stdout
    assert status.strip() == "HTTP/1.1 200 OK"
