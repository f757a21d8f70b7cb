"""TLS as webhook configures it: Go cipher-suite names and -tls-min-version, mapped onto Python's ssl."""

from __future__ import annotations

import ssl
from dataclasses import dataclass


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
    return context
