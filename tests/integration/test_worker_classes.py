"""-worker-class: what the gevent worker (the default) and the threaded one must both do, run against the
real process. The rest of the integration suite runs on the default, and scripts/test runs it again on
gthread (HOOKRUNNER_TEST_FLAGS)."""

from __future__ import annotations

import signal
import socket
import threading
import time
from pathlib import Path

import pytest
from test_limits import python_command, start
from test_serving import Server, wait_until

WORKER_CLASSES = ("gevent", "gthread")

ROOT_REQUEST = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"


def read_root_answer(sock: socket.socket) -> bytes:
    """The answer to ROOT_REQUEST, whose head and body may come in separate reads."""
    data = b""
    while not data.endswith(b"\r\n\r\nOK"):
        piece = sock.recv(4096)
        assert piece, data
        data += piece
    return data


@pytest.mark.parametrize("worker_class", WORKER_CLASSES)
def test_a_request_waiting_for_command_output_holds_up_no_other(
    tmp_path: Path, servers: list[Server], worker_class: str
) -> None:
    # The capturing request waits for its command on a native thread; on the gevent worker that wait must
    # not block the event loop that serves every other connection.
    slow = {
        "id": "slow",
        "include-command-output-in-response": True,
        **python_command("import time; time.sleep(2); print('done')"),
    }
    server = start(tmp_path, servers, [slow], "-worker-class", worker_class)
    answers: list[tuple[int, bytes]] = []
    waiting = threading.Thread(target=lambda: answers.append(server.request("POST", "/hooks/slow")[::2]))
    waiting.start()
    assert server.wait_for_log("executing")
    began = time.monotonic()
    assert server.request("GET", "/")[0] == 200
    assert time.monotonic() - began < 1.0
    waiting.join(timeout=15)
    assert answers == [(200, b"done\n")]


@pytest.mark.parametrize("worker_class", WORKER_CLASSES)
def test_a_stop_does_not_wait_for_idle_connections(
    tmp_path: Path, servers: list[Server], worker_class: str
) -> None:
    server = start(tmp_path, servers, [{"id": "t", "execute-command": "/bin/true"}],
                   "-worker-class", worker_class, "-read-timeout", "0", "-debug")
    # One connection kept alive after its request, one that never sent anything.
    kept = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    silent = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        kept.sendall(ROOT_REQUEST)
        assert read_root_answer(kept).startswith(b"HTTP/1.1 200 OK\r\n")
        time.sleep(0.2)
        began = time.monotonic()
        server.signal(signal.SIGTERM)
        assert server.stop(timeout=30) == 0
        # -shutdown-timeout is 25 s: the idle connections were closed, not waited for.
        assert time.monotonic() - began < 8
        assert kept.recv(4096) == b""
    finally:
        kept.close()
        silent.close()
    # Quietly, even with -debug showing gunicorn's own messages.
    assert "Traceback" not in server.log and "Socket error" not in server.log, server.log


@pytest.mark.slow
@pytest.mark.parametrize("worker_class", WORKER_CLASSES)
def test_an_idle_kept_alive_connection_is_closed_after_five_seconds(
    tmp_path: Path, servers: list[Server], worker_class: str
) -> None:
    server = start(tmp_path, servers, [{"id": "t", "execute-command": "/bin/true"}],
                   "-worker-class", worker_class, "-read-timeout", "0")
    with socket.create_connection(("127.0.0.1", server.port), timeout=15) as sock:
        sock.sendall(ROOT_REQUEST)
        assert read_root_answer(sock).startswith(b"HTTP/1.1 200 OK\r\n")
        began = time.monotonic()
        assert sock.recv(4096) == b""
        assert 4 <= time.monotonic() - began < 10


@pytest.mark.parametrize("worker_class", WORKER_CLASSES)
def test_two_workers_serve_and_stop(tmp_path: Path, servers: list[Server], worker_class: str) -> None:
    server = start(tmp_path, servers, [{"id": "t", "execute-command": "/bin/true", "response-message": "ok"}],
                   "-worker-class", worker_class, "-workers", "2")
    pid = server.process.pid
    assert wait_until(lambda: len(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()) == 2)
    results: list[tuple[int, bytes]] = []

    def client() -> None:
        for _ in range(10):
            results.append(server.request("POST", "/hooks/t")[::2])

    clients = [threading.Thread(target=client) for _ in range(4)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join(timeout=30)
    assert results == [(200, b"ok")] * 40
    assert server.stop(timeout=30) == 0
