"""soulteary/webhook's `stream-command-output`: a hook's command output written to its answer as it is read,
chunked, each piece sent as soon as it is read (docs/compatibility.md, "Streamed output").

Between the run's reader and the answer is a `StreamPipe`, bounded: the run's reader never waits for the
client (it is told each chunk, and must not block), and a client that falls `-stream-buffer` bytes behind is
cut off. A client that takes longer than `-stream-write-timeout` to take one piece is cut off too, by a
watch beside the answer. Either way the command runs on, and its output goes to the run history as any
run's does (docs/limits.md, "Streamed answers").

Until the first byte the answer is still open: a run that ends with an error, a timeout or a cancellation
before any output gets soulteary's status and text. After it, the status has gone out, and only the log
says how the run ended.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from hookrunner.golang.sniff import detect_content_type
from hookrunner.golang.status import status_line
from hookrunner.golang.time import go_duration_text
from hookrunner.ops.log import log
from hookrunner.run.executor import CommandResult, CommandRunner
from hookrunner.run.ownerclient import OwnerClient
from hookrunner.run.spawn import StartSignal, Waits
from hookrunner.run.streamflow import StreamFlow
from hookrunner.serve.answers import TEXT_PLAIN, Answer, answer

#: The most output held for one streamed answer's client by default (-stream-buffer); further behind, it is
#: cut off.
STREAM_BUFFER = 4 << 20

#: soulteary/webhook's answers for a streaming hook whose run ends badly before its first byte.
MSG_STREAM_ERROR = (
    b"Error occurred while executing the hook's stream command. Please check your logs for more details."
)
MSG_STREAM_TIMEOUT = b"Hook execution timeout. Please check your logs for more details."
MSG_STREAM_CANCELLED = b"Hook execution cancelled. Please check your logs for more details."


class StreamPipe(StreamFlow):
    """The output of one run on its way to one answer: `push` (the run's reader, or the run owner's client)
    never blocks; `take` (the answer) waits for what has come, and credits it (run/streamflow.py). At most
    `limit` bytes are held: past it, or once the run owner says its client fell that far behind, the pipe
    is overrun, takes no more, and `on_overrun` is told (once)."""

    def __init__(self, waits: Waits, limit: int = STREAM_BUFFER) -> None:
        super().__init__(limit)
        self._waits = waits
        self._lock = threading.Lock()
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._waiter: StartSignal | None = None
        self._ended = False
        self._dropped = False
        self.overrun = False
        self.on_overrun: Callable[[], None] | None = None

    def push(self, chunk: bytes) -> None:
        """A chunk of the run's output, as it is read (run/spawn.py's Listener)."""
        with self._lock:
            if self._dropped:
                return
            fits = self._size + len(chunk) <= self.limit
            if fits:
                self._chunks.append(chunk)
                self._size += len(chunk)
                waiter, self._waiter = self._waiter, None
        if not fits:  # past its bound here, as when the run owner says so
            self.fell_behind()
        elif waiter is not None:
            waiter.set()

    __call__ = push

    def fell_behind(self) -> None:
        # What it holds is still taken (and fails to go out: the client is cut off); no more.
        with self._lock:
            if self._dropped:
                return
            self.overrun = self._dropped = True
            told = self.on_overrun
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            waiter.set()
        if told is not None:
            told()

    def end(self) -> None:
        """The run has ended (or its output will come no more)."""
        with self._lock:
            self._ended = True
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            waiter.set()

    def drop(self) -> None:
        """The answer is over: what comes from now on is not kept."""
        with self._lock:
            self._dropped = True
            self._chunks.clear()
            self._size = 0
        self.end()

    def take(self) -> bytes | None:
        """All that has come since the last take, once there is some; None once all has been taken and the
        run has ended, or the pipe was overrun or dropped."""
        while True:
            with self._lock:
                if self._chunks:
                    data = b"".join(self._chunks)
                    self._chunks.clear()
                    self._size = 0
                    break
                if self._ended or self._dropped:
                    return None
                waiter = self._waiter = self._waits.event()
            waiter.wait(1.0)
        self.taken(len(data))
        return data


def _shut(sock: Any) -> None:
    """End a connection under whatever is writing to it: a write blocked on it fails at once (EPIPE),
    which both workers take as a client gone. Done on a duplicate of its descriptor, so that it works
    the same for a TLS socket and from any thread or greenlet."""
    try:
        handle = socket.socket(fileno=os.dup(sock.fileno()))
    except (OSError, AttributeError, ValueError):
        return
    try:
        handle.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        handle.close()


class StreamBody:
    """The answer's body: each `next` is all the output that has come since the last, sent by the worker
    as one chunk as soon as it is returned. While the worker writes a piece (between one `next` and the
    next, and after the last until `close`), a watch checks that the write ends within `write_timeout`."""

    def __init__(
        self,
        first: bytes,
        pipe: StreamPipe,
        future: Future[CommandResult],
        runner: CommandRunner | OwnerClient,
        rid: str,
        hook_id: str,
        write_timeout: float,
        sock: Any,
    ) -> None:
        self._first: bytes | None = first
        self._pipe = pipe
        self._future = future
        self._runner = runner
        self._rid = rid
        self._hook_id = hook_id
        self._write_timeout = write_timeout
        self._sock = sock
        self._writing_since: float | None = None
        self._closed = False
        self._cut = ""
        self.sent = 0
        pipe.on_overrun = self._overrun
        if pipe.overrun:  # behind before its first byte (a loop too busy to send it): cut off all the same
            self._overrun()

    def __iter__(self) -> StreamBody:
        return self

    def __next__(self) -> bytes:
        self._writing_since = None
        if self._first is not None:
            data, self._first = self._first, None
            if self._write_timeout > 0 and self._sock is not None:
                self._runner.waits.launch(self._watch)
        else:
            taken = self._pipe.take()
            if taken is None:
                self._writing_since = time.monotonic()  # the worker writes the last chunk next
                self._ended()
                raise StopIteration
            data = taken
        self.sent += len(data)
        self._writing_since = time.monotonic()
        return data

    def close(self) -> None:
        """The worker is done with the answer (all written, or the client gone)."""
        if self._closed:
            return
        self._closed = True
        self._pipe.drop()
        if self._cut:
            log.request(
                self._rid,
                f"{self._hook_id}: {self._cut}; the streamed answer was cut off, the command runs on",
                level="warn",
                hook=self._hook_id,
                event="stream_cut",
            )

    def _ended(self) -> None:
        """The run's output has all been taken: how it ended goes to the log only (the status is out)."""
        if self._pipe.overrun or not self._future.done():
            return
        failed = self._future.exception()  # the run owner went away with the run (run/ownerclient.py)
        result = self._future.result() if failed is None else CommandResult(b"", f"{failed}")
        if result.ok:
            return
        how = "timed out" if result.timed_out else "was cancelled" if self._runner.closing else "failed"
        log.request(
            self._rid,
            f"{self._hook_id}: the command {how} after its output began ({result.error}); "
            "the streamed answer ends there",
            level="error",
            hook=self._hook_id,
            event="stream_failed",
        )

    def _overrun(self) -> None:
        self._cut = f"the client fell {self._pipe.limit} bytes behind"
        _shut(self._sock)

    def _watch(self) -> None:
        """Cut the client off once a write of the answer has taken longer than write_timeout."""
        limit = self._write_timeout
        tick = min(1.0, limit / 4)
        while not self._closed:
            self._runner.waits.sleep(tick)
            since = self._writing_since
            if not self._closed and since is not None and time.monotonic() - since > limit:
                self._cut = f"the client took nothing of the answer for {go_duration_text(limit)}"
                _shut(self._sock)
                return


class StreamedAnswer(Answer):
    """An answer whose body is a StreamBody: no Content-Length (the worker sends it chunked), and no body
    for the -debug dump (it has gone to the client piece by piece)."""

    def get_data(self, as_text: bool = False) -> Any:
        return "" if as_text else b""

    def body_size(self) -> int:
        body = self.response
        return body.sent if isinstance(body, StreamBody) else 0


def stream_answer(
    pipe: StreamPipe,
    future: Future[CommandResult],
    runner: CommandRunner | OwnerClient,
    rid: str,
    hook_id: str,
    status: int,
    headers: dict[str, str],
    write_timeout: float,
    sock: Any,
) -> Answer:
    """The answer of a streaming hook's request, once its run's first output has come or the run has
    ended: streamed from the first byte on; before it, soulteary's answer for how the run ended. Raises
    what the run's future raises when it ended before any output (StateUnavailable: the run owner went
    away with it)."""
    future.add_done_callback(lambda _: pipe.end())
    first = pipe.take()
    if first is None:
        result = future.result() if future.done() else CommandResult(b"", "ended without output")
        if result.output:  # a request coalesced into another's run: not told of its output as it came
            first = result.output
        elif result.ok:
            return answer(status, b"", headers)
        else:
            if result.timed_out:
                code, text = 408, MSG_STREAM_TIMEOUT
            elif runner.closing:
                code, text = 408, MSG_STREAM_CANCELLED
            else:
                code, text = 500, MSG_STREAM_ERROR
            log.request(
                rid,
                f"{hook_id}: the command ended before any output ({result.error})",
                level="error",
                hook=hook_id,
                event="stream_failed",
            )
            return answer(code, text, headers, TEXT_PLAIN)
    body = StreamBody(first, pipe, future, runner, rid, hook_id, write_timeout, sock)
    handler_names = frozenset(headers)
    sent_headers = dict(headers)
    if "Content-Type" not in sent_headers:
        sent_headers["Content-Type"] = detect_content_type(first)  # Go sniffs the first write
    response = StreamedAnswer(body, status=status_line(status or 200), headers=list(sent_headers.items()))
    response.written_status = status or 200
    response.written_headers = dict(headers)
    response.handler_names = handler_names
    return response
