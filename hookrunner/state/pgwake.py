"""What the PostgreSQL run state's owner waits on for new work (state/backend.py's Waiter): LISTEN on a
connection of its own, woken by the NOTIFY that every admission and finish sends, with polling as the
fallback (a lease that runs out announces nothing, and LISTEN is down while the database is away)."""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from typing import Any

import psycopg

from hookrunner.state.backend import StateUnavailable
from hookrunner.state.pgconn import close_quietly


def _epoll() -> select.epoll:
    """A new epoll object: select's own, or, once gevent's monkey patching has taken it out of `select` (its
    loop waits with poll instead), the original that gevent kept; either way a descriptor a loop can watch."""
    make = getattr(select, "epoll", None)
    if make is None:
        from gevent.monkey import get_original  # patched: gevent is loaded already

        make = get_original("select", "epoll")
    return make(flags=select.EPOLL_CLOEXEC)


class Listener:
    """LISTEN `channel` on an autocommit connection from `connect`. A wait ends at another instance's NOTIFY
    or a poke from this one (True), at the poll interval (True: work may be claimable) or at the timeout
    (False). NOTIFYs whose payload is `own` are this instance's, which pokes its waiter itself, at once. A
    lost connection is made again at the next wait; until it can be, a wait is a plain poll. One waiter at
    a time (the owner's loop); pokes from any thread or greenlet. fileno() is an epoll descriptor watching
    both the poke pipe and the listening connection's socket (whichever connection is current), so one
    descriptor covers both wakes; the poll it cannot announce is `poll` (state/backend.py's Waiter)."""

    def __init__(
        self, connect: Callable[[], psycopg.Connection[Any]], channel: str, poll: float, own: str
    ) -> None:
        self._connect = connect
        self._channel = channel
        self.poll = poll
        self._own = own.encode()
        self._conn: psycopg.Connection[Any] | None = None
        # A pipe, not an Event: a poke must also end a wait in select(), on a thread or on gevent's loop.
        self._poked, self._poke = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._epoll = _epoll()
        self._epoll.register(self._poked, select.EPOLLIN)
        self._watched = -1  # the listening socket the epoll watches, if any
        try:
            listening = self._listen()
        except StateUnavailable:
            self.close()
            raise
        if listening is None:  # the first LISTEN must succeed: the caller learns the database is away
            self.close()
            raise StateUnavailable("PostgreSQL is unavailable: LISTEN failed")

    def _listen(self) -> psycopg.Connection[Any] | None:
        """The listening connection, made (and LISTEN sent) when there is none; None when it cannot be."""
        if self._conn is None:
            conn = self._connect()  # StateUnavailable when the database is away
            try:
                conn.execute(f"LISTEN {self._channel}")
                self._epoll.register(conn.fileno(), select.EPOLLIN)
            except (psycopg.Error, OSError):
                close_quietly(conn)
                return None
            self._conn, self._watched = conn, conn.fileno()
        return self._conn

    def fileno(self) -> int:
        """Readable when poked, or when the listening connection has input (a NOTIFY, maybe this instance's
        own, which wait(0) then ignores; or its end, which wait(0) then sees)."""
        return self._epoll.fileno()

    def poke(self) -> None:
        """Wake the wait now (this instance admitted or finished a run)."""
        if self._poke < 0:
            return  # closed: its number may be another file's by now
        try:
            os.write(self._poke, b"!")
        except OSError:
            pass  # full: a wake is already due; closed: nobody waits any more

    def _woken(self, conn: psycopg.Connection[Any] | None) -> bool:
        """Whether a poke or another instance's NOTIFY came (all consumed: one wake stands for them all)."""
        got = False
        try:
            while os.read(self._poked, 512):
                got = True
        except BlockingIOError:
            pass
        if conn is not None:
            conn.pgconn.consume_input()
            while (notify := conn.pgconn.notifies()) is not None:
                got = got or notify.extra != self._own
        return got

    def wait(self, timeout: float | None) -> bool:
        now = time.monotonic()
        deadline = now + timeout if timeout is not None else float("inf")
        until = min(deadline, now + self.poll)
        while True:
            try:
                conn = self._listen()
            except StateUnavailable:
                conn = None
            try:
                if self._woken(conn):
                    return True
                left = until - time.monotonic()
                if left <= 0:
                    return until < deadline
                watched = [self._poked] if conn is None else [self._poked, conn.fileno()]
                readable, _, _ = select.select(watched, [], [], left)
                if conn is None and not readable:
                    return until < deadline  # no connection to make again before the next round
            except (psycopg.Error, OSError, ValueError):
                self._forget()  # the next round connects again, or polls

    def _forget(self) -> None:
        if self._watched >= 0:  # before the close: the number may be another file's after it
            try:
                self._epoll.unregister(self._watched)
            except OSError:
                pass  # the socket was already gone
            self._watched = -1
        close_quietly(self._conn)
        self._conn = None

    def close(self) -> None:
        self._forget()
        fds, (self._poked, self._poke) = (self._poked, self._poke), (-1, -1)
        for fd in fds:
            if fd >= 0:
                os.close(fd)
        self._epoll.close()
