"""A running run's output, sent to the run history while the run runs (the live log, docs/history.md): the
chunks its reader is told (run/spawn.py `Output`'s listener) are gathered per run and sent as one "output"
event per run every BATCH_SECONDS at most, whatever the number of chunks, each with at most the history's
output limit (older bytes of a batch are dropped, and the event's offset says where its bytes start). The
run's final event still carries the whole kept tail, so nothing here decides what a finished record holds.

One thread per process sends the batches; a reader only appends under a lock and never waits on the sink.
Nothing here knows HTTP.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable
from typing import Any

#: Seconds a run's chunks are gathered before they are sent: a flood makes at most 1/BATCH_SECONDS events a
#: second per run, and a line printed alone reaches the history within this.
BATCH_SECONDS = 0.1


class _Pending:
    """One run's output not sent yet: its bytes (at most `keep`), and the whole size so far."""

    __slots__ = ("data", "size")

    def __init__(self) -> None:
        self.data = bytearray()
        self.size = 0


class OutputBatcher:
    """Gathers each run's chunks (by the key of its record) and sends them to `sink` as events
    {"event": "output", "key", "offset", "size", "output" (base64)}: `offset` is where the event's bytes
    start in the run's whole output, `size` the whole output's size so far (offset + their length)."""

    def __init__(
        self, sink: Callable[[dict[str, Any]], None], keep: int, every: float = BATCH_SECONDS
    ) -> None:
        self._sink = sink
        self._keep = max(keep, 0)
        self._every = every
        self._lock = threading.Condition(threading.Lock())
        self._pending: dict[str, _Pending] = {}
        self._sizes: dict[str, int] = {}
        self._thread: threading.Thread | None = None

    def chunk(self, key: str, data: bytes) -> None:
        """Run `key` printed `data` (on its reader's thread or greenlet): kept until the next batch."""
        with self._lock:
            pending = self._pending.get(key)
            if pending is None:
                pending = self._pending[key] = _Pending()
                pending.size = self._sizes.get(key, 0)
            pending.size += len(data)
            if self._keep:
                pending.data += data[-self._keep :]
                if len(pending.data) > self._keep:
                    del pending.data[: len(pending.data) - self._keep]
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="history-output", daemon=True)
                self._thread.start()
            self._lock.notify()

    def forget(self, key: str) -> None:
        """Run `key` ended: what it had not sent yet is in its final event; nothing more is sent for it."""
        with self._lock:
            self._pending.pop(key, None)
            self._sizes.pop(key, None)

    def flush(self) -> int:
        """Send every run's gathered output now; returns how many events were sent."""
        with self._lock:
            batches, self._pending = self._pending, {}
            for key, pending in batches.items():
                self._sizes[key] = pending.size
        for key, pending in batches.items():
            data = bytes(pending.data)
            self._sink(
                {
                    "event": "output",
                    "key": key,
                    "offset": pending.size - len(data),
                    "size": pending.size,
                    "output": base64.b64encode(data).decode("ascii"),
                }
            )
        return len(batches)

    def _serve(self) -> None:
        while True:
            with self._lock:
                while not self._pending:
                    self._lock.wait()
            time.sleep(self._every)  # the chunks of the next BATCH_SECONDS join this batch
            self.flush()
