"""Faults for the run journal's tests: a disk that fails its writes, as the process sees it."""

from __future__ import annotations

import contextlib
import resource
import signal
from collections.abc import Iterator
from pathlib import Path

from hookrunner.state.journal import FILE_NAME


@contextlib.contextmanager
def failing_disk(state: Path) -> Iterator[None]:
    """A disk that fails the journal's writes, as the process sees it: the write-ahead log cannot grow past
    its size (EFBIG: SQLite's "disk I/O error")."""
    wal = state / (FILE_NAME + "-wal")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (wal.stat().st_size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)
