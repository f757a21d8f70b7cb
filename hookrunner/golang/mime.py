"""Go's mime.ParseMediaType (with RFC 2231 parameters), with Go's error texts."""

from __future__ import annotations

from hookrunner.golang.gostring import go_bytes_to_str

__all__ = ["MediaTypeError", "parse_media_type"]

_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")
# unicode.IsSpace, which Go's mime package trims with.
_GO_UNICODE_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
)
_MIME_TSPECIALS = frozenset('()<>@,;:\\"/[]?=')


class MediaTypeError(Exception):
    pass


def _consume_token(v: str) -> tuple[str, str]:
    for i, ch in enumerate(v):
        if not ("\x20" < ch < "\x7f") or ch in _MIME_TSPECIALS:
            return v[:i], v[i:]
    return v, ""


def _consume_value(v: str) -> tuple[str, str]:
    if not v or v[0] != '"':
        return _consume_token(v)
    out: list[str] = []
    i = 1
    while i < len(v):
        ch = v[i]
        if ch == '"':
            return "".join(out), v[i + 1 :]
        if ch == "\\" and i + 1 < len(v) and v[i + 1] in _MIME_TSPECIALS:
            out.append(v[i + 1])
            i += 2
            continue
        if ch in "\r\n":
            return "", v
        out.append(ch)
        i += 1
    return "", v


def _percent_hex_unescape(s: str) -> str | None:
    raw = s.encode("utf-8", "surrogateescape")
    out = bytearray()
    i = 0
    while i < len(raw):
        if raw[i] != 0x25:
            out.append(raw[i])
            i += 1
            continue
        if i + 2 >= len(raw) or raw[i + 1] not in _HEX_DIGITS or raw[i + 2] not in _HEX_DIGITS:
            return None
        out.append(int(raw[i + 1 : i + 3], 16))
        i += 3
    return go_bytes_to_str(bytes(out))


def _decode_2231(v: str) -> str | None:
    parts = v.split("'", 2)
    if len(parts) != 3 or parts[0].lower() not in ("us-ascii", "utf-8"):
        return None
    return _percent_hex_unescape(parts[2])


def parse_media_type(v: str) -> tuple[str, dict[str, str]]:
    """Go's mime.ParseMediaType (with RFC 2231 parameters); raises MediaTypeError on what Go rejects."""
    base = v.split(";", 1)[0]
    media_type = base.lower().strip(_GO_UNICODE_SPACE)
    main, rest = _consume_token(media_type)
    if not main:
        raise MediaTypeError("mime: no media type")
    if rest:
        if not rest.startswith("/"):
            raise MediaTypeError("mime: expected slash after first token")
        sub, rest = _consume_token(rest[1:])
        if not sub:
            raise MediaTypeError("mime: expected token after slash")
        if rest:
            raise MediaTypeError("mime: unexpected content after media subtype")
    params: dict[str, str] = {}
    continuations: dict[str, dict[str, str]] = {}
    v = v[len(base) :]
    while v:
        v = v.lstrip(_GO_UNICODE_SPACE)
        if not v:
            break
        key, value, rest = "", "", v
        if v.startswith(";"):
            after = v[1:].lstrip(_GO_UNICODE_SPACE)
            token, after = _consume_token(after)
            after = after.lstrip(_GO_UNICODE_SPACE)
            if token and after.startswith("="):
                after = after[1:].lstrip(_GO_UNICODE_SPACE)
                parsed, rest2 = _consume_value(after)
                if parsed or rest2 != after:
                    key, value, rest = token.lower(), parsed, rest2
        if not key:
            if rest.strip(_GO_UNICODE_SPACE) == ";":
                break
            raise MediaTypeError("mime: invalid media parameter")
        target = params
        if "*" in key:
            target = continuations.setdefault(key.split("*", 1)[0], {})
        if key in target:
            raise MediaTypeError("mime: duplicate parameter name")
        target[key] = value
        v = rest
    for name, pieces in continuations.items():
        if name + "*" in pieces:
            decoded = _decode_2231(pieces[name + "*"])
            if decoded is not None:
                params[name] = decoded
            continue
        joined: list[str] = []
        valid = False
        n = 0
        while True:
            simple = f"{name}*{n}"
            if simple in pieces:
                valid = True
                joined.append(pieces[simple])
            elif simple + "*" in pieces:
                valid = True
                encoded = pieces[simple + "*"]
                decoded = _decode_2231(encoded) if n == 0 else _percent_hex_unescape(encoded)
                joined.append(decoded or "")
            else:
                break
            n += 1
        if valid:
            params[name] = "".join(joined)
    return media_type, params

