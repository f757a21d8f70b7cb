"""The threaded worker (-worker-class gthread): gunicorn's gthread worker, whose pool of THREADS threads
(context.py) serves requests, with webhook's behaviour from worker.py and -read-timeout on each
connection: a bounded TLS handshake and reads under one deadline per request."""

from __future__ import annotations

import socket
import threading
from typing import Any

import gunicorn.workers.gthread
from gunicorn.http.unreader import SocketUnreader
from gunicorn.workers.gthread import TConn, ThreadWorker

from hookrunner.serve.worker import DeadlineSocket, WebhookWorker, ctx, handshake_expired, handshake_failed


class _TimedConn(TConn):
    """gunicorn's connection with -read-timeout: a bounded TLS handshake, and reads under a deadline."""

    reader: DeadlineSocket | None = None

    def init(self) -> None:
        if self.initialized:
            return
        limit = ctx.config.read_timeout
        timer: threading.Timer | None = None
        handle: socket.socket | None = None
        expired = threading.Event()
        if limit > 0 and self.cfg.is_ssl:
            # The handshake reads too; a stalled one is ended by shutting the connection down under it.
            # Wrapping detaches the descriptor from self.sock, so the timer holds a duplicate of its own
            # (which also keeps the descriptor from being reused by another connection meanwhile).
            handle = self.sock.dup()
            timer = threading.Timer(limit, _end_handshake, (handle, self.client, limit, expired))
            timer.daemon = True
            timer.start()
        try:
            super().init()
        except OSError as exc:  # ssl.SSLError included; gunicorn then closes the connection
            if self.cfg.is_ssl and self.parser is None and not expired.is_set():
                handshake_failed(self.sock, self.client, exc)
            raise
        finally:
            if timer is not None and handle is not None:
                timer.cancel()
                timer.join()
                handle.close()
        unreader = getattr(self.parser, "unreader", None)
        if limit > 0 and isinstance(unreader, SocketUnreader):
            self.reader = DeadlineSocket(unreader.sock, limit, self.client)
            unreader.sock = self.reader


def _end_handshake(sock: socket.socket, peer: Any, limit: float, expired: threading.Event) -> None:
    expired.set()
    handshake_expired(peer, limit)
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class HookWorker(WebhookWorker, ThreadWorker):
    """gunicorn's threaded worker (-worker-class gthread): a pool of THREADS threads serves requests."""

    def init_process(self) -> None:
        # Connections read under -read-timeout (slow clients); in this process only.
        gunicorn.workers.gthread.TConn = _TimedConn
        super().init_process()

    def request_local(self) -> Any:
        return threading.local()

    def handle(self, conn: Any) -> Any:
        # Each request on a kept-alive connection gets the whole -read-timeout again.
        reader = getattr(conn, "reader", None)
        if reader is not None:
            reader.new_request()
        return super().handle(conn)

    def handle_request(self, req: Any, conn: Any) -> bool:
        if self.refuse_bad_host(req, conn.sock):
            return False
        self._current.req = req  # the app runs on this thread, inside the call below
        self._current.sock = conn.sock
        try:
            return bool(super().handle_request(req, conn))
        finally:
            self._current.req = self._current.sock = None
            reader = getattr(conn, "reader", None)
            if reader is not None:
                # The request was read in time; draining an unread body is bounded by gunicorn itself.
                reader.new_request()

    def run(self) -> None:
        super().run()
        self.finish_commands()
