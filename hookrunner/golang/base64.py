"""Go's encoding/base64 StdEncoding.DecodeString: what it decodes, and where it reports corrupt input."""

from __future__ import annotations

import base64
import re

# Base64 that Go's StdEncoding and Python's decoder read alike: whole quanta, padding only at the end.
_CLEAN_BASE64 = re.compile(rb"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
_BASE64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_BASE64_VALUES = {byte: i for i, byte in enumerate(_BASE64_ALPHABET)}


def go_base64_decode(data: bytes) -> tuple[bytes, int | None]:
    """Go's base64.StdEncoding.DecodeString: \\r and \\n are skipped anywhere; on corrupt input, the bytes of
    the whole quanta before the error and the offset Go reports (None when there is no error)."""
    stripped = data.replace(b"\r", b"").replace(b"\n", b"")
    if _CLEAN_BASE64.fullmatch(stripped):
        return base64.b64decode(stripped), None
    out = bytearray()
    si, end = 0, len(data)
    while si < end:
        quantum = [0, 0, 0, 0]
        size, j, error = 4, 0, None
        while j < 4:
            if si == end:
                if j == 0:
                    return bytes(out), None
                return bytes(out), si - j
            byte = data[si]
            si += 1
            if byte in _BASE64_VALUES:
                quantum[j] = _BASE64_VALUES[byte]
                j += 1
                continue
            if byte in b"\r\n":
                continue
            if byte != ord("=") or j < 2:
                return bytes(out), si - 1
            if j == 2:  # "==" is expected; line breaks may sit between the two
                while si < end and data[si] in b"\r\n":
                    si += 1
                if si == end:
                    return bytes(out), end
                if data[si] != ord("="):
                    return bytes(out), si - 1
                si += 1
            while si < end and data[si] in b"\r\n":
                si += 1
            if si < end:
                error = si  # data after the padding; the padded quantum still counts
            size = j
            break
        value = quantum[0] << 18 | quantum[1] << 12 | quantum[2] << 6 | quantum[3]
        out += value.to_bytes(3, "big")[: size - 1]
        if error is not None:
            return bytes(out), error
    return bytes(out), None
