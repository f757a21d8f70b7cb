"""webhook's log: `[webhook] YYYY/MM/DD HH:MM:SS message`, off unless -verbose, -debug or -logfile."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

PREFIX = "[webhook] "


class GoLogger:
    """A thread-safe clone of Go's log package with the Ldate|Ltime flags and webhook's prefix."""

    def __init__(self, stream: TextIO | None = None, enabled: bool = True) -> None:
        self._stream: TextIO = stream if stream is not None else sys.stderr
        self._lock = threading.Lock()
        self.enabled = enabled

    def set_output(self, stream: TextIO) -> None:
        with self._lock:
            self._stream = stream

    def output(self, message: str) -> None:
        """Write one entry; like Go, add a newline only when the message has none."""
        if not self.enabled:
            return
        stamp = time.strftime("%Y/%m/%d %H:%M:%S")
        line = f"{PREFIX}{stamp} {message}"
        if not line.endswith("\n"):
            line += "\n"
        with self._lock:
            try:
                self._stream.write(line)
                self._stream.flush()
            except (OSError, ValueError):
                pass  # a closed or full log must never take a request down

    def raw(self, text: str) -> None:
        """Write text as it is, with no prefix (webhook's -debug dumper writes to the log's writer)."""
        if not self.enabled:
            return
        with self._lock:
            try:
                self._stream.write(text)
                self._stream.flush()
            except (OSError, ValueError):
                pass

    def printf(self, fmt: str, *args: object) -> None:
        """Go's log.Printf with Python %-formatting; callers pass already-Go-rendered values."""
        self.output(fmt % args if args else fmt)

    def request(self, request_id: str, message: str) -> None:
        """The common `[reqid] message` form."""
        self.output(f"[{request_id}] {message}")


#: The process-wide logger, configured once by the CLI (like Go's default logger).
log = GoLogger(enabled=False)


def configure(enabled: bool, logfile: str = "") -> None:
    """Point the logger at stderr or at -logfile (append, created 0666 minus umask, as Go does)."""
    if logfile:
        log.set_output(open(logfile, "a", encoding="utf-8", errors="replace"))  # noqa: SIM115
    log.enabled = enabled
