"""HTTP as Go's net/http speaks it, on top of gunicorn's parser: its plain answers to requests it refuses,
its Host checks, and its response head (Go's header order, no `Server`, `Connection` only where Go sends
one)."""

from __future__ import annotations

import email.utils
import re
import ssl
import time
from collections.abc import Callable
from typing import Any

import gunicorn.http.message
import gunicorn.http.wsgi
from gunicorn import util as gunicorn_util
from gunicorn.http import errors as http_errors
from gunicorn.http.body import Body, ChunkedReader, LengthReader

from hookrunner.serve.context import MAX_HEAD_BYTES

#: net/http reads the unread rest of a body smaller than this before it writes the answer (its
#: maxPostHandlerReadBytes); a bigger one is left unread, and the connection closed after the answer.
GO_DISCARD_LIMIT = 256 << 10

#: The headers net/http adds to a handler's, in the order it writes them, after the handler's own.
_SERVER_HEADERS = ("Date", "Content-Length", "Content-Type", "Connection", "Transfer-Encoding")
_SERVER_HEADER_ORDER = {name: rank for rank, name in enumerate(_SERVER_HEADERS)}


class GoResponse(gunicorn.http.wsgi.Response):
    """gunicorn's response head as Go's net/http writes it, byte for byte: the handler's headers sorted by
    name, then what the server adds (`Date`, `Content-Length`, a sniffed `Content-Type`, `Connection`,
    `Transfer-Encoding`, in that order); no `Server:` header of its own, and `Connection:` only where Go
    sends it (`close` on HTTP/1.1, `keep-alive` on HTTP/1.0; the protocol default is left out).

    Which headers are the handler's is the request's `handler_headers` (names), as the app declared them
    (answers.HANDLER_HEADERS_KEY); without a declaration every header but `Content-Length` is. Unlike
    gunicorn, a handler's `Date`, `Server`, `Connection` and other hop-by-hop headers are written as it
    set them (net/http keeps them), but for `Transfer-Encoding`, which the server decides."""

    headers_sent: bool

    def default_headers(self) -> list[str]:
        implicit = "Connection: keep-alive\r\n" if self.req.version >= (1, 1) else "Connection: close\r\n"
        return [
            line for line in super().default_headers() if not line.startswith("Server:") and line != implicit
        ]

    def send_headers(self) -> None:
        if self.headers_sent:
            return
        gunicorn_util.write(self.sock, self._head())
        self.headers_sent = True

    def write(self, arg: bytes) -> None:
        """A whole body of a known length, written with its head in one send, as net/http's buffered writer
        sends a small answer: one system call and one segment, where two sends cost a second call and left
        the body to Nagle's wait for the head's acknowledgement. Anything else as gunicorn writes it."""
        if (
            self.headers_sent
            or self.chunked
            or self._omits_body
            or not isinstance(arg, bytes)
            or not arg
            or len(arg) != self.response_length
        ):
            super().write(arg)
            return
        gunicorn_util.write(self.sock, self._head() + arg)
        self.headers_sent = True
        self.sent += len(arg)

    def _head(self) -> bytes:
        """The answer's head, as net/http writes it (and, first, what it does with an unread body)."""
        self._discard_unread_body()
        status, *added = self.default_headers()
        declared = getattr(self.req, "handler_headers", None)
        handler: list[tuple[str, str]] = []
        for name, value in self.headers:
            if name in declared if declared is not None else name != "Content-Length":
                handler.append((name, value))
            elif (line := f"{name}: {value}\r\n") not in added or name != "Connection":
                added.append(line)  # a `Connection: close` the server writes anyway is written once
        names = {name.lower() for name, _ in handler}
        if "date" in names:  # the handler's Date stands instead of the server's
            added = [line for line in added if not line.startswith("Date:")]
        if "connection" in names:
            if self.should_close() and not any(
                name.lower() == "connection" and _has_token(value, "close") for name, value in handler
            ):
                # Closing though the handler's Connection does not say so: the server's `close` replaces it.
                handler = [(name, value) for name, value in handler if name.lower() != "connection"]
            else:
                added = [line for line in added if not line.startswith("Connection:")]
        handler.sort(key=lambda header: header[0])  # stable: a repeated name keeps its values' order
        added.sort(key=lambda line: _SERVER_HEADER_ORDER.get(line[: line.index(":")], 2))
        head = status + "".join(f"{name}: {value}\r\n" for name, value in handler) + "".join(added) + "\r\n"
        return head.encode("latin-1")

    def _discard_unread_body(self) -> None:
        """What net/http does before it writes the head of an answer whose handler left some of the body
        unread (chunkWriter.writeHeader): the connection is closed after the answer (`Connection: close`)
        when a `100 Continue` was asked for and not sent, when the rest is GO_DISCARD_LIMIT or more by its
        declared length, or does not end within GO_DISCARD_LIMIT, or cannot be read; a shorter rest is read
        and dropped, and the connection kept."""
        body: Any = getattr(self.req, "body", None)
        if body is None or self.should_close():
            return
        if getattr(self.req, "go_continue_pending", False) or getattr(body, "failed", False):
            self.force_close()
            return
        reader = getattr(body, "reader", None)
        if isinstance(reader, LengthReader) and reader.length >= GO_DISCARD_LIMIT:
            self.force_close()
            return
        try:
            if len(body.read(GO_DISCARD_LIMIT + 1)) > GO_DISCARD_LIMIT:
                self.force_close()
        except Exception:  # noqa: BLE001 - a broken or cut body: where the next request starts is unknown
            self.force_close()

    def process_headers(self, headers: list[tuple[str, str]]) -> None:
        super().process_headers(headers)  # gunicorn's checks of names and values, and the body's length
        # gunicorn drops the hop-by-hop headers (Date and Server among them) and reads `Connection: upgrade`
        # as a protocol switch; net/http writes what the handler set and switches nothing.
        self.upgrade = False
        self.headers = [
            (name, value.strip(" \t")) for name, value in headers if name.lower() != "transfer-encoding"
        ]
        if any(name.lower() == "connection" and _has_token(value, "close") for name, value in headers):
            self.force_close()


def _has_token(value: str, token: str) -> bool:
    """net/http's hasToken for a comma-separated header value, case-insensitively."""
    return any(part.strip(" \t").lower() == token for part in value.split(","))


_date: tuple[int, str] = (0, "")


def http_date(timestamp: float | None = None) -> str:
    """gunicorn's util.http_date, formatted once a second instead of for every answer's `Date:`."""
    global _date
    if timestamp is not None:
        return email.utils.formatdate(timestamp, usegmt=True)
    now = int(time.time())
    second, text = _date
    if second != now:
        text = email.utils.formatdate(now, usegmt=True)
        _date = (now, text)
    return text


# Go's httpguts.ValidHostHeader: the bytes a Host header may hold.
_HOST_BYTES = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!$%&'()*+,-.:;=[]_~"
)


def go_plain_error(code: int, text: str, body: str | None = None) -> bytes:
    """An answer net/http writes itself, before any handler runs: no Date, no length, then close."""
    body = f"{code} {text}" if body is None else body
    head = f"HTTP/1.1 {code} {text}\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
    return (head + body).encode("latin-1")


#: The bytes of a header name: httpguts.ValidHeaderFieldName's token, as a regex character class.
HEADER_NAME_BYTES = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]"

# httpguts.ValidHeaderFieldName (a token) and ValidHeaderFieldValue (no control byte but HTAB; 0x80-0xFF
# are fine). gunicorn refuses the same bytes, but as it meets them, line by line.
_HEADER_NAME = re.compile(HEADER_NAME_BYTES + rb"+")
_BAD_VALUE_BYTE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_CONTROL_BYTES = bytes([*range(0x09), *range(0x0A, 0x20), 0x7F])
#: Values at least this long are first looked at with bytes.translate, ten times as fast as the regex on a
#: head of a megabyte; shorter ones go straight to the regex.
_LONG_VALUE = 4096


class _ControlSearch:
    """A regex for control bytes in a header value whose search() answers None at once, without the regex,
    when a long value has none (bytes.translate deletes them in one C pass): the same answers, sooner."""

    def __init__(self, pattern: re.Pattern[Any]) -> None:
        self._pattern = pattern

    def search(self, value: Any) -> re.Match[Any] | None:
        if len(value) >= _LONG_VALUE:
            try:
                raw = value.encode("latin-1") if isinstance(value, str) else value
            except UnicodeEncodeError:
                raw = None
            if raw is not None and len(raw.translate(None, _CONTROL_BYTES)) == len(raw):
                return None
        return self._pattern.search(value)

    def sub(self, repl: Any, value: Any) -> Any:
        return self._pattern.sub(repl, value)


_BAD_VALUE = _ControlSearch(_BAD_VALUE_BYTE)
# gunicorn's own check of every header value, the same bytes (RFC 9110 5.5), sped up alike.
gunicorn.http.message.RFC9110_5_5_INVALID_AND_DANGEROUS = _ControlSearch(
    gunicorn.http.message.RFC9110_5_5_INVALID_AND_DANGEROUS
)
# Header lines whose bad value gunicorn must still see: its errors for them are Go's own (a bad
# Content-Length is a plain 400, a bad Transfer-Encoding a 501), which come before the server's checks.
_FRAMING_HEADERS = (b"content-length", b"transfer-encoding")


def go_header_block(block: bytes) -> tuple[bytes, str]:
    """A request's header block read as Go 1.19 reads it, before gunicorn parses it: returns the block for
    gunicorn and the problem net/http's server finds in the header names and values ("" for none).

    Go reports such a problem only after its own parse errors and its Host checks, where gunicorn would
    refuse the line at once; so lines with a bad name are left out, and control bytes in a value become
    0x80 (which no Host header may hold either). Lines with an empty name are skipped, as textproto does;
    a block that textproto cannot read raises gunicorn's InvalidHeader, a plain 400 as in Go."""
    lines = block.split(b"\r\n")
    if lines[0][:1] in (b" ", b"\t"):
        raise http_errors.InvalidHeader("malformed MIME header initial line")
    kept: list[bytes] = []
    bad_name = bad_value = False
    skipping = False
    for line in lines:
        if line[:1] in (b" ", b"\t"):  # a folded continuation of the previous field
            if skipping:
                continue
            if _BAD_VALUE.search(line) and kept[-1].partition(b":")[0].lower() not in _FRAMING_HEADERS:
                bad_value = True
                line = _BAD_VALUE_BYTE.sub(b"\x80", line)
            kept.append(line)
            continue
        name, colon, value = line.partition(b":")
        if not colon:
            raise http_errors.InvalidHeader("malformed MIME header line")
        skipping = not name or not _HEADER_NAME.fullmatch(name)
        if skipping:
            bad_name = bad_name or bool(name)
            continue
        if _BAD_VALUE.search(value) and name.lower() not in _FRAMING_HEADERS:
            bad_value = True
            line = name + b":" + _BAD_VALUE_BYTE.sub(b"\x80", value)
        kept.append(line)
    # Go looks at the names and values in its map's random order; a request with both problems may get
    # either answer there. Here it is always the name.
    problem = "invalid header name" if bad_name else "invalid header value" if bad_value else ""
    return b"\r\n".join(kept), problem


class HeadExpectationFailed(http_errors.ExpectationFailed):
    """An unknown Expect on a HEAD request: net/http's 417 then has no Content-Length (no body written)."""


class HeadTooLarge(http_errors.LimitRequestHeaders):
    """The head passed MAX_HEAD_BYTES: 431, then the connection is closed as net/http closes it."""


#: Whether a peer address is in gunicorn's forwarded_allow_ips (gunicorn's answer), by address and list;
#: emptied when full. hookrunner sets that list empty (serve/arbiter.py): no peer is trusted.
_TRUSTED_PEERS: dict[tuple[str, tuple[str, ...]], bool] = {}
_TRUSTED_PEERS_KEPT = 4096


class GoRequest(gunicorn.http.message.Request):
    """gunicorn's request, its head read under net/http's bound as the bytes arrive, each byte scanned
    once, and its header block read as net/http reads it (go_header_block)."""

    go_problem = ""
    #: `Expect: 100-continue` was asked for: `100 Continue` is sent at the first read of the body
    #: (ContinueOnRead), where gunicorn would send it before the app runs.
    go_expects_continue = False
    #: The names of the headers the handler set (GoResponse writes them first, sorted), when the app said.
    handler_headers: frozenset[str] | None = None

    def parse(self, unreader: Any) -> bytes:
        if getattr(self, "_use_fast", False) or self.cfg.proxy_protocol != "off":
            return bytes(super().parse(unreader))  # not this server's configuration: gunicorn's way
        buf = bytearray()
        self.read_into(unreader, buf, stop=True)
        # RFC 9112 2.2: one empty line before the request line is ignored (gunicorn's rule, kept).
        while buf[:1] == b"\r" and len(buf) < 2:
            self.read_into(unreader, buf)
        begin = 2 if buf[:2] == b"\r\n" else 0
        # The request line: answered as soon as it is complete, before the headers arrive.
        searched = begin
        while True:
            end = buf.find(b"\r\n", max(begin, searched - 1))
            if buf.find(b"\n", searched, end if end >= 0 else len(buf)) >= 0:
                raise http_errors.InvalidRequestLine("bare LF as line terminator")
            if end >= 0:
                break
            _check_head_size(len(buf))
            searched = len(buf)
            self.read_into(unreader, buf)
        self.parse_request_line(bytes(buf[begin:end]))
        # The headers, up to the empty line; the bound counts the request line too, as Go's does.
        begin = searched = end + 2
        while True:
            if buf[begin : begin + 2] == b"\r\n":
                _check_head_size(begin + 2)
                self.unreader.unread(bytes(buf[begin + 2 :]))
                return b""
            end = buf.find(b"\r\n\r\n", max(begin, searched - 3))
            if end >= 0:
                break
            scan = max(begin, searched - 1)
            if buf.count(b"\n", searched) != buf.count(b"\r\n", scan):
                raise http_errors.InvalidHeader("bare LF as line terminator")
            _check_head_size(len(buf))
            searched = len(buf)
            self.read_into(unreader, buf)
        _check_head_size(end + 4)
        self.headers = self.parse_headers(bytes(buf[begin:end]), from_trailer=False)
        return bytes(buf[end + 4 :])

    def parse_headers(self, data: bytes, from_trailer: bool = False) -> Any:
        if from_trailer:
            return super().parse_headers(data, from_trailer)
        data, self.go_problem = go_header_block(data)
        if not data:
            return []
        try:
            headers = super().parse_headers(data, from_trailer)
        except http_errors.ExpectationFailed as exc:
            # net/http answers an Expect it does not know only once its Host and header checks pass.
            headers = super().parse_headers(_without_expect(data), from_trailer)
            if not (self.go_problem or go_host_problem(self.version, self.method, headers)):
                if self.method == "HEAD":
                    raise HeadExpectationFailed(exc.expect) from None
                raise
        self.go_expects_continue = bool(getattr(self, "_expected_100_continue", False))
        self._expected_100_continue = False
        return headers

    def _peer_is_trusted_proxy(self) -> bool:
        # gunicorn parses the peer's address and walks forwarded_allow_ips on every request; the answer
        # depends only on the address.
        peer = self.peer_addr
        if not isinstance(peer, tuple):
            return True
        key = (peer[0], tuple(self.cfg.forwarded_allow_ips))
        trusted = _TRUSTED_PEERS.get(key)
        if trusted is None:
            trusted = bool(super()._peer_is_trusted_proxy())
            if len(_TRUSTED_PEERS) >= _TRUSTED_PEERS_KEPT:
                _TRUSTED_PEERS.clear()
            _TRUSTED_PEERS[key] = trusted
        return trusted

    def _apply_header_policy(self, name: str, value: str, scheme_state: Any, seen: set[str], *args: Any,
                             **kwargs: Any) -> Any:
        # gunicorn refuses a second Content-Type as an RFC 9110 singleton; net/http keeps every line and
        # its readers take the first (Header.Get), as webhook does. The worker hands the app that first one.
        if name == "CONTENT-TYPE" and name in seen:
            return (name, value)
        return super()._apply_header_policy(name, value, scheme_state, seen, *args, **kwargs)

    def set_body_reader(self) -> None:
        self._set_body_reader()
        body: Any = getattr(self, "body")  # noqa: B009 (gunicorn sets it untyped)
        if isinstance(getattr(body, "reader", None), ChunkedReader):
            self.body = Body(GoChunkedReader(self, self.unreader))

    def _set_body_reader(self) -> None:
        # net/http reads repeated Content-Length lines as one when all are equal once trimmed (and refuses
        # unequal ones, as gunicorn does); gunicorn refuses any repeat.
        headers: list[tuple[str, str]] = getattr(self, "headers")  # noqa: B009 (gunicorn sets it untyped)
        lengths = [i for i, (name, _) in enumerate(headers) if name == "CONTENT-LENGTH"]
        if len(lengths) > 1 and len({headers[i][1].strip(" \t") for i in lengths}) == 1:
            self.headers = [h for i, h in enumerate(headers) if i not in lengths[1:]]
        super().set_body_reader()
        # net/http reads the length with strconv.ParseUint(value, 10, 63): a length past 2^63-1 is a bad
        # Content-Length, a plain 400 (gunicorn takes any number, and the body limit answered it 413).
        if lengths and int(self.headers[lengths[0]][1].strip(" \t")) > _MAX_CONTENT_LENGTH:
            raise http_errors.InvalidHeader("CONTENT-LENGTH", req=self)


#: The largest Content-Length net/http takes (a 63-bit unsigned number).
_MAX_CONTENT_LENGTH = 2**63 - 1


def _no_pause() -> None:
    pass


_SIMPLE_CHUNK = re.compile(rb"([0-9a-fA-F]{1,8})\r\n")
_PENDING_BYTES = 65536


class GoChunkedReader(ChunkedReader):
    """gunicorn's chunked body reader, with its buffer walked by an offset (gunicorn's copies what is left
    of its buffer for every chunk), and `pause` called between chunks: a body of millions of tiny chunks
    is parsed a chunk at a time, and the gevent worker lets its other connections run meanwhile."""

    #: Called before each chunk; the gevent worker's share_loop.
    pause: Callable[[], None] = staticmethod(_no_pause)

    def parse_chunked(self, unreader: Any) -> Any:
        data, pos = b"", 0
        pending: list[bytes] = []  # whole chunks already in the buffer, handed over together
        held = 0
        while True:
            self.pause()
            # The common case, a whole chunk with a plain size already in the buffer, costs one match.
            simple = _SIMPLE_CHUNK.match(data, pos)
            if simple is not None:
                start = simple.end()
                stop = start + int(simple.group(1), 16)
                if stop > start and data[stop : stop + 2] == b"\r\n":
                    pending.append(data[start:stop])
                    held += stop - start
                    pos = stop + 2
                    if held < _PENDING_BYTES:
                        continue
            if pending:
                yield b"".join(pending)
                pending, held = [], 0
                continue
            searched = pos
            while (end := data.find(b"\r\n", max(pos, searched - 1))) < 0:
                if len(data) - pos > self.limit_chunk_size_line:
                    raise http_errors.InvalidChunkSize(
                        b"line over %d bytes with no terminator" % self.limit_chunk_size_line
                    )
                more = unreader.read()
                if not more:
                    raise http_errors.NoMoreData()
                searched, data, pos = len(data) - pos, data[pos:] + more, 0
            line, pos = data[pos : end + 2], end + 2
            _check_chunk_length(line)
            if line[:1] == b"0" and not line.strip(b"0 \t\r\n").split(b";", 1)[0]:
                # The last chunk: gunicorn's own reader checks it and reads the trailers after it.
                unreader.unread(data[pos:])
                super().parse_chunk_size(unreader, data=line)
                return
            size = super().parse_chunk_size(unreader, data=line)[0]
            while size > 0:
                if pos >= len(data):
                    data, pos = unreader.read(None, read_ahead=size), 0
                    if not data:
                        raise http_errors.NoMoreData()
                piece = data[pos : pos + size]
                pos += len(piece)
                size -= len(piece)
                yield piece
            while len(data) - pos < 2:
                more = unreader.read()
                if not more:
                    break
                data, pos = data[pos:] + more, 0
            if data[pos : pos + 2] != b"\r\n":
                raise http_errors.ChunkMissingTerminator(data[pos : pos + 2])
            pos += 2


class ChunkLengthTooLarge(http_errors.InvalidChunkSize):
    """A chunk size of more than 16 hex digits: net/http's "http chunk length too large"."""


_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")


def _check_chunk_length(line: bytes) -> None:
    """net/http's parseHexUint: the 17th hex digit of a size (leading zeros count) is too large, at once;
    a byte that is no hex digit before it is gunicorn's InvalidChunkSize."""
    size = line.split(b";", 1)[0]
    if len(size) > 16 and _HEX_DIGITS.issuperset(size[:17]):
        raise ChunkLengthTooLarge(size)


def _check_head_size(size: int) -> None:
    if size > MAX_HEAD_BYTES:
        raise HeadTooLarge(f"request head over {MAX_HEAD_BYTES} bytes")


class ContinueOnRead:
    """A request body that sends `100 Continue` before its first read, as Go's expectContinueReader does:
    a handler that answers without reading the body (an unknown hook, say) sends none."""

    def __init__(self, stream: Any, sock: Any) -> None:
        self._stream = stream
        self._sock: Any = sock

    @property
    def pending(self) -> bool:
        """Whether the `100 Continue` is still to be sent (no read yet)."""
        return self._sock is not None

    def _continue(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            except OSError:
                pass

    def read(self, *args: Any) -> bytes:
        self._continue()
        data: bytes = self._stream.read(*args)
        return data

    def readline(self, *args: Any) -> bytes:
        self._continue()
        data: bytes = self._stream.readline(*args)
        return data

    def readlines(self, *args: Any) -> list[bytes]:
        self._continue()
        lines: list[bytes] = self._stream.readlines(*args)
        return lines

    def __iter__(self) -> Any:
        self._continue()
        return iter(self._stream)


def go_sends_continue(req: Any, environ: dict[str, Any]) -> bool:
    """Whether net/http would answer this request's `Expect: 100-continue`: on HTTP/1.1, for a body that
    is not empty (a declared length over 0, or chunked)."""
    if not getattr(req, "go_expects_continue", False) or req.version < (1, 1):
        return False
    if "HTTP_TRANSFER_ENCODING" in environ:
        return True
    length = environ.get("CONTENT_LENGTH") or "0"
    return length.isdigit() and int(length) > 0


def _without_expect(block: bytes) -> bytes:
    kept: list[bytes] = []
    skipping = False
    for line in block.split(b"\r\n"):
        if line[:1] not in (b" ", b"\t"):
            skipping = line.partition(b":")[0].lower() == b"expect"
        if not skipping:
            kept.append(line)
    return b"\r\n".join(kept)


def go_host_problem(version: tuple[int, int], method: str, headers: list[tuple[str, str]]) -> str:
    """Why net/http would refuse this request's Host header, or "" when it would not. (Its next checks,
    of header names and values, are GoRequest.go_problem's.)"""
    hosts = [value for name, value in headers if name.upper() == "HOST"]
    if not hosts and version >= (1, 1) and method != "CONNECT":
        return "missing required Host header"
    if len(hosts) == 1 and not set(hosts[0]) <= _HOST_BYTES:
        return "malformed Host header"
    return ""


def go_refuses_transfer_encoding(version: tuple[int, int], headers: list[tuple[str, str]]) -> bool:
    """Whether net/http answers 501: on HTTP/1.1 it takes exactly one Transfer-Encoding header, and only
    `chunked` (gunicorn also takes `gzip, chunked` and the like, and hands the body over still coded)."""
    codings = [value for name, value in headers if name.upper() == "TRANSFER-ENCODING"]
    if not codings or version < (1, 1):
        return False
    return len(codings) != 1 or codings[0].strip(" \t").lower() != "chunked"


def go_parse_error(exc: BaseException) -> bytes | None:
    """What net/http answers to a request it cannot parse; None for errors that are not the client's."""
    if isinstance(exc, (http_errors.InvalidResponseHeader, http_errors.InvalidResponseHeaderName)):
        return None  # the application's fault: gunicorn's 500
    if isinstance(exc, ssl.SSLError):
        return b""  # Go only logs a TLS handshake error and closes the connection
    if isinstance(exc, (http_errors.LimitRequestHeaders, http_errors.LimitRequestLine)):
        return go_plain_error(431, "Request Header Fields Too Large")
    if isinstance(exc, http_errors.InvalidHTTPVersion) and isinstance(exc.version, tuple):
        return go_plain_error(505, "HTTP Version Not Supported: unsupported protocol version")
    if isinstance(exc, http_errors.ExpectationFailed):
        date = gunicorn_util.http_date()
        length = "" if isinstance(exc, HeadExpectationFailed) else "Content-Length: 0\r\n"
        return f"HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: {date}\r\n{length}\r\n".encode(
            "latin-1"
        )
    if isinstance(exc, http_errors.UnsupportedTransferCoding) or (
        isinstance(exc, http_errors.InvalidHeader) and exc.hdr == "TRANSFER-ENCODING"
    ):
        return go_plain_error(501, "Not Implemented", "Unsupported transfer encoding")
    if isinstance(exc, http_errors.InvalidHeaderName):
        return go_plain_error(400, "Bad Request: invalid header name")
    if isinstance(exc, http_errors.ParseException):
        return go_plain_error(400, "Bad Request")
    return None
