"""The gevent worker (-worker-class gevent, the default): each connection is a greenlet on one event
loop (its bytes read as serve/greenreads.py says). Each hook command runs in the run owner, as a greenlet on
its own loop, which starts it and waits on its output and exit (serve/greenruns.py).

Nothing is monkey-patched: only the worker's own sockets are gevent sockets (the listener, and through
it every accepted connection). The `subprocess` pipes, the reloader, the hooks watcher and every lock
and queue stay the standard library's, so a command is spawned with vfork as before. See
docs/performance.md for what this buys and docs/operations.md for the choice between workers."""

from __future__ import annotations

import errno
import gc
import socket
import ssl
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from itertools import compress, islice, repeat
from typing import Any, TypeVar

import gevent
import gevent.local
import gevent.pool
import gevent.server
import gevent.socket
import gevent.ssl
import gevent.threadpool
from gevent.hub import Waiter
from gunicorn import http, util
from gunicorn.workers.base_async import AsyncWorker
from gunicorn.workers.ggevent import GeventWorker

from hookrunner.golang.syscall import errno_text
from hookrunner.ops.log import log
from hookrunner.serve.app import Parsing
from hookrunner.serve.fairness import LoopTurns, client_key
from hookrunner.serve.greenreads import (
    BodyFirst,
    DormantConnection,
    GatedUnreader,
    RequestReader,
    polled,
    share_loop,
)
from hookrunner.serve.greenruns import GreenWaits
from hookrunner.serve.protocol import GoChunkedReader
from hookrunner.serve.proxies import parse_networks
from hookrunner.serve.routes import body_first
from hookrunner.serve.worker import (
    WebhookWorker,
    ctx,
    handshake_expired,
    handshake_failed,
    share_one_arena,
    shutdown_reading,
)

T = TypeVar("T")

#: How often the worker's main greenlet looks at whether it is to stop (and tells the master it lives).
TICK = 0.1

#: The interpreter's switch interval in this worker (Python's default is 5 ms). One thread, the loop's,
#: serves every connection; when it wants the GIL back after a socket call and a command thread holds
#: it, it waits this long at most instead of 5 ms. Measured (docs/performance.md): async p99 -15%,
#: capture p99 -8%, no change in throughput.
SWITCH_INTERVAL = 0.0002

#: Allocations between two collections of the youngest generation in this worker (Python's default: 700).
GC_THRESHOLD = 20_000

#: Native threads parsing big request bodies at once; more wait their turn (each is busy on the CPU).
PARSE_THREADS = 2

#: How long the waiting requests given their turns after a poll may take before the loop polls again
#: (serve/fairness.py); at least one goes. 0: one waiting request per poll. Measured with one client
#: flooding on 64 connections (docs/limits.md, "A flooded neighbour"): a second client's push took a
#: median of 9-16 ms with 0 and 20-27 ms with 2 ms (three runs each, load average 7-11); three later
#: rounds of 0, 0.5 and 1 ms (load average 8-15) told them apart neither there nor in the flood's rate.
TURNS_BUDGET = 0.0

#: Go's backoff after a failed accept (net/http's Serve): 5 ms, doubled up to 1 s.
ACCEPT_RETRY_FIRST = 0.005
ACCEPT_RETRY_MAX = 1.0

#: Connections whose client went away part-way through a held head or body, served at once; the rest wait
#: their turn. Each is still served to its end (a hook whose body was cut runs with what came, as in
#: webhook), but thousands cut at once (a flood closing) would otherwise all be ready on the loop together,
#: and a live client would wait behind every one of them.
GONE_AT_ONCE = 8

#: Stopping: how long a connection accepted just before the stop may take to send its request before it is
#: closed unanswered (net/http's Shutdown closes a connection that has been new for 5 s). With systemd's
#: socket (hookrunner.socket), a connection the old process accepted as it stopped is then answered by it,
#: not reset, and those still in the backlog go to the next process.
NEW_CONNECTION_GRACE = 5.0

#: How long the unread rest of a request body may take to drain before the connection is kept alive;
#: gunicorn's threaded worker allows as much.
DRAIN_SECONDS = 5.0


def wait_for_run(future: Future[T]) -> T:
    """The result of a command run on a native thread, waited for by a greenlet: other greenlets are
    served meanwhile. (Future.result() would block the whole loop.)"""
    if not future.done():
        watcher = gevent.get_hub().loop.async_()
        waiter: Waiter[None] = Waiter()
        watcher.start(waiter.switch, None)
        # The command's thread rings the watcher (the loop's thread-safe doorbell) unless this greenlet
        # has stopped waiting (killed by a stop whose grace is over) and closed it.
        guard = threading.Lock()
        waiting = True

        def wake(_: Future[T]) -> None:
            with guard:
                if waiting:
                    watcher.send()

        try:
            future.add_done_callback(wake)
            waiter.get()
        finally:
            with guard:
                waiting = False
                watcher.close()
    return future.result()


def write(sock: Any, data: bytes, chunked: bool = False) -> None:
    """gunicorn's util.write in this worker: an answer's head or body usually fits the socket's buffer,
    so it is sent with one send(); gevent's sendall() first asks the kernel for the buffer's size, a
    system call per write."""
    if chunked:
        util.write_chunk(sock, data)
        return
    if not data:
        return  # nothing to send (and TLS refuses a write of nothing)
    sent = sock.send(data)
    if sent < len(data):
        sock.sendall(memoryview(data)[sent:])


_parsing = 0
_parsing_lock = threading.Lock()


def _pause_gc() -> None:
    """The cyclic garbage collector paused while a big body is parsed and until its parse is freed: the
    millions of containers a parse builds (JSON numbers among them) would otherwise set off collections
    that walk them all while holding the GIL, for a second or more each, and the loop would wait that
    long; the first young collection after the parse would walk every one of them. Nothing a parse
    builds is cyclic, so nothing is lost; the collector runs again once no parse is held (_resume_gc)."""
    global _parsing
    with _parsing_lock:
        _parsing += 1
        gc.disable()


def _resume_gc() -> None:
    global _parsing
    with _parsing_lock:
        _parsing -= 1
        if not _parsing:
            gc.enable()


def _without_gc(work: Callable[[], T]) -> tuple[T | None, Exception | None]:
    """`work` (a big body's parse, on a parser thread) under _pause_gc; a failed parse resumes the
    collector at once, a parse that succeeds keeps it paused until the request is released."""
    _pause_gc()
    try:
        return work(), None
    except Exception as exc:  # noqa: BLE001 - handed back to the request's greenlet, raised there
        _resume_gc()
        return None, exc


def parse_on(parsers: gevent.threadpool.ThreadPool, work: Callable[[], T]) -> T:
    """`work` (a big body's parse) on a thread of `parsers`, under _pause_gc, waited for by the calling
    greenlet. The parse's own error (a body that is not JSON) comes back from the thread as a value, since
    gevent's pool would print a traceback for an exception raised there, and is raised here."""
    value, error = parsers.apply(_without_gc, (work,))
    if error is not None:
        try:
            raise error
        finally:
            # The raised error's traceback holds this frame: with the error still in it, that cycle kept
            # the body and what was parsed of it until a full collection (docs/performance.md).
            del error
    return value  # type: ignore[return-value]  # None only with an error, raised above


#: How many values _dismantle takes out of a container at a time.
DISMANTLE_STEP = 4096
#: How many objects held by the containers of a step (all the way down) _dismantle frees with the step.
DISMANTLE_BUDGET = 8 * DISMANTLE_STEP
#: How many levels of containers below a step _dismantle frees with it; deeper ones are emptied later.
DISMANTLE_DEPTH = 1024


def _dismantle(parsed: list[Any]) -> None:
    """Free a big parsed request on a parser thread, a few thousand values at a time, with bytecode run
    between the steps so that the GIL passes to the event loop (freeing millions of values in one go is
    one long C call that holds it)."""
    request: Any = parsed.pop() if parsed else None
    payload = getattr(request, "payload", None)
    if payload is not None:
        request.payload = None
    del request  # the body's bytes: one block, given back at once
    stack: list[Any] = [payload] if isinstance(payload, (dict, list)) else []
    while stack:
        item = stack[-1]
        if not item:
            stack.pop()
            continue
        if isinstance(item, dict):
            step = list(map(item.pop, list(islice(item, DISMANTLE_STEP))))
        else:
            step = item[-DISMANTLE_STEP:]
            del item[-DISMANTLE_STEP:]
        # Most steps hold scalars only: their types are gathered in C (freeing 12 million numbers value by
        # value took 5 s). A step with containers is freed in one go too if it holds few objects in all.
        if any(issubclass(kind, (dict, list)) for kind in set(map(type, step))):
            # The containers it leaves are emptied next, before the rest of this one: the stack is bounded
            # by the depth.
            stack.extend(_held_apart(step, DISMANTLE_BUDGET, DISMANTLE_DEPTH))
        del step


def _containers(values: list[Any]) -> list[Any]:
    return list(compress(values, map(isinstance, values, repeat((dict, list)))))


def _held_apart(values: list[Any], budget: int, depth: int) -> list[Any]:
    """The containers to empty step by step before `values` can be freed in one go. None when what the
    containers among `values` hold all the way down, counted level by level in C, is at most `budget`
    objects on at most `depth` levels: millions of small containers (`[]`, `{"b":[1]}`) are freed a step at
    a time, where walking each one in bytecode took seconds. Those among `values` when they hold more.
    Those `depth` levels down when that is deeper (XML of millions of nested elements is a chain of as many
    one-key maps): the levels above go with the step and each level is counted once, where counting
    `budget` levels down from each level again took hours for a chain of half a million."""
    held, walked = 0, 0
    level = _containers(list(filter(None, values)))  # empty containers hold nothing
    while walked < depth:
        if not level:
            return []
        if len(level) == 1 and len(level[0]) == 1:
            # One container holding one value, level after level: followed without building lists (five
            # times faster, for the nested XML element's one-key maps).
            node, down = level[0], 0
            for down in range(1, depth - walked + 1):  # noqa: B007 - how far it went is read after
                if isinstance(node, dict):
                    (node,) = node.values()
                else:
                    node = node[0]
                if not isinstance(node, (dict, list)) or len(node) != 1:
                    break
            walked += down
            held += down
            level = [node] if node and isinstance(node, (dict, list)) else []
            continue
        walked += 1
        held += sum(map(len, level))
        if held > budget:
            return _containers(list(filter(None, values)))
        level = _containers(gc.get_referents(*level))  # their values (and a dict's keys, which are strings)
    return list(filter(None, level))


class _Listener(gevent.server.StreamServer):
    """gevent's server with Go's handling of a failed accept (at the descriptor limit, say): one log line
    in net/http's words, then a retry after a growing pause, where gevent prints a traceback each time."""

    _retry = ACCEPT_RETRY_FIRST
    #: Plain connections wait for their first byte as a DormantConnection, under this -read-timeout
    #: (0: none); None: each gets its greenlet at once (TLS, whose handshake has a bound of its own).
    read_timeout: float | None = None
    #: Which of those keep waiting for their body too (serve/routes.py).
    body_first: BodyFirst | None = None

    def __init__(self, listener: Any, handle: Callable[..., None], pool: gevent.pool.Pool) -> None:
        super().__init__(listener, handle=handle, spawn=pool)
        self._serve_connection, self._pool = handle, pool
        self.dormant: set[DormantConnection] = set()
        #: Connections whose client has gone, waiting for one of GONE_AT_ONCE turns, and how many are served.
        self._gone: deque[tuple[Any, Any, float, bytes]] = deque()
        self._gone_serving = 0

    def do_read(self) -> Any:
        try:
            accepted = super().do_read()
        except OSError as exc:
            if self.is_fatal_error(exc):
                raise
            delay = self._retry
            self._retry = min(delay * 2, ACCEPT_RETRY_MAX)
            reason = accept_error_text(self.socket, exc)
            log.output(f"http: Accept error: {reason}; retrying in {go_ms(delay)}")
            self.stop_accepting()
            gevent.spawn_later(delay, self._resume)
            return None
        self._retry = ACCEPT_RETRY_FIRST
        return accepted

    def do_handle(self, *args: Any) -> None:
        if self.read_timeout is None:
            super().do_handle(*args)
            return
        client, peer = args
        DormantConnection(
            client, peer, self.read_timeout, partial(self._woken, client, peer), self.dormant, self.body_first
        )

    @property
    def waiting(self) -> int:
        """Connections accepted and not yet served: those whose client has gone, waiting their turn."""
        return len(self._gone)

    def _woken(self, client: Any, peer: Any, accepted: float, head: bytes, gone: bool = False) -> None:
        if gone:
            self._gone.append((client, peer, accepted, head))
            self._serve_gone()
            return
        self._spawn(self._serve, client, peer, accepted, head)

    def _spawn(self, serve: Callable[..., None], client: Any, *args: Any) -> None:
        try:
            self._pool.spawn(serve, client, *args)
        except BaseException:
            client.close()
            raise

    def _serve(self, client: Any, peer: Any, accepted: float, head: bytes) -> None:
        try:
            self._serve_connection(client, peer, accepted, head)
        finally:
            client.close()

    def _serve_gone(self) -> None:
        while self._gone and self._gone_serving < GONE_AT_ONCE:
            self._gone_serving += 1
            self._spawn(self._serve_turn, *self._gone.popleft())

    def _serve_turn(self, client: Any, peer: Any, accepted: float, head: bytes) -> None:
        try:
            self._serve(client, peer, accepted, head)
        finally:
            self._gone_serving -= 1
            self._serve_gone()

    def close_dormant(self, older_than: float = 0.0) -> None:
        """Stopping: connections accepted at least `older_than` seconds ago that have sent nothing are
        closed; a younger one keeps its chance to send its request, which is then answered."""
        now = time.monotonic()
        for connection in list(self.dormant):
            if now - connection.accepted >= older_than:
                connection.close()

    def _resume(self) -> None:
        if self.started:
            self.start_accepting()


def accept_error_text(listener: Any, exc: OSError) -> str:
    """Go's *net.OpError text for a failed accept: `accept tcp 127.0.0.1:9000: accept4: too many open
    files`."""
    try:
        address = listener.getsockname()
    except OSError:
        address = ""
    if listener.family == socket.AF_UNIX:
        where = f"unix {address.decode() if isinstance(address, bytes) else address}"
    elif listener.family == socket.AF_INET6:
        where = f"tcp [{address[0]}]:{address[1]}"
    else:
        where = f"tcp {address[0]}:{address[1]}"
    return f"accept {where}: accept4: {errno_text(exc)}"


def go_ms(seconds: float) -> str:
    """A duration as Go's time.Duration prints the accept backoff: `5ms`, `1s`."""
    if seconds >= 1:
        return f"{seconds:g}s"
    return f"{round(seconds * 1000):d}ms"


class GreenWorker(WebhookWorker, GeventWorker):
    """gunicorn's gevent worker with HTTP/1.1 served by hookrunner's own connection loop: the TLS
    handshake and request reads under -read-timeout, and idle connections closed when it stops."""

    sockets: list[Any]

    def patch(self) -> None:
        # gunicorn's GeventWorker monkey-patches the whole standard library here. Only the listening
        # sockets change: to gevent sockets, whose accepted connections are gevent sockets too.
        self.sockets = [
            gevent.socket.socket(s.FAMILY, socket.SOCK_STREAM, fileno=s.sock.detach()) for s in self.sockets
        ]

    def init_process(self) -> None:
        self._readers: set[RequestReader] = set()
        self._handshaking: set[Any] = set()
        ctx.runner.wait_for = wait_for_run
        ctx.runner.use(GreenWaits())  # runs as greenlets on the loop (serve/greenruns.py)
        util.write = write
        share_one_arena()  # before any thread of this worker starts
        sys.setswitchinterval(SWITCH_INTERVAL)
        GoChunkedReader.pause = staticmethod(share_loop)
        # Thousands of connections are thousands of greenlets, readers and parsers: with the collector's
        # defaults a flood spends a quarter of the loop's time in collections walking every one of them,
        # and the app, hooks and modules loaded before the fork besides. Those are set aside for good,
        # and a young-generation collection waits for more allocations (docs/limits.md, robustness).
        gc.freeze()
        # gevent records where each greenlet was spawned (a walk of the stack's frames): a cost for every
        # connection, for a debugging aid nothing here reads.
        gevent.config.track_greenlet_tree = False
        gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])
        # Big bodies are parsed on native threads: the loop keeps the GIL every SWITCH_INTERVAL meanwhile.
        parsers = gevent.threadpool.ThreadPool(PARSE_THREADS)

        Parsing.run = staticmethod(partial(parse_on, parsers))  # type: ignore[method-assign]

        def dismantle(parsed: list[Any]) -> None:
            try:
                _dismantle(parsed)
            finally:
                _resume_gc()
                Parsing.freed()

        def release(parsed: list[Any]) -> None:
            parsers.spawn(dismantle, parsed)

        Parsing.release = staticmethod(release)  # type: ignore[method-assign]
        super().init_process()

    def request_local(self) -> Any:
        return gevent.local.local()

    def linger(self, seconds: float) -> None:
        gevent.sleep(seconds)

    def run(self) -> None:
        servers: list[_Listener] = []
        pools: list[gevent.pool.Pool] = []
        loop = gevent.get_hub().loop
        # Requests start in fair turns between clients, a round per poll of the loop (serve/fairness.py).
        self._turns = turns = LoopTurns(loop, TURNS_BUDGET)
        self._proxies = parse_networks(ctx.config.trusted_proxies)
        for listener in self.sockets:
            listener.setblocking(True)
            # No cap on connections short of the descriptor limit, as net/http has none: a pool of
            # worker_connections would leave every client past it waiting in the kernel's backlog.
            pool = gevent.pool.Pool(None)
            # The listener's address is taken now: a connection served after a stop closed it still
            # needs it.
            handle = partial(self.handle, listener.getsockname())
            server = _Listener(listener, handle, pool)
            if ctx.ssl_context is None:
                server.read_timeout = ctx.config.read_timeout
                server.body_first = body_first(ctx.config, ctx.registry)
            if self.cfg.workers > 1:
                server.max_accept = 1  # leave the next connection to another worker
            server.start()
            servers.append(server)
            pools.append(pool)

        def after_poll() -> None:
            polled()
            turns.polled()

        polls = loop.check()
        polls.start(after_poll)
        while self.alive:
            self.notify()
            gevent.sleep(TICK)
        for server in servers:
            server.close()  # accept nothing more
            server.close_dormant(older_than=NEW_CONNECTION_GRACE)

        def busy() -> bool:
            return any(len(pool) for pool in pools) or any(
                server.waiting or server.dormant for server in servers
            )

        deadline = time.monotonic() + self.cfg.graceful_timeout
        while busy():
            for server in servers:
                server.close_dormant(older_than=NEW_CONNECTION_GRACE)
            for reader in list(self._readers):
                reader.close_if_waiting()
            for tls_sock in list(self._handshaking):
                shutdown_reading(tls_sock)  # not yet a request: its handshake fails at once
            if time.monotonic() >= deadline:
                self.log.warning("Worker graceful timeout (pid:%s)", self.pid)
                # Commands still running are ended first, so that requests waiting for their output
                # answer (500) as on the threaded worker; what is still open a second later is cut.
                ctx.runner.shutdown(0)
                last = time.monotonic() + 1
                while busy() and time.monotonic() < last:
                    gevent.sleep(TICK)
                for server in servers:
                    server.close_dormant()
                    server.stop(timeout=1)
                break
            self.notify()
            gevent.sleep(TICK)
        self.finish_commands()

    def handle(self, listener_name: Any, client: Any, addr: Any, accepted: float | None = None,
               head: bytes = b"") -> None:
        client.setblocking(1)
        req = None
        reader: RequestReader | None = None
        try:
            if ctx.ssl_context is not None:
                client = self._handshake(client, addr)
                if client is None:
                    return
            reader = RequestReader(client, ctx.config.read_timeout, self.cfg.keepalive, addr, accepted, head)
            self._readers.add(reader)
            parser = http.get_parser(self.cfg, reader, addr)
            parser.unreader = GatedUnreader(reader)
            while True:
                req = None
                req = next(parser)
                if not req:
                    break
                reader.request_started()
                self._turns.take(client_key(self._proxies, addr, req.headers))
                if not self.handle_request(listener_name, req, client, addr):
                    break
                reader.request_done()
                if not self.alive:
                    break  # stopping: no next request on this connection
                if not parser.finish_body(deadline=time.monotonic() + DRAIN_SECONDS):
                    break
                reader.next_request()
                share_loop()  # pipelined requests are served in turn with other connections
        except (http.errors.NoMoreData, StopIteration):
            pass  # the client went away, or the connection is not to be kept alive
        except ssl.SSLError as exc:
            if exc.args[0] != ssl.SSL_ERROR_EOF:
                self.handle_error(req, client, addr, exc)
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN):
                self.log.exception("Socket error processing request.")
        except Exception as exc:  # noqa: BLE001 - answered as gunicorn's workers answer it
            self.handle_error(req, client, addr, exc)
        finally:
            if reader is not None:
                self._readers.discard(reader)
            util.close(client)

    def _handshake(self, client: Any, addr: Any) -> Any:
        """The TLS handshake, within -read-timeout; returns the TLS socket, or None when it timed out or
        failed (handshake_failed: logged, or answered as net/http answers plain HTTP)."""
        tls_sock = gevent.ssl.SSLSocket(
            sock=client,
            server_side=True,
            do_handshake_on_connect=False,
            suppress_ragged_eofs=self.cfg.suppress_ragged_eofs,
            _context=ctx.ssl_context,
        )
        limit = ctx.config.read_timeout
        self._handshaking.add(tls_sock)
        try:
            # One bound for the whole handshake: a socket timeout would start again at every read.
            with gevent.Timeout(limit or None, TimeoutError):
                tls_sock.do_handshake()
        except TimeoutError:
            handshake_expired(addr, limit)
            util.close(tls_sock)
            return None
        except OSError as exc:  # ssl.SSLError included
            if self.alive:  # (a stop ends the handshakes under way: not the client's failure)
                handshake_failed(tls_sock, addr, exc)
            util.close(tls_sock)
            return None
        finally:
            self._handshaking.discard(tls_sock)
        return tls_sock

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> bool:
        if self.refuse_bad_host(req, sock):
            return False
        self._current.req = req  # the app runs in this greenlet, inside the call below
        self._current.sock = sock
        try:
            # AsyncWorker's: GeventWorker's own drops its answer of whether to keep the connection.
            return bool(AsyncWorker.handle_request(self, listener_name, req, sock, addr))
        except gevent.GreenletExit:  # killed by a stop whose grace is over
            return False
        finally:
            self._current.req = self._current.sock = None
