"""Fixtures shared by the gevent worker's tests."""

from __future__ import annotations

from collections.abc import Iterator

import gevent.socket
import pytest


@pytest.fixture
def pair() -> Iterator[tuple[gevent.socket.socket, gevent.socket.socket]]:
    """A connected pair of gevent sockets: the server's end and the client's."""
    server, client = gevent.socket.socketpair()
    try:
        yield server, client
    finally:
        server.close()
        client.close()
