"""The `hookrunner` command: webhook's start-up sequence, from flags to a bound socket, hooks and serving."""

from __future__ import annotations

import errno
import functools
import importlib
import importlib.util
import os
import resource
import signal
import socket
import stat
import sys
import threading
import time
from dataclasses import dataclass, replace
from functools import partial
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any

from hookrunner.config import Config
from hookrunner.errors import AdminSetupError, DuplicateHookError, UsageError
from hookrunner.flags import parse_args
from hookrunner.golang.syscall import errno_text
from hookrunner.ops.log import configure, log

if TYPE_CHECKING:
    import ssl

    from hookrunner.hooks.load import HookRegistry
    from hookrunner.run.ownerclient import OwnerClient
    from hookrunner.serve.adminserver import AdminListener

#: The upstream release whose behaviour hookrunner follows.
WEBHOOK_COMPATIBLE = "2.8.2"

NO_HOOKS_MESSAGE = (
    "couldn't load any hooks from file!\n"
    "aborting webhook execution since the -verbose flag is set to false.\n"
    "If, for some reason, you want webhook to start without the hooks, either use -verbose flag, or -nopanic"
)


@functools.cache
def hookrunner_version() -> str:
    """The installed distribution's version, from the METADATA file of its .dist-info beside the package:
    the file importlib.metadata reads, without the ~5 MiB that module's imports would keep in the master
    (docs/performance.md, memory at rest). Any other kind of install asks importlib.metadata."""
    site = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        infos = [
            name
            for name in os.listdir(site)
            if name.startswith("hookrunner-") and name.endswith(".dist-info")
        ]
        if len(infos) == 1:
            with open(os.path.join(site, infos[0], "METADATA"), encoding="utf-8") as metadata:
                for line in metadata:
                    if line.startswith("Version: "):
                        return line[len("Version: ") :].strip()
                    if not line.strip():
                        break  # the headers end at the first empty line
    except OSError:
        pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hookrunner")
    except PackageNotFoundError:
        return "0.0.0"


class _DeferredModule(ModuleType):
    """A module of the standard library that is imported only when something first reads one of its names
    (other than those it is made with)."""

    #: Two threads of the threaded worker may read a deferred module's first name at once: one imports it,
    #: the other then finds it imported (and neither imports a second copy).
    _loading = threading.RLock()

    def __getattr__(self, name: str) -> Any:  # only for names not yet in the module
        with self._loading:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
            real = importlib.import_module(self.__name__)
            self.__dict__.update(real.__dict__)
        return getattr(real, name)


def _defer(name: str, **known: Any) -> None:
    """Registers the module `name`, not yet imported, as a _DeferredModule that answers the names `known`
    itself; a submodule is also set on its package, where `import package.name` finds it."""
    if name in sys.modules:
        return
    deferred = _DeferredModule(name)
    deferred.__spec__ = importlib.util.find_spec(name)  # what the import system checks before it hands
    deferred.__dict__.update(known)  # out a module already loaded
    sys.modules[name] = deferred
    package, _, child = name.rpartition(".")
    if package:
        setattr(importlib.import_module(package), child, deferred)


#: Modules that gunicorn imports when the master imports it but that only a worker uses, if at all:
#: email.utils (the Date header), html (error pages; its entity table alone is ~0.4 MiB), pickle (logging's
#: socket handler). Each is a _DeferredModule: imported where and when it is first used, if ever
#: (docs/performance.md, memory at rest).
WORKER_ONLY_MODULES = ("email.utils", "html", "pickle")

#: What gunicorn's settings read of ssl when gunicorn is imported: the defaults of settings that only its
#: own TLS set-up uses (hookrunner gives it a context of its own, serve/arbiter.py). CPython's values.
SSL_CONSTANTS = {"PROTOCOL_TLS": 2, "PROTOCOL_SSLv23": 2, "CERT_NONE": 0}


def defer_worker_modules(config: Config) -> None:
    """Keeps out of the tree what gunicorn imports for its workers and nothing uses at rest
    (docs/performance.md, memory at rest). importlib.metadata, for entry points that hookrunner never names
    (its own imports, email, zipfile, csv and pathlib, hold ~5 MiB), always. Without -setuid/-setgid
    (after the drop a deferred module's first use may no longer read the interpreter's files), also the
    WORKER_ONLY_MODULES and, without -secure, ssl: each is loaded at its first use, in the master if the
    app's build uses it, and then once for the whole tree."""
    _defer("importlib.metadata")
    if config.setuid or config.setgid:
        return
    for name in WORKER_ONLY_MODULES:
        _defer(name)
    if not config.secure:
        _defer("ssl", **SSL_CONSTANTS)


class ListenError(Exception):
    """The listening socket could not be opened; the text follows Go's net error wording."""

    def __init__(self, message: str, on: str = "port") -> None:
        super().__init__(message)
        self.on = on  # webhook says `error listening on socket` or `error listening on port`


@dataclass
class Listener:
    """An open, listening socket and how webhook names it in `serving hooks on ...`."""

    sock: socket.socket
    address: str
    unix_path: str = ""  # a filesystem socket we created, removed again on exit
    from_systemd: bool = False


def _split_host_port(address: str) -> tuple[str, str]:
    """Go's net.SplitHostPort, enough for `-ip` and `-port` joined with a colon."""
    if address.startswith("["):
        end = address.find("]")
        if end < 0:
            raise ListenError(f"listen tcp: address {address}: missing ']' in address")
        if address[end + 1 : end + 2] != ":":
            raise ListenError(f"listen tcp: address {address}: missing port in address")
        return address[1:end], address[end + 2 :]
    host, sep, port = address.rpartition(":")
    if not sep:
        raise ListenError(f"listen tcp: address {address}: missing port in address")
    if ":" in host:
        raise ListenError(f"listen tcp: address {address}: too many colons in address")
    return host, port


def listen_tcp(ip: str, port: int) -> Listener:
    """Listen like Go's net.Listen("tcp", ip:port): a wildcard address listens on IPv4 and IPv6 at once."""
    address = f"{ip}:{port}"
    host, port_text = _split_host_port(address)
    if not 0 <= port <= 65535:
        raise ListenError(f"listen tcp: address {port_text}: invalid port")
    candidates: list[tuple[socket.AddressFamily, tuple[str, int]]] = []
    if host in ("", "0.0.0.0", "::") and socket.has_ipv6:
        candidates.append((socket.AF_INET6, ("::", port)))
        if host != "::":
            candidates.append((socket.AF_INET, ("0.0.0.0", port)))
    else:
        try:
            infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except socket.gaierror:
            raise ListenError(f"listen tcp: lookup {host}: no such host") from None
        candidates = [(family, sockaddr[:2]) for family, _, _, _, sockaddr in infos]  # type: ignore[misc]
        # Go listens on one address of a host name, an IPv4 one when there is one.
        candidates.sort(key=lambda candidate: candidate[0] != socket.AF_INET)
    last: OSError | None = None
    for family, sockaddr in candidates:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and sockaddr[0] == "::":
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(sockaddr)
            sock.listen(socket.SOMAXCONN)
        except OSError as err:
            sock.close()
            last = err
            if err.errno == errno.EADDRINUSE:
                break
            continue
        return Listener(sock, address)
    detail = errno_text(last) if last else "no suitable address found"
    raise ListenError(f"listen tcp {address}: bind: {detail}")


def listen_unix(path: str) -> Listener:
    """Listen on a Unix socket; a stale socket file nobody listens on is replaced. `@name` is abstract."""
    abstract = path.startswith("@")
    target = "\0" + path[1:] if abstract else path
    if not abstract:
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            mode = 0
        if stat.S_ISSOCK(mode):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
            except ConnectionRefusedError:
                os.unlink(path)  # left behind by a process that died without cleaning up
            except OSError:
                pass
            finally:
                probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(target)
        sock.listen(socket.SOMAXCONN)
    except OSError as err:
        sock.close()
        raise ListenError(f"listen unix {path}: bind: {errno_text(err)}", on="socket") from None
    return Listener(sock, f"{{unix:{path}}}", unix_path="" if abstract else path)


def systemd_listener() -> Listener | None:
    """The socket systemd passed us (LISTEN_PID/LISTEN_FDS), if any; the variables are then cleared."""
    try:
        listen_pid = int(os.environ.get("LISTEN_PID", "0"))
        count = int(os.environ.get("LISTEN_FDS", "0"))
    except ValueError:
        return None
    if listen_pid != os.getpid() or count == 0:
        return None
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(name, None)
    if count > 1:
        raise ListenError(f"received {count} sockets from systemd, but only 1 is supported", on="socket")
    try:
        sock = socket.socket(fileno=3)
        name = sock.getsockname()
    except OSError as err:
        raise ListenError(f"failed to use the socket from systemd: {errno_text(err)}", on="socket") from None
    if sock.family == socket.AF_UNIX:
        text = name.decode(errors="replace").replace("\0", "@") if isinstance(name, bytes) else name
        address = f"{{unix:{text}}}"
    elif sock.family == socket.AF_INET6:
        address = f"[{name[0]}]:{name[1]}"
    else:
        address = f"{name[0]}:{name[1]}"
    return Listener(sock, address, from_systemd=True)


def open_listener(config: Config) -> Listener:
    """webhook's order: systemd's socket, else -socket, else -ip and -port."""
    listener = systemd_listener()
    if listener is not None:
        return listener
    if config.socket:
        if config.setuid or config.setgid:
            raise ListenError(
                "-setuid and -setgid cannot be used with -socket; to bind the socket as root and run "
                "as another user, use systemd socket activation",
                on="socket",
            )
        return listen_unix(config.socket)
    return listen_tcp(config.ip, config.port)


def drop_privileges(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


def _go_fatal_plain(message: str) -> int:
    """Go's log.Fatalln before webhook sets its prefix: date, time, message, exit 1."""
    sys.stderr.write(f"{time.strftime('%Y/%m/%d %H:%M:%S')} {message}\n")
    return 1


def create_pidfile(path: str) -> None:
    """Write our pid; refuse when the pid already in the file belongs to a running process."""
    try:
        with open(path, encoding="utf-8") as handle:
            old = int(handle.read().strip())
    except (OSError, ValueError):
        old = 0
    # Our own pid in the file is stale too: a container restarted with the same pid (often 1).
    if old > 0 and old != os.getpid() and os.path.exists(f"/proc/{old}"):
        raise OSError(f"pid file found, ensure webhook is not running or delete {path}")
    os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(str(os.getpid()))


def _oserror_text(err: OSError) -> str:
    """An OSError as Go's *PathError prints: `open /x/y: no such file or directory`."""
    if err.filename is not None and err.strerror:
        op = "mkdir" if isinstance(err, FileExistsError) else "open"
        return f"{op} {err.filename}: {errno_text(err)}"
    return str(err)


def _key_pair_problem(cert: str, key: str) -> str:
    """What Go's tls.LoadX509KeyPair would say about unreadable or PEM-less files, or ""."""
    for path, what in ((cert, "certificate"), (key, "key")):
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as err:
            return _oserror_text(err)
        if b"-----BEGIN" not in data:
            return f"tls: failed to find any PEM data in {what} input"
    return ""


def _state_reachable(config: Config) -> bool:
    """Whether the shared run state (-state-url) can be used now, checked before anything is served, in a
    child process: psycopg must not be loaded in the master, whose forks (the run owner) load it only after
    gevent's patching. Its failure is one line on the log (state/opener.py's check_state)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            from hookrunner.state.opener import check_state

            code = 0 if check_state(config) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def raise_fd_limit() -> None:
    """The soft limit on open files raised to the hard one, as Go 1.19+ does at start: every connection
    holds a descriptor, and the common soft limit (1,024) would cap the clients served at once
    (docs/limits.md, robustness)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError):
        pass  # kept as it is, as Go keeps it when the raise is refused


def load_server_code(config: Config) -> None:
    """Import what the tree needs, before -setuid/-setgid (after it, the interpreter's own files may be
    out of reach; a Go binary has everything in memory already). -version, -h and flag errors stay fast.

    The master loads the worker's code and the run owner's and builds the app (serve/arbiter.py) before
    it forks them: the run owner and every worker share one copy of Flask, gevent, OpenSSL and the run
    path, which a memory cgroup charges once (docs/operations.md, "Process model"; docs/performance.md,
    memory at rest). Each optional library is still loaded only with the flag that needs it; with
    -setuid/-setgid, every library a flag or a later reload may need."""
    defer_worker_modules(config)
    if config.secure:
        import hookrunner.serve.tls  # noqa: F401 - the master makes the TLS context
    import hookrunner.hooks.load
    import hookrunner.serve.arbiter  # noqa: F401

    if config.template:
        import hookrunner.hooks.template  # noqa: F401
    if not (config.setuid or config.setgid):
        from hookrunner.serve import devserver

        devserver.install()  # before werkzeug is imported: the tree loads no development server
    from importlib import import_module

    import hookrunner.run.ownerclient
    import hookrunner.serve.app
    import hookrunner.serve.ownerprocess  # noqa: F401 - the run owner's, forked after the build

    serving = "threadworker" if config.worker_class == "gthread" else "greenworker"
    import_module(f"hookrunner.serve.{serving}")
    if not (config.setuid or config.setgid):
        return
    import sqlite3  # noqa: F401 - -state-dir's journal

    import hookrunner.golang.yaml  # noqa: F401 - read only for a file that is not plain JSON (hooks/load.py)
    import hookrunner.ops.watcher
    import hookrunner.run.historyfeed  # noqa: F401
    from hookrunner.golang.regexp import load_engine

    load_engine()  # a reload may bring the first regex
    if config.metrics:
        import prometheus_client
        import prometheus_client.openmetrics.exposition
        import prometheus_client.openmetrics.parser  # noqa: F401 - the run metrics cross as OpenMetrics


def main(argv: list[str] | None = None) -> int:
    """Run hookrunner with `argv` (default: the process's arguments); return the exit status."""
    try:
        config = parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError as err:
        sys.stderr.write(str(err))
        return err.exit_code

    # Read now, while the installed files can be read: -setuid may take that away before it is logged.
    version = hookrunner_version()
    if config.version:
        print(f"hookrunner version {version} (webhook {WEBHOOK_COMPATIBLE} compatible)")
        return 0

    if config.list_cipher_suites:
        from hookrunner.serve import tls

        try:
            names = tls.supported_cipher_names(config.tls_min_version)
        except tls.TLSSettingError as err:
            return _go_fatal_plain(str(err))
        sys.stdout.write("".join(f"{name}\n" for name in names))
        return 0

    if config.validate:
        # Checks the hooks files and exits: no socket, no log set-up, nothing served (docs/limits.md).
        from hookrunner.hooks.validate import run_validation

        return run_validation(config.hooks_files, config.template)

    if (config.setuid or config.setgid) and not (config.setuid and config.setgid):
        print("error: setuid and setgid options must be used together")
        return 1

    raise_fd_limit()

    # Until the hooks are served, a stop request simply ends start-up (through the clean-up below);
    # a reload request has nothing to reload yet.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGINT, _exit_on_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)

    load_server_code(config)

    # Problems found before logging is set up are queued, as webhook does, so they reach -logfile.
    problems: list[str] = []
    listener: Listener | None = None
    admin: AdminListener | None = None
    try:
        listener = open_listener(config)
    except ListenError as err:
        problems.append(f"error listening on {err.on}: {err}")
    if config.state_url or config.state_url_file:
        # Before -setuid: a Secret's file may be readable by root only. The URL is never logged.
        from hookrunner.state.opener import StateURLError, resolve_state_url

        try:
            config = replace(config, state_url=resolve_state_url(config), state_url_file="")
        except StateURLError as err:
            problems.append(f"error setting up the run state: {err}")
    if config.admin_addr and listener is not None:
        # Before -setuid: the token file may be readable by root only (and the admin code must be loaded).
        import hookrunner.serve.admin  # noqa: F401
        from hookrunner.serve.adminserver import open_admin

        try:
            admin = open_admin(config)
        except AdminSetupError as err:
            problems.append(f"error setting up the admin listener: {err}")
    if config.setuid:
        try:
            drop_privileges(config.setuid, config.setgid)
        except OSError as err:
            problems.append(f"error dropping privileges: {errno_text(err)}")
    if config.logfile:
        try:
            configure(True, config.logfile, config.log_format)
        except OSError as err:
            problems.append(f'error opening log file "{config.logfile}": {_oserror_text(err)}')
    else:
        configure(True, fmt=config.log_format)
    if problems:
        for problem in problems:
            log.output(problem)
        if listener is not None:
            listener.sock.close()
        if admin is not None:
            admin.sock.close()
        return 1
    assert listener is not None
    if config.state_url and not _state_reachable(config):
        listener.sock.close()
        if admin is not None:
            admin.sock.close()
        return 1
    log.enabled = config.log_enabled
    log.access = config.access_log

    master = os.getpid()
    pidfile = ""
    try:
        if config.pidfile:
            try:
                create_pidfile(config.pidfile)
            except OSError as err:
                log.output(f"Error creating pidfile: {_oserror_text(err)}")
                return 1
            pidfile = config.pidfile
        return _run(config, listener, admin)
    finally:
        if os.getpid() == master:
            listener.sock.close()  # also on the exits before serving (no hooks, a bad -template file)
            if pidfile:
                try:
                    os.remove(pidfile)
                except OSError as err:
                    log.output(_oserror_text(err).replace("open ", "remove ", 1))
            if listener.unix_path and not listener.from_systemd:
                try:
                    os.remove(listener.unix_path)
                except FileNotFoundError:
                    pass
                except OSError as err:
                    log.output(f"Failed to remove socket file {listener.unix_path}: {err}")


def _run(config: Config, listener: Listener, admin: AdminListener | None = None) -> int:
    """From `version ... starting` to serving; returns only when the server has stopped."""
    from hookrunner.hooks.load import HookRegistry
    from hookrunner.serve.arbiter import hold_reload_signals, serve

    log.output(f"version {hookrunner_version()} starting")
    log.output("setting up os signal watcher")

    registry = HookRegistry(config.hooks_files, config.template, digests=config.hotreload)
    try:
        registry.load_initial()
    except DuplicateHookError as err:
        log.output(str(err))
        return 1

    if not config.log_enabled and not config.nopanic and len(registry) == 0:
        log.set_output(sys.stdout)
        log.enabled = True
        log.output(NO_HOOKS_MESSAGE)
        return 1

    if config.hotreload:
        for path in registry.files:
            log.output(f"setting up file watcher for {path}")

    base = config.hooks_base
    context: ssl.SSLContext | None = None
    if config.secure:
        from hookrunner.serve import tls

        # webhook checks the TLS flags, announces the address, and only then finds a bad cert or key.
        try:
            tls.min_version(config.tls_min_version)
            tls.openssl_cipher_string(config.cipher_suites)
        except tls.TLSSettingError as err:
            log.output(str(err))
            return 1
        log.output(f"serving hooks on https://{listener.address}{base}/{{id}}")
        problem = _key_pair_problem(config.cert, config.key)
        if problem:
            log.output(problem)
            return 1
        try:
            context = tls.server_context(
                config.cert, config.key, config.tls_min_version, config.cipher_suites
            )
        except (OSError, ValueError) as err:
            log.output(f"tls: {getattr(err, 'reason', None) or err}")
            return 1
    else:
        log.output(f"serving hooks on http://{listener.address}{base}/{{id}}")
    hold_reload_signals()
    log.output("os signal watcher ready")
    fd = listener.sock.detach()
    serve(config, partial(_build_app, config, registry), registry, fd, context, admin)
    return 0


def _build_app(config: Config, registry: HookRegistry) -> tuple[Any, OwnerClient]:
    """The WSGI app and its runner, made in the worker (serve/context.py, load_app): the worker's side of
    the run owner, which admits, starts and waits for every run (serve/ownerprocess.py)."""
    from hookrunner.run.ownerclient import OwnerClient
    from hookrunner.serve.app import create_app

    runner = OwnerClient()  # its connection is given at the worker's start (serve/worker.py)
    return create_app(config, registry, runner), runner
