"""Followers of a run's output (GET /api/v1/runs/<id>/output?follow=1, docs/history.md): Server-Sent Events
from the first byte the history keeps of the run, then each batch of output as the workers send it
(run/liveoutput.py), then an `end` event with the run's record (its outcome), and the connection closes.

A follower costs no thread. The admin app checks the request (the token, the run) on a pool thread and
registers the follower; `FollowApp` then takes the connection from werkzeug before anything is written
(serve/adminconns.py `Handoff`) and hands it to one writer thread, which writes every follower's events
from its selector without blocking. Each event is encoded once, and its bytes are shared by every follower
it is queued for; a follower more than `FOLLOW_BUFFER` bytes behind, or whose socket has taken nothing for
-read-timeout while it had bytes waiting, is dropped (closed). So 500 followers cost 500 sockets, their
queues, and one thread, and the pool keeps answering the other requests.
"""

from __future__ import annotations

import base64
import itertools
import json
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from email.utils import formatdate
from typing import Any

from hookrunner.serve.adminconns import Handoff
from hookrunner.state.backend import HistoryReader, StateUnavailable
from hookrunner.state.model import FINAL_OUTCOMES, Event

#: The environ key under which the admin app leaves a follower for FollowApp to connect.
FOLLOWER = "hookrunner.follower"

#: How many bytes of events may wait for one follower (they are shared with the others, not copied); past
#: this it is dropped. The output kept when it came (up to -history-output) is allowed on top. A run sends
#: at most -history-output bytes a tenth of a second.
FOLLOW_BUFFER = 1 << 20

#: The kernel's send buffer of a follower's socket: what a follower that stopped reading holds there.
SEND_BUFFER = 64 << 10

#: Seconds between two rounds of writes to the followers: the events that came meanwhile go out together,
#: in one system call per follower (4 a second, whatever the number of runs and batches).
WRITE_EVERY = 0.25

#: At most how many queued events one system call writes.
WRITE_BATCH = 64

#: Seconds between comments sent to an idle follower (a proxy keeps the stream open; a gone peer is seen).
HEARTBEAT = 15.0

#: Seconds between checks of the followed runs' outcomes in the store (a run ended by a worker's death, a
#: replay or a restart has no event of its own), and the writer's longest sleep.
SWEEP = 1.0

_HEARTBEAT_FRAME = b": keep-alive\n\n"


def frame(event: str, data: dict[str, Any]) -> bytes:
    """One Server-Sent Event in UTF-8: JSON escapes line breaks, so `data` is one line."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event}\ndata: {text}\n\n".encode()


def output_frame(offset: int, data: bytes, size: int) -> bytes:
    """An `output` event: `offset`, where `data` starts in the run's whole output; `size`, its size so far;
    the bytes as text, and, only when they are not UTF-8 on their own (invalid, or a character cut between
    two events: U+FFFD in the text), exact in base64 as well."""
    fields: dict[str, Any] = {"offset": offset, "size": size}
    try:
        fields["output"] = data.decode("utf-8")
    except UnicodeDecodeError:
        fields["output"] = data.decode("utf-8", "replace")
        fields["output_base64"] = base64.b64encode(data).decode("ascii")
    return frame("output", fields)


class Follower:
    """One follower: its socket (once attached), where in the run's output it is, and its queued bytes."""

    __slots__ = (
        "key",
        "sock",
        "position",
        "frames",
        "sent",
        "queued",
        "ending",
        "dropped",
        "stalled",
        "mask",
        "limit",
    )

    def __init__(self, key: str, position: int) -> None:
        self.key = key
        self.sock: socket.socket | None = None
        self.position = position
        self.frames: deque[bytes] = deque()
        self.sent = 0  # bytes of frames[0] written already
        self.queued = 0  # bytes waiting, all frames
        self.ending = False  # close once everything queued is written
        self.dropped = False
        self.stalled: float | None = None  # since when bytes have waited without any being taken
        self.mask = selectors.EVENT_READ  # what the writer's selector waits for on its socket
        self.limit = FOLLOW_BUFFER  # the most bytes that may wait for it


class Followers:
    """The followers of every run, and the thread that writes to them. `describe(record)` turns a stored
    record into the `end` event's data (the API's form); `stall` is -read-timeout (0: no limit)."""

    def __init__(
        self,
        store: HistoryReader,
        describe: Callable[[dict[str, Any]], dict[str, Any]],
        stall: float,
        buffer: int = FOLLOW_BUFFER,
    ) -> None:
        self._store = store
        self._describe = describe
        self._stall = stall
        self._buffer = buffer
        self._lock = threading.Lock()
        self._by_key: dict[str, list[Follower]] = {}
        self._attached: set[Follower] = set()
        self._new: list[Follower] = []
        self._dirty: set[Follower] = set()
        self._selector = selectors.DefaultSelector()
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)
        self._woken = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        #: Followers dropped for falling behind or stalling, and connections of followers closed in all.
        self.dropped = 0
        self.closed = 0

    def keys(self) -> list[str]:
        """The keys of the runs followed now (those not ended yet)."""
        with self._lock:
            return list(self._by_key)

    @property
    def attached(self) -> int:
        """How many followers the writer is writing to."""
        return len(self._attached)

    # --- on the app's threads and the feed's -------------------------------------------------------

    def follow(self, run_id: str) -> Follower | None:
        """A new follower of run `run_id` (the newest of that id), its kept output queued; None: none."""
        with self._lock:
            record = self._store.followed(run_id)
            if record is None:
                return None
            output = bytes(record["output"])
            size = int(record["output_size"])
            follower = Follower(record["key"], size)
            kept = output_frame(size - len(output), output, size)
            follower.limit = self._buffer + len(kept)  # the kept output (up to -history-output) comes on top
            self._queue(follower, kept)
            if record["outcome"] in FINAL_OUTCOMES:
                self._queue(follower, self._end_frame(record))
                follower.ending = True
            else:
                self._by_key.setdefault(follower.key, []).append(follower)
            return follower

    def attach(self, follower: Follower, sock: socket.socket, head: bytes) -> None:
        """Give `follower` its connection; `head` (the answer's status line and headers) is written first."""
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        except OSError:
            pass
        with self._lock:
            follower.sock = sock
            follower.frames.appendleft(head)
            follower.queued += len(head)
            self._new.append(follower)
            self._wake()
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="admin-follow", daemon=True)
                self._thread.start()

    def publish(self, event: Event) -> None:
        """An event the store has just applied: a followed run's output goes to its followers; its end
        ends them."""
        key = event.get("key")
        if not isinstance(key, str) or key not in self._by_key:
            return
        if event.get("event") == "output":
            offset, size = event.get("offset"), event.get("size")
            if isinstance(offset, int) and isinstance(size, int):
                data = base64.b64decode(event.get("output", ""))
                with self._lock:
                    self._deliver(self._by_key.get(key, ()), offset, data, size)
        elif event.get("event") == "run" and event.get("outcome") in FINAL_OUTCOMES:
            self._end(key)

    def _deliver(self, followers: Iterable[Follower], offset: int, data: bytes, size: int) -> None:
        """Queue the part of `data` each follower has not had yet (under the lock); encoded once for all
        followers at the same place."""
        encoded: dict[int, bytes] = {}
        for follower in list(followers):  # a copy: one dropped on the way leaves the list
            if size <= follower.position:
                continue
            start = max(offset, follower.position)
            if start not in encoded:
                encoded[start] = output_frame(start, data[start - offset :], size)
            follower.position = size
            self._queue(follower, encoded[start])

    def _end(self, key: str) -> None:
        """Run `key` has ended (or left the history): its followers get what they lack and its record."""
        record = self._store.by_key(key)
        with self._lock:
            followers = self._by_key.pop(key, [])
            if record is not None:
                output = bytes(record["output"])
                size = int(record["output_size"])
                self._deliver(followers, size - len(output), output, size)
                ended = self._end_frame(record)
            else:
                ended = frame("end", {"error": "the run is no longer in the history"})
            for follower in followers:
                self._queue(follower, ended)
                follower.ending = True

    def _end_frame(self, record: dict[str, Any]) -> bytes:
        """The `end` event: the run's record as the API lists it (its output was the stream's)."""
        listed = {name: value for name, value in record.items() if name not in ("key", "output")}
        return frame("end", self._describe(listed))

    def _queue(self, follower: Follower, data: bytes) -> None:
        if follower.dropped:
            return
        if follower.queued + len(data) > follower.limit:
            self._drop(follower)
            return
        follower.frames.append(data)
        follower.queued += len(data)
        if follower.sock is not None:
            self._dirty.add(follower)
            self._wake()

    def _drop(self, follower: Follower) -> None:
        """It fell behind: no more bytes for it; the writer closes its connection."""
        follower.dropped = True
        follower.frames.clear()
        follower.queued = 0
        self.dropped += 1
        followers = self._by_key.get(follower.key)
        if followers is not None and follower in followers:
            followers.remove(follower)
        if follower.sock is not None:
            self._dirty.add(follower)
            self._wake()

    def _wake(self) -> None:
        if not self._woken:
            self._woken = True
            try:
                self._wake_write.send(b"x")
            except OSError:
                pass

    def stop(self) -> None:
        """Close every follower's connection and the writer (at once when it never started)."""
        self._stopping = True
        with self._lock:
            self._woken = False
            self._wake()
            started = self._thread is not None
        if not started:
            self._release()

    def _release(self) -> None:
        self._selector.close()
        self._wake_read.close()
        self._wake_write.close()

    # --- the writer thread ---------------------------------------------------------------------------

    def _serve(self) -> None:
        self._selector.register(self._wake_read, selectors.EVENT_READ, None)
        next_sweep = next_beat = next_write = time.monotonic()
        while not self._stopping:
            wait = max(0.0, next_write - time.monotonic()) if self._dirty or self._new else SWEEP
            for key, mask in self._selector.select(min(wait, SWEEP)):
                if key.data is None:
                    self._drain_wake()
                    continue
                if mask & selectors.EVENT_READ:
                    self._peer_sent(key.data)
                if mask & selectors.EVENT_WRITE:
                    with self._lock:
                        self._dirty.add(key.data)
            now = time.monotonic()
            if now < next_write:
                continue
            next_write = now + WRITE_EVERY
            with self._lock:
                for follower in self._new:
                    self._selector.register(follower.sock, selectors.EVENT_READ, follower)  # type: ignore[arg-type]
                    self._attached.add(follower)
                    self._dirty.add(follower)
                self._new.clear()
                if now >= next_beat:
                    next_beat = now + HEARTBEAT
                    for follower in self._attached:
                        if not follower.queued and not follower.ending:
                            self._queue(follower, _HEARTBEAT_FRAME)
                dirty, self._dirty = self._dirty, set()
                for follower in dirty:
                    self._write(follower, now)
                if self._stall:
                    for follower in [
                        f for f in self._attached if f.stalled and now - f.stalled > self._stall
                    ]:
                        self._drop(follower)
                        self._close(follower)
            if now >= next_sweep:
                next_sweep = now + SWEEP
                self._sweep()
        with self._lock:
            for follower in list(self._attached):
                self._close(follower)
            for follower in self._new:
                assert follower.sock is not None
                follower.sock.close()
            self._new.clear()
            self._release()

    def _drain_wake(self) -> None:
        with self._lock:
            self._woken = False
            try:
                while self._wake_read.recv(4096):
                    pass
            except OSError:
                pass

    def _peer_sent(self, follower: Follower) -> None:
        """The follower's peer sent something (ignored) or closed its side (it is gone)."""
        assert follower.sock is not None
        try:
            gone = not follower.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            gone = True
        if gone:
            with self._lock:
                follower.ending = True
                follower.frames.clear()
                follower.queued = 0
                followers = self._by_key.get(follower.key)
                if followers is not None and follower in followers:
                    followers.remove(follower)
                self._close(follower)

    def _write(self, follower: Follower, now: float) -> None:
        """Write what is queued for `follower` until its socket takes no more (under the lock)."""
        sock = follower.sock
        if sock is None or follower not in self._attached:
            return
        if follower.dropped:
            self._close(follower)
            return
        wrote = False
        frames = follower.frames
        while frames:
            buffers: list[Any] = [memoryview(frames[0])[follower.sent :]]
            buffers += itertools.islice(frames, 1, WRITE_BATCH)
            try:
                count = sock.sendmsg(buffers)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._close(follower)
                return
            wrote = True
            follower.queued -= count
            count += follower.sent
            while frames and count >= len(frames[0]):
                count -= len(frames.popleft())
            follower.sent = count
        if not follower.frames:
            follower.stalled = None
            if follower.ending:
                self._close(follower)
                return
            mask = selectors.EVENT_READ
        else:
            if wrote or follower.stalled is None:
                follower.stalled = now
            mask = selectors.EVENT_READ | selectors.EVENT_WRITE
        if mask != follower.mask:  # one system call saved per event for a follower that keeps up
            follower.mask = mask
            self._selector.modify(sock, mask, follower)

    def _close(self, follower: Follower) -> None:
        if follower not in self._attached:
            return
        self._attached.discard(follower)
        self.closed += 1
        sock = follower.sock
        assert sock is not None
        try:
            self._selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        sock.close()

    def _sweep(self) -> None:
        """End the followers of runs that ended without an event (a dead worker's, a replayed one's) or
        left the history."""
        with self._lock:
            keys = list(self._by_key)
        if not keys:
            return
        try:
            outcomes = self._store.outcomes(keys)
            for key in keys:
                outcome = outcomes.get(key)
                if outcome is None or outcome in FINAL_OUTCOMES:
                    self._end(key)
        except StateUnavailable:
            pass  # a shared history's database is away (-state-url): the next sweep looks again


class FollowApp:
    """WSGI middleware around the admin app: a request the app answered with a follower (environ
    FOLLOWER) has its connection handed to the writer, with the answer's head the app made (its status,
    the security headers), its body written by the writer until the run ends (Connection: close)."""

    def __init__(self, app: Any, followers: Followers) -> None:
        self._app = app
        self._followers = followers

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        answer: list[Any] = []

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            answer[:] = [status, headers]
            return start_response(status, headers, exc_info)

        body = self._app(environ, start)
        follower = environ.get(FOLLOWER)
        sock = environ.get("werkzeug.socket")
        if follower is None or sock is None or not answer:
            return body
        if hasattr(body, "close"):
            body.close()
        status, headers = answer
        lines = [f"HTTP/1.1 {status}"]
        lines += [
            f"{name}: {value}"
            for name, value in headers
            if name.lower() not in ("content-length", "connection")
        ]
        lines += ["Server: hookrunner-admin", f"Date: {formatdate(usegmt=True)}", "Connection: close", "", ""]
        self._followers.attach(follower, sock, "\r\n".join(lines).encode("latin-1"))
        raise Handoff("the follower's connection is written by the follow writer")
