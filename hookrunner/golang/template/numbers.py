"""Number literals of templates, as Go's parse.newNumber reads them: strconv.ParseInt/ParseUint/ParseFloat
with base prefixes and underscores, character constants, and complex numbers as fmt.Sscan reads them."""

from __future__ import annotations

import math

from hookrunner.golang.strconv import quote as go_quote
from hookrunner.golang.strconv import underscores_ok as _underscores_ok
from hookrunner.golang.template.lex import _Tok
from hookrunner.golang.template.literals import _SyntaxError, _unquote_char
from hookrunner.golang.template.nodes import _NumberNode, _OwnerTree


def _parse_go_int(text: str, signed: bool) -> int | None:
    """strconv.ParseInt/ParseUint with base 0 and 64 bits; None when Go would fail."""
    body = text
    neg = False
    if body[:1] in "+-":
        if not signed:
            return None
        neg = body[0] == "-"
        body = body[1:]
    if not body:
        return None
    base = 10
    low = body.lower()
    if low.startswith("0x"):
        base, body = 16, body[2:]
    elif low.startswith("0o"):
        base, body = 8, body[2:]
    elif low.startswith("0b"):
        base, body = 2, body[2:]
    elif len(body) > 1 and body[0] == "0":
        base, body = 8, body[1:]
    if not _underscores_ok(text):
        return None
    digits = body.replace("_", "")
    if not digits:
        return None
    try:
        value = int(digits, base)
    except ValueError:
        return None
    if neg:
        value = -value
    if signed and not (-(2**63) <= value < 2**63):
        return None
    if not signed and value >= 2**64:
        return None
    return value


def _parse_go_float(text: str) -> float | None:
    """strconv.ParseFloat(text, 64) for the forms the lexer lets through; None when Go would fail."""
    s = text
    if "_" in s:
        if not _underscores_ok(s):
            return None
        s = s.replace("_", "")
    low = s.lower()
    try:
        if "0x" in low[:3]:
            sign = -1.0 if s.startswith("-") else 1.0
            if "p" not in low:
                return None
            return sign * float.fromhex(low.lstrip("+-"))
        if low.lstrip("+-")[:2] in ("0o", "0b"):
            return None
        if any(c not in "0123456789.eE+-" for c in s):
            return None
        value = float(s)
    except (ValueError, OverflowError):
        return None
    if math.isinf(value):
        return None  # Go reports a range error
    return value


def _new_number(tree: _OwnerTree, pos: int, text: str, typ: int) -> _NumberNode:
    n = _NumberNode(tree, pos, text)
    if typ == _Tok.CHAR_CONSTANT:
        try:
            ch, nxt = _unquote_char(text, 1, "'")
        except (_SyntaxError, IndexError):
            raise _NumberError("invalid syntax") from None
        if text[nxt:] != "'":
            raise _NumberError(f"malformed character constant: {text}")
        code = ord(ch) if not (0xDC80 <= ord(ch) <= 0xDCFF) else ord(ch) - 0xDC00
        n.int64 = n.uint64 = code
        n.float64 = float(code)
        n.is_int = n.is_uint = n.is_float = True
        return n
    if typ == _Tok.COMPLEX:
        n.complex = _parse_go_complex(text)
        n.is_complex = True
        _simplify_complex(n)
        return n
    if text.endswith("i"):
        f = _parse_go_float(text[:-1])
        if f is not None:
            n.is_complex = True
            n.complex = complex(0, f)
            _simplify_complex(n)
            return n
    u = _parse_go_int(text, False)
    if u is not None:
        n.is_uint, n.uint64 = True, u
    i = _parse_go_int(text, True)
    if i is not None:
        n.is_int, n.int64 = True, i
        if i == 0:
            n.is_uint, n.uint64 = True, 0
    if n.is_int:
        n.is_float, n.float64 = True, float(n.int64)
    elif n.is_uint:
        n.is_float, n.float64 = True, float(n.uint64)
    else:
        f = _parse_go_float(text)
        if f is not None:
            if not any(c in text for c in ".eEpP"):
                raise _NumberError(f"integer overflow: {go_quote(text)}")
            n.is_float, n.float64 = True, f
            if f.is_integer() and -(2**63) <= f < 2**63:
                n.is_int, n.int64 = True, int(f)
            if f.is_integer() and 0 <= f < 2**64:
                n.is_uint, n.uint64 = True, int(f)
    if not (n.is_int or n.is_uint or n.is_float):
        raise _NumberError(f"illegal number syntax: {go_quote(text)}")
    return n


def _parse_go_complex(text: str) -> complex:
    """fmt.Sscan of a complex literal such as 1+2i: a float token, a sign, a float token, then i."""
    pos = 0

    def accept(chars: str) -> bool:
        nonlocal pos
        if pos < len(text) and text[pos] in chars:
            pos += 1
            return True
        return False

    def float_token() -> str:
        # fmt's scanner takes the longest run that looks like a float, without checking it.
        start = pos
        if accept("nN") and accept("aA") and accept("nN"):
            return text[start:pos]
        accept("+-")
        if accept("iI") and accept("nN") and accept("fF"):
            return text[start:pos]
        digits, exp = "0123456789_", "eEpP"
        if accept("0") and accept("xX"):
            digits, exp = "0123456789aAbBcCdDeEfF_", "pP"
        while accept(digits):
            pass
        if accept("."):
            while accept(digits):
                pass
        if accept(exp):
            accept("+-")
            while accept("0123456789_"):
                pass
        return text[start:pos]

    real = float_token()
    sign_at = pos
    if not accept("+-"):
        raise _NumberError("syntax error scanning complex number")
    imag = text[sign_at] + float_token()
    if not accept("i"):
        raise _NumberError("syntax error scanning complex number")
    parts = []
    for token in (real, imag):
        value = _parse_go_float(token)
        if value is None:
            try:
                out_of_range = math.isinf(float(token.replace("_", "")))
            except ValueError:
                out_of_range = False
            reason = "value out of range" if out_of_range else "invalid syntax"
            raise _NumberError(f"strconv.ParseFloat: parsing {go_quote(token)}: {reason}")
        parts.append(value)
    return complex(parts[0], parts[1])


def _simplify_complex(n: _NumberNode) -> None:
    n.is_float = n.complex.imag == 0
    if n.is_float:
        n.float64 = n.complex.real
        f = n.float64
        n.is_int = f.is_integer() and -(2**63) <= f < 2**63
        if n.is_int:
            n.int64 = int(f)
        n.is_uint = f.is_integer() and 0 <= f < 2**64
        if n.is_uint:
            n.uint64 = int(f)


class _NumberError(Exception):
    pass
