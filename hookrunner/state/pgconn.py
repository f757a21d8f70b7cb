"""The PostgreSQL run state's connections: made from a libpq conninfo string or a `postgresql://` URL, with
settings that find a database that is away in seconds, a few kept for reuse and checked before each use
without a round trip, the password kept out of every message, and one log line per change between
reachable and not."""

from __future__ import annotations

import re
import select
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict
from psycopg.errors import ReadOnlySqlTransaction

from hookrunner.ops.log import log
from hookrunner.state.backend import StateUnavailable

#: Connection settings unless the URL gives its own: a database that is away is found out in seconds.
DEFAULTS = {
    "connect_timeout": "5",
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "application_name": "hookrunner",
}

#: What says the database cannot take this transaction now: it is away, the connection was cut, or it is a
#: primary demoted by a failover (read-only). The connection is dropped; the next use connects again.
AWAY = (psycopg.OperationalError, psycopg.InterfaceError, ReadOnlySqlTransaction)


def secrets_of(conninfo: str) -> list[str]:
    """The password in a conninfo string or URL (as written in a URL, and as libpq reads it; as written
    after `password=` when libpq cannot read it), to be kept out of messages."""
    found = [m.group(1) for m in re.finditer(r"://[^:/@]*:([^@]*)@", conninfo)]
    try:
        found.append(str(conninfo_to_dict(conninfo).get("password") or ""))
    except psycopg.Error:
        found += [m.group(1) for m in re.finditer(r"password\s*=\s*'?([^'\s&]+)", conninfo)]
    return sorted({s for s in found if s}, key=len, reverse=True)


class Connections:
    """Up to `size` connections to one database, lent one transaction at a time: a caller past `size` waits
    for one to come back. Thread-safe (and greenlet-safe under gevent's patching)."""

    def __init__(self, conninfo: str, size: int = 4) -> None:
        self._secrets = secrets_of(conninfo)
        try:
            params = conninfo_to_dict(conninfo)
        except psycopg.Error as exc:
            raise StateUnavailable(f"the state URL cannot be read: {self.redact(str(exc))}") from None
        self._params: dict[str, Any] = {**DEFAULTS, **params}
        self.size = max(size, 1)
        self._idle: list[psycopg.Connection[Any]] = []
        self._out = 0  # lent now
        self._changed = threading.Condition()
        self._reachable = True
        # Bumped each time the database is found away: a transaction that began before that (on another
        # connection, and went through as the database went down) does not say it is back.
        self._away = 0
        self._closed = False

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def connect(self, autocommit: bool = False) -> psycopg.Connection[Any]:
        """A new connection of the caller's own (StateUnavailable when it cannot be made)."""
        try:
            return psycopg.connect(autocommit=autocommit, **self._params)
        except psycopg.Error as exc:
            raise self.unavailable(exc) from None

    def unavailable(self, exc: BaseException) -> StateUnavailable:
        """What a psycopg error becomes, without the password; the first after a success is logged."""
        why = self.redact(" ".join(str(exc).split()) or type(exc).__name__)
        if self._reachable:
            self._reachable = False
            self._away += 1
            log.output(f"run state: PostgreSQL is unavailable: {why}")
        return StateUnavailable(f"PostgreSQL is unavailable: {why}")

    def reachable(self, since: int | None = None) -> None:
        """A transaction went through: log the change if the database was away, unless the transaction
        began (`since`: the count of times found away then) before the database was last found away."""
        if not self._reachable and (since is None or since == self._away):
            self._reachable = True
            log.output("run state: PostgreSQL is reachable again")

    @contextmanager
    def lent(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection for one transaction: an idle one that is still up, or a new one. Given back after,
        unless what ended the transaction says the database is away (AWAY), which becomes StateUnavailable."""
        since = self._away
        conn = self._take()
        keep = False
        try:
            yield conn
            keep = True
            self.reachable(since)
        except AWAY as exc:
            raise self.unavailable(exc) from None
        except BaseException:
            keep = not (conn.closed or conn.broken)
            raise
        finally:
            if not keep:
                close_quietly(conn)
            self._give(conn if keep else None)

    def _take(self) -> psycopg.Connection[Any]:
        with self._changed:
            while not self._idle and self._out >= self.size and not self._closed:
                self._changed.wait()
            if self._closed:
                raise StateUnavailable("the run state is closed")
            self._out += 1
            idle = self._idle.pop() if self._idle else None
        try:
            if idle is not None and alive(idle):
                return idle
            close_quietly(idle)
            return self.connect()
        except BaseException:
            self._give(None)
            raise

    def _give(self, conn: psycopg.Connection[Any] | None) -> None:
        with self._changed:
            self._out -= 1
            if conn is not None and not self._closed:
                self._idle.append(conn)
                conn = None
            self._changed.notify()
        close_quietly(conn)

    def close(self) -> None:
        """Close the idle connections (those lent now are closed when given back)."""
        with self._changed:
            idle, self._idle = self._idle, []
            self._closed = True
            self._changed.notify_all()
        for conn in idle:
            close_quietly(conn)


def alive(conn: psycopg.Connection[Any]) -> bool:
    """Whether an idle connection is still up, without a round trip: the server's goodbye (a restart, a
    terminated backend) is already in its socket, so one call after the database is back connects again
    rather than failing on the old connection."""
    if conn.closed or conn.broken:
        return False
    try:
        for _ in range(3):  # a goodbye is an error message, then the end of the stream: two reads
            if not select.select([conn.fileno()], [], [], 0)[0]:
                break
            conn.pgconn.consume_input()
    except (psycopg.Error, OSError, ValueError):
        return False
    return conn.pgconn.status == pq.ConnStatus.OK


def close_quietly(conn: psycopg.Connection[Any] | None) -> None:
    """Close a connection that may already be broken; there is nothing to tell anyone if it fails."""
    if conn is not None:
        try:
            conn.close()
        except psycopg.Error:
            pass
