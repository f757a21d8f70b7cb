"""Hostile input against the real `hookrunner`: deeply nested payloads and broken chunked bodies.

Each test checks the answer, that no Python detail reached the client, and that the server still serves
its hooks afterwards. Where the reference is installed, the same bytes go to it too and the answers are
compared.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from integration_harness import REFERENCE_BINARY, reference_available
from test_serving import Server, free_port, wait_until

# Answers must never carry interpreter or framework detail.
LEAK = re.compile(rb"Traceback|File \"|Error:|Exception|werkzeug|<!doctype|RecursionError")

HOOKS = [
    {
        "id": "echo-payload",
        "execute-command": "/bin/echo",
        "include-command-output-in-response": True,
        "pass-arguments-to-command": [{"source": "entire-payload"}],
    },
    {
        "id": "xml-payload",
        "execute-command": "/bin/echo",
        "incoming-payload-content-type": "application/xml",
        "include-command-output-in-response": True,
        "pass-arguments-to-command": [{"source": "entire-payload"}],
    },
    {
        "id": "form",
        "execute-command": "/bin/echo",
        "include-command-output-in-response": True,
        "pass-arguments-to-command": [{"source": "payload", "name": "a"}, {"source": "url", "name": "q"}],
    },
]


def exchange(port: int, data: bytes, half_close: bool = True) -> bytes:
    """Send raw bytes, then read until the server closes (bounded by a 10 s timeout)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


def post(path: str, content_type: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def dechunk(data: bytes) -> bytes:
    out = b""
    while True:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return out
        out, data = out + data[:size], data[size + 2 :]


def answer_body(raw: bytes) -> tuple[bytes, bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    if b"Transfer-Encoding: chunked" in head:
        body = dechunk(body)
    return head, body


def still_serving(port: int) -> None:
    assert exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").endswith(b"\r\n\r\nOK")
    raw = exchange(port, post("/hooks/form?q=1", "application/x-www-form-urlencoded", b"a=z"))
    assert raw.startswith(b"HTTP/1.1 200 OK\r\n") and raw.endswith(b"\r\n\r\nz 1\n"), raw


@pytest.fixture
def hookrunner(tmp_path: Path) -> Iterator[Server]:
    server = Server(tmp_path, HOOKS)
    try:
        server.ready()
        yield server
    finally:
        server.stop(timeout=15)


@pytest.fixture
def reference(tmp_path: Path) -> Iterator[int | None]:
    if not reference_available():
        yield None
        return
    hooks = tmp_path / "ref-hooks.json"
    hooks.write_text(json.dumps(HOOKS))
    port = free_port()
    argv = [str(REFERENCE_BINARY), "-hooks", str(hooks), "-ip", "127.0.0.1", "-port", str(port), "-verbose"]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def up() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    try:
        assert wait_until(up, timeout=10)
        yield port
    finally:
        process.kill()
        process.wait(timeout=10)


@pytest.mark.parametrize("depth", [1500, 9999])
def test_deeply_nested_json_payload_is_passed_on(hookrunner: Server, depth: int) -> None:
    # Go decodes JSON nested up to 10000 levels, and encodes it again for entire-payload; a recursive
    # encoder failed from about 1000 levels on with a 500 and `maximum recursion depth exceeded`.
    value = b"[" * depth + b"]" * depth
    raw = exchange(hookrunner.port, post("/hooks/echo-payload", "application/json", b'{"a":' + value + b"}"))
    head, body = answer_body(raw)
    assert head.startswith(b"HTTP/1.1 200 OK"), head
    assert body == b'{"a":' + value + b"}\n"
    assert "recursion" not in hookrunner.log
    still_serving(hookrunner.port)


def test_deeply_nested_xml_payload_is_passed_on(hookrunner: Server) -> None:
    depth = 5000  # XML has no nesting limit in Go
    raw = exchange(hookrunner.port, post("/hooks/xml-payload", "text/plain", b"<a>" * depth + b"</a>" * depth))
    head, body = answer_body(raw)
    assert head.startswith(b"HTTP/1.1 200 OK"), head
    assert body == b'{"a":' * depth + b'""' + b"}" * depth + b"\n"
    still_serving(hookrunner.port)


CHUNKED = (
    b"POST /hooks/form?q=1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
    b"Content-Type: application/x-www-form-urlencoded\r\n\r\n"
)

# (chunked body, what the hook receives as `a`, the log line); each as webhook 2.8.0 handles it.
BROKEN_CHUNKED = {
    "bad-size": (b"zz\r\nabc\r\n0\r\n\r\n", b"", "invalid byte in chunk length"),
    "cut-short": (b"3\r\na=1\r\n3\r\n&b=", b"1", "unexpected EOF"),
    "no-crlf": (b"3\r\na=1XX0\r\n\r\n", b"1", "malformed chunked encoding"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_CHUNKED))
def test_broken_chunked_body_is_handled_like_webhook(
    hookrunner: Server, reference: int | None, case: str
) -> None:
    # A body that cannot be read was a bare 500 (bad chunk size) or werkzeug's HTML 400 page (cut short);
    # webhook logs the error, runs the hook with what arrived, and closes the connection.
    chunks, a_value, error = BROKEN_CHUNKED[case]
    # A pipelined request after the broken body must not be answered: the connection is closed. (A body
    # cut short ends where the client stopped sending.)
    data = CHUNKED + chunks + (b"" if case == "cut-short" else b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    raw = exchange(hookrunner.port, data)
    assert not LEAK.search(raw), raw
    head, body = answer_body(raw)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n"), raw
    assert b"\r\nConnection: close" in head
    assert body == a_value + b" 1\n"
    assert hookrunner.wait_for_log(f"error reading the request body: {error}")
    if reference is not None:
        ref_head, ref_body = answer_body(exchange(reference, data))
        assert (ref_body, b"\r\nConnection: close" in ref_head) == (body, True)
    still_serving(hookrunner.port)


def test_client_gone_mid_chunk_leaves_the_server_serving(hookrunner: Server) -> None:
    with socket.create_connection(("127.0.0.1", hookrunner.port), timeout=10) as sock:
        sock.sendall(CHUNKED + b"100\r\nabc")
    assert hookrunner.wait_for_log("error reading the request body: unexpected EOF")
    still_serving(hookrunner.port)
    assert "Traceback" not in hookrunner.log, hookrunner.log


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        # curl sends `?q=é` unescaped; Go takes the bytes as they are (gunicorn answered 400).
        (b"/hooks/form?q=\xc3\xa9", b"HTTP/1.1 200 OK"),
        (b"/hooks/form?q=\xff%ff", b"HTTP/1.1 200 OK"),
        (b"/hooks/\xc3\xa9", b"HTTP/1.1 404 Not Found"),
        (b"/hooks/form?q=\x01", b"HTTP/1.1 400 Bad Request"),  # controls stay refused
        (b"/hooks/form?q=\x7f", b"HTTP/1.1 400 Bad Request"),
    ],
)
def test_raw_non_ascii_request_target_is_taken_as_go_does(
    hookrunner: Server, reference: int | None, target: bytes, expected: bytes
) -> None:
    data = b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    head, body = answer_body(exchange(hookrunner.port, data))
    assert head.startswith(expected + b"\r\n"), head
    if expected.endswith(b"200 OK"):
        assert body == b" " + target.split(b"=", 1)[1].replace(b"%ff", b"\xff") + b"\n"
    if reference is not None:
        ref_head, ref_body = answer_body(exchange(reference, data))
        assert (ref_head.split(b"\r\n", 1)[0], ref_body) == (head.split(b"\r\n", 1)[0], body)
    still_serving(hookrunner.port)
