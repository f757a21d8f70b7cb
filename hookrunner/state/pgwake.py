"""What the PostgreSQL run state's owner waits on for new work (state/backend.py's Waiter): LISTEN on a
connection of its own, woken by the NOTIFY that every admission and finish sends, with polling as the
fallback (a lease that runs out announces nothing, and LISTEN is down while the database is away)."""

from __future__ import annotations

import select
import time
from collections.abc import Callable
from typing import Any

import psycopg

from hookrunner.state.backend import StateUnavailable


class Listener:
    """LISTEN `channel` on an autocommit connection from `connect`. A wait ends at a NOTIFY (True), at the
    poll interval (True: work may be claimable) or at the timeout (False). A lost connection is made again at
    the next wait; until it can be, a wait is a plain poll. One waiter at a time (the owner's loop)."""

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], channel: str, poll: float) -> None:
        self._connect = connect
        self._channel = channel
        self.poll = poll
        self._conn: psycopg.Connection[Any] | None = None
        if self._listen() is None:  # the first LISTEN must succeed: the caller learns the database is away
            raise StateUnavailable("PostgreSQL is unavailable: LISTEN failed")

    def _listen(self) -> psycopg.Connection[Any] | None:
        """The listening connection, made (and LISTEN sent) when there is none; None when it cannot be."""
        if self._conn is None:
            conn = self._connect()  # StateUnavailable when the database is away
            try:
                conn.execute(f"LISTEN {self._channel}")
            except psycopg.Error:
                close_quietly(conn)
                return None
            self._conn = conn
        return self._conn

    @staticmethod
    def _notified(conn: psycopg.Connection[Any]) -> bool:
        """Whether a NOTIFY came (all that came are consumed: one wake stands for them all)."""
        conn.pgconn.consume_input()
        got = False
        while conn.pgconn.notifies() is not None:
            got = True
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
            left = until - time.monotonic()
            if conn is None:
                time.sleep(max(left, 0))
                return until < deadline
            try:
                if self._notified(conn):
                    return True
                if left <= 0:
                    return until < deadline
                readable, _, _ = select.select([conn.fileno()], [], [], left)
                if readable and self._notified(conn):
                    return True
            except (psycopg.Error, OSError, ValueError):
                self.close()  # the next round connects again, or polls

    def close(self) -> None:
        close_quietly(self._conn)
        self._conn = None


def close_quietly(conn: psycopg.Connection[Any] | None) -> None:
    """Close a connection that may already be broken; there is nothing to tell anyone if it fails."""
    if conn is not None:
        try:
            conn.close()
        except psycopg.Error:
            pass
