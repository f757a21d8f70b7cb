"""The incoming request as the rules see it, and Go's canonical header names."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any


@dataclass
class Request:
    """One hook request: the parsed parts that rules and arguments read.

    `headers` and `query` hold the first value of each key; header keys are canonical MIME names
    (`X-Hub-Signature`). `payload` is None when the body was not parsed (unsupported type, bad JSON).
    `remote_addr` is Go's `ip:port` form (`127.0.0.1:54321`, `[::1]:54321`).
    """

    id: str
    method: str
    remote_addr: str
    content_type: str = ""
    body: bytes = b""
    headers: dict[str, Any] = field(default_factory=dict)
    query: dict[str, Any] = field(default_factory=dict)
    payload: dict[str, Any] | None = None
    allow_signature_errors: bool = False


# RFC 7230 token characters: the only bytes Go's textproto accepts in a header name it canonicalises.
_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


#: Names up to this long are remembered once canonicalised (each request sends the same few); longer ones,
#: which only an odd client sends, are worked out each time, so that the cache stays small.
_REMEMBERED_NAME_CHARS = 64


def canonical_header_key(name: str) -> str:
    """Go's textproto.CanonicalMIMEHeaderKey: `x-hub-signature` -> `X-Hub-Signature`.

    A name holding any character outside the RFC 7230 token set (a space, a colon, non-ASCII) is
    returned unchanged, as Go does.
    """
    if len(name) <= _REMEMBERED_NAME_CHARS:
        return _remembered_canonical(name)
    return _canonical(name)


def _canonical(name: str) -> str:
    if not all(c in _TOKEN_CHARS for c in name):
        return name
    out = []
    upper = True
    for c in name:
        out.append(c.upper() if upper else c.lower())
        upper = c == "-"
    return "".join(out)


_remembered_canonical = lru_cache(maxsize=512)(_canonical)
