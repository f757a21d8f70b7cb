"""TLS settings: Go's cipher-suite list, -tls-min-version, a real handshake with the built context; and failed
handshakes worded as crypto/tls words them."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import sys
import threading

import pytest
import trustme

from hookrunner.serve import tls


def test_list_for_tls12_is_gos_full_list() -> None:
    names = tls.supported_cipher_names("1.2")
    assert len(names) == 17
    assert names[0] == "TLS_RSA_WITH_AES_128_CBC_SHA"
    assert names[-1] == "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
    assert tls.supported_cipher_names("1.0") == names
    assert tls.supported_cipher_names("") == names


def test_list_for_tls13_has_only_the_13_suites() -> None:
    assert tls.supported_cipher_names("1.3") == [
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
    ]


def test_unknown_settings_use_webhooks_words() -> None:
    with pytest.raises(tls.TLSSettingError, match="^error: unknown minimum TLS version: 1.5$"):
        tls.min_version("1.5")
    with pytest.raises(tls.TLSSettingError, match="^error: unknown TLS cipher suite: NOPE$"):
        tls.openssl_cipher_string("TLS_RSA_WITH_AES_128_CBC_SHA,NOPE")


def test_every_go_name_maps_to_a_cipher_openssl_knows() -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    for suite in tls.SUITES:
        if suite.openssl_name:
            context.set_ciphers(suite.openssl_name)  # raises SSLError for an unknown name
            assert [c["name"] for c in context.get_ciphers() if c["protocol"] != "TLSv1.3"] == [
                suite.openssl_name
            ]


@pytest.mark.reference
@pytest.mark.skipif(shutil.which("webhook") is None, reason="reference webhook not installed")
@pytest.mark.parametrize("minimum", ["1.0", "1.2", "1.3"])
def test_list_matches_the_reference(minimum: str) -> None:
    argv = ["webhook", "-list-cipher-suites", "-tls-min-version", minimum]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    assert done.stdout.splitlines() == tls.supported_cipher_names(minimum)


def _handshake(context: ssl.SSLContext, client: ssl.SSLContext) -> tuple[str, str]:
    """Run one real handshake over loopback; return (protocol, cipher) as the client saw them."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def accept() -> None:
        conn, _ = server.accept()
        try:
            with context.wrap_socket(conn, server_side=True) as tls_conn:
                tls_conn.recv(1)
        except (ssl.SSLError, OSError):
            pass

    thread = threading.Thread(target=accept)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", port)) as raw:
            with client.wrap_socket(raw, server_hostname="localhost") as conn:
                cipher = conn.cipher()
                assert cipher is not None
                result = (conn.version() or "", cipher[0])
                conn.sendall(b"x")
                return result
    finally:
        thread.join(timeout=5)
        server.close()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, trustme.CA]:
    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    folder = tmp_path_factory.mktemp("tls")
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_path))
    cert.private_key_pem.write_to_path(str(key_path))
    return str(cert_path), str(key_path), ca


def test_server_context_honours_suite_and_minimum(certs: tuple[str, str, trustme.CA]) -> None:
    cert, key, ca = certs
    context = tls.server_context(cert, key, "1.2", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384")
    client = ssl.create_default_context()
    ca.configure_trust(client)
    client.maximum_version = ssl.TLSVersion.TLSv1_2
    assert _handshake(context, client) == ("TLSv1.2", "ECDHE-ECDSA-AES256-GCM-SHA384")


def test_min_version_13_refuses_a_12_client(certs: tuple[str, str, trustme.CA]) -> None:
    cert, key, ca = certs
    context = tls.server_context(cert, key, "1.3", "")
    client = ssl.create_default_context()
    ca.configure_trust(client)
    assert _handshake(context, client)[0] == "TLSv1.3"
    client.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        _handshake(context, client)


# --- failed handshakes as crypto/tls words them (issue 34) ----------------------------------------------


class _Sock:
    """What go_handshake_error asks of a socket: its own address (a reset) and TCP_INFO (an EOF)."""

    def __init__(self, received: int | None = None) -> None:
        self.received = received

    def getsockname(self) -> tuple[str, int]:
        return ("::ffff:127.0.0.1", 9000)

    def getsockopt(self, level: int, name: int, size: int) -> bytes:
        if self.received is None:
            raise OSError("no TCP_INFO")
        return bytes(128) + self.received.to_bytes(8, sys.byteorder) + bytes(size - 136)


def _ssl_error(reason: str, cls: type[ssl.SSLError] = ssl.SSLError, code: int = 1) -> ssl.SSLError:
    exc = cls(code, reason.lower())
    exc.reason = reason
    return exc


def test_failed_handshakes_are_worded_as_crypto_tls_words_them() -> None:
    peer = ("::ffff:127.0.0.1", 41994)
    eof = _ssl_error("UNEXPECTED_EOF_WHILE_READING", ssl.SSLEOFError, ssl.SSL_ERROR_EOF)
    assert tls.go_handshake_error(eof, _Sock(received=1), peer) == "EOF"  # only the client's FIN came
    assert tls.go_handshake_error(eof, _Sock(received=21), peer) == "unexpected EOF"
    reset = ConnectionResetError(104, "Connection reset by peer")
    assert tls.go_handshake_error(reset, _Sock(), peer) == (
        "read tcp 127.0.0.1:9000->127.0.0.1:41994: read: connection reset by peer"
    )
    assert tls.go_handshake_error(_ssl_error("WRONG_VERSION_NUMBER"), _Sock(), peer) == (
        "tls: first record does not look like a TLS handshake"
    )
    assert tls.go_handshake_error(_ssl_error("HTTP_REQUEST"), _Sock(), peer) is None  # answered, not logged


@pytest.mark.parametrize(
    ("version", "alert", "text"),
    [
        (ssl.TLSVersion.TLSv1_2, 48, "remote error: tls: unknown certificate authority"),
        (ssl.TLSVersion.TLSv1_2, 42, "remote error: tls: bad certificate"),
        (ssl.TLSVersion.TLSv1_2, 0, "EOF"),  # close_notify
        (ssl.TLSVersion.TLSv1_2, 200, "remote error: tls: alert(200)"),
        # webhook 2.8.0 (Go 1.19) says this for any alert an OpenSSL client sends in TLS 1.3
        (ssl.TLSVersion.TLSv1_3, 48, "local error: tls: bad record MAC"),
    ],
)
def test_a_clients_alert_is_worded_by_its_number_and_version(version: int, alert: int, text: str) -> None:
    sock = _Sock()
    tls._note_alert(sock, "read", version, 21, alert, bytes([2, alert]))  # the context's message callback
    assert tls.go_handshake_error(_ssl_error("TLSV1_ALERT_UNKNOWN_CA"), sock, ("127.0.0.1", 1)) == text


def test_addresses_are_written_as_go_writes_them() -> None:
    assert tls.go_addr(("::ffff:10.0.0.1", 80)) == "10.0.0.1:80"
    assert tls.go_addr(("::1", 80, 0, 0)) == "[::1]:80"
    assert tls.go_addr(("127.0.0.1", 80)) == "127.0.0.1:80"
