"""net/http's protocol answers, mapped from gunicorn's parse errors; Host checks."""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator

import gunicorn.http.message
import pytest
from gunicorn.http import errors as http_errors

from hookrunner.serve import protocol
from hookrunner.serve.arbiter import PARSER_OPTIONS
from hookrunner.serve.protocol import (
    MAX_HEAD_BYTES,
    ChunkLengthTooLarge,
    GoChunkedReader,
    GoRequest,
    go_header_block,
    go_host_problem,
    go_parse_error,
    go_plain_error,
)


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
def test_host_problems(
    version: tuple[int, int], method: str, headers: list[tuple[str, str]], problem: str
) -> None:
    assert go_host_problem(version, method, headers) == problem


@pytest.mark.parametrize(
    ("exc", "status_line"),
    [
        (http_errors.LimitRequestHeaders("too big"), b"HTTP/1.1 431 Request Header Fields Too Large\r\n"),
        (http_errors.LimitRequestLine(10, 5), b"HTTP/1.1 431 Request Header Fields Too Large\r\n"),
        (
            http_errors.InvalidHTTPVersion((2, 0)),
            b"HTTP/1.1 505 HTTP Version Not Supported: unsupported protocol",
        ),
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


@pytest.mark.parametrize(
    "block", [b" X-A: a\r\nHost: x", b"\tX-A: a", b"Host: x\r\nNoColon", b"Bad(Name: y\r\nNoColon"]
)
def test_header_blocks_textproto_cannot_read_are_a_plain_400(block: bytes) -> None:
    with pytest.raises(http_errors.InvalidHeader) as caught:
        go_header_block(block)
    assert go_parse_error(caught.value) == go_plain_error(400, "Bad Request")


# --- the request head under net/http's bound, and chunked bodies (issue 21) ---------------------------


def _parse(data: bytes, step: int = 4096) -> GoRequest:
    """A GoRequest parsed from `data` arriving `step` bytes per read, with hookrunner's gunicorn settings."""
    from gunicorn.config import Config
    from gunicorn.http.unreader import IterUnreader

    cfg = Config()
    for key, value in PARSER_OPTIONS.items():
        cfg.set(key, value)
    pieces = [data[i : i + step] for i in range(0, len(data), step)]
    return GoRequest(cfg, IterUnreader(pieces), ("127.0.0.1", 1))


def _head_of(size: int) -> bytes:
    """A GET whose head (through its final CRLF CRLF) is exactly `size` bytes."""
    start = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: "
    return start + b"a" * (size - len(start) - 4) + b"\r\n\r\n"


def test_a_head_at_net_https_bound_is_read_and_one_byte_more_is_431() -> None:
    assert len(_head_of(MAX_HEAD_BYTES)) == MAX_HEAD_BYTES == (1 << 20) + 4096
    request = _parse(_head_of(MAX_HEAD_BYTES))
    assert request.path == "/" and request.headers[0] == ("HOST", "x")
    with pytest.raises(http_errors.LimitRequestHeaders):
        _parse(_head_of(MAX_HEAD_BYTES + 1))


def test_an_endless_request_line_or_header_is_refused_once_past_the_bound() -> None:
    """The bound holds as bytes arrive: reading stops after it, whatever follows."""

    class Endless:
        read = 0

        def __iter__(self) -> Iterator[bytes]:
            yield b"GET /"
            while self.read < 64 << 20:
                self.read += 65536
                yield b"a" * 65536

    from gunicorn.config import Config
    from gunicorn.http.unreader import IterUnreader

    source = Endless()
    with pytest.raises(http_errors.LimitRequestHeaders):
        GoRequest(Config(), IterUnreader(source), ("127.0.0.1", 1))
    assert source.read <= MAX_HEAD_BYTES + 65536


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"GET / HTTP/1.1\nHost: x\r\n\r\n", http_errors.InvalidRequestLine),
        (b"GET / HTTP/1.1\r\nHost: x\nX: y\r\n", http_errors.InvalidHeader),
        (b"GET / HTTP/1.1\r\nHost: x\r\nA\x01: b\r\n\r\n", None),
    ],
)
def test_bare_lf_is_refused_as_gunicorn_refuses_it(data: bytes, error: type[Exception] | None) -> None:
    if error is None:
        assert _parse(data, step=3).go_problem == "invalid header name"
        return
    with pytest.raises(error):
        _parse(data, step=3)


def test_a_head_is_the_same_however_it_arrives() -> None:
    data = b"\r\nPOST /hooks/a?x=1 HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n folded\r\nContent-Length: 2\r\n\r\nhi"
    for step in (1, 2, 3, 7, 4096):
        request = _parse(data, step)
        assert (request.method, request.uri, request.headers) == (
            "POST",
            "/hooks/a?x=1",
            [("HOST", "h"), ("X-A", "1 folded"), ("CONTENT-LENGTH", "2")],
        )
        assert request.body.read() == b"hi"


def test_a_head_just_under_the_bound_is_scanned_once() -> None:
    """Each byte is scanned once: a head of 1 MB arriving a few bytes at a time parses in linear time
    (gunicorn's own reader copied and rescanned the whole buffer at every read). Generous bound."""
    import time

    data = _head_of(MAX_HEAD_BYTES - 200)
    began = time.perf_counter()
    _parse(data, step=512)
    assert time.perf_counter() - began < 2.0


CHUNKED_BODIES = [
    b"1\r\na\r\n2\r\nbc\r\n0\r\n\r\n",
    b"3;ext=1\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
    b"A\r\n0123456789\r\n000\r\n\r\n",
    b"1\r\n \r\n" * 5000 + b"0\r\n\r\n",
    b"2\r\nabc\r\n0\r\n\r\n",  # missing terminator
    b"zz\r\nab\r\n0\r\n\r\n",  # bad size
    b"1;a\rb\r\nx\r\n0\r\n\r\n",  # bare CR in an extension
    b"0 \r\n\r\n",  # space after a last chunk without an extension
    b"2\r\nab\r\n",  # the body breaks off
    b"1\r\na\r\n1\r\nb\r\n1\r\nc\r\nzz\r\n",  # a bad size after whole chunks
    b"1\r\na\r\n" * 20000 + b"1\r\nab\r\n0\r\n\r\n",  # a missing terminator after 20,000
    b"00000000001\r\na\r\n0\r\n\r\n",
]


@pytest.mark.parametrize("body", CHUNKED_BODIES, ids=range(len(CHUNKED_BODIES)))
@pytest.mark.parametrize("step", [1, 5, 8192])
def test_chunked_bodies_read_as_gunicorns_reader_reads_them(body: bytes, step: int) -> None:
    from gunicorn.http.body import Body, ChunkedReader
    from gunicorn.http.unreader import IterUnreader

    def outcome(reader_class: type[ChunkedReader]) -> tuple[bytes, str, list[tuple[str, str]]]:
        request = _parse(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        unreader = IterUnreader([body[i : i + step] for i in range(0, len(body), step)])
        stream = Body(reader_class(request, unreader))
        try:
            return stream.read(), "", request.trailers
        except Exception as exc:  # noqa: BLE001 - the error is what is compared
            # ...and what arrived before it, which the app reads again (answers.read_body).
            return stream.read(), f"{type(exc).__name__}: {exc}", request.trailers

    assert outcome(GoChunkedReader) == outcome(ChunkedReader)


@pytest.mark.parametrize("length", [10, 5000, 1 << 20])
@pytest.mark.parametrize("bad", ["", "\x00", "\t", "\x1f", "\x7f", "\x80", "\xff", "\u0100"])
def test_the_check_for_control_bytes_answers_as_the_regex_does(length: int, bad: str) -> None:
    # gunicorn's check of header values is replaced by one that skips the regex for a long clean value.
    check = gunicorn.http.message.RFC9110_5_5_INVALID_AND_DANGEROUS
    regex = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
    for value in ("a" * length + bad, bad + "a" * length, "a" * (length // 2) + bad + "a" * (length // 2)):
        found, expected = check.search(value), regex.search(value)
        assert (found and found.span()) == (expected and expected.span())
        raw = value.encode("utf-8")
        assert bool(protocol._BAD_VALUE.search(raw)) == bool(protocol._BAD_VALUE_BYTE.search(raw))


# --- the trusted-proxy answer, kept per peer address (issue 23) ---------------------------------------


@pytest.mark.parametrize(
    ("allowed", "peer", "trusted"),
    [("", "127.0.0.1", False), ("127.0.0.1", "127.0.0.1", True), ("10.0.0.0/8", "10.1.2.3", True),
     ("10.0.0.0/8", "192.0.2.1", False), ("*", "192.0.2.1", True), ("", "::1", False), ("::1", "::1", True)],
)
def test_the_trusted_proxy_answer_is_gunicorns_and_is_worked_out_once_per_peer(
    allowed: str, peer: str, trusted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gunicorn.config import Config
    from gunicorn.http.unreader import IterUnreader

    monkeypatch.setattr(protocol, "_TRUSTED_PEERS", {})
    asked: list[str] = []
    real = gunicorn.http.message._ip_in_allow_list

    def counted(ip: str, *args: object) -> bool:
        asked.append(ip)
        return bool(real(ip, *args))

    monkeypatch.setattr(gunicorn.http.message, "_ip_in_allow_list", counted)
    cfg = Config()
    for key, value in PARSER_OPTIONS.items():
        cfg.set(key, value)
    cfg.set("forwarded_allow_ips", allowed)
    head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-Proto: https\r\n\r\n"
    for _ in range(3):
        request = GoRequest(cfg, IterUnreader([head]), (peer, 1))
        assert request._peer_is_trusted_proxy() is trusted
        assert request.scheme == ("https" if trusted else "http")  # what gunicorn makes of the header
    assert asked == [peer]
    other = Config()
    other.set("forwarded_allow_ips", "192.0.2.77" if trusted else "*")  # another list: asked again
    assert GoRequest(other, IterUnreader([head]), (peer, 1))._peer_is_trusted_proxy() is not trusted
    assert asked == [peer, peer]


class _Req:
    """What GoResponse reads of a request."""

    method = "POST"

    def __init__(self, version: tuple[int, int], close: bool, handler_headers: frozenset[str] | None) -> None:
        self.version = version
        self.close = close
        self.handler_headers = handler_headers

    def should_close(self) -> bool:
        return self.close


def _head(
    headers: list[tuple[str, str]],
    handler_headers: frozenset[str] | None,
    version: tuple[int, int] = (1, 1),
    close: bool = False,
) -> bytes:
    import socket

    from gunicorn.config import Config

    from hookrunner.serve.protocol import GoResponse

    ours, theirs = socket.socketpair()
    with ours, theirs:
        response = GoResponse(_Req(version, close, handler_headers), ours, Config())
        response.start_response("200 OK", headers)
        response.send_headers()
        ours.shutdown(socket.SHUT_WR)
        head = b""
        while chunk := theirs.recv(4096):
            head += chunk
    return re.sub(rb"Date: [A-Z][a-z]{2}, [^\r]+ GMT", b"Date: *", head)  # the server's own date


def test_the_handlers_headers_go_first_sorted_then_the_servers_in_nets_order() -> None:
    # webhook with `-header X-Global=g` and a hook's response headers Zeta and Alpha, a sniffed body type,
    # and a client that asked to close: what webhook 2.8.0 wrote, Date masked.
    headers = [("X-Global", "g"), ("Zeta", "1"), ("Alpha", "2"), ("Content-Type", "text/plain; charset=utf-8")]
    headers.append(("Content-Length", "1"))
    head = _head(headers, frozenset({"X-Global", "Zeta", "Alpha"}), close=True)
    assert head == (
        b"HTTP/1.1 200 OK\r\nAlpha: 2\r\nX-Global: g\r\nZeta: 1\r\nDate: *\r\nContent-Length: 1\r\n"
        b"Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
    )


def test_a_content_type_the_handler_set_is_sorted_among_its_headers_and_repeats_keep_their_order() -> None:
    headers = [("X-B", "2"), ("Content-Type", "application/json"), ("X-B", "1"), ("Content-Length", "2")]
    head = _head(headers, frozenset({"X-B", "Content-Type"}))
    assert head == (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-B: 2\r\nX-B: 1\r\nDate: *\r\n"
        b"Content-Length: 2\r\n\r\n"
    )


def test_chunked_and_http_1_0_keep_alive_come_last() -> None:
    chunked = _head([("Content-Type", "text/plain; charset=utf-8"), ("X-A", "1")], frozenset({"X-A"}))
    assert chunked == (
        b"HTTP/1.1 200 OK\r\nX-A: 1\r\nDate: *\r\nContent-Type: text/plain; charset=utf-8\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    old = _head([("Content-Length", "0"), ("X-A", "1")], None, version=(1, 0))
    assert old == b"HTTP/1.0 200 OK\r\nX-A: 1\r\nDate: *\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n"


def test_a_handlers_date_server_and_hop_by_hop_headers_are_written_as_set() -> None:
    headers = [("Server", "mine"), ("Date", "yesterday"), ("Upgrade", "h2c"), ("Content-Length", "5")]
    head = _head(headers, frozenset({"Server", "Date", "Upgrade"}))
    assert head == b"HTTP/1.1 200 OK\r\nDate: yesterday\r\nServer: mine\r\nUpgrade: h2c\r\nContent-Length: 5\r\n\r\n"


def test_a_handlers_connection_gives_way_to_a_close_it_does_not_say() -> None:
    kept = [("Connection", "keep-alive"), ("Content-Length", "5")]
    assert _head(kept, frozenset({"Connection"})) == (
        b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nDate: *\r\nContent-Length: 5\r\n\r\n"
    )
    assert _head(kept, frozenset({"Connection"}), close=True) == (
        b"HTTP/1.1 200 OK\r\nDate: *\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
    )
    closing = [("Connection", "close"), ("A", "1"), ("Content-Length", "5")]
    assert _head(closing, frozenset({"Connection", "A"})) == (  # the handler's own close: it closes
        b"HTTP/1.1 200 OK\r\nA: 1\r\nConnection: close\r\nDate: *\r\nContent-Length: 5\r\n\r\n"
    )


def test_a_connection_close_the_server_writes_anyway_is_written_once() -> None:
    # The app's close after a broken body, on a connection closing anyway: one line, as net/http writes.
    closing = [("Connection", "close"), ("Content-Length", "0")]
    assert _head(closing, frozenset(), close=True) == (
        b"HTTP/1.1 200 OK\r\nDate: *\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )


# --- numbers net/http cannot take (issue 34) ------------------------------------------------------------


def _chunked_error(body: bytes, step: int) -> BaseException:
    from gunicorn.http.body import Body
    from gunicorn.http.unreader import IterUnreader

    request = _parse(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    stream = Body(GoChunkedReader(request, IterUnreader([body[i : i + step] for i in range(0, len(body), step)])))
    with pytest.raises(Exception) as caught:  # noqa: PT011 - which error it is, is the assertion
        stream.read()
    return caught.value


#: (chunked body, the error reading it raises), as net/http's parseHexUint decides
CHUNK_SIZES = [
    # a 17th hex digit is too large at once, leading zeros counted: the chunk is not waited for
    (b"10000000000000000\r\nabc", ChunkLengthTooLarge),
    (b"00000000000000001\r\na\r\n0\r\n\r\n", ChunkLengthTooLarge),
    (b"1\r\na\r\n10000000000000000;ext\r\nabc", ChunkLengthTooLarge),
    # a byte that is no hex digit, up to the 17th, is a bad byte; 16 digits fit, and the chunk is waited for
    (b"fffffffffffffffz0\r\nabc", http_errors.InvalidChunkSize),
    (b"ffffffffffffffff\r\nabc", http_errors.NoMoreData),
]


@pytest.mark.parametrize("step", [1, 8192])
def test_a_chunk_size_past_16_hex_digits_is_net_https_too_large(step: int) -> None:
    errors = [type(_chunked_error(body, step)) for body, _ in CHUNK_SIZES]
    assert errors == [error for _, error in CHUNK_SIZES]


def test_a_content_length_past_63_bits_is_a_plain_400() -> None:
    # strconv.ParseUint(value, 10, 63): webhook 2.8.0 answers these `400 Bad Request` before any handler.
    for length in ["9223372036854775808", "99999999999999999999999", " 18446744073709551616"]:
        with pytest.raises(http_errors.InvalidHeader) as caught:
            _parse(f"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode())
        assert go_parse_error(caught.value) == go_plain_error(400, "Bad Request")
    # The largest length it takes is taken.
    request = _parse(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 9223372036854775807\r\n\r\n")
    assert request.body.reader.length == 2**63 - 1


# --- a body the handler left unread, as net/http's chunkWriter.writeHeader treats it --------------------


def _head_after(request: bytes, continue_pending: bool = False) -> bytes:
    """The head GoResponse writes for a request parsed from `request` whose handler read none of its body
    (and sent no `100 Continue` it was asked for, with `continue_pending`)."""
    import socket

    from gunicorn.config import Config

    from hookrunner.serve.protocol import GoResponse

    ours, theirs = socket.socketpair()
    with ours, theirs:
        req = _parse(request)
        req.go_continue_pending = continue_pending  # as the worker marks it after the app
        response = GoResponse(req, ours, Config())
        response.start_response("404 Not Found", [("Content-Length", "15")])
        response.send_headers()
        ours.shutdown(socket.SHUT_WR)
        head = b""
        while chunk := theirs.recv(4096):
            head += chunk
    return re.sub(rb"Date: [^\r]+", b"Date: *", head)


def test_an_unread_body_that_breaks_or_goes_past_256_kib_closes_the_connection() -> None:
    closing = b"HTTP/1.1 404 Not Found\r\nDate: *\r\nContent-Length: 15\r\nConnection: close\r\n\r\n"
    kept = b"HTTP/1.1 404 Not Found\r\nDate: *\r\nContent-Length: 15\r\n\r\n"
    post = b"POST /hooks/nope HTTP/1.1\r\nHost: x\r\n"
    chunked = post + b"Transfer-Encoding: chunked\r\n\r\n"
    assert _head_after(chunked + b"zz\r\n") == closing  # broken
    assert _head_after(chunked + b"10000000000000000\r\n") == closing  # too large a size
    assert _head_after(chunked + b"40001\r\n" + b"a" * 0x40001 + b"\r\n0\r\n\r\n") == closing  # past 256 KiB
    assert _head_after(post + b"Content-Length: 262144\r\n\r\n") == closing  # declared: not even read
    assert _head_after(chunked + b"3\r\nabc\r\n0\r\n\r\n") == kept  # read to its end and dropped
    assert _head_after(post + b"Content-Length: 3\r\n\r\nabc") == kept
    # Expect: 100-continue never answered: the body is not waited for, and the connection not kept
    assert _head_after(post + b"Expect: 100-continue\r\nContent-Length: 3\r\n\r\n", continue_pending=True) == closing


class _Sends:
    """A socket that keeps each write apart."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    send = sendall


@pytest.mark.parametrize(
    ("headers", "parts", "writes"),
    [
        ([("Content-Length", "5")], [b"hello"], 1),  # a whole body of a known length: with its head
        ([("Content-Length", "5")], [b"hel", b"lo"], 3),  # in parts: the head, then each part
        ([], [b"hello"], 3),  # no length: the head, then the body chunked, as before
        ([("Content-Length", "0")], [], 1),  # no body: the head alone, when the answer closes
    ],
)
def test_a_whole_body_of_known_length_is_written_with_its_head_in_one_send(
    headers: list[tuple[str, str]], parts: list[bytes], writes: int
) -> None:
    from gunicorn.config import Config

    from hookrunner.serve.protocol import GoResponse

    sock = _Sends()
    response = GoResponse(_Req((1, 1), False, None), sock, Config())
    response.start_response("200 OK", [("Content-Type", "text/plain"), *headers])
    for part in parts:
        response.write(part)
    response.close()
    assert len(sock.writes) == writes, sock.writes
    wire = b"".join(sock.writes)
    head, _, body = wire.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nDate: ")
    assert body == (b"".join(parts) if headers else b"5\r\nhello\r\n0\r\n\r\n")
    assert response.sent == sum(map(len, parts)) and response.headers_sent
