"""What every hookrunner worker process does the same way, whatever serves its connections: webhook's
signals, following the run owner's hooks generations, the Go-style answers to broken requests, the graceful
stop, and the -read-timeout deadline on request reads."""

from __future__ import annotations

import ctypes
import math
import os
import re
import signal
import socket
import ssl
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import gunicorn.http.message
import gunicorn.http.parser
import gunicorn.http.wsgi
import gunicorn.util
from gunicorn.http import errors as http_errors
from gunicorn.workers.base import Worker
from werkzeug.exceptions import RequestTimeout
from werkzeug.wrappers import Response as WerkzeugResponse

from hookrunner.golang.status import status_line
from hookrunner.hooks.generation import Follower, unpack
from hookrunner.ops.heap import malloc_trim
from hookrunner.ops.log import log
from hookrunner.run.history import Recorder
from hookrunner.serve.answers import HANDLER_HEADERS_KEY, HEADER_LIST_KEY, go_request_path
from hookrunner.serve.context import HELD_SIGNALS, ctx
from hookrunner.serve.parseheap import PARSE_HEAP
from hookrunner.serve.protocol import (
    ContinueOnRead,
    GoRequest,
    GoResponse,
    go_host_problem,
    go_parse_error,
    go_plain_error,
    go_refuses_transfer_encoding,
    go_sends_continue,
    http_date,
)
from hookrunner.serve.tls import PLAIN_HTTP_ANSWER, go_addr, go_handshake_error

if TYPE_CHECKING:
    # Loaded only with the flag that needs them (docs/performance.md, memory at rest): multiprocessing's
    # connections with -admin-addr.
    from hookrunner.run.historyfeed import FeedClient


#: How long net/http waits between shutting the write side of a refused connection and closing it.
RST_AVOIDANCE_DELAY = 0.5

#: glibc's mallopt parameters (malloc.h): how much free space at the top of the heap is kept, the size from
#: which an allocation gets pages of its own, and the most arenas malloc makes.
M_MXFAST = 1
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
#: Allocations of this many bytes or more are mapped on their own, and given back to the system when freed.
MMAP_THRESHOLD_BYTES = 2 << 20
#: Free space at the top of the heap is given back once there is more than this (twice the mmap threshold,
#: as glibc's own adjustment would set it).
TRIM_THRESHOLD_BYTES = 2 * MMAP_THRESHOLD_BYTES


def _mallopt(param: int, value: int) -> bool:
    """glibc's mallopt(param, value); False where there is none (not glibc) or it refused."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(param, value))


class SettledConfig:
    """gunicorn's configuration as a worker reads it on every request, each setting's value read once.

    gunicorn's Config finds a setting through __getattr__ and its Setting object on every access, some
    of them once per header line: about 3% of a request's CPU. A worker's settings do not change once it
    serves, so they become plain attributes here; anything else (its methods, the properties that are not
    settings) is the Config's own, looked up as before."""

    #: Properties of gunicorn's Config, not settings, read on every request.
    PER_REQUEST = ("is_ssl",)

    def __init__(self, cfg: Any) -> None:
        self._cfg = cfg
        for name in (*cfg.settings, *self.PER_REQUEST):
            # Through the Config, so that a property standing for a setting (worker_class) is what is kept.
            setattr(self, name, getattr(cfg, name))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cfg, name)


def map_big_allocations() -> bool:
    """Have glibc map every allocation of MMAP_THRESHOLD_BYTES or more on its own, for good. By default it
    raises that threshold each time such a block is freed (up to 32 MiB), so once a big body was read
    the next ones of its size (the body, its decoded text, their copies, on parser and request threads)
    were taken from a thread's arena and kept there when freed: some 60 MB stayed after two 25 MiB bodies
    (docs/limits.md, robustness).

    Fixing the threshold also stops glibc from raising the heap's trim threshold with it, so that one is
    set too: left at 128 KiB, a block of a MiB or so freed at the top of the heap is given back at once
    and faulted in again for the next request; at a threshold of 1 MiB each 1 MiB body was mapped and
    unmapped, and 1 MiB pushes ran at half their rate in some workers (docs/performance.md). Returns
    False where there is no mallopt (not glibc)."""
    mapped = _mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    return mapped and _mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)


def share_one_arena() -> bool:
    """Have every thread of this process allocate from glibc's main arena. By default each thread that
    allocates gets an arena of its own (up to eight per core), kept when the thread ends and handed to the
    next: on the gevent worker the pool threads that started commands (before the run owner started them)
    came and went with each burst, and their arenas added 0.5 MiB of RSS per load that stayed
    (docs/performance.md, memory at rest). Its threads hand the GIL to each other, so they seldom allocate
    at the same moment. Returns False where there is no mallopt (not glibc)."""
    return _mallopt(M_ARENA_MAX, 1)


def merge_frees() -> bool:
    """No fast bins in glibc's malloc (mallopt(M_MXFAST, 0)): a small block freed is merged with its free
    neighbours at once, where a fast bin would set it aside unmerged until the next malloc_trim, or the next
    big malloc, merges all of them in one go on whichever thread comes. The millions of small blocks of a
    big parse (serve/parseheap.py) took 0.45 s to merge that way (25 MiB of nested XML), on the event loop's
    thread; merged as they are freed, on the parser thread, they add 0.05 s to the freeing. Small blocks of
    Python objects come from Python's own allocator outside a parse, and a thread's cache (tcache) still
    keeps a few blocks of each size for reuse. False where there is no mallopt (not glibc)."""
    return _mallopt(M_MXFAST, 0)


class HeapTrim:
    """The heap given back after a burst of TLS handshakes. Each handshake allocates OpenSSL's objects and
    buffers on the heap, and thousands at once leave it full of free pages between the blocks still in
    use, which glibc keeps: RSS stayed at its high-water mark after each flood (docs/limits.md, TLS
    floods). `tick(begun)`, called by the worker's loop with how many handshakes have begun so far
    (OpenSSL's own count, SSLContext.session_stats()), trims once TRIM_AFTER have begun since the last
    trim and either none has for TRIM_QUIET seconds (the burst is over) or TRIM_EVERY seconds have passed
    (a burst that goes on). The connections a burst opened may end later (a client holding its
    handshakes open, then dropping them all), so the trim is done again FOLLOW_UPS seconds after it. A
    trim takes a few milliseconds, less with little to give back; none for plain HTTP."""

    TRIM_AFTER = 64
    TRIM_QUIET = 1.0
    TRIM_EVERY = 10.0
    FOLLOW_UPS: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)

    def __init__(
        self, trim: Callable[[], object] = malloc_trim, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._trim, self._clock = trim, clock
        self._begun = self._trimmed_at_count = 0
        self._last = self._trimmed = clock()
        self._follow: list[float] = []

    def tick(self, begun: int) -> None:
        now = self._clock()
        if begun != self._begun:
            self._begun, self._last = begun, now
        if begun - self._trimmed_at_count >= self.TRIM_AFTER and (
            now - self._last >= self.TRIM_QUIET or now - self._trimmed >= self.TRIM_EVERY
        ):
            self._trimmed_at_count, self._trimmed = begun, now
            self._follow = [now + later for later in self.FOLLOW_UPS]
            self._trim()
        elif self._follow and now >= self._follow[0]:
            self._follow = [when for when in self._follow if when > now]
            self._trim()


class ParseTrim(HeapTrim):
    """The heap given back after big bodies' parses (serve/parseheap.py): `tick` with how many parses have
    ended or been freed (PARSE_HEAP.events) trims TRIM_QUIET seconds after the last one, then again
    FOLLOW_UPS seconds later for objects freed late (a failed parse's, once its error is answered)."""

    TRIM_AFTER = 1
    TRIM_QUIET = 0.2
    FOLLOW_UPS = (1.0, 3.0)


def _follow_hooks() -> None:
    """Serve the hooks generations the run owner publishes (hooks/generation.py): each applied by the reader
    of the owner's connection, and caught up with by every request before it matches its hook."""
    registry = ctx.registry
    follower = Follower(registry, ctx.hooks_generation, ctx.runner.waits)
    ctx.runner.hooks_generation = lambda: registry.generation
    ctx.runner.on_reload = lambda generation, fields, data: follower.apply(generation, unpack(fields, data))
    registry.latest = follower.catch_up


def _start_history() -> FeedClient:
    """Send the hooks this worker serves to the admin listener (-admin-addr), at its start and after each
    reload; the runs' records come from the run owner (serve/ownerprocess.py)."""
    from hookrunner.run.historyfeed import FeedClient

    feed = FeedClient(ctx.history_feed, ctx.history_key)
    recorder = Recorder(feed.send, ctx.config.history_output)
    registry = ctx.registry

    def report_hooks() -> None:
        loaded = registry.loaded_at
        recorder.hooks(
            [
                {"file": path, "loaded_at": loaded.get(path),
                 "hooks": [k.id for k in registry.hooks_of(path)]}
                for path in registry.files
            ]
        )

    registry.on_publish = report_hooks
    report_hooks()
    return feed


class ClientReadTimeout(RequestTimeout):
    """The request was not fully received within -read-timeout (docs/limits.md, slow clients).

    Raised from a socket read: while the head is read the worker closes the connection without an answer,
    as net/http does; while the app reads the body it becomes a 408 that closes the connection.
    """

    def get_response(self, *args: Any, **kwargs: Any) -> Any:
        # Plain text like the app's other answers, not werkzeug's HTML page.
        headers = {"Content-Type": "text/plain; charset=utf-8"}
        return WerkzeugResponse(b"Request not received in time.\n", status_line(408), headers)


class DeadlineSocket:
    """The socket as the request parser reads it: every read of one request shares one deadline.

    A per-read timeout alone lets a client that sends a byte now and then hold a worker thread forever
    (slowloris); the deadline counts from the first read of a request, so the whole request (head and
    body) has `limit` seconds. Writes are not bounded: the socket is blocking again after each read.
    """

    def __init__(self, sock: socket.socket, limit: float, peer: Any) -> None:
        self._sock = sock
        self._limit = limit
        self._peer = peer
        self._caller_timeout: float | None = None  # what gunicorn's body drain asks for
        self.deadline: float | None = None

    def new_request(self) -> None:
        self.deadline = None

    def settimeout(self, timeout: float | None) -> None:
        self._caller_timeout = timeout

    def gettimeout(self) -> float | None:
        return self._caller_timeout

    def recv(self, size: int) -> bytes:
        now = time.monotonic()
        if self.deadline is None:
            self.deadline = now + self._limit
        remaining = self.deadline - now
        if remaining <= 0:
            self._expired()
        timeout = remaining if self._caller_timeout is None else min(remaining, self._caller_timeout)
        self._sock.settimeout(timeout)
        try:
            return self._sock.recv(size)
        except TimeoutError:
            if time.monotonic() >= self.deadline:
                self._expired()
            raise
        finally:
            try:
                self._sock.settimeout(None)
            except OSError:
                pass

    def _expired(self) -> None:
        read_expired(self._peer, self._limit)
        # Nothing more is read from this client: a graceful close would otherwise linger reading from it.
        shutdown_reading(self._sock)
        raise ClientReadTimeout()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def shutdown_reading(sock: Any, how: int = socket.SHUT_RD) -> None:
    """No more reads from this client (or with SHUT_WR, no more writes), over TLS or not. A TLS socket's own
    shutdown() also drops its TLS state, and an answer written after it (a 408) would go out in plain text;
    so the descriptor is shut under the TLS layer: with the plain socket's method for the standard
    library's TLS socket, and on the raw socket (`_sock`) that a gevent socket wraps."""
    try:
        if isinstance(sock, ssl.SSLSocket):
            socket.socket.shutdown(sock, how)
        else:
            getattr(sock, "_sock", sock).shutdown(how)
    except OSError:
        pass


def go_target_parses(target: str | None) -> bool:
    """Whether the path of a request target has only good `%` escapes (what the app would refuse with a
    plain 400 when it routes the request)."""
    try:
        go_request_path({"RAW_URI": target or ""})
    except ValueError:
        return False
    return True


def peer_text(peer: Any) -> str:
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "@"


def read_expired(peer: Any, limit: float) -> None:
    """The log line for a request not received within -read-timeout."""
    log.output(f"closing the connection from {peer_text(peer)}: request not received within {limit:g}s")


def handshake_expired(peer: Any, limit: float) -> None:
    log.output(f"closing the connection from {peer_text(peer)}: TLS handshake not done within {limit:g}s")


def handshake_failed(sock: Any, peer: Any, exc: OSError) -> None:
    """A TLS handshake that failed with `exc`, as net/http handles it: a client that sent plain HTTP is
    answered 400 on the plain connection; any other failure is logged as
    `http: TLS handshake error from <peer>: <crypto/tls's error>`."""
    text = go_handshake_error(exc, sock, peer)
    if text is None:
        try:
            fd = sock.fileno()
            os.set_blocking(fd, False)
            try:
                os.read(fd, 65536)  # what came after the request line: closing on it unread would reset
            except BlockingIOError:
                pass
            os.write(fd, PLAIN_HTTP_ANSWER)
        except OSError:
            pass
        return
    log.output(f"http: TLS handshake error from {go_addr(peer)}: {text}")


class WebhookWorker(Worker):
    """Mixed in before a gunicorn worker class: webhook's signals (HUP and USR1 reload the hooks, INT is
    as graceful as TERM), Go's answers to requests net/http refuses, the header list of each request, and
    the stop that gives background commands what is left of -shutdown-timeout.

    The worker class provides `request_local()`: where the request being served is kept while the app
    runs (a thread local for threads, a greenlet local for greenlets).
    """

    wsgi: Any
    cfg: Any

    def request_local(self) -> Any:
        raise NotImplementedError

    _heap = HeapTrim()
    _parse_heap = ParseTrim()

    def notify(self) -> None:
        super().notify()
        if ctx.ssl_context is not None:
            self._heap.tick(ctx.ssl_context.session_stats()["accept"])
        if PARSE_HEAP.available:
            self._parse_heap.tick(PARSE_HEAP.events)

    def init_process(self) -> None:
        from hookrunner.serve.app import Parsing  # Flask: loaded by the worker, not by the master

        map_big_allocations()
        # A big body's objects are made by malloc, and given back once freed (serve/parseheap.py).
        merge_frees()
        parse = Parsing.run
        Parsing.run = staticmethod(lambda work: parse(partial(PARSE_HEAP.outside_pools, work)))  # type: ignore[method-assign]
        Parsing.freed = staticmethod(PARSE_HEAP.freed)
        # Go's net/http sends no Server header; swap the response class in this process only.
        gunicorn.http.wsgi.Response = GoResponse
        # Header names and values are checked as net/http checks them: after its Host checks.
        gunicorn.http.parser.RequestParser.mesg_class = GoRequest
        # Go takes bytes 0x80-0xFF in the request target as they are (curl sends `?name=é` unescaped);
        # gunicorn refuses them with a 400. Controls and DEL stay refused, as url.ParseRequestURI does.
        gunicorn.http.message.RFC9112_TARGET_INVALID = re.compile(r"[^\x21-\x7e\x80-\xff]")
        gunicorn.util.http_date = http_date
        self._history_feed: FeedClient | None = None
        self._stop_started = 0.0
        # In this process only: requests get -shutdown-timeout, so there is time left to kill leftover
        # commands before the master's own, longer, deadline ends this worker with SIGKILL.
        self.cfg.set("graceful_timeout", math.ceil(ctx.config.shutdown_timeout))
        self.cfg = SettledConfig(self.cfg)
        super().init_process()

    def init_signals(self) -> None:
        super().init_signals()
        # The run owner reloads the hooks for every worker (serve/ownerreload.py): the master sends it the
        # reload signals, and one sent to a worker does nothing.
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        signal.signal(signal.SIGINT, self.handle_exit)
        # Signals that arrived between fork and now were held back by the master (see spawn_worker).
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD_SIGNALS)
        # Threads start only now: a thread inherits the signal mask, and so would the commands it ran.
        if ctx.history_feed:
            self._history_feed = _start_history()
        if ctx.owner_link is not None:
            _follow_hooks()
            # Every run goes through the run owner (serve/ownerprocess.py); the journal is the owner's.
            ctx.runner.connect(sock=ctx.owner_link, spawn=ctx.runner.waits.launch)

    def load_wsgi(self) -> None:
        super().load_wsgi()
        app = self.wsgi
        current = self._current = self.request_local()

        def with_header_list(environ: dict[str, Any], start_response: Any) -> Any:
            req = getattr(current, "req", None)
            if req is not None:
                environ[HEADER_LIST_KEY] = headers = tuple(req.headers)
                # gunicorn's environ holds the last Content-Type of a repeated one; Go reads the first.
                first_type = next((value for name, value in headers if name == "CONTENT-TYPE"), None)
                if first_type is not None:
                    environ["CONTENT_TYPE"] = first_type
                sock = getattr(current, "sock", None)
                if sock is not None and go_sends_continue(req, environ):
                    environ["wsgi.input"] = ContinueOnRead(environ["wsgi.input"], sock)
            result = app(environ, start_response)
            if req is not None:
                req.handler_headers = environ.get(HANDLER_HEADERS_KEY)
                body = environ.get("wsgi.input")
                req.go_continue_pending = isinstance(body, ContinueOnRead) and body.pending
            return result

        self.wsgi = with_header_list

    def refuse_bad_host(self, req: Any, sock: Any) -> bool:
        """net/http refuses a request target it cannot parse (a bad `%` escape: 400), then a Transfer-Encoding
        other than one `chunked` while it parses (501), then checks
        the Host header, then the header names and values, before any handler runs, and answers in its own
        plain format; returns whether it answered (and the connection is to be closed)."""
        problem = go_host_problem(req.version, req.method, req.headers) or getattr(req, "go_problem", "")
        if not go_target_parses(req.uri):
            # net/http parses the request target (url.ParseRequestURI) before it reads the headers.
            answer = go_plain_error(400, "Bad Request")
        elif go_refuses_transfer_encoding(req.version, req.headers):
            answer = go_plain_error(501, "Not Implemented", "Unsupported transfer encoding")
        elif problem:
            answer = go_plain_error(400, f"Bad Request: {problem}")
        else:
            return False
        try:
            sock.sendall(answer)
        except OSError:
            pass
        return True

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        if isinstance(exc, ClientReadTimeout):
            return  # net/http closes a connection whose request head timed out without an answer
        answer = go_parse_error(exc)
        if answer is None:
            super().handle_error(req, client, addr, exc)
            return
        try:
            if answer:
                client.sendall(answer)
        except OSError:
            return
        if isinstance(exc, (http_errors.LimitRequestHeaders, http_errors.LimitRequestLine)):
            # net/http's closeWriteAndWait: the client, likely still sending its head, is told the end
            # of the answer and given time to read it before the close (which may reset the connection).
            shutdown_reading(client, socket.SHUT_WR)
            self.linger(RST_AVOIDANCE_DELAY)

    def linger(self, seconds: float) -> None:
        """Wait without holding up other connections (the gevent worker waits on its loop)."""
        time.sleep(seconds)

    def handle_exit(self, sig: int, frame: Any) -> None:
        if not self._stop_started:
            self._stop_started = time.monotonic()
        super().handle_exit(sig, frame)

    def finish_commands(self) -> None:
        """Requests are done (or their grace is over); give background commands what is left of it."""
        started = self._stop_started or time.monotonic()
        grace = ctx.config.shutdown_timeout
        ctx.runner.shutdown(max(0.0, grace - (time.monotonic() - started)))
        if self._history_feed is not None:
            self._history_feed.flush(1.0)
