"""The admin listener's connections: one selector thread accepts them and reads each head until it is whole,
then a small pool of threads runs the admin app on it. A connection costs a thread only while its request is
being answered, so thousands of idle or slowloris clients cost a socket each and no thread (docs/limits.md).

The design is the hooks port's (serve/greenreads.py: connections read without a greenlet until the head is
complete, deadlines swept in one place) on the admin process's own threads, without gevent: the admin
process is forked from the master, which never loads it, and its app reads SQLite and the run history on
plain threads. werkzeug's handler answers every request with `Connection: close`, so a connection carries
one request, and no admin route reads a body: the handler is given the head (and whatever came with it)
and never reads the socket itself.
"""

from __future__ import annotations

import io
import re
import selectors
import socket
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from werkzeug.serving import WSGIRequestHandler

from hookrunner.ops.log import log

#: Threads that answer requests whose head has come. The app's work is short (a page, a query of the
#: history), so a few serve any number of clients; a request waits in the pool's queue when all are busy.
HANDLER_THREADS = 8

#: The listen backlog: a burst of new connections waits in the kernel for the accept loop, not refused.
BACKLOG = 1024

#: The longest head the selector holds (http.server's own limit on a line): a longer one is refused at
#: once, 414 when its request line has not ended by then, else 431, without a thread.
HEAD_BYTES = 65536

#: A refused request (414, 431, and the handler's 400s and 505s) is counted; the log gets the first, then at
#: most one line per this many seconds that says how many more there were.
REFUSALS_EVERY = 60.0

#: The selector's longest sleep, so that a stop or a due summary line is never kept waiting long.
TICK = 1.0

#: Accepts per wake-up before the heads already there are read.
ACCEPTS = 256

#: After a failed accept (out of descriptors, say) the listener rests, as net/http's does: 5 ms, doubled
#: after each failure in a row, at most 1 s. Without a rest its backlog keeps it readable, and the selector
#: would spin.
ACCEPT_REST = (0.005, 1.0)

_HEAD_END = re.compile(rb"\n\r?\n")

_REFUSED = {
    414: b"HTTP/1.1 414 Request-URI Too Long\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Connection: close\r\nContent-Length: 24\r\n\r\n414 Request-URI Too Long",
    431: b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Connection: close\r\nContent-Length: 35\r\n\r\n431 Request Header Fields Too Large",
}


class Refusals:
    """Refused requests, logged as a count: the first at once, then one line per REFUSALS_EVERY at most
    (a client sending thousands of bad requests writes a line a minute, not one each)."""

    def __init__(self, every: float = REFUSALS_EVERY) -> None:
        self._every = every
        self._lock = threading.Lock()
        self._count = 0
        self._last = ""
        self._logged_at: float | None = None

    def note(self, what: str) -> None:
        with self._lock:
            self._count += 1
            self._last = what
        self.flush(time.monotonic())

    def due(self) -> float | None:
        """When the next summary line may be written, if there is anything to write."""
        with self._lock:
            if not self._count:
                return None
            return 0.0 if self._logged_at is None else self._logged_at + self._every

    def flush(self, now: float) -> None:
        with self._lock:
            if not self._count or (self._logged_at is not None and now < self._logged_at + self._every):
                return
            count, last, self._count = self._count, self._last, 0
            since = self._logged_at
            self._logged_at = now
        if since is None and count == 1:
            log.output(f"admin listener: refused a request ({last})")
        else:
            span = "" if since is None else f" in the last {now - since:.0f}s"
            log.output(f"admin listener: refused {count} requests{span} (the last: {last})")


class Handoff(ConnectionError):  # noqa: N818 - not an error: the app took the connection
    """Raised by the app, before it has written anything, once it has taken the request's connection
    (environ["werkzeug.socket"]) to answer it on its own (a follower of a run, serve/adminfollow.py): the
    pool thread then lets go of it without writing or closing it."""


class Handler(WSGIRequestHandler):
    """werkzeug's handler on a head the selector read: its request comes from those bytes and never from
    the socket (no admin route reads a body). No log line per request, refusals counted (Refusals), and
    no versions of werkzeug and Python in the `Server` header."""

    refusals: Refusals
    protocol_version = "HTTP/1.1"  # as werkzeug's threaded server sets it

    def __init__(self, sock: socket.socket, peer: Any, server: Any, head: bytes) -> None:
        self._head = head
        self.taken = False
        super().__init__(sock, peer, server)

    def connection_dropped(self, error: BaseException, environ: Any = None) -> None:
        if isinstance(error, Handoff):
            self.taken = True

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the socket's own reader: its hold on the socket let go
        self.rfile = io.BytesIO(self._head)

    def version_string(self) -> str:
        return "hookrunner-admin"

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass

    def log(self, type: str, message: str, *args: Any) -> None:
        if type == "error":
            self.refusals.note((message % args if args else message).strip())


@dataclass
class _Server:
    """What werkzeug's handler asks of its server."""

    app: Any
    server_address: tuple[str, int]
    ssl_context: None = None
    multithread: bool = True
    multiprocess: bool = False
    passthrough_errors: bool = False

    def log(self, type: str, message: str, *args: Any) -> None:
        # werkzeug's "Error on request" with a traceback: the app answers every error itself (admin.py), so
        # this is werkzeug's own failure; one line, no traceback.
        text = (message % args if args else message).strip().splitlines()
        log.output("admin listener: " + (text[-1] if text else type))


@dataclass
class _Connection:
    sock: socket.socket
    peer: Any
    deadline: float | None
    head: bytearray = field(default_factory=bytearray)


class AdminConnections:
    """Serves the admin app on a listening socket: `serve_forever()` runs the selector in the calling
    thread until `stop()` (or an exception, such as the SystemExit of SIGTERM's handler)."""

    def __init__(
        self, sock: socket.socket, app: Any, read_timeout: float, threads: int = HANDLER_THREADS
    ) -> None:
        self._listener = sock
        self._read_timeout = read_timeout
        host, port = sock.getsockname()[:2]
        self._server = _Server(app, (host, port))
        self.refusals = Refusals()
        self._handler = type("AdminHandler", (Handler,), {"refusals": self.refusals})
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="admin-http")
        self._selector = selectors.DefaultSelector()
        self._pending: deque[_Connection] = deque()  # in the order of their deadlines (one limit for all)
        self._scratch = bytearray(HEAD_BYTES + 1)
        self._stopping = False
        #: Failed accepts, and when the listener is taken back after its rest (None: it is listened to).
        self.accept_errors = 0
        self._rest = 0.0
        self._resume: float | None = None
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)

    def stop(self) -> None:
        self._stopping = True
        try:
            self._wake_write.send(b"x")
        except OSError:
            pass

    def serve_forever(self) -> None:
        self._listener.listen(BACKLOG)
        self._listener.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_read, selectors.EVENT_READ, None)
        try:
            while not self._stopping:
                for key, _ in self._selector.select(self._sleep()):
                    if key.fileobj is self._listener:
                        self._accept()
                    elif key.data is not None:
                        self._read(key.data)
                now = time.monotonic()
                self._expire(now)
                self.refusals.flush(now)
                if self._resume is not None and now >= self._resume:
                    self._resume = None
                    self._selector.register(self._listener, selectors.EVENT_READ, None)
        finally:
            self._close()

    def _sleep(self) -> float:
        wake = [time.monotonic() + TICK]
        if self._pending and self._pending[0].deadline is not None:
            wake.append(self._pending[0].deadline)
        due = self.refusals.due()
        if due is not None:
            wake.append(due)
        if self._resume is not None:
            wake.append(self._resume)
        return max(0.0, min(wake) - time.monotonic())

    def _accept(self) -> None:
        for _ in range(ACCEPTS):
            try:
                sock, peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors, say: the rest wait in the backlog
                self.accept_errors += 1
                self.refusals.note(f"accept: {exc.strerror or exc}")
                self._rest = min(ACCEPT_REST[1], max(ACCEPT_REST[0], self._rest * 2))
                self._resume = time.monotonic() + self._rest
                self._selector.unregister(self._listener)
                return
            self._rest = 0.0
            sock.setblocking(False)
            deadline = time.monotonic() + self._read_timeout if self._read_timeout else None
            conn = _Connection(sock, peer, deadline)
            self._selector.register(sock, selectors.EVENT_READ, conn)
            self._pending.append(conn)

    def _read(self, conn: _Connection) -> None:
        try:
            count = conn.sock.recv_into(self._scratch, HEAD_BYTES + 1 - len(conn.head))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            count = 0
        if not count:
            self._drop(conn)
            return
        seen = len(conn.head)
        conn.head += memoryview(self._scratch)[:count]
        if _HEAD_END.search(conn.head, max(0, seen - 2)):
            self._selector.unregister(conn.sock)
            conn.deadline = None  # no longer pending; its entry in _pending is skipped
            self._pool.submit(self._answer, conn.sock, conn.peer, bytes(conn.head))
        elif len(conn.head) > HEAD_BYTES:
            self._refuse(conn)

    def _refuse(self, conn: _Connection) -> None:
        code = 431 if b"\n" in conn.head else 414
        self.refusals.note(f"code {code}, a head over {HEAD_BYTES} bytes")
        try:
            conn.sock.send(_REFUSED[code])
        except OSError:
            pass
        self._drop(conn)

    def _expire(self, now: float) -> None:
        """Close what has not sent a whole head within -read-timeout (no answer, no log line, as before)."""
        pending = self._pending
        while pending and (pending[0].deadline is None or pending[0].deadline <= now):
            conn = pending.popleft()
            if conn.deadline is not None:
                self._drop(conn)

    def _drop(self, conn: _Connection) -> None:
        conn.deadline = None
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    def _answer(self, sock: socket.socket, peer: Any, head: bytes) -> None:
        """On a pool thread: the app's answer to a whole head. Writes wait at most -read-timeout each. An
        app that took the connection (Handoff) answers it on its own: it is left open."""
        taken = False
        try:
            sock.setblocking(True)
            sock.settimeout(self._read_timeout or None)
            taken = self._handler(sock, peer, self._server, head).taken
        except OSError:
            pass  # the client went away while its answer was written
        except Exception as exc:  # noqa: BLE001 - one line, the listener goes on
            log.output(f"admin listener: {type(exc).__name__}: {exc}")
        finally:
            if not taken:
                try:
                    sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                sock.close()

    def _close(self) -> None:
        for key in list(self._selector.get_map().values()):
            if key.data is not None:
                key.data.sock.close()
        self._selector.close()
        self._wake_read.close()
        self._wake_write.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
