"""HTTP as Go's net/http speaks it, on top of gunicorn's parser: its plain answers to requests it refuses,
its Host checks, and its response head (no `Server`, `Connection` only where Go sends one)."""

from __future__ import annotations

import email.utils
import ssl
import time

import gunicorn.http.wsgi
from gunicorn import util as gunicorn_util
from gunicorn.http import errors as http_errors


class GoResponse(gunicorn.http.wsgi.Response):
    """gunicorn's response head as Go's net/http writes it: no `Server:` header, and `Connection:` only
    where Go sends it (`close` on HTTP/1.1, `keep-alive` on HTTP/1.0; the protocol default is left out)."""

    def default_headers(self) -> list[str]:
        implicit = "Connection: keep-alive\r\n" if self.req.version >= (1, 1) else "Connection: close\r\n"
        return [
            line for line in super().default_headers() if not line.startswith("Server:") and line != implicit
        ]

    def process_headers(self, headers: list[tuple[str, str]]) -> None:
        # gunicorn drops an application's hop-by-hop `Connection: close`; honour it by closing.
        super().process_headers(headers)
        if any(name.lower() == "connection" and value.strip().lower() == "close" for name, value in headers):
            self.force_close()


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


def go_host_problem(version: tuple[int, int], method: str, headers: list[tuple[str, str]]) -> str:
    """Why net/http would refuse this request's Host header, or "" when it would not."""
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
        return f"HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: {date}\r\n" \
            "Content-Length: 0\r\n\r\n".encode("latin-1")
    if isinstance(exc, http_errors.UnsupportedTransferCoding) or (
        isinstance(exc, http_errors.InvalidHeader) and exc.hdr == "TRANSFER-ENCODING"
    ):
        return go_plain_error(501, "Not Implemented", "Unsupported transfer encoding")
    if isinstance(exc, http_errors.InvalidHeaderName):
        return go_plain_error(400, "Bad Request: invalid header name")
    if isinstance(exc, http_errors.ParseException):
        return go_plain_error(400, "Bad Request")
    return None
