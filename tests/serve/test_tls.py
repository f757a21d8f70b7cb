"""TLS settings: Go's cipher-suite list, -tls-min-version, and a real handshake with the built context."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
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
