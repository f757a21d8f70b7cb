"""stream-command-output against the installed `hookrunner` (docs/compatibility.md, "Streamed output"; docs/
limits.md, "Streamed answers"): the output reaches the client while the command runs, soulteary/webhook's
answers when a run ends badly before its first byte, only a log line after it, and a client that stops
reading is cut off while the command runs on and others are served."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

from test_run_history import settle
from test_run_history import start as start_with_history
from test_serving import Server, python_hook

MSG_STREAM_ERROR = (
    b"Error occurred while executing the hook's stream command. Please check your logs for more details."
)
STREAM = {"stream-command-output": True}


def hooks() -> list[dict[str, object]]:
    return [
        python_hook(
            "two-lines",
            "import time; print('one', flush=True); time.sleep(1); print('two', flush=True)",
            **STREAM,
            **{"response-headers": [{"name": "X-Hook", "value": "h"}], "success-http-response-code": 201},
        ),
        python_hook(
            "both",  # soulteary: streaming wins over include-command-output-in-response
            "import time; print('a', flush=True); time.sleep(0.5); print('b', flush=True)",
            **STREAM,
            **{"include-command-output-in-response": True},
        ),
        {"id": "missing", "execute-command": "/nonexistent/stream-command", **STREAM},
        python_hook("fails-quietly", "import sys; sys.exit(3)", **STREAM),
        python_hook("quiet", "pass", **STREAM, **{"success-http-response-code": 201}),
        python_hook(
            "ruled",
            "print('never')",
            **STREAM,
            **{
                "trigger-rule": {
                    "match": {
                        "type": "value",
                        "value": "yes",
                        "parameter": {"source": "header", "name": "X-Token"},
                    }
                },
                "trigger-rule-mismatch-http-response-code": 403,
            },
        ),
        python_hook("late", "import time; time.sleep(30)", **STREAM, **{"command-timeout": "500ms"}),
        python_hook(
            "stops",
            "import time; print('begun', flush=True); time.sleep(30)",
            **STREAM,
            **{"command-timeout": "1s"},
        ),
        # 8 MB: more than the kernel's socket buffers hold for a client that reads nothing, then a pause.
        python_hook(
            "stall",
            "import sys, time; sys.stdout.buffer.write(b'x' * 8000000); sys.stdout.flush(); time.sleep(3);"
            " sys.stdout.buffer.write(b'END')",
            **STREAM,
        ),
        python_hook("flood", "import sys; sys.stdout.buffer.write(b'y' * 20000000 + b'END')", **STREAM),
        python_hook(
            "ticks",
            "import time\nfor n in range(20):\n    print(n, flush=True)\n    time.sleep(0.05)",
            **STREAM,
        ),
        python_hook("quick", "pass", **{"response-message": "ok"}),
    ]


def send(port: int, hook: str, headers: str = "", rcvbuf: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        f"POST /hooks/{hook} HTTP/1.1\r\nHost: x\r\n{headers}Content-Length: 0\r\nConnection: close\r\n\r\n".encode()
    )
    return sock


def read_timed(sock: socket.socket) -> list[tuple[float, bytes]]:
    """Everything the server sends until it closes, each piece with when it came."""
    pieces = []
    with sock:
        while True:
            data = sock.recv(65536)
            if not data:
                return pieces
            pieces.append((time.monotonic(), data))


def split(raw: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    return status, dict(line.split(": ", 1) for line in lines), body


def dechunk(body: bytes) -> tuple[bytes, bool]:
    """The body of a chunked answer, and whether it ended with the last chunk."""
    out = b""
    while body:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return out, body == b"\r\n"
        out += body[:size]
        body = body[size + 2 :]
    return out, False


def answer(port: int, hook: str, headers: str = "") -> tuple[str, dict[str, str], bytes]:
    return split(b"".join(data for _, data in read_timed(send(port, hook, headers))))


def test_output_reaches_the_client_before_the_command_ends(tmp_path: Path, servers: list[Server]) -> None:
    server = Server(tmp_path, hooks(), "-header", "X-Global=g")
    servers.append(server)
    server.ready()
    sent = time.monotonic()
    pieces = read_timed(send(server.port, "two-lines"))
    raw = b""
    first_line_at = None
    for at, data in pieces:
        raw += data
        if first_line_at is None and b"one" in raw:
            first_line_at = at
    ended_at = pieces[-1][0]
    status, head, body = split(raw)
    assert status == "HTTP/1.1 201 Created"
    # The handler's headers sorted, then the server's: Date, the type sniffed from the first write, chunked
    # (and `Connection: close`, asked for by the client).
    assert list(head) == ["X-Global", "X-Hook", "Date", "Content-Type", "Connection", "Transfer-Encoding"]
    assert (head["X-Hook"], head["Content-Type"], head["Transfer-Encoding"]) == (
        "h",
        "text/plain; charset=utf-8",
        "chunked",
    )
    assert dechunk(body) == (b"one\ntwo\n", True)
    # The first line came while the command slept its second, not with the end of the answer.
    assert first_line_at is not None, pieces
    assert ended_at - first_line_at > 0.5, [(at - sent, data) for at, data in pieces]

    # A line every 50 ms arrives as it is printed: pieces all along, not one block at the end.
    pieces = read_timed(send(server.port, "ticks"))
    assert dechunk(split(b"".join(data for _, data in pieces))[2]) == (
        "".join(f"{n}\n" for n in range(20)).encode(),
        True,
    )
    assert len(pieces) >= 10, pieces

    status, head, body = answer(server.port, "both")
    assert head.get("Transfer-Encoding") == "chunked" and dechunk(body) == (b"a\nb\n", True)


def test_a_run_that_ends_badly_before_any_output_gets_soulteary_s_answers(
    tmp_path: Path, servers: list[Server]
) -> None:
    server = Server(tmp_path, hooks(), "-header", "X-Global=g")
    servers.append(server)
    server.ready()
    for hook in ("missing", "fails-quietly"):
        status, head, body = answer(server.port, hook)
        assert (status, body) == ("HTTP/1.1 500 Internal Server Error", MSG_STREAM_ERROR), hook
        assert list(head) == ["Content-Type", "X-Global", "Date", "Content-Length", "Connection"], hook
        assert head["Content-Type"] == "text/plain; charset=utf-8"
    status, head, body = answer(server.port, "late")
    assert (status, body) == (
        "HTTP/1.1 408 Request Timeout",
        b"Hook execution timeout. Please check your logs for more details.",
    )
    # The rules and the configured codes work as in the other modes.
    status, head, body = answer(server.port, "ruled")
    assert (status, body) == ("HTTP/1.1 403 Forbidden", b"Hook rules were not satisfied.")
    status, head, body = answer(server.port, "ruled", "X-Token: yes\r\n")
    assert (status, head["Transfer-Encoding"], dechunk(body)) == (
        "HTTP/1.1 200 OK",
        "chunked",
        (b"never\n", True),
    )
    status, head, body = answer(server.port, "quiet")
    assert (status, head.get("Content-Length"), body) == ("HTTP/1.1 201 Created", "0", b"")
    assert "Content-Type" not in head
    assert "missing: the command ended before any output" in server.log


def test_a_timeout_after_the_first_byte_ends_the_stream_and_is_logged(
    tmp_path: Path, servers: list[Server]
) -> None:
    server = Server(tmp_path, hooks())
    servers.append(server)
    server.ready()
    status, head, body = answer(server.port, "stops")
    assert status == "HTTP/1.1 200 OK"
    assert dechunk(body) == (b"begun\n", True)  # ended as Go ends a handler's answer: nothing tells
    assert server.wait_for_log("stops: the command timed out after its output began"), server.log


def others_answered_meanwhile(server: Server, cut_line: str, interval: float = 0.05) -> int:
    """Requests to another hook answered while a streamed answer's client reads nothing, before it is cut.

    One every `interval` seconds at most: each starts a run of `quick`, answered before its command ends.
    Sent back to back they were hundreds (780 in the 3.5 s to the cut on gthread), whose runs loaded the
    machine for seconds after and whose records pushed the streamed run's out of the history's newest 500,
    where `settle` looks for it."""
    answered = 0
    next_at = time.monotonic()
    while cut_line not in server.log:
        time.sleep(max(0.0, next_at - time.monotonic()))
        next_at = time.monotonic() + interval
        status, _, body = server.request("POST", "/hooks/quick")
        assert (status, body) == (200, b"ok")
        answered += 1
    return answered


def test_a_client_that_stops_reading_is_cut_off_and_its_command_runs_on(
    tmp_path: Path, servers: list[Server]
) -> None:
    server, admin = start_with_history(
        tmp_path, servers, hooks(), "-stream-buffer", "64MiB", "-stream-write-timeout", "2s"
    )
    stalled = send(server.port, "stall", "X-Request-Id: stall-1\r\n", rcvbuf=4096)
    try:
        answered = others_answered_meanwhile(server, "stall: the client took nothing of the answer for 2s")
        assert answered >= 5, answered  # served throughout the 2 s the stalled client was held
        # Cut off before the command's pause was over, and the connection is closed under the client.
        assert "finished handling stall" not in server.log
        received = b""
        stalled.settimeout(10)
        while data := stalled.recv(1 << 20):
            received += data
        assert 0 < len(received) < 8000000 and not received.endswith(b"0\r\n\r\n")
    finally:
        stalled.close()
    # The command ran on to its end, and its whole output is in the run history.
    settle(admin, {"stall-1": ("immediate", "ok")})
    record = admin.json("/api/v1/runs/stall-1")
    assert record["output_size"] == 8000003 and record["output"].endswith("END")
    assert "Traceback" not in server.log and "Error handling request" not in server.log


def test_a_client_too_far_behind_is_cut_off_and_its_command_runs_on(
    tmp_path: Path, servers: list[Server]
) -> None:
    server, admin = start_with_history(tmp_path, servers, hooks())
    behind = send(server.port, "flood", "X-Request-Id: flood-1\r\n", rcvbuf=4096)
    try:
        assert server.wait_for_log("flood: the client fell 4194304 bytes behind"), server.log
        status, _, body = server.request("POST", "/hooks/quick")
        assert (status, body) == (200, b"ok")
    finally:
        behind.close()
    settle(admin, {"flood-1": ("immediate", "ok")})
    record = admin.json("/api/v1/runs/flood-1")
    assert record["output_size"] == 20000003 and record["output"].endswith("END")
    assert "Traceback" not in server.log and "Error handling request" not in server.log


def test_a_stop_that_ends_the_command_before_any_output_answers_cancelled(
    tmp_path: Path, servers: list[Server]
) -> None:
    sleepy = python_hook("sleepy", "import time; time.sleep(30)", **STREAM)
    server = Server(tmp_path, [sleepy], "-shutdown-timeout", "1s")
    servers.append(server)
    server.ready()
    waiting = send(server.port, "sleepy")
    assert server.wait_for_log("executing "), server.log
    server.signal(signal.SIGTERM)  # the command outlives -shutdown-timeout: it is ended, its run cancelled
    status, head, body = split(b"".join(data for _, data in read_timed(waiting)))
    assert (status, body) == (
        "HTTP/1.1 408 Request Timeout",
        b"Hook execution cancelled. Please check your logs for more details.",
    )
    assert head["Content-Type"] == "text/plain; charset=utf-8"
    server.stop()
