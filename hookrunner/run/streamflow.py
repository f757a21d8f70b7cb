"""A streamed run's flow control between the run owner and its worker (docs/run-state.md, "Capture output and
streamed answers"): the owner sends at most WINDOW bytes of a stream run's output past the worker's last
`credit`, holds the rest while its client is behind by less than the stream's bound, and past that gives the
stream up (`behind`); the worker credits what its answer has taken."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator

from hookrunner.run import wire
from hookrunner.run.wire import Message

#: What the owner sends of one stream run's output past the worker's last credit, at most (plus one frame).
WINDOW = 256 * 1024

#: How far a stream's client may fall behind its run when the worker does not say (its -stream-buffer).
BEHIND = 4 << 20


class StreamFlow:
    """A streamed run's output as its answer takes it, in the worker (serve/stream.py's StreamPipe): told each
    chunk as a listener is (run/spawn.py's Listener), it says what its answer has taken (`taken`: the run
    owner's client credits it) and is told when the owner has given its client up (`fell_behind`)."""

    def __init__(self, limit: int) -> None:
        #: How far its client may fall behind the run before it is cut off, in bytes.
        self.limit = limit
        #: Told the bytes the answer has taken (set by the run owner's client; None: no owner, no credit).
        self.on_taken: Callable[[int], None] | None = None

    def __call__(self, chunk: bytes) -> None:
        raise NotImplementedError

    def fell_behind(self) -> None:
        """The owner has given the client up: it fell `limit` bytes behind (the run's output goes on)."""
        raise NotImplementedError

    def taken(self, size: int) -> None:
        """The answer has taken `size` more bytes (handed them to its client's write)."""
        told = self.on_taken
        if told is not None and size:
            told(size)


class OwnerStream:
    """One stream run's output on its way to its worker, in the owner. `push` (the run's reader) never waits:
    a chunk is sent while less than `window` is out past the last credit, else held; once what is held and
    out exceeds `limit` (the client's -stream-buffer) the stream is given up: what is held is dropped, the
    worker is told `behind`, and nothing more is sent (the run's own output is kept as any run's is)."""

    def __init__(
        self, number: int, send: Callable[[Message], None], limit: int, window: int = WINDOW
    ) -> None:
        self._number = number
        self._send = send
        self._limit = limit if limit > 0 else BEHIND
        self._window = window
        self._lock = threading.Lock()
        self._held: deque[bytes] = deque()
        self._held_size = 0
        self._out = 0  # bytes sent and not credited
        self._over = False  # given up, or ended: nothing more is sent from here
        #: Whether any chunk came (a coalesced request's own listener is never told: its exit carries all).
        self.streamed = False

    @property
    def out(self) -> int:
        """Bytes sent and not yet credited."""
        return self._out

    @property
    def held(self) -> int:
        """Bytes held for want of credit."""
        return self._held_size

    def push(self, chunk: bytes) -> None:
        """A chunk of the run's output, as it is read (run/spawn.py's Listener)."""
        with self._lock:
            self.streamed = True
            if self._over:
                return
            for piece in wire.frames(chunk):
                self._held.append(piece)
                self._held_size += len(piece)
            if self._held_size + self._out > self._limit:
                self._over = True
                self._held.clear()
                self._held_size = 0
                self._send(Message("behind", {"id": self._number, "bytes": self._limit}))
                return
            self._pump()

    def credit(self, size: int) -> None:
        """The worker's answer has taken `size` bytes: as much again may go."""
        with self._lock:
            self._out = max(self._out - size, 0)
            if not self._over:
                self._pump()

    def _pump(self) -> None:
        """Send what is held while the window has room (with the lock held)."""
        while self._held and self._out < self._window:
            piece = self._held.popleft()
            self._held_size -= len(piece)
            self._out += len(piece)
            self._send(Message("out", {"id": self._number}, piece))

    def rest(self) -> Iterator[bytes]:
        """The run has ended: what is still held, as `out` packets to be pulled as the socket takes them
        (ahead of the run's `exit`; bounded by `limit`, and the worker's answer holds as much), after which
        no credit sends anything."""
        with self._lock:
            self._over = True
            held, self._held = self._held, deque()
            self._held_size = 0
        while held:
            yield wire.encode(Message("out", {"id": self._number}, held.popleft()))
