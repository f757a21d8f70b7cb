"""A running run's output sent to the history in batches: many chunks make few events, each at most the
output limit, with offsets that say where its bytes start; a run that ended sends nothing more."""

from __future__ import annotations

import base64
import threading
import time
from typing import Any

from hookrunner.run.liveoutput import OutputBatcher


class Sink:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def __call__(self, event: dict[str, Any]) -> None:
        with self.lock:
            self.events.append(event)

    def data(self) -> bytes:
        return b"".join(base64.b64decode(e["output"]) for e in self.events)


def wait_until(check: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return check()


def test_chunks_are_batched_with_offsets() -> None:
    sink = Sink()
    batcher = OutputBatcher(sink, keep=1 << 20, every=3600)  # sent only by flush
    for n in range(1000):
        batcher.chunk("k1", b"line %04d\n" % n)
    assert sink.events == []
    assert batcher.flush() == 1
    batcher.chunk("k1", b"more\n")
    batcher.flush()
    first, second = sink.events
    assert first == {"event": "output", "key": "k1", "offset": 0, "size": 10000,
                     "output": base64.b64encode(b"".join(b"line %04d\n" % n for n in range(1000))).decode()}
    assert (second["offset"], second["size"], base64.b64decode(second["output"])) == (10000, 10005, b"more\n")


def test_a_batch_keeps_at_most_the_limit_and_says_where_it_starts() -> None:
    sink = Sink()
    batcher = OutputBatcher(sink, keep=16, every=3600)
    batcher.chunk("k", b"a" * 100)
    batcher.chunk("k", b"0123456789")
    batcher.flush()
    (event,) = sink.events
    assert (event["offset"], event["size"]) == (94, 110)
    assert base64.b64decode(event["output"]) == b"aaaaaa0123456789"


def test_without_a_limit_only_the_size_is_sent() -> None:
    sink = Sink()
    batcher = OutputBatcher(sink, keep=0, every=3600)
    batcher.chunk("k", b"secret\n")
    batcher.flush()
    assert [(e["offset"], e["size"], e["output"]) for e in sink.events] == [(7, 7, "")]


def test_a_flood_makes_about_ten_events_a_second() -> None:
    sink = Sink()
    batcher = OutputBatcher(sink, keep=64 << 10, every=0.1)
    deadline = time.monotonic() + 1.0
    chunks = 0
    while time.monotonic() < deadline:
        batcher.chunk("k", b"x" * 4096)
        chunks += 1
    assert wait_until(lambda: sink.events and sink.events[-1]["size"] == chunks * 4096)
    assert chunks > 100, chunks
    assert 5 <= len(sink.events) <= 13, len(sink.events)
    assert all(len(base64.b64decode(e["output"])) <= 64 << 10 for e in sink.events)


def test_a_line_alone_is_sent_within_the_batch_time() -> None:
    sink = Sink()
    batcher = OutputBatcher(sink, keep=1024, every=0.1)
    started = time.monotonic()
    batcher.chunk("k", b"hello\n")
    assert wait_until(lambda: bool(sink.events), timeout=2.0)
    assert time.monotonic() - started < 1.0
    assert sink.data() == b"hello\n"


def test_a_forgotten_run_sends_nothing_more_and_runs_are_apart() -> None:
    sink = Sink()
    batcher = OutputBatcher(sink, keep=1024, every=3600)
    batcher.chunk("a", b"one")
    batcher.chunk("b", b"two")
    batcher.forget("a")
    batcher.flush()
    assert [(e["key"], e["offset"]) for e in sink.events] == [("b", 0)]
    batcher.chunk("b", b"three")
    batcher.flush()
    assert [(e["key"], e["offset"], e["size"]) for e in sink.events][-1] == ("b", 3, 8)
