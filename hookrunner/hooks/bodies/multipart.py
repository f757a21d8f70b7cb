"""webhook's multipart handling: Go's mime/multipart ReadForm, as net/http's ParseMultipartForm runs it,
then the payload webhook builds from the form."""

from __future__ import annotations

from typing import Any

from hookrunner.errors import MultipartError
from hookrunner.golang.gostring import go_bytes_to_str
from hookrunner.golang.json import GoJSONError, NilMap, decode_json_map
from hookrunner.golang.mime import MediaTypeError, parse_media_type
from hookrunner.golang.strconv import quote as go_quote
from hookrunner.golang.url import go_parse_query
from hookrunner.hooks.request import canonical_header_key

__all__ = ["parse_multipart"]


class _MultipartReader:
    """Go's multipart.Reader over a byte stream: boundary lines, MIME headers, part bodies."""

    _CHUNK = 64 * 1024
    _PEEK_BUFFER = 4096  # Go's bufio size here: longer lines between parts are an error

    def __init__(self, stream: Any, content_length: int | None, boundary: str) -> None:
        self.stream = stream
        self.remaining = content_length
        self.buf = bytearray()
        self.eof = False
        b = boundary.encode("utf-8", "surrogateescape")
        self.nl = b"\r\n"
        self.dash_boundary = b"--" + b
        self.dash_boundary_dash = b"--" + b + b"--"
        self.parts_read = 0

    @property
    def nl_dash_boundary(self) -> bytes:
        return self.nl + self.dash_boundary

    def _fill(self) -> bool:
        """Read more of the body into the buffer; False once it is all read."""
        if self.eof:
            return False
        size = self._CHUNK if self.remaining is None else min(self._CHUNK, self.remaining)
        chunk = self.stream.read(size) if size > 0 else b""
        if not chunk:
            self.eof = True
            return False
        if self.remaining is not None:
            self.remaining -= len(chunk)
        self.buf.extend(chunk)
        return True

    def _read_slice(self) -> tuple[bytes, bool]:
        """bufio.Reader.ReadSlice('\\n'): (line, at_eof); a line over 4096 bytes is Go's ErrBufferFull."""
        while True:
            i = self.buf.find(b"\n", 0, self._PEEK_BUFFER)
            if i >= 0:
                line = bytes(self.buf[: i + 1])
                del self.buf[: i + 1]
                return line, False
            if len(self.buf) >= self._PEEK_BUFFER:
                raise MultipartError("multipart: NextPart: bufio: buffer full")
            if not self._fill():
                line = bytes(self.buf)
                self.buf.clear()
                return line, True

    def _read_line(self) -> bytes | None:
        """textproto's readLineSlice: a line without its \\n or \\r\\n; None at the end of input."""
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[: i + 1]
                return line[:-1] if line.endswith(b"\r") else line
            if not self._fill():
                if not self.buf:
                    return None
                line = bytes(self.buf)
                self.buf.clear()
                return line

    def _peek(self, n: int) -> bytes:
        while len(self.buf) < n and self._fill():
            pass
        return bytes(self.buf[:n])

    def _is_boundary_delimiter_line(self, line: bytes) -> bool:
        if not line.startswith(self.dash_boundary):
            return False
        rest = line[len(self.dash_boundary) :].lstrip(b" \t")
        # The first boundary line decides whether the body uses bare \n line ends.
        if self.parts_read == 0 and rest == b"\n":
            self.nl = b"\n"
            return True
        return rest == self.nl

    def _is_final_boundary(self, line: bytes) -> bool:
        if not line.startswith(self.dash_boundary_dash):
            return False
        rest = line[len(self.dash_boundary_dash) :].lstrip(b" \t")
        return not rest or rest == self.nl

    def next_part(self) -> dict[str, list[str]] | None:
        """Move to the next part and read its headers; None at the end of the form."""
        if self.dash_boundary == b"--":
            raise MultipartError("multipart: boundary is empty")
        expect_new_part = False
        while True:
            line, at_eof = self._read_slice()
            if at_eof and self._is_final_boundary(line):
                return None
            if at_eof:
                raise MultipartError("multipart: NextPart: EOF")
            if self._is_boundary_delimiter_line(line):
                self.parts_read += 1
                return self._read_headers()
            if self._is_final_boundary(line):
                return None
            if expect_new_part:
                got = go_quote(go_bytes_to_str(line))
                raise MultipartError(f"multipart: expecting a new Part; got line {got}")
            if self.parts_read == 0:
                continue  # the preamble
            if line == self.nl:
                expect_new_part = True
                continue
            raise MultipartError(f"multipart: unexpected line in Next(): {go_quote(go_bytes_to_str(line))}")

    def _read_headers(self) -> dict[str, list[str]] | None:
        """textproto's ReadMIMEHeader; None when the input ends inside them (Go then ends the form)."""
        headers: dict[str, list[str]] = {}
        first = self._peek(1)
        if first in (b" ", b"\t"):
            line = self._read_line()
            if line is None:
                return None
            raise MultipartError(f"malformed MIME header initial line: {go_bytes_to_str(line)}")
        while True:
            line = self._read_line()
            if line is None:
                return None
            if not line:
                return headers
            if b":" not in line:
                bad = go_quote(go_bytes_to_str(line))
                raise MultipartError(f"malformed MIME header: missing colon: {bad}")
            text = line.rstrip(b" \t")
            # Continuation lines start with a space or tab and are joined with one space.
            while self._peek(1) in (b" ", b"\t"):
                more = self._read_line()
                if more is None:
                    break
                text = text + b" " + more.strip(b" \t")
            raw_key, _, raw_value = text.partition(b":")
            key = canonical_header_key(go_bytes_to_str(raw_key))
            if not key:
                continue
            headers.setdefault(key, []).append(go_bytes_to_str(raw_value.lstrip(b" \t")))

    def _byte_at(self, j: int) -> int | None:
        while len(self.buf) <= j:
            if not self._fill():
                return None
        return self.buf[j]

    def _boundary_follows(self, j: int) -> bool:
        """Go's matchAfterPrefix: a delimiter ends at buf[j] with `--`, blank, CR, LF or the input's end."""
        c = self._byte_at(j)
        if c is None or c in b" \t\r\n":
            return True
        return c == 0x2D and self._byte_at(j + 1) == 0x2D

    def read_body(self, sink: bytearray | None, limit: int | None = None) -> int:
        """Read the current part's body, keeping it in `sink` (None discards it); return its length.

        With a `limit`, reading stops once the body is known to be longer than that (io.CopyN).
        """
        # At the very start of a body the boundary may come without the line break before it.
        head = len(self.dash_boundary)
        while len(self.buf) < head and self._fill():
            pass
        if self.buf.startswith(self.dash_boundary) and self._boundary_follows(head):
            return 0
        total = 0
        delimiter = self.nl_dash_boundary
        search_from = 0
        while True:
            i = self.buf.find(delimiter, search_from)
            if i >= 0:
                if self._boundary_follows(i + len(delimiter)):
                    return total + self._emit(sink, i)
                search_from = i + 1
                continue
            # No delimiter yet: all but a tail that could start one split across reads is body.
            safe = max(0, len(self.buf) - len(delimiter) + 1)
            total += self._emit(sink, safe)
            if limit is not None and total > limit:
                return total
            if not self._fill():
                raise MultipartError("unexpected EOF")
            search_from = 0

    def _emit(self, sink: bytearray | None, n: int) -> int:
        if sink is not None:
            sink.extend(self.buf[:n])
        del self.buf[:n]
        return n


_MAX_PARTS = 1000  # Go 1.19.8's multipartmaxparts default
_MAX_HEADERS = 10000  # and its multipartmaxheaders
_MAP_ENTRY_OVERHEAD = 200
_FILE_HEADER_SIZE = 100
_TOO_LARGE = "multipart: message too large"


def _mime_header_size(headers: dict[str, list[str]]) -> int:
    return 400 + sum(len(k) + _MAP_ENTRY_OVERHEAD + sum(len(v) for v in vs) for k, vs in headers.items())


def _decode_part_body(headers: dict[str, list[str]], body: bytes) -> bytes:
    # Go decodes (and then hides) a quoted-printable Content-Transfer-Encoding.
    cte = headers.get("Content-Transfer-Encoding", [""])[0]
    if cte.lower() == "quoted-printable":
        import binascii

        return binascii.a2b_qp(body)
    return body


def parse_multipart(
    stream: Any,
    content_type: str,
    content_length: int | None,
    max_memory: int,
    json_file_names: set[str],
    *,
    raw_query: bytes = b"",
    on_log: Any = None,
) -> dict[str, Any] | None:
    """webhook's multipart handling: Go's ParseMultipartForm, then the payload webhook builds from it.

    `content_type` must be the request's own Content-Type header (Go parses the form from it even when a
    hook's `incoming-payload-content-type` made webhook take the multipart branch). Value parts give the
    first value of each name; a file part (one with a non-empty filename) is read only when it is the
    first file of its name and either its Content-Type is exactly `application/json` or its name is in
    `json_file_names`; it is decoded as a JSON object, and a failure stores NilMap under its name.
    Returns None when nothing was stored (Go's nil map). `raw_query` is the URL's query: Go's form parsing
    fails on a query that url.ParseQuery rejects. `on_log(message)` receives webhook's log lines
    (without the `[id] ` prefix). Raises MultipartError with Go's error text.
    """
    def log_line(message: str) -> None:
        if on_log is not None:
            on_log(message)

    try:
        media_type, params = parse_media_type(content_type)
    except MediaTypeError:
        media_type, params = "", {}
    if media_type != "multipart/form-data":
        raise MultipartError("request Content-Type isn't multipart/form-data")
    if "boundary" not in params:
        raise MultipartError("no multipart boundary param in Content-Type")
    reader = _MultipartReader(stream, content_length, params["boundary"])

    values: dict[str, str] = {}
    files: dict[str, tuple[dict[str, list[str]], bytes | None]] = {}
    max_file_memory = max_memory
    max_memory_bytes = max_memory + (10 << 20)
    if max_memory_bytes <= 0:
        max_memory_bytes = 0 if max_memory < 0 else 1 << 63
    max_parts = _MAX_PARTS
    max_headers = _MAX_HEADERS
    while True:
        headers = reader.next_part()
        if headers is None:
            break
        if sum(len(v) for v in headers.values()) > max_headers:
            raise MultipartError("message too large")
        if max_parts <= 0:
            raise MultipartError(_TOO_LARGE)
        max_parts -= 1
        disposition = headers.get("Content-Disposition", [""])[0]
        try:
            kind, disposition_params = parse_media_type(disposition)
        except MediaTypeError:
            kind, disposition_params = "", {}
        name = disposition_params.get("name", "") if kind == "form-data" else ""
        if not name:
            reader.read_body(None)
            continue
        max_memory_bytes -= len(name.encode("utf-8", "surrogateescape")) + _MAP_ENTRY_OVERHEAD
        if max_memory_bytes < 0:
            raise MultipartError(_TOO_LARGE)
        if not disposition_params.get("filename", ""):
            sink = bytearray()
            size = reader.read_body(sink, max_memory_bytes)
            max_memory_bytes -= size
            if max_memory_bytes < 0:
                raise MultipartError(_TOO_LARGE)
            values.setdefault(name, go_bytes_to_str(_decode_part_body(headers, bytes(sink))))
            continue
        max_memory_bytes -= _mime_header_size(headers) + _MAP_ENTRY_OVERHEAD + _FILE_HEADER_SIZE
        if max_memory_bytes < 0:
            raise MultipartError(_TOO_LARGE)
        max_headers -= sum(len(v) for v in headers.values())
        # Only the first file of a name is looked at, and only a JSON one is worth keeping.
        wanted = name not in files and (
            name in json_file_names or "application/json" in headers.get("Content-Type", [])
        )
        file_sink = bytearray() if wanted else None
        size = reader.read_body(file_sink)
        if size <= max_file_memory:
            # Go keeps a small file in memory and counts it; a bigger one goes to disk uncounted.
            max_file_memory -= size
            max_memory_bytes -= size
        if name not in files:
            body = _decode_part_body(headers, bytes(file_sink)) if file_sink is not None else None
            files[name] = (headers, body)
    if raw_query:
        _, query_error = go_parse_query(raw_query)
        if query_error is not None:
            raise MultipartError(query_error)

    payload: dict[str, Any] | None = None
    for name, value in values.items():
        log_line(f"found multipart form value {go_quote(name)}")
        payload = payload if payload is not None else {}
        payload[name] = value
    for name, (_, body) in files.items():
        if body is None:
            continue
        log_line(f"parsing multipart form file {go_quote(name)} as JSON")
        try:
            part: dict[str, Any] = decode_json_map(body)
        except GoJSONError as exc:
            log_line(f"error parsing JSON payload file: {exc}")
            part = NilMap()
        payload = payload if payload is not None else {}
        payload[name] = part
    return payload
