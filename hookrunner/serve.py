"""Serving: gunicorn embedded in-process on an already-bound socket, with webhook's signals and TLS;
one master preloads app and hooks, one gthread worker serves (see docs/operations.md for why)."""

from __future__ import annotations

import concurrent.futures.thread  # noqa: F401 - loaded lazily by gunicorn; see the note below
import logging
import math
import os
import queue
import re
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

# gunicorn.glogging and concurrent.futures.thread are imported lazily by gunicorn; after -setuid/-setgid
# the interpreter's files may be out of reach, so they are loaded here, before the privileges go.
import gunicorn.glogging  # noqa: F401
import gunicorn.http.message
import gunicorn.http.wsgi
import gunicorn.workers.gthread
from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from gunicorn.http.unreader import SocketUnreader
from gunicorn.workers.gthread import TConn, ThreadWorker
from werkzeug.exceptions import RequestTimeout
from werkzeug.wrappers import Response as WerkzeugResponse

from hookrunner import tls
from hookrunner.app import HEADER_LIST_KEY
from hookrunner.config import Config
from hookrunner.log import json_line, log, rfc3339_now
from hookrunner.protocol import GoResponse, go_host_problem, go_parse_error, go_plain_error
from hookrunner.statuses import status_line
from hookrunner.watcher import HooksWatcher

#: The WSGI environ key holding every request header in arrival order, as (UPPER-CASE NAME, value):
#: WSGI joins repeated headers with commas, while webhook uses the first value of each.

#: Threads of the worker: each request that captures a command's output holds one while it runs.
THREADS = 64


class Registry(Protocol):
    """What serving needs of hooks.HookRegistry."""

    @property
    def files(self) -> tuple[str, ...]: ...

    def reload_all(self) -> object: ...

    def reload_file(self, path: str) -> object: ...

    def remove_file(self, path: str) -> object: ...


class Runner(Protocol):
    """What serving needs of executor.CommandRunner."""

    def shutdown(self, grace: float) -> object: ...


_HELD_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1}


class _Context:
    """What the worker needs after the fork; set once by serve() before gunicorn starts."""

    config: Config
    registry: Registry
    runner: Runner
    ssl_context: ssl.SSLContext | None = None


_ctx = _Context()

#: Reload signals that arrived after start-up announced `os signal watcher ready` but before gunicorn's
#: master installed its own handlers; the master replays them once it has.
_early_reloads: list[int] = []


def hold_reload_signals() -> None:
    """From now on a SIGHUP or SIGUSR1 is kept and replayed once serving has started, never lost."""

    def keep(signum: int, frame: object) -> None:
        if len(_early_reloads) < 5:
            _early_reloads.append(signum)

    signal.signal(signal.SIGHUP, keep)
    signal.signal(signal.SIGUSR1, keep)


class _Reloader:
    """Reloads every hooks file on request, on its own thread: signal handlers only enqueue."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self._requests: queue.SimpleQueue[bool] = queue.SimpleQueue()

    def request(self) -> None:
        self._requests.put(True)

    def start(self) -> None:
        threading.Thread(target=self._serve_requests, name="hooks-reloader", daemon=True).start()

    def _serve_requests(self) -> None:
        while self._requests.get():
            self._registry.reload_all()


def _start_watcher(registry: Registry) -> HooksWatcher:
    def changed(path: str) -> None:
        log.output(f"hooks file {path} modified")
        registry.reload_file(path)

    def removed(path: str) -> None:
        log.output(f"hooks file {path} removed, removing hooks that were loaded from it")
        registry.remove_file(path)

    watcher = HooksWatcher(registry.files, changed, removed)
    watcher.start()
    return watcher


class ClientReadTimeout(RequestTimeout):
    """The request was not fully received within -read-timeout (docs/limits.md, slow clients).

    Raised from a socket read: while the head is read the worker closes the connection without an answer,
    as net/http does; while the app reads the body it becomes a 408 that closes the connection.
    """

    def get_response(self, *args: Any, **kwargs: Any) -> Any:
        # Plain text like the app's other answers, not werkzeug's HTML page.
        headers = {"Content-Type": "text/plain; charset=utf-8"}
        return WerkzeugResponse(b"Request not received in time.\n", status_line(408), headers)


class _DeadlineSocket:
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
        where = _peer_text(self._peer)
        log.output(f"closing the connection from {where}: request not received within {self._limit:g}s")
        # Nothing more is read from this client: gunicorn's graceful close, which runs on the worker's
        # main thread, would otherwise linger reading from it (up to 2 s per connection).
        try:
            self._sock.shutdown(socket.SHUT_RD)
        except OSError:
            pass
        raise ClientReadTimeout()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _TimedConn(TConn):
    """gunicorn's connection with -read-timeout: a bounded TLS handshake, and reads under a deadline."""

    reader: _DeadlineSocket | None = None

    def init(self) -> None:
        if self.initialized:
            return
        limit = _ctx.config.read_timeout
        timer: threading.Timer | None = None
        handle: socket.socket | None = None
        if limit > 0 and self.cfg.is_ssl:
            # The handshake reads too; a stalled one is ended by shutting the connection down under it.
            # Wrapping detaches the descriptor from self.sock, so the timer holds a duplicate of its own
            # (which also keeps the descriptor from being reused by another connection meanwhile).
            handle = self.sock.dup()
            timer = threading.Timer(limit, _end_handshake, (handle, self.client, limit))
            timer.daemon = True
            timer.start()
        try:
            super().init()
        finally:
            if timer is not None and handle is not None:
                timer.cancel()
                timer.join()
                handle.close()
        unreader = getattr(self.parser, "unreader", None)
        if limit > 0 and isinstance(unreader, SocketUnreader):
            self.reader = _DeadlineSocket(unreader.sock, limit, self.client)
            unreader.sock = self.reader


def _peer_text(peer: Any) -> str:
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "@"


def _end_handshake(sock: socket.socket, peer: Any, limit: float) -> None:
    log.output(f"closing the connection from {_peer_text(peer)}: TLS handshake not done within {limit:g}s")
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class HookWorker(ThreadWorker):
    """gunicorn's threaded worker with webhook's signals: HUP and USR1 reload hooks, INT is graceful."""

    wsgi: Any

    def init_process(self) -> None:
        # Go's net/http sends no Server header; swap the response class in this process only.
        gunicorn.http.wsgi.Response = GoResponse
        # Go takes bytes 0x80-0xFF in the request target as they are (curl sends `?name=é` unescaped);
        # gunicorn refuses them with a 400. Controls and DEL stay refused, as url.ParseRequestURI does.
        gunicorn.http.message.RFC9112_TARGET_INVALID = re.compile(r"[^\x21-\x7e\x80-\xff]")
        # Connections read under -read-timeout (slow clients); also in this process only.
        gunicorn.workers.gthread.TConn = _TimedConn
        self._reloader = _Reloader(_ctx.registry)
        if self.age > 1:
            # A replacement worker starts from the master's start-up hooks; catch up with the files
            # before serving anything.
            _ctx.registry.reload_all()
        self._watcher: HooksWatcher | None = None
        self._stop_started = 0.0
        # In this process only: requests get -shutdown-timeout, so there is time left to kill leftover
        # commands before the master's own, longer, deadline ends this worker with SIGKILL.
        self.cfg.set("graceful_timeout", math.ceil(_ctx.config.shutdown_timeout))
        super().init_process()

    def init_signals(self) -> None:
        super().init_signals()
        signal.signal(signal.SIGHUP, self._reload_signal)
        signal.signal(signal.SIGUSR1, self._reload_signal)
        signal.signal(signal.SIGINT, self.handle_exit)
        signal.siginterrupt(signal.SIGHUP, False)
        # Signals that arrived between fork and now were held back by the master (see spawn_worker).
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD_SIGNALS)
        # Threads start only now: a thread inherits the signal mask, and so would the commands it ran.
        self._reloader.start()
        if _ctx.config.hotreload:
            self._watcher = _start_watcher(_ctx.registry)

    def load_wsgi(self) -> None:
        super().load_wsgi()
        app = self.wsgi
        current = self._current = threading.local()

        def with_header_list(environ: dict[str, Any], start_response: Any) -> Any:
            req = getattr(current, "req", None)
            if req is not None:
                environ[HEADER_LIST_KEY] = tuple(req.headers)
            return app(environ, start_response)

        self.wsgi = with_header_list

    def handle(self, conn: Any) -> Any:
        # Each request on a kept-alive connection gets the whole -read-timeout again.
        reader = getattr(conn, "reader", None)
        if reader is not None:
            reader.new_request()
        return super().handle(conn)

    def handle_request(self, req: Any, conn: Any) -> bool:
        # net/http checks the Host header before any handler runs, and answers in its own plain format.
        problem = go_host_problem(req.version, req.method, req.headers)
        if problem:
            try:
                conn.sock.sendall(go_plain_error(400, f"Bad Request: {problem}"))
            except OSError:
                pass
            return False
        self._current.req = req  # the app runs on this thread, inside the call below
        try:
            return bool(super().handle_request(req, conn))
        finally:
            self._current.req = None
            reader = getattr(conn, "reader", None)
            if reader is not None:
                # The request was read in time; draining an unread body is bounded by gunicorn itself.
                reader.new_request()

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
            pass

    def _reload_signal(self, signum: int, frame: object) -> None:
        self._reloader.request()

    def handle_exit(self, sig: int, frame: Any) -> None:
        if not self._stop_started:
            self._stop_started = time.monotonic()
        super().handle_exit(sig, frame)

    def run(self) -> None:
        super().run()
        # Requests are done (or their grace is over); give background commands what is left of it.
        if self._watcher is not None:
            self._watcher.stop()
        started = self._stop_started or time.monotonic()
        grace = _ctx.config.shutdown_timeout
        _ctx.runner.shutdown(max(0.0, grace - (time.monotonic() - started)))


class HookArbiter(Arbiter):
    """gunicorn's master with webhook's signal meanings instead of gunicorn's."""

    def __init__(self, app: BaseApplication) -> None:
        software = os.environ.get("SERVER_SOFTWARE")
        super().__init__(app)
        # gunicorn exports SERVER_SOFTWARE; hook commands inherit our environment and must not see it.
        if software is None:
            os.environ.pop("SERVER_SOFTWARE", None)
        else:
            os.environ["SERVER_SOFTWARE"] = software
        # The socket is ours (or systemd's): gunicorn must not unlink a Unix socket path when stopping;
        # the CLI removes the ones it created. This flag only controls that and re-exec, which is off.
        self.systemd = True

    def init_signals(self) -> None:
        super().init_signals()
        # Queued like any signal gunicorn catches, so they are handled once the worker is spawned.
        while _early_reloads:
            self.signal(_early_reloads.pop(0), None)

    def spawn_worker(self) -> int:
        # A stop or reload sent to the new worker before it installs its own handlers would reach the
        # master's copied handlers and be lost (the worker would then run until SIGKILL). Hold those
        # signals across the fork; the worker releases them once its handlers are in place.
        signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
        try:
            return int(super().spawn_worker())
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD_SIGNALS)

    def handle_hup(self) -> None:
        log.output("caught HUP signal")
        self.kill_workers(signal.SIGHUP)

    def handle_usr1(self) -> None:
        log.output("caught USR1 signal")
        self.kill_workers(signal.SIGUSR1)

    def handle_term(self) -> None:
        log.output("caught terminated signal; exiting")
        raise StopIteration

    def handle_int(self) -> None:
        # Ctrl-C is as graceful as SIGTERM: running commands get their grace period.
        log.output("caught interrupt signal; exiting")
        raise StopIteration

    def handle_usr2(self) -> None:
        pass  # gunicorn would re-exec itself; webhook has no such thing

    def handle_ttin(self) -> None:
        pass  # one worker keeps one registry; see docs/operations.md

    def handle_ttou(self) -> None:
        pass


class HookApplication(BaseApplication):
    """gunicorn configured from Config alone: the user never writes a gunicorn config."""

    def __init__(self, wsgi_app: Any, options: dict[str, Any]) -> None:
        self._wsgi_app = wsgi_app
        self._options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            # Settings newer than the installed gunicorn (control_socket_disable, http_protocols) are
            # about features that older releases do not have at all, so they can be left out.
            if key in self.cfg.settings:
                self.cfg.set(key, value)

    def load(self) -> Any:
        return self._wsgi_app

    def run(self) -> None:
        HookArbiter(self).run()


class _JsonFormatter(logging.Formatter):
    """gunicorn's own messages as JSON lines, so that with -log-format json every line parses."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        entry = {"time": rfc3339_now(), "level": record.levelname.lower(), "event": "server", "msg": message}
        return json_line(entry).rstrip("\n")


class _JsonLogger(gunicorn.glogging.Logger):
    """gunicorn's logger with every handler of its error log writing JSON (-log-format json)."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in self.error_log.handlers:
            handler.setFormatter(_JsonFormatter())


def _ssl_context(conf: Any, default_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
    assert _ctx.ssl_context is not None
    return _ctx.ssl_context


def gunicorn_options(config: Config, fd: int) -> dict[str, Any]:
    """The gunicorn settings that make it behave like webhook's net/http server."""
    options: dict[str, Any] = {
        "bind": [f"fd://{fd}"],
        # One by default (see docs/operations.md); -workers trades per-process state for CPU cores.
        "workers": max(1, config.workers),
        "worker_class": HookWorker,
        "threads": THREADS,
        "preload_app": True,
        # Commands run in the background of the worker; recycling it would cut them short.
        "max_requests": 0,
        # The master's own bound: the worker's (-shutdown-timeout) plus time to kill leftover commands.
        "graceful_timeout": math.ceil(config.shutdown_timeout) + 5,
        "timeout": 30,
        "keepalive": 5,
        # net/http limits the request line and headers together to 1 MB. gunicorn limits the line, each
        # field and the number of fields: a 1 MB line or field is accepted, in at most 100 fields.
        "limit_request_line": 0,
        "limit_request_fields": 100,
        "limit_request_field_size": 1 << 20,
        # Go accepts what gunicorn refuses by default: headers with underscores (kept, not dropped),
        # any method token (`post` is a method of its own, answered 405 by the app), folded headers.
        "header_map": "dangerous",
        "permit_unconventional_http_method": True,
        "permit_obsolete_folding": True,
        "forwarded_allow_ips": "",
        "control_socket_disable": True,
        # Who we are now, after -setuid/-setgid; gunicorn's default is whoever imported it (root).
        "user": os.getuid(),
        "group": os.getgid(),
        "proc_name": "hookrunner",
        # Requests are logged by the app in webhook's format; gunicorn speaks only of its own trouble.
        "accesslog": None,
        "errorlog": "-",
        "loglevel": "info" if config.debug else "critical",
        "http_protocols": "h1",
    }
    if config.log_format == "json":
        options["logger_class"] = _JsonLogger
    if config.secure:
        options["certfile"] = config.cert
        options["keyfile"] = config.key
        options["ssl_context"] = _ssl_context
    return options


def serve(
    config: Config,
    wsgi_app: Any,
    registry: Registry,
    runner: Runner,
    fd: int,
    ssl_context: ssl.SSLContext | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT on the listening socket `fd` (HTTPS with `ssl_context` under -secure).

    Returns only in the master process; the worker process leaves through SystemExit, so callers doing
    clean-up must check their pid.
    """
    _ctx.config = config
    _ctx.registry = registry
    _ctx.runner = runner
    if config.secure and ssl_context is None:
        ssl_context = tls.server_context(
            config.cert, config.key, config.tls_min_version, config.cipher_suites
        )
    _ctx.ssl_context = ssl_context
    app = HookApplication(wsgi_app, gunicorn_options(config, fd))
    master = os.getpid()
    try:
        app.run()
    except SystemExit as stop:
        # gunicorn ends both the master and the forked worker with sys.exit; only the master returns.
        if os.getpid() != master or stop.code not in (0, None):
            raise
