"""TLS as webhook configures it: Go cipher-suite names and -tls-min-version, mapped onto Python's ssl;
and a failed handshake as crypto/tls words it."""

from __future__ import annotations

import socket
import ssl
import sys
import weakref
from dataclasses import dataclass
from typing import Any


class TLSSettingError(ValueError):
    """A -tls-min-version or -cipher-suites value webhook would refuse; the text is webhook's log line."""


@dataclass(frozen=True)
class CipherSuite:
    """One suite of Go's tls.CipherSuites(), in Go's order, with its OpenSSL name."""

    go_name: str
    openssl_name: str
    versions: tuple[str, ...]  # the TLS versions Go allows the suite with


_UP_TO_12 = ("1.0", "1.1", "1.2")
_ONLY_12 = ("1.2",)
_ONLY_13 = ("1.3",)

SUITES: tuple[CipherSuite, ...] = (
    CipherSuite("TLS_RSA_WITH_AES_128_CBC_SHA", "AES128-SHA", _UP_TO_12),
    CipherSuite("TLS_RSA_WITH_AES_256_CBC_SHA", "AES256-SHA", _UP_TO_12),
    CipherSuite("TLS_RSA_WITH_AES_128_GCM_SHA256", "AES128-GCM-SHA256", _ONLY_12),
    CipherSuite("TLS_RSA_WITH_AES_256_GCM_SHA384", "AES256-GCM-SHA384", _ONLY_12),
    # TLS 1.3 suites cannot be chosen, in Go as in OpenSSL's cipher string; they are listed and accepted.
    CipherSuite("TLS_AES_128_GCM_SHA256", "", _ONLY_13),
    CipherSuite("TLS_AES_256_GCM_SHA384", "", _ONLY_13),
    CipherSuite("TLS_CHACHA20_POLY1305_SHA256", "", _ONLY_13),
    CipherSuite("TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", "ECDHE-ECDSA-AES128-SHA", _UP_TO_12),
    CipherSuite("TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", "ECDHE-ECDSA-AES256-SHA", _UP_TO_12),
    CipherSuite("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "ECDHE-RSA-AES128-SHA", _UP_TO_12),
    CipherSuite("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", "ECDHE-RSA-AES256-SHA", _UP_TO_12),
    CipherSuite("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256", _ONLY_12),
    CipherSuite("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384", _ONLY_12),
    CipherSuite("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256", _ONLY_12),
    CipherSuite("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "ECDHE-RSA-AES256-GCM-SHA384", _ONLY_12),
    CipherSuite("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-RSA-CHACHA20-POLY1305", _ONLY_12),
    CipherSuite("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305", _ONLY_12),
)

_VERSIONS = {
    "1.0": ssl.TLSVersion.TLSv1,
    "1.1": ssl.TLSVersion.TLSv1_1,
    "1.2": ssl.TLSVersion.TLSv1_2,
    "": ssl.TLSVersion.TLSv1_2,
    "1.3": ssl.TLSVersion.TLSv1_3,
}
_ORDER = ("1.0", "1.1", "1.2", "1.3")


def min_version(text: str) -> ssl.TLSVersion:
    """-tls-min-version as an ssl.TLSVersion; an empty value means 1.2, as in webhook."""
    try:
        return _VERSIONS[text]
    except KeyError:
        raise TLSSettingError(f"error: unknown minimum TLS version: {text}") from None


def supported_cipher_names(min_text: str) -> list[str]:
    """What -list-cipher-suites prints: every suite usable at or above the minimum version."""
    minimum = _ORDER.index(min_text or "1.2") if (min_text or "1.2") in _ORDER else None
    if minimum is None:
        raise TLSSettingError(f"error: unknown minimum TLS version: {min_text}")
    return [s.go_name for s in SUITES if any(_ORDER.index(v) >= minimum for v in s.versions)]


def openssl_cipher_string(go_names: str) -> str:
    """-cipher-suites (comma-separated Go names; empty for all) as an OpenSSL cipher string."""
    by_name = {s.go_name: s for s in SUITES}
    chosen: list[CipherSuite] = []
    for name in go_names.split(",") if go_names else [s.go_name for s in SUITES]:
        suite = by_name.get(name)
        if suite is None:
            raise TLSSettingError(f"error: unknown TLS cipher suite: {name}")
        chosen.append(suite)
    return ":".join(s.openssl_name for s in chosen if s.openssl_name)


def server_context(certfile: str, keyfile: str, min_text: str, go_names: str) -> ssl.SSLContext:
    """A server context like webhook's: the minimum version, the suites, no HTTP/2 (no ALPN offered)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = min_version(min_text)
    ciphers = openssl_cipher_string(go_names)
    if not ciphers:
        # Only TLS 1.3 suites were named: as with Go, no TLS 1.2 handshake can succeed.
        context.minimum_version = ssl.TLSVersion.TLSv1_3
    elif context.minimum_version < ssl.TLSVersion.TLSv1_2:
        # Older protocol versions need OpenSSL's security level lowered to be offered at all.
        context.set_ciphers(ciphers + ":@SECLEVEL=0")
    else:
        context.set_ciphers(ciphers)
    context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    context.load_cert_chain(certfile, keyfile)
    watch_alerts(context)
    return context


# ------------------------------------------------------------------------------ failed handshakes

#: crypto/tls's alert texts (alert.go), by alert number.
_GO_ALERTS = {
    0: "close notify", 10: "unexpected message", 20: "bad record MAC", 21: "decryption failed",
    22: "record overflow", 30: "decompression failure", 40: "handshake failure", 42: "bad certificate",
    43: "unsupported certificate", 44: "revoked certificate", 45: "expired certificate",
    46: "unknown certificate", 47: "illegal parameter", 48: "unknown certificate authority",
    49: "access denied", 50: "error decoding message", 51: "error decrypting message",
    60: "export restriction", 70: "protocol version not supported", 71: "insufficient security level",
    80: "internal error", 86: "inappropriate fallback", 90: "user canceled", 100: "no renegotiation",
    109: "missing extension", 110: "unsupported extension", 111: "certificate unobtainable",
    112: "unrecognized name", 113: "bad certificate status response", 114: "bad certificate hash value",
    115: "unknown PSK identity", 116: "certificate required", 120: "no application protocol",
}
#: OpenSSL's reasons for a first record that is no TLS handshake, and crypto/tls's words for it.
_NOT_TLS = frozenset(
    {"WRONG_VERSION_NUMBER", "HTTPS_PROXY_REQUEST", "UNKNOWN_PROTOCOL", "PACKET_LENGTH_TOO_LONG"}
)
_ALERT_RECORD = 21
#: Where a `struct tcp_info` holds tcpi_bytes_received (Linux 4.1 and later).
_TCP_BYTES_RECEIVED = 128

#: The last alert each socket's client sent, with its record's version (gevent's sockets have no __dict__).
_ALERTS: weakref.WeakKeyDictionary[Any, tuple[int, int]] = weakref.WeakKeyDictionary()

#: What net/http writes, on the plain connection, to a client that sent HTTP to the TLS port.
PLAIN_HTTP_ANSWER = b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"


def _note_alert(
    conn: Any, direction: str, version: Any, content_type: Any, msg_type: Any, data: bytes
) -> None:
    """The context's message callback: keeps the last alert a client sent, with its record's version."""
    if content_type == _ALERT_RECORD and direction == "read" and len(data) == 2:
        try:
            _ALERTS[conn] = (int(version), data[1])
        except TypeError:
            pass  # not weakly referable: the error's own reason is used


def watch_alerts(context: ssl.SSLContext) -> None:
    """Makes the sockets of `context` keep the alert a client ends its handshake with (go_handshake_error
    words it as crypto/tls does). The callback is the ssl module's message callback, which Python keeps
    for debugging (`_msg_callback`)."""
    setattr(context, "_msg_callback", _note_alert)  # noqa: B010 (not in the typed API)


def _bytes_received(sock: Any) -> int | None:
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    except (OSError, AttributeError):
        return None
    if len(info) < _TCP_BYTES_RECEIVED + 8:
        return None
    return int.from_bytes(info[_TCP_BYTES_RECEIVED : _TCP_BYTES_RECEIVED + 8], sys.byteorder)


def go_addr(addr: Any) -> str:
    """An address as net.TCPAddr's String() writes it: `host:port`, an IPv6 host in brackets, an IPv4 peer
    of a dual-stack socket (`::ffff:a.b.c.d`) as IPv4."""
    if isinstance(addr, tuple) and len(addr) >= 2:
        host = str(addr[0]).removeprefix("::ffff:") if "." in str(addr[0]) else str(addr[0])
        return f"[{host}]:{addr[1]}" if ":" in host else f"{host}:{addr[1]}"
    return str(addr)


def go_handshake_error(exc: OSError, sock: Any, peer: Any) -> str | None:
    """The error crypto/tls reports for a handshake with `peer` that failed with `exc` on `sock` (net/http
    logs it as `http: TLS handshake error from <peer>: <error>`), or None for a client that sent plain HTTP,
    which net/http answers with PLAIN_HTTP_ANSWER and does not log.

    OpenSSL's reasons are mapped to Go's texts where both see the same thing; a reason Go has no word for
    keeps OpenSSL's text after `tls: `."""
    reason = getattr(exc, "reason", None)
    if reason == "HTTP_REQUEST":
        return None
    # The callback is given the socket's owner: the socket, or under gevent the plain socket inside it.
    alert = _ALERTS.pop(getattr(sock, "_sock", sock), None) or _ALERTS.pop(sock, None)
    if alert is not None and isinstance(exc, ssl.SSLError) and not isinstance(exc, ssl.SSLEOFError):
        version, number = alert
        if number == 0:
            return "EOF"  # close_notify
        if version >= ssl.TLSVersion.TLSv1_3:
            # Go 1.19's server cannot read the alert a client sends in its second flight: it says this.
            return "local error: tls: bad record MAC"
        return f"remote error: tls: {_GO_ALERTS.get(number, f'alert({number})')}"
    if isinstance(exc, ssl.SSLError) and exc.args[0] == ssl.SSL_ERROR_EOF:  # SSLEOFError's too
        received = _bytes_received(sock)  # counts the client's FIN
        return "EOF" if received is not None and received <= 1 else "unexpected EOF"
    if isinstance(exc, ConnectionResetError):
        try:
            local = go_addr(sock.getsockname())
        except OSError:
            return "read: connection reset by peer"
        return f"read tcp {local}->{go_addr(peer)}: read: connection reset by peer"
    if reason in _NOT_TLS:
        return "tls: first record does not look like a TLS handshake"
    if isinstance(exc, ssl.SSLError) and reason:
        return "tls: " + str(reason).lower().replace("_", " ")
    return str(exc.strerror or exc)
