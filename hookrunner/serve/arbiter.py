"""Serving: gunicorn embedded in-process on an already-bound socket, with webhook's signals and TLS;
one master (the arbiter) holds the hooks and supervises, and one worker serves: the gevent worker
(greenworker.py), or with -worker-class gthread the threaded worker (threadworker.py); docs/operations.md
says why one. The master builds the app before it forks the run owner and the workers, which share it."""

from __future__ import annotations

import concurrent.futures.thread  # noqa: F401 - loaded lazily by gunicorn; see the note below
import gc
import importlib
import logging
import math
import os
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

# gunicorn.glogging and concurrent.futures.thread are imported lazily by gunicorn; after -setuid/-setgid
# the interpreter's files may be out of reach, so they are loaded here, before the privileges go.
import gunicorn.glogging  # noqa: F401
from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from gunicorn.workers.workertmp import WorkerTmp

from hookrunner.config import Config
from hookrunner.errors import AdminSetupError
from hookrunner.hooks.generation import SharedGeneration
from hookrunner.hooks.load import HookRegistry
from hookrunner.ops.log import json_line, log, rfc3339_now
from hookrunner.run.processes import become_subreaper
from hookrunner.serve.context import (
    HELD_SIGNALS,
    MAX_HEAD_BYTES,
    THREADS,
    Runner,
    ctx,
)
from hookrunner.serve.runowner import RunOwner
from hookrunner.state.journal import JournalError, check_journal, lock_state_dir, new_boot_id

if TYPE_CHECKING:
    import ssl

    from hookrunner.serve.adminserver import AdminListener, AdminProcess

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


class HookArbiter(Arbiter):
    """gunicorn's master with webhook's signal meanings instead of gunicorn's, and the supervisor of the run
    owner (serve/runowner.py): each worker it forks gets a connection to the owner, and an owner that dies
    is forked again."""

    #: Set by serve() before gunicorn starts; None only where no owner is started (unit tests).
    run_owner: RunOwner | None = None

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
        # What the master holds now stays out of the collector's reach: a collection in the worker would
        # otherwise write to every page of it, and each written page is copied (issue 23).
        gc.freeze()
        # A stop or reload sent to the new worker before it installs its own handlers would reach the
        # master's copied handlers and be lost (the worker would then run until SIGKILL). Hold those
        # signals across the fork; the worker releases them once its handlers are in place.
        owner = self.run_owner
        ctx.owner_link = owner.new_connection() if owner is not None else None
        signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
        try:
            pid = int(super().spawn_worker())  # only the master returns
            if owner is not None:
                owner.connect_worker(pid)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD_SIGNALS)
            if ctx.owner_link is not None:
                ctx.owner_link.close()  # the worker's end is the worker's
                ctx.owner_link = None
            if owner is not None:
                owner.drop_connection()  # the fork failed: nobody holds the other end
        return pid

    def spawned(self, worker: Any) -> None:
        """In the worker, right after its fork (gunicorn's post_fork): what only the master holds goes."""
        if self.run_owner is not None:
            self.run_owner.in_worker()

    def reap_workers(self) -> None:
        super().reap_workers()
        if self.run_owner is not None:
            self.run_owner.keep_workers(self.WORKERS)

    def manage_workers(self) -> None:
        if self.run_owner is not None:
            self.run_owner.keep_workers(self.WORKERS)  # gunicorn also drops a worker it could not signal
            self.run_owner.restart_if_gone()
        super().manage_workers()

    def handle_hup(self) -> None:
        log.output("caught HUP signal")
        self._reload(signal.SIGHUP)

    def handle_usr1(self) -> None:
        log.output("caught USR1 signal")
        self._reload(signal.SIGUSR1)

    def _reload(self, signum: int) -> None:
        """The run owner reloads the hooks for every worker (serve/ownerreload.py, issue 32 step 9)."""
        if self.run_owner is not None:
            self.run_owner.forward(signum)
        else:
            self.kill_workers(signum)

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


def _post_fork(arbiter: Arbiter, worker: Any) -> None:
    if isinstance(arbiter, HookArbiter):
        arbiter.spawned(worker)


class _ForkedWorker:
    """What gunicorn's master makes and keeps for a worker: what gunicorn's arbiter reads of a worker (its
    heartbeat file, pid, age, booted and aborted); the worker process makes the real worker class
    (`serving`) after the fork and runs it, on the same heartbeat file. The class's module is imported
    and the app built in the master before the first fork (cli.load_server_code, serve()), so the forked
    process finds both there and shares their pages."""

    serving = ""  # "module:Class"

    def __init__(self, age: int, ppid: int, sockets: list[Any], app: Any, timeout: float, cfg: Any, log: Any):
        # as gunicorn's Worker.__init__, which runs in the master before the fork
        self.age, self.ppid, self.sockets, self.app = age, ppid, sockets, app
        self.timeout, self.cfg, self.log = timeout, cfg, log
        self.pid: int | str = "[booting]"
        self.booted = False
        self.aborted = False
        self.tmp = WorkerTmp(cfg)

    def init_process(self) -> None:
        module, _, name = self.serving.partition(":")
        serving = getattr(importlib.import_module(module), name)
        ctx.load_app()  # serve() built it in the master; this builds it only where nothing did
        worker = serving(self.age, self.ppid, self.sockets, self.app, self.timeout, self.cfg, self.log)
        worker.tmp.close()
        worker.tmp, worker.pid = self.tmp, self.pid
        try:
            worker.init_process()
        finally:
            self.booted = worker.booted  # gunicorn tells a failed boot from a failure after it by this


class GeventWorkerInFork(_ForkedWorker):
    serving = "hookrunner.serve.greenworker:GreenWorker"


class ThreadWorkerInFork(_ForkedWorker):
    serving = "hookrunner.serve.threadworker:HookWorker"


class HookApplication(BaseApplication):
    """gunicorn configured from Config alone: the user never writes a gunicorn config."""

    def __init__(self, options: dict[str, Any]) -> None:
        self._options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            # Settings newer than the installed gunicorn (control_socket_disable, http_protocols) are
            # about features that older releases do not have at all, so they can be left out.
            if key in self.cfg.settings:
                self.cfg.set(key, value)

    def load(self) -> Any:
        return ctx.load_app()

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
    assert ctx.ssl_context is not None
    return ctx.ssl_context


# How gunicorn's parser must read a request for it to read it as net/http does.
PARSER_OPTIONS: dict[str, Any] = {
    # net/http limits the request line and headers together to 1 MB + 4 KiB: GoRequest.parse
    # (protocol.py) enforces that as the head arrives, so gunicorn's own limits on the line and on
    # each field are that bound too. gunicorn still takes at most 100 fields.
    "limit_request_line": 0,
    "limit_request_fields": 100,
    "limit_request_field_size": MAX_HEAD_BYTES,
    # Go accepts what gunicorn refuses by default: headers with underscores (kept, not dropped),
    # any method token (`post` is a method of its own, answered 405 by the app), folded headers.
    "header_map": "dangerous",
    "permit_unconventional_http_method": True,
    "permit_obsolete_folding": True,
}


def gunicorn_options(config: Config, fd: int) -> dict[str, Any]:
    """The gunicorn settings that make it behave like webhook's net/http server."""
    options: dict[str, Any] = {
        "bind": [f"fd://{fd}"],
        # One by default (see docs/operations.md); -workers trades per-process state for CPU cores.
        "workers": max(1, config.workers),
        "worker_class": GeventWorkerInFork if config.worker_class == "gevent" else ThreadWorkerInFork,
        "threads": THREADS,
        # The app is built by serve() before gunicorn starts.
        "preload_app": False,
        # Commands run in the background of the worker; recycling it would cut them short.
        "max_requests": 0,
        # The master's own bound: the worker's (-shutdown-timeout) plus time to kill leftover commands.
        "graceful_timeout": math.ceil(config.shutdown_timeout) + 5,
        "timeout": 30,
        "keepalive": 5,
        **PARSER_OPTIONS,
        "forwarded_allow_ips": "",
        "control_socket_disable": True,
        "post_fork": _post_fork,
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
    build: Callable[[], tuple[Any, Runner]],
    registry: HookRegistry,
    fd: int,
    ssl_context: ssl.SSLContext | None = None,
    admin: AdminListener | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT on the listening socket `fd` (HTTPS with `ssl_context` under -secure);
    `build` makes the WSGI app and its runner, here, before the run owner and the workers are forked: they
    share its pages (docs/performance.md, memory at rest).

    Returns only in the master process; the worker process leaves through SystemExit, so callers doing
    clean-up must check their pid.
    """
    ctx.config = config
    ctx.registry = registry
    ctx.build = build
    ctx.load_app()
    ctx.boot_id = new_boot_id()
    # Before any fork: the page every process of the tree shares (hooks/generation.py).
    ctx.hooks_generation = SharedGeneration()
    # Held until the whole tree is gone; inherited by the workers, which open the journal itself.
    if config.state_dir:
        # -state-dir promises that a 200 is journaled: a journal that cannot be used stops the start.
        try:
            ctx.state_lock = lock_state_dir(config.state_dir)
            check_journal(config.state_dir, ctx.boot_id, config.state_keep)
        except JournalError as err:
            reason = f'run journal: {err}; not starting (docs/operations.md, "Run journal")'
            log.output(reason, level="error", event="fatal")
            raise SystemExit(1) from None
    if config.secure and ssl_context is None:
        from hookrunner.serve import tls

        ssl_context = tls.server_context(
            config.cert, config.key, config.tls_min_version, config.cipher_suites
        )
    ctx.ssl_context = ssl_context
    app = HookApplication(gunicorn_options(config, fd))
    master = os.getpid()
    admin_process: AdminProcess | None = None
    if admin is not None:
        # Before gunicorn forks any worker: the workers send their runs to this one process.
        from hookrunner.serve.adminserver import start_admin

        held = (fd,) if ctx.state_lock is None else (fd, ctx.state_lock)
        try:
            admin_process = start_admin(config, admin, held)
        except AdminSetupError as err:
            log.output(f"error setting up the admin listener: {err}", level="error", event="fatal")
            raise SystemExit(1) from None
        ctx.history_feed, ctx.history_key = admin_process.feed_address, admin_process.feed_key
    # After -setuid/-setgid (cli.py drops them before serve() is called) and before any worker: the run
    # owner, which never holds the hooks socket or the -state-dir lock. The master adopts what the owner's
    # commands leave behind (subreaper), and gunicorn's reaping reaps them as unknown children.
    become_subreaper()
    owner = HookArbiter.run_owner = RunOwner((fd,) if ctx.state_lock is None else (fd, ctx.state_lock))
    owner.start()
    try:
        app.run()
    except SystemExit as stop:
        # gunicorn ends both the master and the forked worker with sys.exit; only the master returns.
        if os.getpid() != master or stop.code not in (0, None):
            raise
    finally:
        if os.getpid() == master:
            owner.stop()  # after the workers: gunicorn has stopped them by now
            if admin_process is not None:
                admin_process.stop()
