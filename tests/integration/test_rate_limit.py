"""-rate-limit-enabled on the installed command: each client (by address; behind -trusted-proxies, the
forwarded client) gets its burst, then `429` with `Retry-After` until its bucket refills, while another
client is still served; `/` is never limited."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from command_under_test import HOOKRUNNER_BIN
from flood_load import _connect
from hostile_load import Target, hooks, push, receive, start, stop
from integration_harness import HOOKRUNNER_TEST_FLAGS

REFUSAL_HEAD = (
    b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain; charset=utf-8\r\nRetry-After: 1\r\n"
    b"X-Content-Type-Options: nosniff\r\n"
)


def send(port: int, data: bytes, source: str = "127.0.0.1") -> bytes:
    with _connect(port, source) as sock:
        sock.sendall(data)
        return receive(sock, time.monotonic() + 10)


def ping(port: int, source: str = "127.0.0.1", forwarded: str = "") -> bytes:
    data = push("/hooks/ping", b"{}")
    if forwarded:
        data = data.replace(b"Host: x\r\n", f"Host: x\r\nX-Forwarded-For: {forwarded}\r\n".encode())
    return send(port, data, source)


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[Target]:
    argv = [HOOKRUNNER_BIN, *HOOKRUNNER_TEST_FLAGS, "-rate-limit-enabled", "-rate-limit-rps", "1",
            "-rate-limit-burst", "3", "-trusted-proxies", "127.0.0.3"]
    target = start("hookrunner", argv, tmp_path, hooks(tmp_path))
    try:
        yield target
    finally:
        stop(target)


def test_each_client_gets_its_burst_then_429_with_retry_after(limited: Target) -> None:
    port = limited.port
    # start() asked for `/` until it answered: that took no token.
    answers = [ping(port) for _ in range(3)]
    assert all(a.startswith(b"HTTP/1.1 200 OK\r\n") for a in answers), answers
    refused = ping(port)
    assert refused.startswith(REFUSAL_HEAD), refused
    assert refused.endswith(b"\r\nContent-Length: 20\r\nConnection: close\r\n\r\nRate limit exceeded\n"), refused
    # Another client is served meanwhile, and `/` is not limited.
    assert ping(port, "127.0.0.2").startswith(b"HTTP/1.1 200 OK\r\n")
    root = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    assert send(port, root).startswith(b"HTTP/1.1 200 OK\r\n")
    # The first client's bucket refills at 1 a second: served again within a few seconds.
    deadline = time.monotonic() + 10
    while ping(port).startswith(b"HTTP/1.1 429 ") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert time.monotonic() < deadline


def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_bucket(limited: Target) -> None:
    port = limited.port
    proxy = "127.0.0.3"
    for _ in range(3):
        assert ping(port, proxy, "203.0.113.7").startswith(b"HTTP/1.1 200 OK\r\n")
    assert ping(port, proxy, "203.0.113.7").startswith(REFUSAL_HEAD)
    # The same proxy forwarding another client, and the proxy's own requests, are other buckets.
    assert ping(port, proxy, "203.0.113.8").startswith(b"HTTP/1.1 200 OK\r\n")
    assert ping(port, proxy).startswith(b"HTTP/1.1 200 OK\r\n")
    # An untrusted peer's X-Forwarded-For is not believed: its own address is the bucket.
    for _ in range(3):
        assert ping(port, "127.0.0.4", "203.0.113.9").startswith(b"HTTP/1.1 200 OK\r\n")
    assert ping(port, "127.0.0.4", "203.0.113.10").startswith(REFUSAL_HEAD)
