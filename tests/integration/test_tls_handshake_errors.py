"""Failed TLS handshakes under -secure -verbose, against the real `hookrunner` and webhook 2.8.0 side by side:
the same clients, one after the other, must give the same `http: TLS handshake error from ...` lines
(ports masked), and a client that speaks plain HTTP to the TLS port the same answer (and no line)."""

from __future__ import annotations

import re
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest
import trustme
from integration_harness import REFERENCE_BINARY, free_port
from test_serving import Server, tls_files, wait_until

pytestmark = pytest.mark.reference

HANDSHAKE_LINE = re.compile(r"http: TLS handshake error from .*")
PORT = re.compile(r"(127\.0\.0\.1):\d+")


def _client_hello() -> bytes:
    """A TLS 1.3 ClientHello, as a client would send it first."""
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def _send_then_close(port: int, data: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        time.sleep(0.2)  # the server has read it (and, for a whole hello, answered it unread: a reset)


def _untrusting_client(port: int, version: ssl.TLSVersion, hostname: str, ca: trustme.CA | None) -> None:
    client = ssl.create_default_context()
    if ca is not None:
        ca.configure_trust(client)
    client.minimum_version = client.maximum_version = version
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        with pytest.raises(ssl.SSLCertVerificationError):
            client.wrap_socket(sock, server_hostname=hostname)


def _plain_http(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
        return answer


def _clients(ca: trustme.CA) -> list[tuple[str, Callable[[int], object]]]:
    hello = _client_hello()
    v12, v13 = ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3
    return [
        ("closes at once", lambda port: _send_then_close(port, b"")),
        ("closes mid-hello", lambda port: _send_then_close(port, hello[:20])),
        ("closes after its hello", lambda port: _send_then_close(port, hello)),
        ("unknown CA, TLS 1.2", lambda port: _untrusting_client(port, v12, "localhost", None)),
        ("unknown CA, TLS 1.3", lambda port: _untrusting_client(port, v13, "localhost", None)),
        ("wrong name, TLS 1.2", lambda port: _untrusting_client(port, v12, "wrong.example", ca)),
        ("not TLS", lambda port: _send_then_close(port, b"SSH-2.0-OpenSSH_9.2\r\n")),
    ]


def handshake_errors(port: int, log: Callable[[], str], ca: trustme.CA) -> tuple[bytes, list[str]]:
    """The plain-HTTP answer, then each client's handshake line, as the server on `port` (whose certificate
    `ca` issued) logged them."""
    answer = _plain_http(port)
    for seen, (name, client) in enumerate(_clients(ca)):
        client(port)
        logged = partial(lambda count: len(HANDSHAKE_LINE.findall(log())) > count, seen)
        assert wait_until(logged, timeout=10), (name, log())
    lines = [PORT.sub(r"\1:<port>", line) for line in HANDSHAKE_LINE.findall(log())]
    return answer, lines


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[tuple[int, Path, trustme.CA, list[str]]]:
    """webhook 2.8.0 on a free port with -secure -verbose: its port, its log file, the CA of its certificate
    and the -secure flags (the certificate's files are in `tmp_path`)."""
    ca, flags = tls_files(tmp_path)
    port = free_port()
    hooks = tmp_path / "reference-hooks.json"
    hooks.write_text("[]")
    log_path = tmp_path / "reference.log"
    with open(log_path, "wb") as err:
        process = subprocess.Popen([str(REFERENCE_BINARY), "-hooks", str(hooks), "-verbose", "-ip", "127.0.0.1",
                                    "-port", str(port), *flags], stderr=err, stdout=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: "serving hooks on https://" in log_path.read_text(), timeout=15)
        yield port, log_path, ca, flags
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def test_failed_handshakes_are_logged_as_webhook_logs_them(
    tmp_path: Path, servers: list[Server], webhook: tuple[int, Path, trustme.CA, list[str]]
) -> None:
    ref_port, ref_log, ca, flags = webhook
    theirs = handshake_errors(ref_port, ref_log.read_text, ca)

    server = Server(tmp_path, [], *flags)
    servers.append(server)
    assert server.wait_for_log("serving hooks on https://", timeout=15), server.log
    ours = handshake_errors(server.port, lambda: server.log, ca)

    assert theirs == (
        b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n",
        [
            "http: TLS handshake error from 127.0.0.1:<port>: EOF",
            "http: TLS handshake error from 127.0.0.1:<port>: unexpected EOF",
            "http: TLS handshake error from 127.0.0.1:<port>: read tcp 127.0.0.1:<port>->127.0.0.1:<port>: "
            "read: connection reset by peer",
            "http: TLS handshake error from 127.0.0.1:<port>: remote error: tls: unknown certificate authority",
            "http: TLS handshake error from 127.0.0.1:<port>: local error: tls: bad record MAC",
            "http: TLS handshake error from 127.0.0.1:<port>: remote error: tls: bad certificate",
            "http: TLS handshake error from 127.0.0.1:<port>: tls: first record does not look like a TLS handshake",
        ],
    )
    assert ours == theirs
