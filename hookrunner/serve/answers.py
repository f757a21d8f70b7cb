"""HTTP as Go's net/http does it, for the app: answers framed as Go's ResponseWriter frames them,
webhook's answer texts, the request's method, path and body as Go's server reads them, the environ keys
the server sets for the app, and the durations and sizes of webhook's access log."""

from __future__ import annotations

import posixpath
from typing import Any
from urllib.parse import urlsplit

from flask import Response, request
from gunicorn.http import errors as http_errors
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from hookrunner.golang.sniff import detect_content_type
from hookrunner.golang.status import status_line
from hookrunner.hooks.request import canonical_header_key
from hookrunner.ops.log import log
from hookrunner.ops.metrics import HostMetricsAway, Metrics
from hookrunner.serve.protocol import ChunkLengthTooLarge

MSG_NOT_FOUND = b"Hook not found."
MSG_MISMATCH = b"Hook rules were not satisfied."
MSG_RULE_ERROR = b"Error occurred while evaluating hook rules."
MSG_MULTIPART = b"Error occurred while parsing multipart form."
MSG_COMMAND_ERROR = (
    b"Error occurred while executing the hook's command. Please check your logs for more details."
)
#: -state-dir's journal cannot record a run (answered 503 with Retry-After; also /healthz?ready's text).
MSG_UNJOURNALED = b"The run journal cannot be written; try again later."
MSG_UNAVAILABLE = b"Runs cannot be accepted now; try again later."
#: /metrics when the run owner, which keeps the host's counters, does not give them (docs/observability.md).
MSG_NO_METRICS = b"The metrics cannot be read now; try again later."
#: Retry-After of that answer, in seconds: the owner is being greeted, replaced or is stopped.
METRICS_RETRY_AFTER = 1
TEXT_PLAIN = "text/plain; charset=utf-8"
#: Where the server puts the request's headers as a list of (name, value), repeats included.
HEADER_LIST_KEY = "hookrunner.header_list"
#: Where an answer names the headers its handler set, for the server to write them as Go does: sorted, and
#: before those the server adds (a sniffed Content-Type, Content-Length).
HANDLER_HEADERS_KEY = "hookrunner.handler_headers"
GO_BUFFER_BEFORE_CHUNKING = 2048


class Answer(Response):
    """A response with no default Content-Type: like Go, an empty body carries none."""

    default_mimetype = None
    automatically_set_content_length = True
    #: What webhook's handler itself wrote, for the -debug dump: WriteHeader's code (0 if it never
    #: called it) and the headers it set (Go sniffs Content-Type only later).
    written_status = 0
    written_headers: dict[str, str] = {}
    #: The names of the headers in the handler's map when the head went out (Go writes those first,
    #: sorted); None for an answer not built by answer().
    handler_names: frozenset[str] | None = None

    def body_size(self) -> int:
        """The body's length, as the access log gives it."""
        return len(self.get_data())

    def get_wsgi_headers(self, environ: dict[str, Any]) -> Any:
        headers = super().get_wsgi_headers(environ)
        # Go writes a Location as it was given (a redirect keeps the raw query's bytes and brackets);
        # werkzeug would re-encode it as a URI.
        location = self.headers.get("Location")
        if location is not None:
            headers["Location"] = location
        # net/http gives a HEAD answer a Content-Length only when the handler wrote some body.
        if environ.get("REQUEST_METHOD") == "HEAD" and self.is_sequence and not self.get_data():
            headers.pop("Content-Length", None)
        if self.handler_names is not None:
            environ[HANDLER_HEADERS_KEY] = self.handler_names
        return headers


def answer(
    status: int,
    body: bytes,
    headers: dict[str, str],
    explicit_type: str | None = None,
    *,
    type_after_status: bool = False,
) -> Answer:
    """Build an answer the way Go's ResponseWriter would frame it (sniffed type, no body on 204/304/1xx).

    A status of 0 means the handler never called WriteHeader: Go then answers 200. With
    `type_after_status` the handler sets `explicit_type` only after WriteHeader (webhook's command-failure
    message): the -debug dump shows it, but the head already went out with a sniffed type.
    """
    written_status = status
    status = status or 200
    headers = dict(headers)
    if explicit_type is not None and not type_after_status:
        headers["Content-Type"] = explicit_type
    handler_names = frozenset(headers)
    written_headers = dict(headers)
    if explicit_type is not None and type_after_status:
        written_headers["Content-Type"] = explicit_type
    bodyless = status == 204 or status == 304 or 100 <= status < 200
    if bodyless:
        body = b""
    elif body and "Content-Type" not in headers:
        headers["Content-Type"] = detect_content_type(body)
    response = Answer(body, status=status_line(status), headers=list(headers.items()))
    if bodyless or len(body) > GO_BUFFER_BEFORE_CHUNKING:
        # Go knows the length only of a body that fits its 2 KiB buffer; a longer one goes out chunked.
        response.headers.pop("Content-Length", None)
        response.automatically_set_content_length = False
    response.written_status = written_status
    response.written_headers = written_headers
    response.handler_names = handler_names
    return response


# environ key set when the request body could not be read: the answer then closes the connection.
BODY_FAILED_KEY = "hookrunner.body_failed"


def _go_body_error(exc: Exception) -> str:
    """net/http's words for a request body that cannot be read."""
    if isinstance(exc, ChunkLengthTooLarge):
        return "http chunk length too large"
    if isinstance(exc, http_errors.InvalidChunkSize):
        return "invalid byte in chunk length"
    if isinstance(exc, http_errors.ChunkMissingTerminator) and exc.term:
        return "malformed chunked encoding"
    return "unexpected EOF"


def read_body(rid: str) -> bytes:
    """The request body, as `request.get_data()` returns it, in one read instead of 64 KiB pieces.

    werkzeug reads a body 64 KiB at a time, and each piece makes gunicorn copy what it holds beyond it,
    which dominates a 1 MiB signed push. A declared length over the limit is 413 before reading; a body
    without a length (chunked) is capped by CappedInput, which create_app puts in front of the app.
    A body that breaks off or has a malformed chunk is handled as webhook does: the error is logged, the
    hook gets what arrived before it, and the answer closes the connection.
    """
    # Without a declared length the body is chunked, and CappedInput enforces the limit while reading.
    limit = request.max_content_length if request.content_length is not None else None
    stream = request.environ["wsgi.input"]
    if limit is not None:
        length = request.content_length
        if length is not None and length > limit:
            raise RequestEntityTooLarge()
    try:
        return bytes(stream.read() if limit is None else stream.read(limit))
    except HTTPException:
        raise  # 413 from CappedInput, 408 from -read-timeout: answers of their own
    except Exception as exc:
        log.request(rid, f"error reading the request body: {_go_body_error(exc)}")
        request.environ[BODY_FAILED_KEY] = True
    try:
        # What arrived before the error: gunicorn keeps it, and its failed reader now reports the end.
        return bytes(stream.read() if limit is None else stream.read(limit))
    except Exception:
        return b""


def go_method() -> str:
    """The method as sent: Go keeps `post` distinct from `POST` (werkzeug upper-cases it)."""
    return str(request.environ.get("REQUEST_METHOD", "GET"))


#: WSGI keys that are not request headers in Go's sense (Go moves Host and Transfer-Encoding out).
_NOT_HEADERS = {"HTTP_HOST", "HTTP_TRANSFER_ENCODING"}


def go_request_headers(environ: dict[str, Any]) -> dict[str, Any]:
    """The request's headers under Go's canonical names; Go keeps Host and Transfer-Encoding apart."""
    headers: dict[str, Any] = {}
    header_list = environ.get(HEADER_LIST_KEY)
    if header_list is not None:
        # The server's own list keeps repeated headers apart: Go takes the first value of each.
        for name, value in header_list:
            key = canonical_header_key(name)
            if key not in ("Host", "Transfer-Encoding"):
                headers.setdefault(key, value.encode("latin-1").decode("utf-8", "surrogateescape"))
        return headers
    for key, value in environ.items():
        if key.startswith("HTTP_") and key not in _NOT_HEADERS:
            # WSGI hands header bytes over as latin-1; Go keeps them as they came (UTF-8 or not).
            value = value.encode("latin-1").decode("utf-8", "surrogateescape")
            headers.setdefault(canonical_header_key(key[5:].replace("_", "-")), value)
    if environ.get("CONTENT_TYPE"):
        headers.setdefault("Content-Type", environ["CONTENT_TYPE"])
    if environ.get("CONTENT_LENGTH"):
        headers.setdefault("Content-Length", environ["CONTENT_LENGTH"])
    return headers


def go_request_path(environ: dict[str, Any]) -> str:
    """The decoded URL path as Go's server sees it, taken from the raw request target when there is one.

    WSGI servers normalise PATH_INFO (gunicorn reads `//hooks/a` as a host and a path); webhook routes
    on Go's URL.Path, so the raw target is parsed here. A bad percent-escape raises ValueError (Go: 400).
    """
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if not raw:
        return str(environ.get("PATH_INFO", "")) or "/"
    if raw == "*":
        return "*"
    if not raw.startswith("/"):  # absolute-form: http://host/path
        raw = urlsplit(raw).path or "/"
    target = raw.split("?", 1)[0].encode("latin-1")
    if b"%" not in target:
        return target.decode("utf-8", "surrogateescape")
    out = bytearray()
    i = 0
    while i < len(target):
        if target[i] == 0x25:
            pair = target[i + 1 : i + 3]
            if len(pair) < 2 or not all(b in b"0123456789abcdefABCDEF" for b in pair):
                raise ValueError("invalid URL escape")
            out.append(int(pair, 16))
            i += 3
        else:
            out.append(target[i])
            i += 1
    return out.decode("utf-8", "surrogateescape")


def clean_path(path: str) -> str:
    """gorilla/mux's cleanPath: Go's path.Clean that keeps a trailing slash."""
    if not path:
        return "/"
    if not path.startswith("/"):
        path = "/" + path
    cleaned = posixpath.normpath(path)
    if cleaned.startswith("//"):
        cleaned = "/" + cleaned.lstrip("/")
    if path.endswith("/") and cleaned != "/":
        cleaned += "/"
    return cleaned


def go_duration(seconds: float) -> str:
    """Go's time.Duration.String() for a non-negative duration under a minute (webhook's access log)."""
    ns = int(seconds * 1e9)
    if ns < 1000:
        return f"{ns}ns"
    for unit, scale in (("µs", 3), ("ms", 6), ("s", 9)):
        if ns < 10 ** (scale + 3) or unit == "s":
            whole, frac = divmod(ns, 10**scale)
            digits = f"{frac:0{scale}d}".rstrip("0")
            return f"{whole}{'.' + digits if digits else ''}{unit}"
    return f"{ns}ns"  # not reached


def humanize_bytes(size: int) -> str:
    """go-humanize's IBytes, as webhook's access log prints the body size."""
    if size < 10:
        return f"{size} B"
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    exponent = 0
    while size >= 1024 ** (exponent + 1) and exponent < len(units) - 1:
        exponent += 1
    value = int(size / 1024**exponent * 10 + 0.5) / 10
    return f"{value:.1f} {units[exponent]}" if value < 10 else f"{value:.0f} {units[exponent]}"


class CappedInput:
    """wsgi.input for a body of unknown length (chunked): reading past `limit` bytes raises 413.

    werkzeug's own cap on such a body stops at the limit and returns what it has read, so a body that is
    too large would reach the hook cut short instead of being refused (docs/limits.md).
    """

    def __init__(self, stream: Any, limit: int) -> None:
        self._stream = stream
        self._left = limit

    def read(self, size: int | None = -1) -> bytes:
        # One byte more than allowed tells a body that is too large from one that just fits.
        want = self._left + 1 if size is None or size < 0 else min(size, self._left + 1)
        data: bytes = self._stream.read(want) if want > 0 else b""
        if len(data) > self._left:
            raise RequestEntityTooLarge()
        self._left -= len(data)
        return data


def metrics_answer(metrics: Metrics, accept: str, headers: dict[str, str]) -> Answer:
    """`/metrics` with -metrics: the exposition in the format `accept` asks for, or `503` with Retry-After,
    never an empty `200`, when the run owner does not give the host's counters (ops/metrics.py)."""
    try:
        body, content_type = metrics.exposition(accept)
    except HostMetricsAway:
        return answer(503, MSG_NO_METRICS, {**headers, "Retry-After": str(METRICS_RETRY_AFTER)}, TEXT_PLAIN)
    return answer(200, body, headers, content_type)
