"""Go's strconv where hookrunner must print or read exactly as Go does: Quote and literal underscores."""

from __future__ import annotations

import unicodedata

_CONTROL_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def is_print(ch: str) -> bool:
    """unicode.IsPrint: letters, marks, numbers, punctuation, symbols and the ASCII space."""
    return ch == " " or unicodedata.category(ch)[0] in "LMNPS"


def quote_with(text: str, quote: str, ascii_only: bool = False) -> str:
    """strconv's quoting with `quote` as the delimiter (`"` for strings, `'` for runes).

    Strings keep bytes that were not UTF-8 as surrogate escapes (U+DC80..U+DCFF); Go prints those bytes
    as `\\xNN`. Any other lone surrogate cannot come from Go text and prints as U+FFFD would.
    """
    out = [quote]
    for ch in text:
        code = ord(ch)
        if ch == quote or ch == "\\":
            out.append("\\" + ch)
        elif 0xD800 <= code <= 0xDFFF:
            out.append(f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "\\ufffd")
        elif (code < 0x80 or not ascii_only) and is_print(ch):
            out.append(ch)
        elif ch in _CONTROL_ESCAPES:
            out.append(_CONTROL_ESCAPES[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append(quote)
    return "".join(out)


def quote(text: str, ascii_only: bool = False) -> str:
    """strconv.Quote (QuoteToASCII with `ascii_only`), as `%q` prints a string."""
    return quote_with(text, '"', ascii_only)


def quote_rune(code: int, ascii_only: bool = False) -> str:
    """strconv.QuoteRune: an invalid code point is quoted as U+FFFD."""
    if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        code = 0xFFFD
    return quote_with(chr(code), "'", ascii_only)


def underscores_ok(text: str) -> bool:
    """strconv's underscoreOK for base-0 literals: `_` only between digits or right after a base prefix."""
    saw = "^"
    if text[:1] in ("+", "-"):
        text = text[1:]
    i = 0
    hex_digits = False
    if len(text) >= 2 and text[0] == "0" and text[1].lower() in "box":
        i, saw, hex_digits = 2, "0", text[1].lower() == "x"
    for ch in text[i:]:
        if "0" <= ch <= "9" or (hex_digits and "a" <= ch.lower() <= "f"):
            saw = "0"
        elif ch == "_":
            if saw != "0":
                return False
            saw = "_"
        else:
            if saw == "_":
                return False
            saw = "!"
    return saw != "_"
