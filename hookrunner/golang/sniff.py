"""Go's http.DetectContentType: the Content-Type Go's server gives a body the handler did not label."""

from __future__ import annotations

import functools
from collections.abc import Callable

_WS = b"\t\n\x0c\r "
_HTML = "text/html; charset=utf-8"
_TEXT = "text/plain; charset=utf-8"

_HTML_TAGS = (
    b"<!DOCTYPE HTML", b"<HTML", b"<HEAD", b"<SCRIPT", b"<IFRAME", b"<H1", b"<DIV", b"<FONT", b"<TABLE",
    b"<A", b"<STYLE", b"<TITLE", b"<B", b"<BODY", b"<BR", b"<P", b"<!--",
)  # fmt: skip


def _html(data: bytes) -> str:
    for tag in _HTML_TAGS:
        if len(data) < len(tag) + 1:
            continue
        head = bytes(b & 0xDF if 0x41 <= t <= 0x5A else b for b, t in zip(data, tag, strict=False))
        if head == tag and data[len(tag)] in b" >":
            return _HTML
    return ""


def _masked(pattern: bytes, mask: bytes, ctype: str) -> Callable[[bytes], str]:
    def match(data: bytes) -> str:
        if len(data) < len(pattern):
            return ""
        if all(d & m == p for d, m, p in zip(data, mask, pattern, strict=False)):
            return ctype
        return ""

    return match


def _exact(prefix: bytes, ctype: str) -> Callable[[bytes], str]:
    return lambda data: ctype if data.startswith(prefix) else ""


def _mp4(data: bytes) -> str:
    if len(data) < 12:
        return ""
    box = int.from_bytes(data[:4], "big")
    if len(data) < box or box % 4 != 0 or data[4:8] != b"ftyp":
        return ""
    for start in range(8, box, 4):
        if start == 12:
            continue  # the minor version, not a brand
        if data[start : start + 3] == b"mp4":
            return "video/mp4"
    return ""


def _text(data: bytes) -> str:
    for b in data:
        if b <= 0x08 or b == 0x0B or 0x0E <= b <= 0x1A or 0x1C <= b <= 0x1F:
            return ""
    return _TEXT


# Signatures that look at the data from its first byte, in Go's order (after the HTML and XML ones).
_FROM_START: tuple[Callable[[bytes], str], ...] = (
    _exact(b"%PDF-", "application/pdf"),
    _exact(b"%!PS-Adobe-", "application/postscript"),
    _masked(b"\xfe\xff\x00\x00", b"\xff\xff\x00\x00", "text/plain; charset=utf-16be"),
    _masked(b"\xff\xfe\x00\x00", b"\xff\xff\x00\x00", "text/plain; charset=utf-16le"),
    _masked(b"\xef\xbb\xbf\x00", b"\xff\xff\xff\x00", _TEXT),
    _exact(b"\x00\x00\x01\x00", "image/x-icon"),
    _exact(b"\x00\x00\x02\x00", "image/x-icon"),
    _exact(b"BM", "image/bmp"),
    _exact(b"GIF87a", "image/gif"),
    _exact(b"GIF89a", "image/gif"),
    _masked(
        b"RIFF\x00\x00\x00\x00WEBPVP",
        b"\xff\xff\xff\xff\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff",
        "image/webp",
    ),
    _exact(b"\x89PNG\x0d\x0a\x1a\x0a", "image/png"),
    _exact(b"\xff\xd8\xff", "image/jpeg"),
    _masked(b"FORM\x00\x00\x00\x00AIFF", b"\xff\xff\xff\xff\x00\x00\x00\x00\xff\xff\xff\xff", "audio/aiff"),
    _masked(b"ID3", b"\xff\xff\xff", "audio/mpeg"),
    _masked(b"OggS\x00", b"\xff\xff\xff\xff\xff", "application/ogg"),
    _masked(b"MThd\x00\x00\x00\x06", b"\xff\xff\xff\xff\xff\xff\xff\xff", "audio/midi"),
    _masked(b"RIFF\x00\x00\x00\x00AVI ", b"\xff\xff\xff\xff\x00\x00\x00\x00\xff\xff\xff\xff", "video/avi"),
    _masked(b"RIFF\x00\x00\x00\x00WAVE", b"\xff\xff\xff\xff\x00\x00\x00\x00\xff\xff\xff\xff", "audio/wave"),
    _mp4,
    _exact(b"\x1a\x45\xdf\xa3", "video/webm"),
    _masked(b"\x00" * 34 + b"LP", b"\x00" * 34 + b"\xff\xff", "application/vnd.ms-fontobject"),
    _exact(b"\x00\x01\x00\x00", "font/ttf"),
    _exact(b"OTTO", "font/otf"),
    _exact(b"ttcf", "font/collection"),
    _exact(b"wOFF", "font/woff"),
    _exact(b"wOF2", "font/woff2"),
    _exact(b"\x1f\x8b\x08", "application/x-gzip"),
    _exact(b"PK\x03\x04", "application/zip"),
    _exact(b"Rar!\x1a\x07\x00", "application/x-rar-compressed"),
    _exact(b"Rar!\x1a\x07\x01\x00", "application/x-rar-compressed"),
    _exact(b"\x00\x61\x73\x6d", "application/wasm"),
)

_XML = _masked(b"<?xml", b"\xff\xff\xff\xff\xff", "text/xml; charset=utf-8")


def detect_content_type(body: bytes) -> str:
    """Return the type Go's net/http would put on `body` (it looks at the first 512 bytes)."""
    return _detect(body[:512])


# Most answers are one of a few fixed messages ("Hook rules were not satisfied.", a response-message):
# sniffing each only once takes a pure-Python byte scan off every request.
@functools.lru_cache(maxsize=256)
def _detect(data: bytes) -> str:
    start = 0
    while start < len(data) and data[start] in _WS:
        start += 1
    trimmed = data[start:]
    found = _html(trimmed) or _XML(trimmed)
    if found:
        return found
    for signature in _FROM_START:
        found = signature(data)
        if found:
            return found
    return _text(trimmed) or "application/octet-stream"
