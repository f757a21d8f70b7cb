"""-worker-class: what the gevent worker (the default) and the threaded one must both do, run against the
real process. The rest of the integration suite runs on the default, and scripts/test runs it again on
gthread (HOOKRUNNER_TEST_FLAGS)."""

from __future__ import annotations

import http.client
import re
import signal
import socket
import ssl
import threading
import time
from pathlib import Path

import pytest
from test_limits import MSG_COMMAND_ERROR, python_command, start
from test_serving import Server, tls_files, wait_until, worker_pids

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


@pytest.mark.parametrize("worker_class", WORKER_CLASSES)
def test_a_connection_accepted_before_a_stop_is_answered_when_its_request_comes_after(
    tmp_path: Path, servers: list[Server], worker_class: str
) -> None:
    # As net/http's Shutdown: a new connection gets 5 s to send its request. Behind systemd's socket
    # (hookrunner.socket) the old process may accept a connection just as it stops; it must answer it,
    # not reset it (tests/packaging: a restart under load refuses no connection).
    server = start(tmp_path, servers, [{"id": "t", "execute-command": "/bin/true"}],
                   "-worker-class", worker_class)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        time.sleep(0.3)  # accepted; nothing sent yet
        server.signal(signal.SIGTERM)
        time.sleep(1)
        sock.sendall(ROOT_REQUEST)
        answer = read_root_answer(sock)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer
    assert server.stop(timeout=30) == 0


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
    assert wait_until(lambda: len(worker_pids(pid)) == 2)
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


def client_hello() -> bytes:
    """The first flight of a real TLS client: its ClientHello record(s)."""
    context = ssl.create_default_context()
    tls = context.wrap_bio(ssl.MemoryBIO(), outgoing := ssl.MemoryBIO(), server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def start_tls(tmp_path: Path, servers: list[Server], *flags: str) -> tuple[Server, ssl.SSLContext]:
    """A -secure server with one hook, answering; and a client context that trusts it."""
    ca, tls_flags = tls_files(tmp_path)
    server = Server(tmp_path, [{"id": "t", "execute-command": "/bin/true"}], *tls_flags, *flags)
    servers.append(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    server.ready(lambda: http.client.HTTPSConnection("127.0.0.1", server.port, context=client, timeout=10))
    return server, client


def read_answers(sock: socket.socket, count: int) -> bytes:
    """Reads until `count` answers with a Content-Length have fully arrived (or the connection ends)."""
    data = b""
    while True:
        answers = data.split(b"HTTP/1.1 ")[1:]
        if len(answers) >= count:
            last = answers[-1]
            head, _, body = last.partition(b"\r\n\r\n")
            length = re.search(rb"Content-Length: (\d+)", head)
            if length and len(body) >= int(length.group(1)):
                return data
        piece = sock.recv(65536)
        if not piece:
            return data
        data += piece


@pytest.mark.slow
@pytest.mark.parametrize("worker_class", WORKER_CLASSES)
def test_a_pipelined_request_gets_its_whole_body_however_slow(
    tmp_path: Path, servers: list[Server], worker_class: str
) -> None:
    # The second request's head comes with the first request (pipelined), its body only in part; the
    # rest comes after longer than the keep-alive time, within -read-timeout. It is one request with
    # that whole body, not a short body and then a new request.
    echo = {"id": "echo", "execute-command": "/bin/echo", "include-command-output-in-response": True,
            "pass-arguments-to-command": [{"source": "entire-payload"}]}
    server = start(tmp_path, servers, [echo], "-worker-class", worker_class)
    second = b'{"a":"' + b"x" * 40 + b'"}'
    head = b"POST /hooks/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
        sock.sendall(head % 7 + b'{"a":1}' + head % len(second) + second[:10])
        time.sleep(6)
        sock.sendall(second[10:])
        data = read_answers(sock, 2)
    answers = data.split(b"HTTP/1.1 ")[1:]
    assert len(answers) == 2, data
    assert answers[0].startswith(b"200 OK") and answers[0].endswith(b'\r\n\r\n{"a":1}\n')
    assert answers[1].startswith(b"200 OK") and answers[1].endswith(b"\r\n\r\n" + second + b"\n"), data


@pytest.mark.parametrize("worker_class", WORKER_CLASSES)
def test_a_trickled_tls_handshake_is_cut_at_the_read_timeout(
    tmp_path: Path, servers: list[Server], worker_class: str
) -> None:
    server, _client = start_tls(tmp_path, servers, "-worker-class", worker_class, "-read-timeout", "2s")
    hello = client_hello()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        began = time.monotonic()
        closed_after = None
        for byte in hello:  # one byte every 0.2 s: each read is quick, the handshake never ends
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed_after = time.monotonic() - began
                break
            time.sleep(0.2)
            if time.monotonic() - began > 15:
                break
    assert closed_after is not None and closed_after < 5, closed_after
    assert server.wait_for_log("TLS handshake not done within 2s")


@pytest.mark.parametrize("worker_class", WORKER_CLASSES)
def test_a_stop_does_not_wait_for_a_tls_handshake_never_started(
    tmp_path: Path, servers: list[Server], worker_class: str
) -> None:
    server, _client = start_tls(tmp_path, servers, "-worker-class", worker_class, "-shutdown-timeout", "10s")
    with socket.create_connection(("127.0.0.1", server.port), timeout=10):
        time.sleep(0.3)
        began = time.monotonic()
        server.signal(signal.SIGTERM)
        assert server.stop(timeout=30) == 0
        assert time.monotonic() - began < 7  # not the 10 s grace


@pytest.mark.parametrize("worker_class", WORKER_CLASSES)
def test_a_slow_body_over_tls_gets_its_408_over_tls(
    tmp_path: Path, servers: list[Server], worker_class: str
) -> None:
    server, client = start_tls(tmp_path, servers, "-worker-class", worker_class, "-read-timeout", "1s")
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        with client.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            sock.sendall(b"POST /hooks/t HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
            answer = b""
            while piece := sock.recv(4096):  # a TLS error here would mean the answer was not TLS
                answer += piece
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
    assert answer.endswith(b"\r\n\r\nRequest not received in time.\n")


@pytest.mark.parametrize("worker_class", WORKER_CLASSES)
def test_a_request_waiting_past_the_stop_grace_is_answered_500(
    tmp_path: Path, servers: list[Server], worker_class: str
) -> None:
    slow = {"id": "slow", "include-command-output-in-response": True,
            **python_command("import time; time.sleep(30)")}
    server = start(tmp_path, servers, [slow], "-worker-class", worker_class, "-shutdown-timeout", "2s")
    answers: list[tuple[int, bytes]] = []
    waiting = threading.Thread(target=lambda: answers.append(server.request("POST", "/hooks/slow")[::2]))
    waiting.start()
    assert server.wait_for_log("executing")
    began = time.monotonic()
    server.signal(signal.SIGTERM)
    waiting.join(timeout=20)
    assert answers == [(500, MSG_COMMAND_ERROR)]
    assert time.monotonic() - began < 6
    assert server.stop(timeout=30) == 0
    assert "shutdown: killing the process group of command" in server.log
