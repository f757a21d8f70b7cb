"""Go's net/url query parsing (url.ParseQuery and its unescaping), with Go's error texts."""

from __future__ import annotations

from hookrunner.golang.gostring import go_bytes_to_str
from hookrunner.golang.strconv import quote as go_quote

__all__ = ["go_parse_query"]

_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")


class _EscapeError(Exception):
    def __init__(self, fragment: bytes) -> None:
        super().__init__(f"invalid URL escape {go_quote(go_bytes_to_str(fragment))}")


def _query_unescape(raw: bytes) -> str:
    if b"%" not in raw and b"+" not in raw:
        return go_bytes_to_str(raw)
    out = bytearray()
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == 0x25:  # %
            if i + 2 >= n or raw[i + 1] not in _HEX_DIGITS or raw[i + 2] not in _HEX_DIGITS:
                raise _EscapeError(raw[i : i + 3])
            out.append(int(raw[i + 1 : i + 3], 16))
            i += 3
            continue
        out.append(0x20 if c == 0x2B else c)
        i += 1
    return go_bytes_to_str(bytes(out))


def go_parse_query(raw: bytes) -> tuple[dict[str, str], str | None]:
    """Go's url.ParseQuery, keeping the first value of each key.

    Returns the values it could parse and Go's error text, if any: pairs with a bad escape or a `;` are
    skipped, and the error is `invalid semicolon separator in query` when any pair held a `;`, else the
    first `invalid URL escape "%zz"`.
    """
    values: dict[str, str] = {}
    error: str | None = None
    for pair in raw.split(b"&"):
        if b";" in pair:
            error = "invalid semicolon separator in query"
            continue
        if not pair:
            continue
        key, _, value = pair.partition(b"=")
        try:
            k, v = _query_unescape(key), _query_unescape(value)
        except _EscapeError as exc:
            error = error or str(exc)
            continue
        values.setdefault(k, v)
    return values, error

