"""Go string literals and runes as the lexer, the parser's messages and fmt see them: strconv.Unquote
of "interpreted" and `raw` strings and of one character, CanBackquote, %#U and UTF-8 length."""

from __future__ import annotations

from hookrunner.golang.strconv import is_print as _is_print


def _can_backquote(s: str) -> bool:
    for ch in s:
        if ch == "`" or ch == "\ufeff" or (ch < " " and ch != "\t") or ch == "\x7f":
            return False
        if 0xDC80 <= ord(ch) <= 0xDCFF:
            return False
    return True


def _rune_desc(ch: str) -> str:
    # fmt's %#U: U+0023 '#'
    code = ord(ch)
    if _is_print(ch):
        return f"U+{code:04X} '{ch}'"
    return f"U+{code:04X}"


def _utf8_len(s: str) -> int:
    return len(s.encode("utf-8", "surrogateescape"))


class _SyntaxError(Exception):
    """strconv's ErrSyntax."""

    def __str__(self) -> str:
        return "invalid syntax"


_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}


def _unquote_char(s: str, i: int, quote: str) -> tuple[str, int]:
    """One character of a Go literal starting at s[i]: (character, next index). Raises _SyntaxError."""
    ch = s[i]
    if ch == quote and quote in "'\"":
        raise _SyntaxError()
    if ch != "\\":
        return ch, i + 1
    if i + 1 >= len(s):
        raise _SyntaxError()
    c = s[i + 1]
    if c in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[c], i + 2
    if c in "xuU":
        n = {"x": 2, "u": 4, "U": 8}[c]
        digits = s[i + 2 : i + 2 + n]
        if len(digits) != n or any(d not in "0123456789abcdefABCDEF" for d in digits):
            raise _SyntaxError()
        value = int(digits, 16)
        if c == "x":
            # A \x escape is a byte; in a string it may build up UTF-8, which Go keeps as bytes.
            return (chr(value) if value < 0x80 else chr(0xDC00 + value)), i + 2 + n
        if value > 0x10FFFF or 0xD800 <= value <= 0xDFFF:
            raise _SyntaxError()
        return chr(value), i + 2 + n
    if c in "01234567":
        digits = s[i + 1 : i + 4]
        if len(digits) != 3 or any(d not in "01234567" for d in digits):
            raise _SyntaxError()
        value = int(digits, 8)
        if value > 255:
            raise _SyntaxError()
        return (chr(value) if value < 0x80 else chr(0xDC00 + value)), i + 4
    if c == quote and quote in "'\"":
        return c, i + 2
    raise _SyntaxError()


def _fix_escaped_bytes(s: str) -> str:
    # Byte escapes (\xNN, \NNN) above 0x7f were kept as surrogates; runs forming valid UTF-8 become text.
    if not any(0xDC80 <= ord(ch) <= 0xDCFF for ch in s):
        return s
    return s.encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape")


def _go_unquote(text: str) -> str:
    """strconv.Unquote for "interpreted" and `raw` strings."""
    if len(text) < 2 or text[0] != text[-1]:
        raise _SyntaxError()
    quote, body = text[0], text[1:-1]
    if quote == "`":
        if "`" in body:
            raise _SyntaxError()
        return body.replace("\r", "")
    if quote != '"':
        raise _SyntaxError()
    if "\n" in body:
        raise _SyntaxError()
    out: list[str] = []
    i = 0
    while i < len(body):
        ch, i = _unquote_char(body, i, '"')
        out.append(ch)
    return _fix_escaped_bytes("".join(out))
