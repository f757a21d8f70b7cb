"""The admin listener (-admin-addr): its socket, opened at start-up beside the hooks port and never on it;
the loopback guard and the token (-admin-token-file, -admin-insecure); and its process.

The admin listener runs in a process of its own, forked by the master before gunicorn starts its workers:
the workers (one, or -workers N) send it their run events over a private Unix socket (run/historyfeed.py),
and it keeps the one run history they all write to (state/historystore.py), in memory or, with -state-dir, in
the journal's database. So its view is the same whatever the number of workers, and a worker replaced by
the master loses nothing already sent. docs/history.md says why.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

from hookrunner.config import Config
from hookrunner.errors import AdminSetupError
from hookrunner.ops.log import log
from hookrunner.run.historyfeed import FeedServer
from hookrunner.state.backend import HistoryReader
from hookrunner.state.historystore import HistoryStore
from hookrunner.state.model import Event


@dataclass
class AdminListener:
    """The admin socket, bound and listening, and what serving it needs."""

    sock: socket.socket
    host: str
    port: int
    token: bytes | None


def split_addr(addr: str) -> tuple[str, int]:
    """HOST:PORT (IPv6 in brackets) to its host and port; raises AdminSetupError."""
    host, sep, port_text = addr.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise AdminSetupError(f"-admin-addr {addr}: want HOST:PORT, e.g. 127.0.0.1:9001")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback one (an empty host is every address: not)."""
    if not host:
        return False
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addresses)


def read_token(path: str) -> bytes:
    """The token in `path` (surrounding white space dropped); raises AdminSetupError when unusable."""
    try:
        with open(path, "rb") as handle:
            token = handle.read().strip()
    except OSError as exc:
        raise AdminSetupError(f"-admin-token-file: cannot read {path}: {exc.strerror or exc}") from exc
    if not token:
        raise AdminSetupError(f"-admin-token-file: {path} is empty")
    return token


def open_admin(config: Config) -> AdminListener:
    """Check the admin flags, read the token and bind the socket (before -setuid drops privileges)."""
    host, port = split_addr(config.admin_addr)
    token = read_token(config.admin_token_file) if config.admin_token_file else None
    if token is None and not config.admin_insecure and not is_loopback(host):
        raise AdminSetupError(
            f"-admin-addr {config.admin_addr} is not a loopback address: give -admin-token-file, or "
            "-admin-insecure to serve the run history there without a token"
        )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host or ("::" if family == socket.AF_INET6 else "0.0.0.0"), port))
        sock.listen(64)
    except OSError as exc:
        sock.close()
        raise AdminSetupError(f"listen tcp {config.admin_addr}: {exc.strerror or exc}") from exc
    bound_port = sock.getsockname()[1]
    return AdminListener(sock, host, bound_port, token)


@dataclass
class AdminProcess:
    """The running admin listener: its pid, and the feed the workers send their events to."""

    pid: int
    feed_address: str
    feed_key: bytes
    feed_dir: str

    def stop(self) -> None:
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                break  # reaped already (gunicorn's master reaps every child)
            if pid:
                break
            time.sleep(0.02)
        else:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.feed_dir, ignore_errors=True)


def start_admin(config: Config, admin: AdminListener, close_fds: tuple[int, ...]) -> AdminProcess:
    """Fork the admin listener's process; returns once it listens (for the workers' events too).

    `close_fds`: descriptors the child must not keep (the hooks socket, the lock on -state-dir)."""
    feed_dir = tempfile.mkdtemp(prefix="hookrunner-admin-")  # 0700
    feed_address = os.path.join(feed_dir, "feed")
    feed_key = secrets.token_bytes(32)
    ready_read, ready_write = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        status = 1
        try:
            os.close(ready_read)
            for fd in close_fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
            _serve_admin(config, admin, feed_address, feed_key, ready_write, parent)
            status = 0
        except SystemExit:
            status = 0  # stopped by the master (SIGTERM)
        except BaseException as exc:  # noqa: BLE001 - the child must end here, whatever happened
            log.output(f"admin listener: {exc}")
        finally:
            os._exit(status)
    os.close(ready_write)
    admin.sock.close()
    ready = os.read(ready_read, 1)
    os.close(ready_read)
    process = AdminProcess(pid, feed_address, feed_key, feed_dir)
    if ready != b"1":
        process.stop()
        raise AdminSetupError("the admin listener did not start")
    host = f"[{admin.host}]" if ":" in admin.host else admin.host
    log.output(f"serving the run history on http://{host}:{admin.port}/")
    return process


def open_store(config: Config) -> HistoryStore:
    """The history's store: in the journal's file with -state-dir, else (or when that file cannot be used,
    logged) in memory; the hooks are served either way."""
    if config.state_dir:
        try:
            return HistoryStore.for_state_dir(
                config.state_dir, config.state_keep, config.state_keep_age, config.history_output
            )
        except (OSError, sqlite3.Error) as exc:
            log.output(f"run history: cannot use {config.state_dir}: {exc}; keeping the history in memory")
    return HistoryStore("", config.state_keep, config.state_keep_age, config.history_output)


def _serve_admin(
    config: Config, admin: AdminListener, feed_address: str, feed_key: bytes, ready: int, parent: int
) -> None:
    # The master handles the terminal's and webhook's signals and stops this process with SIGTERM.
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    from hookrunner.serve.admin import api_record, create_admin_app
    from hookrunner.serve.adminconns import AdminConnections
    from hookrunner.serve.adminfollow import FollowApp, Followers

    store: HistoryReader
    if config.state_url:  # every replica's history, in the shared database (psycopg loaded only here)
        from hookrunner.serve.adminfleet import FleetFeed, open_history

        history = open_history(config)
        followers = Followers(history, api_record, config.read_timeout)
        fleet = FleetFeed(history, followers)
        store, closing = history, fleet.stop
        feed = FeedServer(feed_address, feed_key, fleet.apply, fleet.worker_gone)
        fleet.start()
    else:
        local = open_store(config)
        followers = Followers(local, api_record, config.read_timeout)

        def apply(event: Event) -> None:
            local.apply(event)
            followers.publish(event)

        store, closing = local, local.close
        feed = FeedServer(feed_address, feed_key, apply, local.worker_gone)
    feed.start()
    app = create_admin_app(store, admin.token, config, followers)
    server = AdminConnections(admin.sock, FollowApp(app, followers), config.read_timeout)

    def orphaned() -> None:
        # The master died without stopping us (kill -9): nobody would, and the port would stay taken.
        while os.getppid() == parent:
            time.sleep(1.0)
        shutil.rmtree(os.path.dirname(feed_address), ignore_errors=True)  # nobody else will
        os._exit(0)

    threading.Thread(target=orphaned, name="admin-parent-watch", daemon=True).start()
    os.write(ready, b"1")
    os.close(ready)
    try:
        server.serve_forever()
    finally:
        feed.close()
        followers.stop()
        closing()
