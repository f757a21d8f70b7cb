"""The run history's feed: a worker's events reach the admin listener's process in order over the private
Unix socket; a peer without the key is not heard; a worker never waits on a listener that is gone."""

from __future__ import annotations

import errno
import io
import os
import threading
import time
from multiprocessing.connection import Client
from pathlib import Path
from typing import Any

import pytest

from hookrunner.run.historyfeed import FeedClient, FeedServer


def test_events_arrive_in_order(tmp_path: Path) -> None:
    got: list[dict[str, Any]] = []
    server = FeedServer(str(tmp_path / "feed"), b"k" * 32, got.append)
    server.start()
    client = FeedClient(server.address, b"k" * 32)
    for n in range(200):
        client.send({"event": "run", "key": f"k{n}", "output": "\u00e9" * n})
    assert client.flush(10)
    deadline = time.monotonic() + 10
    while len(got) < 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [e["key"] for e in got] == [f"k{n}" for n in range(200)]
    assert got[5]["output"] == "\u00e9" * 5
    server.close()


def test_a_peer_without_the_key_is_refused(tmp_path: Path) -> None:
    got: list[dict[str, Any]] = []
    server = FeedServer(str(tmp_path / "feed"), b"right" * 8, got.append)
    server.start()
    from multiprocessing import AuthenticationError

    with pytest.raises((AuthenticationError, EOFError, ConnectionError)):
        conn = Client(server.address, family="AF_UNIX", authkey=b"wrong" * 8)
        conn.send_bytes(b'{"event": "run", "key": "x"}')
        conn.close()
    time.sleep(0.2)
    assert got == []
    server.close()


def test_sending_never_blocks_when_nobody_listens(tmp_path: Path) -> None:
    client = FeedClient(str(tmp_path / "nobody"), b"k" * 32)
    done = threading.Event()

    def send_many() -> None:
        for n in range(20000):
            client.send({"event": "run", "key": f"k{n}"})
        done.set()

    threading.Thread(target=send_many, daemon=True).start()
    assert done.wait(20)
    assert client.flush(20)
    assert client.dropped > 0


def test_a_worker_that_dies_is_reported_gone_and_a_live_one_is_not(tmp_path: Path) -> None:
    import subprocess
    import sys

    got: list[dict[str, Any]] = []
    gone: list[int] = []
    server = FeedServer(str(tmp_path / "feed"), b"k" * 32, got.append, gone.append)
    server.start()
    code = (
        "import sys; from multiprocessing.connection import Client\n"
        "c = Client(sys.argv[1], family='AF_UNIX', authkey=b'k' * 32)\n"
        "import os; c.send_bytes(('{\"event\": \"run\", \"key\": \"x\", \"pid\": %d}' % os.getpid()).encode())\n"
        "sys.stdin.read()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code, server.address], stdin=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    assert got == [{"event": "run", "key": "x", "pid": child.pid}] and gone == []
    child.kill()
    child.wait(timeout=10)
    while not gone and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gone == [child.pid]
    # A connection that ends while its process lives on (a worker reconnecting) reports nothing.
    live = Client(server.address, family="AF_UNIX", authkey=b"k" * 32)
    live.send_bytes(b'{"event": "run", "key": "y", "pid": %d}' % os.getpid())
    live.close()
    time.sleep(2.5)
    assert gone == [child.pid]
    if child.stdin:
        child.stdin.close()
    server.close()


def test_an_accept_error_is_logged_and_the_feed_accepts_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log_lines: io.StringIO
) -> None:
    got: list[dict[str, Any]] = []
    server = FeedServer(str(tmp_path / "feed"), b"k" * 32, got.append)
    monkeypatch.setattr("hookrunner.run.historyfeed.ACCEPT_RETRY", 0.05)
    accept = server._listener.accept
    errors = [OSError(errno.EMFILE, "Too many open files")]

    def flaky() -> Any:
        if errors:
            raise errors.pop()
        return accept()

    monkeypatch.setattr(server._listener, "accept", flaky)
    server.start()
    client = FeedClient(server.address, b"k" * 32)
    client.send({"event": "run", "key": "after-emfile"})
    assert client.flush(10)
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    server.close()
    assert [e["key"] for e in got] == ["after-emfile"]
    assert "accepting a worker's connection failed: [Errno 24] Too many open files" in log_lines.getvalue()
