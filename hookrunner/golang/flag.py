"""Go's flag package reading a flag's value: strconv.ParseInt (base 0) for an int flag, strconv.ParseBool
for a bool flag, and the error texts Go appends after `for flag -x: `."""

from __future__ import annotations

from hookrunner.golang.strconv import underscores_ok

_INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

# Go's strconv.ParseBool accepts exactly these spellings.
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class FlagValueError(ValueError):
    """A value a flag cannot take; the text is what Go appends after `for flag -x: `."""


def _digits_ok(body: str, base: int) -> bool:
    allowed = "0123456789abcdef"[:base]
    return bool(body) and all(ch in allowed for ch in body.lower())


def parse_go_int(text: str) -> int:
    """strconv.ParseInt(text, 0, 64): sign, 0x/0o/0b or leading-0 octal prefixes, Go's underscore rules."""
    body = text
    negative = False
    if body and body[0] in "+-":
        negative = body[0] == "-"
        body = body[1:]
    base = 10
    if len(body) >= 2 and body[0] == "0" and body[1].lower() in "xob":
        base = {"x": 16, "o": 8, "b": 2}[body[1].lower()]
        body = body[2:]
    elif len(body) >= 1 and body[0] == "0":
        base = 8
        body = body[1:] or "0"
    underscored = "_" in body
    if underscored and not underscores_ok(text):
        raise FlagValueError("parse error")
    body = body.replace("_", "")
    if not _digits_ok(body, base):
        raise FlagValueError("parse error")
    value = int(body, base)
    value = -value if negative else value
    if not _INT64_MIN <= value <= INT64_MAX:
        raise FlagValueError("value out of range")
    return value


def parse_go_bool(text: str) -> bool:
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise FlagValueError("parse error")
