"""net/http's protocol answers, mapped from gunicorn's parse errors; Host checks."""

from __future__ import annotations

import ssl

import pytest
from gunicorn.http import errors as http_errors

from hookrunner.serve.protocol import go_header_block, go_host_problem, go_parse_error, go_plain_error


def test_plain_error_is_net_https_layout() -> None:
    assert go_plain_error(400, "Bad Request") == (
        b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
        b"400 Bad Request"
    )


@pytest.mark.parametrize(
    ("version", "method", "headers", "problem"),
    [
        ((1, 1), "GET", [], "missing required Host header"),
        ((1, 1), "CONNECT", [], ""),
        ((1, 0), "GET", [], ""),
        ((1, 1), "GET", [("HOST", "")], ""),  # present but empty is allowed, as in Go
        ((1, 1), "GET", [("HOST", "example.com:8080")], ""),
        ((1, 1), "GET", [("HOST", "[::1]:9000")], ""),
        ((1, 0), "GET", [("HOST", "a b")], "malformed Host header"),
        ((1, 1), "GET", [("HOST", "a/b")], "malformed Host header"),
    ],
)
def test_host_problems(version: tuple[int, int], method: str, headers: list[tuple[str, str]], problem: str) -> None:
    assert go_host_problem(version, method, headers) == problem


@pytest.mark.parametrize(
    ("exc", "status_line"),
    [
        (http_errors.LimitRequestHeaders("too big"), b"HTTP/1.1 431 Request Header Fields Too Large\r\n"),
        (http_errors.LimitRequestLine(10, 5), b"HTTP/1.1 431 Request Header Fields Too Large\r\n"),
        (http_errors.InvalidHTTPVersion((2, 0)), b"HTTP/1.1 505 HTTP Version Not Supported: unsupported protocol"),
        (http_errors.InvalidHTTPVersion("http/1.1"), b"HTTP/1.1 400 Bad Request\r\n"),
        (http_errors.InvalidHeaderName("Bad Header"), b"HTTP/1.1 400 Bad Request: invalid header name\r\n"),
        (http_errors.InvalidHeader("TRANSFER-ENCODING"), b"HTTP/1.1 501 Not Implemented\r\n"),
        (http_errors.InvalidHeader("CONTENT-LENGTH"), b"HTTP/1.1 400 Bad Request\r\n"),
        (http_errors.InvalidRequestLine("GARBAGE"), b"HTTP/1.1 400 Bad Request\r\n"),
        (http_errors.ExpectationFailed("foo"), b"HTTP/1.1 417 Expectation Failed\r\n"),
    ],
)
def test_client_errors_map_to_go_answers(exc: Exception, status_line: bytes) -> None:
    answer = go_parse_error(exc)
    assert answer is not None and answer.startswith(status_line)


def test_server_side_errors_are_left_to_gunicorn() -> None:
    assert go_parse_error(RuntimeError("app bug")) is None
    assert go_parse_error(http_errors.InvalidResponseHeader("X-Bad")) is None
    assert go_parse_error(ssl.SSLError("handshake")) == b""  # Go just closes


def test_http_date_is_gunicorns_date_formatted_once_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    import email.utils

    from hookrunner.serve import protocol

    now = [1_700_000_000.25]
    monkeypatch.setattr(protocol.time, "time", lambda: now[0])
    first = protocol.http_date()
    assert first == email.utils.formatdate(now[0], usegmt=True) == "Tue, 14 Nov 2023 22:13:20 GMT"
    now[0] = 1_700_000_000.75  # the same second: the same text
    assert protocol.http_date() is first
    now[0] = 1_700_000_001.0
    assert protocol.http_date() == "Tue, 14 Nov 2023 22:13:21 GMT"
    assert protocol.http_date(0) == "Thu, 01 Jan 1970 00:00:00 GMT"  # an explicit time is not cached


@pytest.mark.parametrize(
    ("block", "kept", "problem"),
    [
        (b"Host: x\r\nX-A: b", b"Host: x\r\nX-A: b", ""),
        (b"Host: x\r\nX-A: a\x01b", b"Host: x\r\nX-A: a\x80b", "invalid header value"),
        (b"Host: x\r\nX-A: a\tb\xff", b"Host: x\r\nX-A: a\tb\xff", ""),  # HTAB and obs-text are fine
        (b"Host: x\r\nX-A: a\r\n b\x7f", b"Host: x\r\nX-A: a\r\n b\x80", "invalid header value"),
        (b"Host: a\x00", b"Host: a\x80", "invalid header value"),  # 0x80: a malformed Host as well
        (b"Host: x\r\nBad(Name: y\r\n more", b"Host: x", "invalid header name"),
        (b"Host: x\r\n: y\r\n more\r\nX-A: b", b"Host: x\r\nX-A: b", ""),  # empty names are skipped
        (b"Bad Name: y\r\nX-A: \x01", b"X-A: \x80", "invalid header name"),
        # Framing headers keep their bytes: gunicorn's errors for them are Go's (plain 400, 501).
        (b"Content-Length: 1\x01", b"Content-Length: 1\x01", ""),
        (b"Transfer-Encoding: chunked\x01", b"Transfer-Encoding: chunked\x01", ""),
    ],
)
def test_header_block_as_net_http_reads_it(block: bytes, kept: bytes, problem: str) -> None:
    assert go_header_block(block) == (kept, problem)


@pytest.mark.parametrize("block", [b" X-A: a\r\nHost: x", b"\tX-A: a", b"Host: x\r\nNoColon", b"Bad(Name: y\r\nNoColon"])
def test_header_blocks_textproto_cannot_read_are_a_plain_400(block: bytes) -> None:
    with pytest.raises(http_errors.InvalidHeader) as caught:
        go_header_block(block)
    assert go_parse_error(caught.value) == go_plain_error(400, "Bad Request")
