"""The run owner's loop (docs/run-state.md, issue 32 step 6): one CommandRunner for the host, serving the
prepared runs of any number of workers, each over its own SOCK_SEQPACKET connection (run/wire.py).

What a worker's connection carries (the worker's side is run/ownerclient.py):

- owner -> worker `hello` {version, owner (its pid), epoch}: sent first, on taking the connection (a new
  owner sends it again on every connection it is given: a new epoch tells the worker that the runs the
  old owner admitted and had not ended are lost; runs it had not answered are the new owner's to read).
- worker -> owner `hello` {version, pid, generation}: the worker's first message. `part` {id} + bytes: the
  start of run `id`'s body when it does not fit one packet. `run` {id, hook, request, spec, files,
  timeout, replay, limits, capture, stream, started} + bytes (run/runorder.py).
- owner -> worker, for run `id`: first `admitted` {id, how} (how: started, queued or coalesced) or `busy`
  {id, retry_after} or `unavailable` {id, retry_after, why, journal} (the journal cannot record it: 503)
  or `refused` {id, why} (a run message it cannot read). Then, when the run asked for it (`started`: a
  background run answered once it has started), `started` {id, pid} once its process has started (not
  for a request coalesced into another's run: that process is another request's); for `stream`, `out`
  {id} + bytes, each chunk as it is read, at most a window past the worker's `credit` and the rest held
  (run/streamflow.py), or `behind` {id, bytes} once the stream's client is given up; `result` {id} +
  bytes, pieces of the whole output for `capture` (and for a stream whose chunks went to another
  request's stream: the run it was coalesced into); and
  last `exit` {id, error} + the output's last piece. `started`, `out` and `exit` may come before
  `admitted`: a run can start, and even end, before its admission's answer is sent. Every run gets its
  `exit`, whatever it asked for.
- worker -> owner `credit` {id, bytes}: run `id`'s streamed answer has taken that much; no answer.
- worker -> owner `count` {hook, outcome}: one request counted (ops/metrics.py, with -metrics), sent
  before the worker answers it; no answer. `metrics` {id}: the host's families (the run metrics and the
  requests). Answered, once every connection has been read until it would block (so every count sent
  before the scrape is in it: issue 32 step 8), with `metrics_part` {id} + bytes, as many as the text
  needs, then `metrics` {id} + its last piece: the families in OpenMetrics text, empty without -metrics.
  `ready` {id}: answered `ready` {id, ok}: whether runs can be accepted now (the journal, with -state-dir,
  can be written), for readiness (/healthz?ready).
- owner -> worker `reload_part` {id} + bytes, then `reload` {id, files} + its last piece: hooks generation
  `id` (hooks/generation.py's `pack`), sent to every worker by `publish_hooks`, and again to a worker whose
  `hello` names another generation (a worker forked after a reload, a new owner). worker -> owner
  `reloaded` {generation}: the worker serves it (serve/ownerreload.py, issue 32 step 9).

The owner never waits on a worker: sends are non-blocking, and what a worker's socket cannot take now
waits in that connection's outbox, bounded (OUTBOX_BOUND); past it the connection is cut off, as if the
worker had died. Any error on a connection is that worker's end, never the owner's: its runs go on, and
only what would have been sent to it is dropped.
"""

from __future__ import annotations

import itertools
import os
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future

from hookrunner.ops.log import log
from hookrunner.run import wire
from hookrunner.run.executor import CommandResult, CommandRunner
from hookrunner.run.runorder import RunOrder, run_order
from hookrunner.run.spawn import Waits
from hookrunner.run.streamflow import OwnerStream
from hookrunner.run.wire import EVENT, Message, PeerGone, WireError
from hookrunner.state.backend import StateUnavailable
from hookrunner.state.journal import JournalUnwritable
from hookrunner.state.slots import Busy

#: How runs the owner's readers and flushers apart from the caller: a thread, or a greenlet on the owner's
#: gevent loop (the caller decides).
Spawn = Callable[[Callable[[], None]], None]

#: What one worker's connection may hold unsent, in messages (a finished run's output aside), before it is
#: cut off.
OUTBOX_BOUND = 8 * 1024 * 1024

#: How long a worker's connection may take nothing while answers wait for it before it is cut off.
OUTBOX_STALL = 30.0

#: How long a scrape waits for every connection to be read until it would block before it answers anyway.
SCRAPE_WAIT = 2.0

#: What the parts of one connection's unfinished run messages may hold before they are dropped.
PARTS_BOUND = 64 * 1024 * 1024


class _Connection:
    """One worker's connection, as the owner holds it: non-blocking sends through an outbox, and the socket
    closed once both its reader and its flusher are done with it.

    The outbox holds messages (counted against `bound`) and finished runs' outputs with their exits, pulled
    a packet at a time as the socket takes them (not counted: each is its run's output, held anyway until
    sent). A connection whose outbox holds more than `bound` bytes of messages, or whose socket has taken
    nothing for `stall` seconds while something waits, is cut off, as if the worker had died."""

    def __init__(
        self, sock: socket.socket, worker_pid: int, spawn: Spawn, waits: Waits, bound: int, stall: float
    ) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.worker_pid = worker_pid
        self._spawn = spawn
        self.waits = waits
        self._bound = bound
        self._stall = stall
        self._lock = threading.Lock()
        self._outbox: deque[bytes | Iterator[bytes]] = deque()
        self._pulled: bytes | None = None  # the packet pulled from the outbox's first output, not yet sent
        self._held = 0  # bytes of messages in the outbox
        self._moved = 0.0  # when the socket last took a packet, or the outbox last became non-empty
        self._flushing = False
        self._users = 1  # the reader; the flusher while it runs
        self.closed = False
        #: The body read so far of each run message whose parts are coming, by the worker's number.
        self.parts: dict[int, list[bytes]] = {}
        self.parts_held = 0
        #: Whether the reader is reading or handling a message (False: it found nothing, and waits).
        self.reading = True
        #: The hooks generation the worker said it serves (its hello, then each `reloaded`).
        self.generation = 0
        #: The hooks generation last sent on this connection (Owner._send_hooks): a hello written before
        #: the worker read it names an older one, and is not sent it twice.
        self.sent_generation: int | None = None
        #: The stream runs of this connection that take `credit`, by the worker's number.
        self.streams: dict[int, OwnerStream] = {}

    def read_out(self) -> bool:
        """Whether everything sent on this connection so far has been read and handled: the reader waits
        with nothing to read, or the connection is closed."""
        if self.closed:
            return True
        if self.reading:
            return False
        try:
            poll = select.poll()
            poll.register(self.sock, select.POLLIN)
            return not poll.poll(0)
        except (OSError, ValueError):  # closed under us
            return True

    def send(self, message: Message) -> None:
        """Send now if the socket takes it, else keep it in the outbox; a message to a connection that is
        closed (the worker gone, or cut off) is dropped."""
        packet = wire.encode(message)
        self._put(packet, len(packet))

    def send_all(self, packets: Iterator[bytes]) -> None:
        """Send `packets` in order (a finished run's output and exit), pulled as the socket takes them."""
        self._put(packets, 0)

    def _put(self, item: bytes | Iterator[bytes], size: int) -> None:
        with self._lock:
            if self.closed:
                return
            if not self._outbox:
                self._moved = time.monotonic()
            self._outbox.append(item)
            self._held += size
            self._drain()
            if self._held > self._bound:
                self._cut(f"has not read {self._held} bytes of answers")
            if self.closed or not self._outbox or self._flushing:
                return
            self._flushing = True
            self._users += 1
        self._spawn(self._flush)

    def _drain(self) -> None:
        """Send from the outbox what the socket takes now (with the lock held)."""
        while self._outbox and not self.closed:
            item = self._outbox[0]
            if not isinstance(item, bytes) and self._pulled is None:
                self._pulled = next(item, None)
                if self._pulled is None:
                    self._outbox.popleft()
                    continue
            packet = item if isinstance(item, bytes) else self._pulled
            assert packet is not None
            try:
                self.sock.send(packet)
            except BlockingIOError:
                return
            except OSError:  # the worker is gone: the reader sees it too
                self._end()
                return
            self._moved = time.monotonic()
            if isinstance(item, bytes):
                self._outbox.popleft()
                self._held -= len(item)
            else:
                self._pulled = None

    def _flush(self) -> None:
        """Send what the outbox holds as the socket takes it, until it is empty or the connection ends. It
        looks again after a pause that grows while the socket takes nothing (1 to 50 ms): the waits of run/
        spawn.py, on threads or on the owner's loop, have no wait for a socket's room, and an outbox that
        is not empty is rare (a worker that reads slower than its runs' output comes)."""
        pause = 0.001
        try:
            while True:
                with self._lock:
                    moved = self._moved
                    self._drain()
                    if not self.closed and self._outbox and time.monotonic() - self._moved > self._stall:
                        self._cut(f"has taken no answer for {self._stall:g}s")
                    if self.closed or not self._outbox:
                        self._flushing = False
                        return
                    pause = 0.001 if self._moved != moved else min(pause * 2, 0.05)
                self.waits.sleep(pause)
        except (OSError, ValueError):  # closed under us
            return
        finally:
            self.release()

    def close(self) -> None:
        with self._lock:
            self._end()

    def _cut(self, why: str) -> None:
        log.output(f"run owner: worker {self.worker_pid} {why}; cutting it off (its runs go on)")
        self._end()

    def _end(self) -> None:
        """Close the connection for good (with the lock held): its peer sees its end, its reader wakes."""
        if self.closed:
            return
        self.closed = True
        self._outbox.clear()
        self._pulled = None
        self._held = 0
        self.parts.clear()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def release(self) -> None:
        """One user (the reader, the flusher) is done; the last one closes the socket."""
        with self._lock:
            self._users -= 1
            last = self._users == 0
        if last:
            self.sock.close()


class _Asked:
    """One run message, as the owner keeps it until its exit is sent: where to answer, and, for a stream, its
    flow (run/streamflow.py: what its worker has credited, and whether it carried the output already)."""

    def __init__(self, connection: _Connection, order: RunOrder) -> None:
        self.connection = connection
        self.number = order.number
        self.wants_output = order.capture or order.stream
        self.flow = OwnerStream(order.number, connection.send, order.behind) if order.stream else None
        if self.flow is not None:
            connection.streams[order.number] = self.flow

    def forget(self) -> None:
        """No more credit is taken for this run (it ended, or was refused)."""
        self.connection.streams.pop(self.number, None)

    def started(self, pid: int | None) -> None:
        """This run's process has started (`pid`), or the run ended without one (None: its exit tells)."""
        if pid is not None:
            self.connection.send(Message("started", {"id": self.number, "pid": pid}))


class Owner:
    """Serves workers' connections with one CommandRunner: every run of the host admitted, started and
    waited for here, under one set of limits."""

    def __init__(
        self,
        runner: CommandRunner,
        spawn: Spawn,
        epoch: int = 1,
        pid: int | None = None,
        outbox_bound: int = OUTBOX_BOUND,
        outbox_stall: float = OUTBOX_STALL,
    ) -> None:
        self.runner = runner
        self.epoch = epoch
        self.pid = os.getpid() if pid is None else pid
        self._spawn = spawn
        self._outbox_bound = outbox_bound
        self._outbox_stall = outbox_stall
        self._lock = threading.Lock()
        self._connections: dict[int, _Connection] = {}
        #: The host's families in OpenMetrics text, for a worker's `metrics` (ops/metrics.py); None: none.
        self.exposition: Callable[[], bytes] | None = None
        #: Counts a worker's `count` (ops/metrics.py's count_request); None: no metrics, counts dropped.
        self.count: Callable[[object, object], bool] | None = None
        self.scrape_wait = SCRAPE_WAIT
        #: Admit each run apart from its connection's reader (set when admissions wait on the network, with
        #: -state-url): one admission waiting in the database then holds back neither the worker's other
        #: messages (its other runs, its counts) nor a scrape, which waits until every connection is read.
        self.admit_apart = False
        #: The hooks generation every worker must serve, with its message's fields and bytes (publish_hooks).
        self._hooks: tuple[int, dict[str, object], bytes] | None = None

    @property
    def workers(self) -> list[int]:
        """The pids of the workers whose connections are served now."""
        with self._lock:
            return sorted(self._connections)

    def attach(self, sock: socket.socket, worker_pid: int) -> None:
        """Take over a worker's connection: send `hello`, then serve it (on a reader of its own, started with
        `spawn`; this returns at once) until it ends. A connection the worker had before is let go. Its
        reader waits the way the runner's `waits` do (on the owner's loop: set with runner.use() first)."""
        connection = _Connection(
            sock, worker_pid, self._spawn, self.runner.waits, self._outbox_bound, self._outbox_stall
        )
        with self._lock:
            previous = self._connections.pop(worker_pid, None)
            self._connections[worker_pid] = connection
        if previous is not None:
            previous.close()
        connection.send(Message("hello", {"version": wire.VERSION, "owner": self.pid, "epoch": self.epoch}))
        self._spawn(lambda: self._serve(connection))

    def detach(self, worker_pid: int) -> None:
        """The worker is gone: stop serving its connection. Its runs go on; what they send is dropped."""
        with self._lock:
            connection = self._connections.pop(worker_pid, None)
        log.output(f"worker {worker_pid} is gone; the run owner let its connection go", event=EVENT)
        if connection is not None:
            connection.close()

    def close(self) -> None:
        """Let every connection go for good (the tree is stopping): each is shut down, for the master's copy
        of its end too, so no later owner can serve it."""
        with self._lock:
            connections = list(self._connections.values())
            self._connections.clear()
        for connection in connections:
            connection.close()

    def publish_hooks(
        self, generation: int, fields: dict[str, object], data: bytes, wait: float
    ) -> list[int]:
        """Send hooks generation `generation` to every worker, and wait up to `wait` seconds until each
        says it serves it; returns the pids of those that did not (stopped, or slow: each catches up before
        its next request, hooks/generation.py). A worker that connects later is sent it at its hello."""
        with self._lock:
            self._hooks = (generation, fields, data)
            connections = list(self._connections.values())
        for connection in connections:
            self._send_hooks(connection)
        deadline = time.monotonic() + wait
        late = connections
        while True:
            late = [c for c in late if c.generation < generation and not c.closed]
            if not late or time.monotonic() >= deadline:
                return [c.worker_pid for c in late]
            self.runner.waits.sleep(0.001)

    def _send_hooks(self, connection: _Connection) -> None:
        with self._lock:
            hooks = self._hooks
            if hooks is None or connection.sent_generation == hooks[0]:
                return
            connection.sent_generation = hooks[0]
        generation, fields, data = hooks
        connection.send_all(_framed("reload_part", "reload", generation, data, fields))

    def _serve(self, connection: _Connection) -> None:
        """The reader of one connection: every message until the worker's end; every error is the worker's."""
        pid = connection.worker_pid
        try:
            while not connection.closed:
                connection.reading = True
                try:
                    message, _fds = wire.receive(connection.sock)
                except BlockingIOError:
                    connection.reading = False
                    connection.waits.readable(connection.sock.fileno(), 1.0)
                    continue
                except WireError as exc:
                    log.output(f"run owner: a packet from worker {pid} refused: {exc}")
                    continue
                except (PeerGone, OSError, ValueError):  # ValueError: the socket closed under us
                    break
                try:
                    self._handle(connection, message)
                except Exception as exc:  # noqa: BLE001 - one message's fault, never the owner's end
                    log.output(f"run owner: a {message.kind} message from worker {pid} failed: {exc!r}")
        finally:
            with self._lock:
                if self._connections.get(pid) is connection:
                    del self._connections[pid]
            connection.close()
            connection.release()

    def _handle(self, connection: _Connection, message: Message) -> None:
        pid = connection.worker_pid
        if message.kind == "run":
            parts = connection.parts.pop(message.get("id"), []) if isinstance(message.get("id"), int) else []
            connection.parts_held -= sum(map(len, parts))
            try:
                order = run_order(message, b"".join(parts))
            except WireError as exc:
                log.output(f"run owner: a run message from worker {pid} refused: {exc}")
                number = message.get("id")
                if isinstance(number, int) and not isinstance(number, bool):
                    connection.send(Message("refused", {"id": number, "why": str(exc)}))
                return
            if self.admit_apart:
                self._spawn(lambda: self._admit(connection, order))
            else:
                self._admit(connection, order)
        elif message.kind == "part":
            number = message.get("id")
            if not isinstance(number, int) or isinstance(number, bool):
                log.output(f"run owner: a part without a run number from worker {pid} refused")
                return
            connection.parts_held += len(message.data)
            if connection.parts_held > PARTS_BOUND:
                log.output(f"run owner: worker {pid} sent more than {PARTS_BOUND} bytes of unfinished runs")
                connection.parts.clear()
                connection.parts_held = 0
                return
            connection.parts.setdefault(number, []).append(message.data)
        elif message.kind == "hello":
            version = message.get("version")
            if version != wire.VERSION:
                log.output(f"run owner: worker {pid} speaks version {version!r}; letting it go", event=EVENT)
                connection.close()
                return
            said = f"worker {pid} connected to the run owner (epoch {self.epoch}, protocol {version})"
            log.output(said, event=EVENT)
            generation = message.get("generation")
            connection.generation = generation if isinstance(generation, int) else 0
            hooks = self._hooks
            if hooks is not None and hooks[0] != connection.generation:
                self._send_hooks(connection)  # forked after a reload, or it served an earlier owner's
        elif message.kind == "reloaded":
            generation = message.get("generation")
            if isinstance(generation, int) and not isinstance(generation, bool):
                connection.generation = generation
        elif message.kind == "credit":
            number, size = message.get("id"), message.get("bytes")
            flow = connection.streams.get(number) if isinstance(number, int) else None
            if flow is not None and isinstance(size, int) and not isinstance(size, bool):
                flow.credit(size)
        elif message.kind == "count":
            if self.count is not None and not self.count(message.get("hook"), message.get("outcome")):
                log.output(f"run owner: a count from worker {pid} refused: {message.fields!r:.200}")
        elif message.kind in ("metrics", "ready"):
            number = message.get("id")
            if not isinstance(number, int) or isinstance(number, bool):
                return
            if message.kind == "ready":
                connection.send(Message("ready", {"id": number, "ok": self.runner.accepts_runs()}))
                return
            # Apart from this reader, which another connection's scrape may be waiting for meanwhile.
            self._spawn(lambda: self._scrape(connection, number))
        else:
            log.output(f"run owner: a {message.kind!r} message from worker {pid} ignored")

    def _scrape(self, connection: _Connection, number: int) -> None:
        """Answer a `metrics` once every connection has been read until it would block: each count a worker
        sent before this scrape was asked (before it answered that request) is then counted."""
        deadline = time.monotonic() + self.scrape_wait
        with self._lock:
            pending = list(self._connections.values())
        while True:
            pending = [other for other in pending if not other.read_out()]
            if not pending or time.monotonic() >= deadline:
                break
            connection.waits.sleep(0.001)
        if pending:
            waited = ", ".join(str(other.worker_pid) for other in pending)
            log.output(f"run owner: a scrape answered before worker(s) {waited} were read out", level="warn")
        text = self.exposition() if self.exposition is not None else b""
        connection.send_all(_framed("metrics_part", "metrics", number, text, None))

    def _admit(self, connection: _Connection, order: RunOrder) -> None:
        """Admit one run and answer how; its start, output and exit are told as they come."""
        asked = _Asked(connection, order)
        number = order.number
        # Its start is told to this run alone (a callback of its own: two runs may share a request id).
        on_started = asked.started if order.tell_start else None
        try:
            future, how = self.runner.submit_prepared(
                order.hook,
                order.spec,
                order.group,
                asked.flow.push if asked.flow else None,
                on_started,
                keep=asked.wants_output,
            )
        except Busy as busy:
            asked.forget()
            connection.send(Message("busy", {"id": number, "retry_after": busy.retry_after}))
            return
        except JournalUnwritable as exc:
            asked.forget()
            journal = self.runner.journal
            fields = {"id": number, "retry_after": exc.retry_after, "why": str(exc)}
            connection.send(Message("unavailable", {**fields, "journal": journal and journal.path}))
            return
        except StateUnavailable as exc:
            asked.forget()
            fields = {"id": number, "retry_after": exc.retry_after, "why": str(exc)}
            connection.send(Message("unavailable", fields))
            return
        except Exception as exc:  # noqa: BLE001 - no thread for the run, say: that request's end, not the owner's
            asked.forget()
            log.output(f"run owner: run {number} of worker {connection.worker_pid} not admitted: {exc}")
            connection.send(Message("refused", {"id": number, "why": f"not admitted: {exc}"}))
            return
        connection.send(Message("admitted", {"id": number, "how": how}))
        future.add_done_callback(lambda done: self._exited(asked, done))

    def _exited(self, asked: _Asked, future: Future[CommandResult]) -> None:
        """The run `asked` stands for has ended (its own, or the run it was coalesced into): its exit, with
        the output it has not had yet when it wants it."""
        asked.forget()
        exc = future.exception()
        result = CommandResult(b"", f"error: {type(exc).__name__}") if exc is not None else future.result()
        flow = asked.flow
        streamed = flow is not None and flow.streamed
        output = result.output if asked.wants_output and not streamed else b""
        ending = _framed("result", "exit", asked.number, output, {"error": result.error})
        # A stream's output held for want of credit goes first, as the socket takes it (it is bounded).
        asked.connection.send_all(itertools.chain(flow.rest(), ending) if flow is not None else ending)


def _framed(
    part: str, last: str, number: int, data: bytes, fields: dict[str, object] | None
) -> Iterator[bytes]:
    """`data` for request `number` in `part` frames, the last piece in the `last` message (with `fields`):
    a finished run's output and its `exit`, or the run metrics."""
    frames = wire.frames(data)
    piece = next(frames)
    for following in frames:
        yield wire.encode(Message(part, {"id": number}, piece))
        piece = following
    yield wire.encode(Message(last, {"id": number, **(fields or {})}, piece))
