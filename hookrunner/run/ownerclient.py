"""The worker's side of the run owner (docs/run-state.md, issue 32 step 6): the surface serving uses of a
CommandRunner, with every run prepared here and admitted, started and waited for by the owner
(run/owner.py says what the connection carries)."""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future

from hookrunner.hooks.model import Hook
from hookrunner.hooks.request import Request
from hookrunner.ops.log import log
from hookrunner.run import wire
from hookrunner.run.executor import CommandResult
from hookrunner.run.prepare import coalesce_group, prepare
from hookrunner.run.runorder import run_messages
from hookrunner.run.spawn import Listener, StartSignal, Waits
from hookrunner.run.startwait import START_WAIT, STARTS_AHEAD
from hookrunner.run.streamflow import StreamFlow
from hookrunner.state.backend import StateUnavailable
from hookrunner.state.journal import JournalUnwritable
from hookrunner.state.slots import Busy

#: How long a run waits for the owner's answer (admitted, busy, ...) before its request fails as
#: OwnerUnavailable; and how long a send to the owner may wait for room in the connection.
ANSWER_WAIT = 10.0

#: How long a submit waits for the owner's `hello` while there is none (the worker's start, an owner being
#: restarted by the master) before it fails as OwnerUnavailable.
HELLO_WAIT = 1.0

#: How long a `/metrics` scrape waits for the owner's counters (after the `hello`, if there was none yet)
#: before it is answered 503 (docs/observability.md): with HELLO_WAIT, well inside Prometheus's default
#: scrape_timeout (10 s), so the scraper records the 503 rather than its own timeout.
METRICS_WAIT = 5.0

#: How many seconds a request refused for want of an owner tells its client to wait.
RETRY_AFTER = 1


class OwnerUnavailable(StateUnavailable):
    """The run owner is gone, restarted (a new epoch), or does not answer: a request waiting on a run it
    sent is failed with this, and new runs are refused until the owner's `hello`. Answered 503 with
    Retry-After, like the run state's other unavailability."""

    def __init__(self, why: str) -> None:
        super().__init__(why, RETRY_AFTER)


class RunRefused(Exception):
    """The owner could not read this run's message, or could not admit it (no thread for it): a fault, not
    a limit."""


class _Sent:
    """A run sent to the owner, until both its answer and its exit have come."""

    def __init__(self, hook_id: str, answered: StartSignal, started: StartSignal) -> None:
        self.hook_id = hook_id
        self.future: Future[CommandResult] = Future()
        self.answered = answered
        self.started = started
        self.how: str | None = None
        self.error: Exception | None = None
        self.chunks: list[bytes] = []
        self.on_output: Listener | None = None
        self.has_started = False


#: Starts a reader apart from the caller: a thread, or a greenlet.
Spawn = Callable[[Callable[[], None]], None]

#: The error of a run this worker stopped waiting for when its stop's grace was over (the run goes on in
#: the owner, which ends it when the tree stops).
CANCELLED = "cancelled: hookrunner stopped before it ended (-shutdown-timeout)"


class OwnerClient:
    """What a worker runs hooks with once the owner holds the runs: submit(), start() and run() as a
    CommandRunner's, each run sent to the owner over the worker's connection and its future resolved by
    this client's reader (a thread, or a greenlet: `spawn` decides). `running` and `queued` are this
    worker's runs as the owner told them, not the host's.

    The connection and the reader's `spawn` may be given at connect() rather than here: the master builds
    the app (and this client) before it forks the worker whose connection it is (serve/context.py)."""

    def __init__(self, sock: socket.socket | None = None, spawn: Spawn | None = None) -> None:
        self._sock = sock if sock is not None else socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._spawn: Spawn = spawn if spawn is not None else Waits().launch
        self._sock.setblocking(False)  # waits are `waits`', on threads or on the worker's loop
        #: How a request waits for the run whose output it answers with (the gevent worker replaces it).
        self.wait_for: Callable[[Future[CommandResult]], CommandResult] = Future.result
        #: What the answers' and starts' waits are made of (the gevent worker's, with use()).
        self.waits = Waits()
        self.start_wait = START_WAIT
        self.answer_wait = ANSWER_WAIT
        self.hello_wait = HELLO_WAIT
        self.metrics_wait = METRICS_WAIT
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        self._sent: dict[int, _Sent] = {}
        self._ahead: set[int] = set()
        self._epoch = 0  # the epoch of the owner that said hello last; 0: none yet, or it is gone
        self._hello = False
        #: Whether the connection is made and not yet ended (connect() to the reader's end).
        self._connected = False
        self._counts_dropping = False
        self._closing = False
        self._generation = 0
        #: The pid of the owner whose hello came last.
        self.owner_pid = 0
        #: The hooks generation this worker serves, told in its hello (hooks/generation.py).
        self.hooks_generation: Callable[[], int] = lambda: self._generation
        #: Applies a hooks generation the owner sent (its number, the message's fields and bytes), on this
        #: client's reader; None: reloads are not followed (they are answered all the same).
        self.on_reload: Callable[[int, dict[str, object], bytes], None] | None = None
        self._reload_parts: list[bytes] = []

    def use(self, waits: Waits) -> None:
        """Wait the way `waits` do (the gevent worker's loop: serve/greenruns.py); before connect()."""
        self.waits = waits

    def connect(
        self, generation: int = 0, sock: socket.socket | None = None, spawn: Spawn | None = None
    ) -> None:
        """Say hello to the owner, and start the reader (with `spawn`); `sock`: the connection, when it was
        not given at the start."""
        if sock is not None:
            self._sock.close()
            self._sock = sock
            sock.setblocking(False)
        if spawn is not None:
            self._spawn = spawn
        self._generation = generation
        self._say_hello()
        self._connected = True
        self._spawn(self._read)

    def _say_hello(self) -> None:
        hello = {"version": wire.VERSION, "pid": os.getpid(), "generation": self.hooks_generation()}
        self._send([wire.Message("hello", hello)])

    # --- CommandRunner's surface --------------------------------------------------------------------

    @property
    def running(self) -> int:
        """This worker's runs the owner started (or admitted to start now: only a background run is told
        of its start) that have not ended."""
        with self._lock:
            began = [s for s in self._sent.values() if s.has_started or s.how == "started"]
            return sum(1 for sent in began if not sent.future.done())

    @property
    def queued(self) -> int:
        """This worker's runs the owner admitted to wait (queued or coalesced) that have not started."""
        with self._lock:
            waiting = [s for s in self._sent.values() if s.how in ("queued", "coalesced")]
            return sum(1 for sent in waiting if not (sent.has_started or sent.future.done()))

    @property
    def ahead(self) -> int:
        """Background runs answered before their process started that have not started yet."""
        return len(self._ahead)

    @property
    def closing(self) -> bool:
        """Whether shutdown has given up waiting for this worker's runs (they go on in the owner)."""
        return self._closing

    def submit(
        self, hook: Hook, req: Request, started_first: bool = False, on_output: Listener | None = None
    ) -> Future[CommandResult]:
        """Send a run to the owner and return its future once admitted; raises Busy, JournalUnwritable and
        StateUnavailable (OwnerUnavailable among them) as the owner answers, RunRefused for a fault. With
        `started_first`, as CommandRunner's where runs are launched on the serving loop (`waits.launches`:
        the gevent worker): a run admitted to start now has started (or waited `start_wait`) when this
        returns, unless it is the only one answered and not yet started."""
        return self._submit(hook, req, started_first and self.waits.launches, on_output, hook.capture_output)

    def _submit(
        self, hook: Hook, req: Request, started_first: bool, on_output: Listener | None, capture: bool
    ) -> Future[CommandResult]:
        spec = prepare(hook, req)
        group = coalesce_group(hook, req)
        if not self._await_hello():
            raise OwnerUnavailable("no run owner")
        number = next(self._numbers)
        sent = _Sent(hook.id, self.waits.event(), self.waits.event())
        sent.on_output = on_output
        with self._lock:
            self._sent[number] = sent
        behind = 0
        if isinstance(on_output, StreamFlow):  # its answer credits what it takes (run/streamflow.py)
            on_output.on_taken = lambda size: self._credit(number, size)
            behind = on_output.limit
        stream = on_output is not None
        try:
            self._send(run_messages(number, hook, spec, group, capture, stream, started_first, behind))
        except (OSError, wire.PeerGone, wire.WireError) as exc:
            self._forget(number)
            raise OwnerUnavailable(f"cannot send a run to the run owner: {exc}") from None
        if not sent.answered.wait(self.answer_wait):
            self._forget(number)
            raise OwnerUnavailable(f"the run owner did not answer in {self.answer_wait:g}s")
        if sent.error is not None:
            raise sent.error
        if started_first and sent.how == "started":
            if len(self._ahead) >= STARTS_AHEAD:
                sent.started.wait(self.start_wait)
            if not sent.has_started and not sent.future.done():
                self._ahead.add(number)
                if sent.has_started or sent.future.done():  # it started meanwhile
                    self._ahead.discard(number)
        return sent.future

    def start(self, hook: Hook, req: Request) -> None:
        """Run in the background (webhook's `go handleHook`); raises like submit."""
        self.submit(hook, req, started_first=True)

    def run(self, hook: Hook, req: Request) -> CommandResult:
        """Run the hook's command for this request and wait for its output (through the owner, under its
        limits)."""
        return self.wait_for(self._submit(hook, req, False, None, True))

    def run_metrics(self) -> bytes | None:
        """The host's families (the run metrics and the requests) in OpenMetrics text, asked of the owner
        (ops/metrics.py's `elsewhere`); None when the owner does not answer within `hello_wait` for its
        `hello` (at start, or while it is replaced) and `metrics_wait` for its answer."""
        answer = self._ask("metrics", self.metrics_wait) if self._await_hello() else None
        if answer is None:
            log.output("run owner client: no run metrics from the run owner", level="warn")
        return None if answer is None else answer.output

    def count(self, hook: str, outcome: str) -> None:
        """Count one request in the owner (ops/metrics.py's `elsewhere`): sent, not answered, before the
        request is answered, so that a scrape through any worker after the answer counts it. Sent as soon as
        the connection is made, hello or not: the packet waits in the connection for whichever owner reads
        it (one that is starting, or the next one after a crash). Never waited for: a connection with no room
        (an owner stopped for long) drops the count, logged once until one goes through again, and a
        connection that has ended drops it silently, so a request that runs nothing is answered as usual."""
        if not self._connected:
            return
        try:
            wire.send(self._sock, wire.Message("count", {"hook": hook, "outcome": outcome}))
        except BlockingIOError:
            if not self._counts_dropping:
                self._counts_dropping = True
                log.output(
                    "run owner client: the run owner takes no more counts; requests not counted", level="warn"
                )
            return
        except (OSError, wire.PeerGone, wire.WireError) as exc:
            log.output(f"run owner client: a request not counted: {exc}", level="warn")
            return
        self._counts_dropping = False

    def _credit(self, number: int, size: int) -> None:
        """Run `number`'s answer has taken `size` bytes of its stream: the owner may send as much again."""
        try:
            self._send([wire.Message("credit", {"id": number, "bytes": size})])
        except (OSError, wire.PeerGone, wire.WireError) as exc:  # the owner's end: the run fails with it
            log.output(f"run owner client: a credit for run {number} not sent: {exc}", level="warn")

    def accepts_runs(self) -> bool:
        """Readiness: whether the owner would accept runs now (its journal, with -state-dir, can be written);
        False when it does not answer."""
        answer = self._ask("ready")
        return answer is not None and answer.ok

    def _await_hello(self) -> bool:
        """Whether the owner has said `hello`, waiting `hello_wait` at most for it when it has not."""
        deadline = time.monotonic() + self.hello_wait
        while not self._hello and time.monotonic() < deadline:
            self.waits.sleep(0.01)
        return self._hello

    def _ask(self, kind: str, wait: float | None = None) -> CommandResult | None:
        """Ask the owner a question (`metrics`, `ready`) and wait for its answer, `wait` (else `answer_wait`)
        at most; None at once when it has not said `hello`."""
        if not self._hello:
            return None
        number = next(self._numbers)
        sent = _Sent("", self.waits.event(), self.waits.event())
        with self._lock:
            self._sent[number] = sent
        try:
            self._send([wire.Message(kind, {"id": number})])
            answered = sent.answered.wait(self.answer_wait if wait is None else wait)
            if answered and sent.error is None and sent.future.done():
                return sent.future.result()
        except (OSError, wire.PeerGone, wire.WireError, OwnerUnavailable):
            pass
        finally:
            self._forget(number)
        return None

    def shutdown(self, grace: float) -> None:
        """Wait up to `grace` seconds for this worker's runs to end; the runs themselves are the owner's and
        go on whatever this worker does."""
        deadline = time.monotonic() + max(grace, 0.0)
        while True:
            with self._lock:
                waiting = [sent.future for sent in self._sent.values() if not sent.future.done()]
            if not waiting or time.monotonic() >= deadline:
                break
            self.waits.sleep(min(0.05, deadline - time.monotonic()))
        self._closing = bool(waiting)
        # Requests still waiting for a run's output are answered now (500); the run goes on in the owner.
        for future in waiting:
            if not future.done():
                future.set_result(CommandResult(b"", CANCELLED))

    def close(self) -> None:
        """Let the connection go: the reader ends, and every run still waited on fails as OwnerUnavailable."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # --- the connection -----------------------------------------------------------------------------

    def _send(self, messages: Iterable[wire.Message]) -> None:
        """Send `messages` in order; each is one packet, which the kernel keeps whole, so runs sent at once
        may interleave their packets. A socket with no room is tried again after a pause that grows (1 to
        50 ms: the waits have no wait for a socket's room), up to `answer_wait`."""
        deadline = time.monotonic() + self.answer_wait
        for message in messages:
            pause = 0.001
            while True:
                try:
                    wire.send(self._sock, message)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise TimeoutError("the run owner takes no more") from None
                    self.waits.sleep(pause)
                    pause = min(pause * 2, 0.05)

    def _forget(self, number: int) -> None:
        with self._lock:
            self._sent.pop(number, None)
        self._ahead.discard(number)

    def _read(self) -> None:
        """The reader: every message from the owner until the connection ends."""
        try:
            while True:
                try:
                    message, _fds = wire.receive(self._sock)
                except BlockingIOError:
                    self.waits.readable(self._sock.fileno(), 1.0)
                    continue
                except wire.WireError as exc:
                    log.output(f"run owner client: a packet from the run owner refused: {exc}")
                    continue
                except (wire.PeerGone, OSError, ValueError):
                    break
                self._handle(message)
        finally:
            self._connected = False
            self._hello = False
            self._epoch = 0
            self._fail(lambda sent: True, "the run owner is gone")
            self._sock.close()

    def _handle(self, message: wire.Message) -> None:
        kind = message.kind
        if kind == "hello":
            epoch = message.get("epoch")
            if message.get("version") != wire.VERSION or not isinstance(epoch, int):
                log.output(f"run owner client: a hello of version {message.get('version')!r} ignored")
                return
            if epoch != self._epoch:
                self._new_owner()
                if self._epoch:
                    self._say_hello()  # a new owner: it learns of this worker from this hello
            self._epoch = epoch
            self.owner_pid = message.get("owner") or 0
            self._hello = True
            return
        number = message.get("id")
        if kind in ("reload_part", "reload"):
            self._reload(message, number)
            return
        with self._lock:
            sent = self._sent.get(number) if isinstance(number, int) else None
        if sent is None:
            return  # a run this worker no longer waits on (it gave up on the answer)
        if kind == "admitted":
            sent.how = str(message.get("how"))
            if sent.future.done():
                self._forget(number)
            sent.answered.set()
        elif kind in ("busy", "unavailable", "refused"):
            sent.error = _refusal(kind, message, sent.hook_id)
            sent.answered.set()
            self._forget(number)
        elif kind == "started":
            sent.has_started = True
            self._ahead.discard(number)
            sent.started.set()
        elif kind == "metrics_part":
            sent.chunks.append(message.data)
        elif kind in ("metrics", "ready"):  # the answer to _ask()
            ready = kind == "metrics" or message.get("ok") is True
            sent.how = kind
            answer = CommandResult(b"".join(sent.chunks) + message.data, None if ready else kind)
            sent.future.set_result(answer)
            sent.answered.set()
        elif kind in ("out", "result"):
            sent.chunks.append(message.data)
            if kind == "out" and sent.on_output is not None:
                try:
                    sent.on_output(message.data)
                except Exception as exc:  # noqa: BLE001 - that request's listener, not the reader's end
                    log.output(f"run owner client: run {number}'s output listener failed: {exc!r}")
        elif kind == "behind":  # the owner gave this stream's client up: it fell its bound behind
            if isinstance(sent.on_output, StreamFlow):
                sent.on_output.fell_behind()
        elif kind == "exit":
            self._ahead.discard(number)
            sent.started.set()
            error = message.get("error")
            output = b"".join(sent.chunks) + message.data
            result = CommandResult(output, error if isinstance(error, str) else None)
            sent.chunks = []
            if sent.how is not None:  # else the exit came before the answer: forgotten once answered
                self._forget(number)
            if not sent.future.done():  # else shutdown stopped waiting for it
                sent.future.set_result(result)

    def _reload(self, message: wire.Message, generation: object) -> None:
        """A piece of hooks generation `generation`; once whole, applied (on this reader: the owner's next
        messages wait for it) and answered `reloaded`."""
        self._reload_parts.append(message.data)
        if message.kind == "reload_part":
            return
        data, self._reload_parts = b"".join(self._reload_parts), []
        if not isinstance(generation, int) or isinstance(generation, bool):
            return
        if self.on_reload is not None:
            try:
                self.on_reload(generation, message.fields, data)
            except Exception as exc:  # noqa: BLE001 - a generation not applied: requests wait, then 503
                log.output(f"run owner client: hooks generation {generation} not applied: {exc!r}")
                return
        try:
            self._send([wire.Message("reloaded", {"generation": generation})])
        except (OSError, wire.PeerGone, wire.WireError) as exc:
            log.output(f"run owner client: reload {generation} not answered: {exc}", level="warn")

    def _new_owner(self) -> None:
        """A new owner took the connection (its hello comes before any answer of its own): the runs an
        earlier owner admitted and had not ended are lost with it and fail now. A run it had not answered
        stays: its packets are still in the connection unless the dead owner read them, so the new owner
        answers it, or `answer_wait` ends it (OwnerUnavailable). A run whose exit came but not its answer
        is answered now."""
        self._reload_parts = []  # an earlier owner's unfinished generation: the new one sends it whole
        with self._lock:
            ended = [
                (number, sent)
                for number, sent in self._sent.items()
                if sent.how is None and sent.future.done()
            ]
        for number, sent in ended:
            sent.how = "started"
            self._forget(number)
            sent.answered.set()
        self._fail(lambda sent: sent.how is not None, "the run owner was restarted")

    def _fail(self, which: Callable[[_Sent], bool], why: str) -> None:
        """Fail the runs sent and not ended that `which` picks: their requests get OwnerUnavailable."""
        with self._lock:
            picked = [(number, sent) for number, sent in self._sent.items() if which(sent)]
            for number, _sent in picked:
                del self._sent[number]
        for number, sent in picked:
            self._ahead.discard(number)
            error = OwnerUnavailable(why)
            if sent.how is None:
                sent.error = error
                sent.answered.set()
            if not sent.future.done():
                sent.future.set_exception(error)
            sent.started.set()


def _refusal(kind: str, message: wire.Message, hook_id: str) -> Exception:
    """The error a refused run's submit raises."""
    retry_after = message.get("retry_after")
    retry_after = retry_after if isinstance(retry_after, int) and not isinstance(retry_after, bool) else 5
    why = str(message.get("why") or kind)
    if kind == "busy":
        return Busy(hook_id, retry_after)
    if kind == "unavailable":
        journal = message.get("journal")
        if isinstance(journal, str):
            error = JournalUnwritable(journal)
            error.retry_after = retry_after
            return error
        return StateUnavailable(why, retry_after)
    return RunRefused(why)
