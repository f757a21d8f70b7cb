"""webhook's log: `[webhook] YYYY/MM/DD HH:MM:SS message`, off unless -verbose, -debug or -logfile.

With `-log-format json` the same entries become one JSON object per line (docs/observability.md).
"""

from __future__ import annotations

import codecs
import datetime
import itertools
import json
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

PREFIX = "[webhook] "

#: Message openings that mark an entry as an error or a warning in JSON mode, when the caller gave no level.
_ERROR_OPENINGS = ("error", "couldn't", "panic", "failed")
_WARNING_OPENINGS = ("warn",)


def _level_of(message: str) -> str:
    lowered = message.lower()
    if lowered.startswith(_ERROR_OPENINGS):
        return "error"
    if lowered.startswith(_WARNING_OPENINGS):
        return "warn"
    return "info"


def json_line(entry: dict[str, Any]) -> str:
    """One entry as a line of strict JSON; bytes that are not UTF-8 (kept as surrogates) become U+FFFD."""
    text = json.dumps(entry, ensure_ascii=False, default=str)
    try:
        text = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:
        text = json.dumps(entry, default=str)  # other lone surrogates: let \u escapes carry them
    return text + "\n"


#: How much of a command's output is decoded and written at a time (GoLogger.request_output).
OUTPUT_PIECE = 1 << 20


def decoded_pieces(data: bytes, piece: int = OUTPUT_PIECE) -> Iterator[str]:
    """`data.decode("utf-8", "replace")` in pieces of at most `piece` bytes each (the same text: the
    incremental decoder keeps a sequence cut between two pieces whole)."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    view = memoryview(data)
    for start in range(0, len(data), piece):
        yield decoder.decode(view[start : start + piece])
    yield decoder.decode(b"", final=True)


def _stripped(pieces: Iterable[str]) -> Iterator[str]:
    """The pieces of `"".join(pieces).strip()`, with no piece joined to another (the whitespace held back
    at the end of what came so far is the only text kept)."""
    started = False
    held = ""
    for piece in pieces:
        if not started:
            piece = piece.lstrip()
            started = bool(piece)
        kept = piece.rstrip()
        if kept:
            if held:
                yield held
            yield kept
            held = piece[len(kept) :]
        else:
            held += piece
    # the trailing whitespace is dropped


def _is_utf8(data: bytes, piece: int) -> bool:
    """Whether `data` is UTF-8 (decoded `piece` bytes at a time: no text of it is held whole)."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    view = memoryview(data)
    try:
        for start in range(0, len(data), piece):
            decoder.decode(view[start : start + piece])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _encoded(text: str) -> bytes:
    """`text` as the log writes it: a byte that was not UTF-8 (kept as a surrogate) as it came."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that stands for no byte
        return text.encode("utf-8", "replace")


#: The most parts one writev(2) takes (Linux's IOV_MAX).
_IOV_MAX = 1024


def _write_all(fd: int, parts: list[bytes]) -> None:
    """Write `parts` to `fd` in order, in as few writev(2) calls as the kernel allows."""
    views = deque(memoryview(part) for part in parts if part)
    while views:
        written = os.writev(fd, list(itertools.islice(views, _IOV_MAX)))
        while written:
            if written >= len(views[0]):
                written -= len(views.popleft())
            else:
                views[0] = views[0][written:]
                written = 0


def rfc3339_now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="milliseconds")


class GoLogger:
    """A thread-safe clone of Go's log package with the Ldate|Ltime flags and webhook's prefix."""

    def __init__(self, stream: TextIO | None = None, enabled: bool = True, fmt: str = "text") -> None:
        self._stream: TextIO = stream if stream is not None else sys.stderr
        self._lock = threading.Lock()
        self.enabled = enabled
        self.format = fmt  # "text" (webhook's lines) or "json"
        #: -access-log: the access entries are written even when the rest of the log is off.
        self.access = False

    @property
    def json(self) -> bool:
        return self.format == "json"

    def set_output(self, stream: TextIO) -> None:
        with self._lock:
            self._stream = stream

    def fileno(self) -> int | None:
        """The descriptor the log writes to (a process that closes what it inherited keeps this one)."""
        try:
            return self._stream.fileno()
        except (AttributeError, OSError, ValueError):
            return None

    def wants(self, event: str | None = None) -> bool:
        """Whether an entry of `event` would be written: callers ask before building a costly message. An
        entry of event `fatal` (hookrunner's own reason not to start: the journal, the admin listener) is
        written even with the log off, where webhook's own start-up errors are not."""
        return self.enabled or (self.access and event == "access") or event == "fatal"

    def output(
        self,
        message: str,
        *,
        request_id: str | None = None,
        level: str | None = None,
        hook: str | None = None,
        event: str | None = None,
        fields: dict[str, Any] | None = None,
    ) -> None:
        """Write one entry; like Go, add a newline only when the message has none.

        The keyword arguments show only in JSON mode; text lines stay exactly webhook's.
        """
        if not self.wants(event):
            return
        if self.json:
            entry = self._entry(level or _level_of(message), request_id, hook, event)
            entry["msg"] = message.strip()
            if fields:
                entry["fields"] = fields
            line = json_line(entry)
        else:
            line = self._prefix(request_id) + message
            if not line.endswith("\n"):
                line += "\n"
        self._write(line)

    def request_output(
        self,
        request_id: str,
        opening: str,
        output: bytes,
        *,
        hook: str | None = None,
        event: str | None = None,
    ) -> None:
        """The entry `request(request_id, opening + output.decode("utf-8", "replace") + "\n")` writes, byte
        for byte, in one write as before (no other process's line lands inside it), without the copies that
        made: the text, the message, the line and its bytes (4 more of a 50 MiB output). A text line whose
        output is UTF-8 is written from the output's own bytes; otherwise (bytes that are not UTF-8, or a
        JSON entry, escaped) the line's bytes are made a piece at a time, one copy of the output in all."""
        if not self.wants(event):
            return
        buffer = getattr(self._stream, "buffer", None)
        if len(output) <= OUTPUT_PIECE or buffer is None:  # the message as it always was, at its speed
            self.request(
                request_id, f"{opening}{output.decode('utf-8', 'replace')}\n", hook=hook, event=event
            )
            return
        pieces = decoded_pieces(output, OUTPUT_PIECE)
        if not self.json:
            head = _encoded(self._prefix(request_id) + opening)
            if _is_utf8(output, OUTPUT_PIECE):  # decoded and encoded again, it is the same bytes
                self._write_parts([head, output, b"\n"])
            else:
                self._write_parts([head, *map(_encoded, pieces), b"\n"])
            return
        first = next(pieces)
        level = _level_of(opening + first[:16])
        entry = self._entry(level, request_id, hook, event)
        entry["msg"] = sentinel = "\x00msg\x00"
        line = json_line(entry)
        before, found, after = line.rpartition(json.dumps(sentinel))  # msg is the entry's last key
        if not found or line != json.dumps(entry, ensure_ascii=False) + "\n":
            # A field that json_line repaired (bytes that are not UTF-8): the whole entry, as before.
            whole = opening + "".join(itertools.chain((first,), pieces)) + "\n"
            self.request(request_id, whole, hook=hook, event=event)
            return
        # The text has no surrogates (decoded with "replace"): json_line would leave its pieces as they are.
        msg = _stripped(itertools.chain((opening, first), pieces))
        escaped = (json.dumps(piece, ensure_ascii=False)[1:-1].encode() for piece in msg)
        self._write_parts([_encoded(before + '"'), *escaped, _encoded('"' + after)])

    def _write_parts(self, parts: list[bytes]) -> None:
        """Write one line's bytes, given in parts, in one writev(2) where the stream has a descriptor (as
        one write of the whole line was): a regular file or an O_APPEND one takes it whole, whatever other
        process writes to it. Only a line of more than IOV_MAX parts takes more: from about 512 MiB of
        output in a JSON entry (up to two parts a 1 MiB piece), 1 GiB in a text line."""
        with self._lock:
            try:
                self._stream.flush()
                buffer = self._stream.buffer
                buffer.flush()
                try:
                    fd = buffer.fileno()
                except (OSError, ValueError):  # io.UnsupportedOperation: an in-memory stream
                    for part in parts:
                        buffer.write(part)
                    buffer.flush()
                    return
                _write_all(fd, parts)
            except (OSError, ValueError):
                pass  # a closed or full log must never take a request down

    def _prefix(self, request_id: str | None) -> str:
        stamp = time.strftime("%Y/%m/%d %H:%M:%S")
        return f"{PREFIX}{stamp} " + (f"[{request_id}] " if request_id is not None else "")

    def _entry(
        self, level: str, request_id: str | None, hook: str | None, event: str | None
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {"time": rfc3339_now(), "level": level}
        if request_id is not None:
            entry["request_id"] = request_id
        if hook is not None:
            entry["hook"] = hook
        if event is not None:
            entry["event"] = event
        return entry

    def _write(self, line: str) -> None:
        # Go's log writes the bytes it is given: a byte that is not UTF-8 (a header value, say, kept as a
        # surrogate) goes out as it came, where a text stream would write `\udcff` or `?`.
        if getattr(self._stream, "buffer", None) is not None:
            self._write_parts([_encoded(line)])
            return
        with self._lock:
            try:
                self._stream.write(line)
                self._stream.flush()
            except (OSError, ValueError):
                pass  # a closed or full log must never take a request down

    def raw(
        self, text: str, *, request_id: str | None = None, event: str | None = None, plain: str = ""
    ) -> None:
        """Write text as it is, with no prefix (webhook's -debug dumper writes to the log's writer).

        In JSON mode it becomes one debug entry whose message is `plain` (or the text).
        """
        if not self.enabled:
            return
        if self.json:
            self.output(plain or text, request_id=request_id, level="debug", event=event)
            return
        self._write(text)

    def printf(self, fmt: str, *args: object) -> None:
        """Go's log.Printf with Python %-formatting; callers pass already-Go-rendered values."""
        self.output(fmt % args if args else fmt)

    def request(
        self,
        request_id: str,
        message: str,
        *,
        level: str | None = None,
        hook: str | None = None,
        event: str | None = None,
        fields: dict[str, Any] | None = None,
    ) -> None:
        """The common `[reqid] message` form."""
        self.output(message, request_id=request_id, level=level, hook=hook, event=event, fields=fields)


#: The process-wide logger, configured once by the CLI (like Go's default logger).
log = GoLogger(enabled=False)


def configure(enabled: bool, logfile: str = "", fmt: str = "text") -> None:
    """Point the logger at stderr or at -logfile (append, created 0666 minus umask, as Go does)."""
    if logfile:
        log.set_output(open(logfile, "a", encoding="utf-8", errors="replace"))  # noqa: SIM115
    log.enabled = enabled
    log.format = fmt
