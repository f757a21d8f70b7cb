"""Go's encoding/json: decoding as a json.Decoder with UseNumber() reads one value, and json.Marshal.

Go strings are bytes; here they are `str`, with bytes that are not UTF-8 kept as surrogate escapes
(`\\udc80`-`\\udcff`, Python's `surrogateescape`), so they survive the trip to a command's argv.
"""

from __future__ import annotations

import codecs
import json
import math
import re
from typing import Any

from hookrunner.errors import HookrunnerError, ValueRetrievalError
from hookrunner.golang.strconv import quote as go_quote

__all__ = [
    "GoJSONError",
    "JSONNumber",
    "NilMap",
    "decode_json_map",
    "go_float",
    "go_json_dumps",
    "loads_json",
]


class JSONNumber(str):
    """A JSON number kept as the literal text it was sent as (Go's json.Number)."""

    __slots__ = ()


class NilMap(dict[str, Any]):
    """Go's typed nil map: empty for lookups, but `null` when marshalled or rendered.

    webhook stores one when a body is not parsed, when a multipart JSON file fails to decode, and when a
    `parse-parameters-as-json` value is the JSON `null`. A JSON `null` inside a payload is Python None
    instead (Go's untyped nil), which renders as `<nil>`.
    """

    __slots__ = ()


class GoJSONError(HookrunnerError):
    """JSON that Go's decoder rejects; the message is Go's error text (`unexpected EOF`, ...)."""


# --- Go-compatible JSON decoding (encoding/json with UseNumber, as a json.Decoder reads one value) ---

_WS = b" \t\n\r"


def _go_utf8_replace(exc: UnicodeError) -> tuple[str, int]:
    # Go's utf8.DecodeRune gives up one byte at a time: every bad byte becomes its own U+FFFD.
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    return "\ufffd", exc.start + 1


codecs.register_error("hookrunner-go-utf8", _go_utf8_replace)


def _decode_utf8_go(raw: bytes) -> str:
    return raw.decode("utf-8", "hookrunner-go-utf8")


def _quote_char(c: int) -> str:
    # encoding/json's quoteChar: the byte as a rune, Go-quoted, in single quotes.
    if c == 0x27:
        return "'\\''"
    if c == 0x22:
        return "'\"'"
    return "'" + go_quote(chr(c))[1:-1] + "'"


_HEX = b"0123456789abcdefABCDEF"
_SIMPLE_ESCAPES = {
    0x22: '"', 0x5C: "\\", 0x2F: "/", 0x62: "\b", 0x66: "\f", 0x6E: "\n", 0x72: "\r", 0x74: "\t",
}
_MAX_DEPTH = 10000  # encoding/json's maxNestingDepth


class _Decoder:
    """A one-value JSON reader that accepts and rejects what Go's does, with Go's error messages."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _syntax(self, c: int, context: str) -> GoJSONError:
        return GoJSONError(f"invalid character {_quote_char(c)} {context}")

    def _peek_nonspace(self) -> int:
        data, pos, n = self.data, self.pos, len(self.data)
        while pos < n and data[pos] in _WS:
            pos += 1
        self.pos = pos
        if pos >= n:
            raise GoJSONError("unexpected EOF")
        return data[pos]

    def decode(self) -> Any:
        data = self.data
        pos = 0
        while pos < len(data) and data[pos] in _WS:
            pos += 1
        if pos >= len(data):
            raise GoJSONError("EOF")
        self.pos = pos
        # An explicit stack instead of recursion: Go allows 10000 levels of nesting.
        stack: list[tuple[Any, str | None]] = []
        while True:
            c = self._peek_nonspace()
            value: Any
            if c == 0x7B:  # {
                if len(stack) >= _MAX_DEPTH:
                    raise self._syntax(c, "exceeded max depth")
                self.pos += 1
                c = self._peek_nonspace()
                if c == 0x7D:
                    self.pos += 1
                    value = {}
                else:
                    if c != 0x22:
                        raise self._syntax(c, "looking for beginning of object key string")
                    key = self._read_key()
                    stack.append(({}, key))
                    continue
            elif c == 0x5B:  # [
                if len(stack) >= _MAX_DEPTH:
                    raise self._syntax(c, "exceeded max depth")
                self.pos += 1
                c = self._peek_nonspace()
                if c == 0x5D:
                    self.pos += 1
                    value = []
                else:
                    stack.append(([], None))
                    continue
            else:
                value = self._read_scalar(c)
            # Attach the finished value to its parents, closing every container that ends here.
            while True:
                if not stack:
                    return value
                container, parent_key = stack[-1]
                if parent_key is not None:
                    container[parent_key] = value
                    c = self._peek_nonspace()
                    if c == 0x2C:
                        self.pos += 1
                        c = self._peek_nonspace()
                        if c != 0x22:
                            raise self._syntax(c, "looking for beginning of object key string")
                        stack[-1] = (container, self._read_key())
                        break
                    if c != 0x7D:
                        raise self._syntax(c, "after object key:value pair")
                else:
                    container.append(value)
                    c = self._peek_nonspace()
                    if c == 0x2C:
                        self.pos += 1
                        break
                    if c != 0x5D:
                        raise self._syntax(c, "after array element")
                self.pos += 1
                stack.pop()
                value = container

    def _read_key(self) -> str:
        key = self._read_string()
        c = self._peek_nonspace()
        if c != 0x3A:
            raise self._syntax(c, "after object key")
        self.pos += 1
        return key

    def _read_scalar(self, c: int) -> Any:
        if c == 0x22:
            return self._read_string()
        if c == 0x2D or 0x30 <= c <= 0x39:
            return self._read_number()
        for word, value in ((b"true", True), (b"false", False), (b"null", None)):
            if c == word[0]:
                self._read_literal(word)
                return value
        raise self._syntax(c, "looking for beginning of value")

    def _read_literal(self, word: bytes) -> None:
        data, n = self.data, len(self.data)
        for i in range(1, len(word)):
            p = self.pos + i
            if p >= n:
                raise GoJSONError("unexpected EOF")
            if data[p] != word[i]:
                literal = word.decode()
                raise self._syntax(data[p], f"in literal {literal} (expecting {_quote_char(word[i])})")
        self.pos += len(word)

    def _read_number(self) -> JSONNumber:
        data, n, start = self.data, len(self.data), self.pos
        p = start

        def at(i: int) -> int:
            # -1 stands for the end of input: a number may end there (the value is then complete).
            return data[i] if i < n else -1

        if at(p) == 0x2D:
            p += 1
            c = at(p)
            if c == -1:
                raise GoJSONError("unexpected EOF")
            if not 0x30 <= c <= 0x39:
                raise self._syntax(c, "in numeric literal")
        if at(p) == 0x30:
            p += 1
        else:
            while 0x30 <= at(p) <= 0x39:
                p += 1
        if at(p) == 0x2E:
            p += 1
            c = at(p)
            if c == -1:
                raise GoJSONError("unexpected EOF")
            if not 0x30 <= c <= 0x39:
                raise self._syntax(c, "after decimal point in numeric literal")
            while 0x30 <= at(p) <= 0x39:
                p += 1
        if at(p) in (0x65, 0x45):
            p += 1
            if at(p) in (0x2B, 0x2D):
                p += 1
            c = at(p)
            if c == -1:
                raise GoJSONError("unexpected EOF")
            if not 0x30 <= c <= 0x39:
                raise self._syntax(c, "in exponent of numeric literal")
            while 0x30 <= at(p) <= 0x39:
                p += 1
        self.pos = p
        return _number(data[start:p].decode("ascii"))

    def _read_string(self) -> str:
        data, n = self.data, len(self.data)
        p = self.pos + 1
        parts: list[str] = []
        chunk = p
        while True:
            if p >= n:
                raise GoJSONError("unexpected EOF")
            c = data[p]
            if c == 0x22:
                parts.append(_decode_utf8_go(data[chunk:p]))
                self.pos = p + 1
                return "".join(parts)
            if c < 0x20:
                raise self._syntax(c, "in string literal")
            if c != 0x5C:
                p += 1
                continue
            parts.append(_decode_utf8_go(data[chunk:p]))
            p += 1
            if p >= n:
                raise GoJSONError("unexpected EOF")
            c = data[p]
            if c in _SIMPLE_ESCAPES:
                parts.append(_SIMPLE_ESCAPES[c])
                p += 1
            elif c == 0x75:
                code = self._read_hex4(p + 1)
                p += 5
                if 0xD800 <= code <= 0xDBFF and data[p : p + 2] == b"\\u":
                    # A high surrogate pairs only with a low one; otherwise it alone becomes U+FFFD.
                    low = self._read_hex4(p + 2)
                    if 0xDC00 <= low <= 0xDFFF:
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                        p += 6
                    else:
                        code = 0xFFFD
                elif 0xD800 <= code <= 0xDFFF:
                    code = 0xFFFD
                parts.append(chr(code))
            else:
                raise self._syntax(c, "in string escape code")
            chunk = p

    def _read_hex4(self, p: int) -> int:
        data, n = self.data, len(self.data)
        for i in range(p, p + 4):
            if i >= n:
                raise GoJSONError("unexpected EOF")
            if data[i] not in _HEX:
                raise self._syntax(data[i], "in \\u hexadecimal character escape")
        return int(data[p : p + 4], 16)


def _as_bytes(data: str | bytes) -> bytes:
    if isinstance(data, bytes):
        return data
    return data.encode("utf-8", "surrogateescape")


class _NotCertain(ValueError):
    """The C decoder met something (NaN, Infinity) where Go's answer differs: use the exact decoder."""


def _refuse_constant(name: str) -> Any:
    raise _NotCertain(name)


#: Numbers of at most this many characters are made once and shared (_number).
SHARED_NUMBER_CHARS = 3
_shared_numbers: dict[str, JSONNumber] = {}


# The C decoder, with numbers kept as their literal text: a parse_int/parse_float hook is handed the
# number exactly as written, so no int() or float() conversion (and no 4300-digit limit) happens.
def _number(text: str) -> JSONNumber:
    """The JSONNumber for `text`. A short one is shared: it is immutable, and a JSONNumber costs some 90
    bytes (a str subclass keeps its characters apart), so a body of `0,0,0,...` took some 60 times its
    size in memory, the most of any JSON value, and as many objects to free once answered (docs/limits.md,
    robustness). Valid literals of three characters or fewer are a few thousand at most."""
    # A Python function, not the class itself: the C decoder then runs bytecode for each number, where the
    # interpreter can hand the GIL to another thread (a decode on a parser thread does not stall the
    # server's event loop for its whole length).
    if len(text) > SHARED_NUMBER_CHARS:
        return JSONNumber(text)
    number = _shared_numbers.get(text)
    if number is None:
        number = _shared_numbers.setdefault(text, JSONNumber(text))
    return number


_C_DECODER = json.JSONDecoder(parse_int=_number, parse_float=_number, parse_constant=_refuse_constant)
# A \uD800-\uDFFF escape: Python keeps a lone surrogate, Go turns it into U+FFFD. (It also matches an
# escaped backslash followed by `uD8..`, which only costs a fall-back.)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_UNCERTAIN = object()


_LEADING_SPACE = re.compile(r"[ \t\r\n]*")


def _loads_fast(data: bytes) -> Any:
    """The first JSON value via the C `json` module, or _UNCERTAIN when Go's decoder might differ.

    It answers only where both decoders build the same value: a first value in valid UTF-8, with no
    NaN/Infinity and no surrogate escapes. An object, array or string ends unambiguously, so what follows
    it (which Go's decoder never reads) may be anything; a number or literal must be the whole body.
    Everything else (errors, bad UTF-8 in the value, nesting deeper than Python's recursion limit, a BOM)
    goes to the exact decoder, which owns Go's messages and repairs.
    """
    text = data.decode("utf-8", "surrogateescape")  # bad bytes become lone surrogates, checked below
    start = _LEADING_SPACE.match(text).end()  # type: ignore[union-attr]
    try:
        if text[start : start + 1] in ("{", "[", '"'):
            value, end = _C_DECODER.raw_decode(text, start)
        else:
            value, end = _C_DECODER.decode(text), len(text)
    except (ValueError, RecursionError):  # JSONDecodeError and _NotCertain are ValueErrors
        return _UNCERTAIN
    try:
        raw = text[:end].encode("utf-8")  # strict: Go would repair bad bytes one by one
    except UnicodeEncodeError:
        return _UNCERTAIN
    if b"\\u" in raw and _SURROGATE_ESCAPE.search(raw):
        return _UNCERTAIN
    return value


def loads_json(data: str | bytes) -> Any:
    """Decode the first JSON value in `data` as Go's json.Decoder with UseNumber() does.

    Numbers become JSONNumber; bad UTF-8 becomes U+FFFD; anything after the first value is ignored.
    Raises GoJSONError with Go's message (`EOF` for an empty body, `unexpected EOF` for a cut one).
    """
    raw = _as_bytes(data)
    # The C decoder is ~10x faster than the exact one; it is used only where it is certain to agree.
    value = _loads_fast(raw)
    if value is not _UNCERTAIN:
        return value
    return _Decoder(raw).decode()


_GO_KIND = {str: "string", JSONNumber: "number", bool: "bool", list: "array"}


def decode_json_map(data: str | bytes) -> dict[str, Any]:
    """Decode into Go's map[string]interface{}: an object, or NilMap for `null`; any other value fails."""
    value = loads_json(data)
    if value is None:
        return NilMap()
    if not isinstance(value, dict):
        kind = _GO_KIND.get(type(value), "value")
        raise GoJSONError(f"json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}")
    return value


# --- Go-compatible JSON encoding (encoding/json.Marshal as built with Go 1.19, as the reference is) ---


def _go_bytes(s: str) -> bytes:
    try:
        return s.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogatepass")


def _encode_string(s: str, out: list[str]) -> None:
    out.append('"')
    for ch in s:
        o = ord(ch)
        if o < 0x80:
            if ch in '<>&"\\' or o < 0x20:
                out.append(_ASCII_ESCAPES.get(ch) or f"\\u00{o:02x}")
            else:
                out.append(ch)
        elif 0xD800 <= o <= 0xDFFF:
            # A byte that was not UTF-8 (or a lone surrogate, three such bytes in Go): Go writes \ufffd.
            out.append("\\ufffd" if 0xDC80 <= o <= 0xDCFF else "\\ufffd" * 3)
        elif o == 0x2028 or o == 0x2029:
            out.append(f"\\u{o:04x}")
        else:
            out.append(ch)
    out.append('"')


# Go 1.19 writes \b and \f as \u0008 and \u000c; only these get short escapes.
_ASCII_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _shortest_digits(f: float) -> tuple[str, int]:
    """The shortest round-trip significant digits of a positive float and the exponent of the first."""
    mantissa, _, exp_text = f"{f!r}".partition("e")
    intpart, _, frac = mantissa.partition(".")
    digits = (intpart + frac).lstrip("0")
    # Position of the first significant digit relative to the decimal point.
    exp10 = int(exp_text or 0) + len(intpart) - 1 - (len(intpart + frac) - len((intpart + frac).lstrip("0")))
    return digits.rstrip("0") or "0", exp10


def go_float(f: float, verb: str) -> str:
    """A float64 as Go formats it: `json` for json.Marshal, `v` for fmt's %v."""
    if math.isnan(f) or math.isinf(f):
        if verb == "json":
            raise ValueRetrievalError(f"json: unsupported value: {go_float(f, 'v')}")
        return "NaN" if math.isnan(f) else ("+Inf" if f > 0 else "-Inf")
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 and verb == "v" else "0"
    # repr() gives the shortest digits that round-trip, as Go's 'g' with precision -1 does.
    sig, exp10 = _shortest_digits(abs(f))
    neg = "-" if f < 0 else ""
    if verb == "json":
        use_exp = abs(f) < 1e-6 or abs(f) >= 1e21
    else:
        # strconv's shortest %g switches to an exponent from 1e+06 on (fmt.Println(1e6) is 1e+06).
        use_exp = exp10 < -4 or exp10 >= 6
    if use_exp:
        mantissa = sig[0] + ("." + sig[1:] if len(sig) > 1 else "")
        sign = "-" if exp10 < 0 else "+"
        # json.Marshal trims e-07 to e-7; fmt keeps two exponent digits.
        width = 1 if verb == "json" and exp10 < 0 else 2
        return f"{neg}{mantissa}e{sign}{abs(exp10):0{width}d}"
    if exp10 >= 0:
        whole = sig[: exp10 + 1].ljust(exp10 + 1, "0")
        frac = sig[exp10 + 1 :]
        return f"{neg}{whole}" + (f".{frac}" if frac else "")
    return f"{neg}0.{'0' * (-exp10 - 1)}{sig}"


def _encode(value: Any, out: list[str]) -> None:
    # An explicit stack instead of recursion: Go encodes payloads nested deeper than Python's recursion
    # limit (JSON up to 10000 levels, XML without a limit). Entries are (is_literal, item).
    stack: list[tuple[bool, Any]] = [(False, value)]
    while stack:
        literal, value = stack.pop()
        if literal:
            out.append(value)
        else:
            _encode_one(value, out, stack)


def _encode_one(value: Any, out: list[str], stack: list[tuple[bool, Any]]) -> None:
    """Encode a scalar into `out`, or open a map/list and push its members (in reverse) onto `stack`."""
    if value is None or isinstance(value, NilMap):
        out.append("null")
    elif isinstance(value, JSONNumber):
        out.append(str.__str__(value) or "0")
    elif isinstance(value, str):
        _encode_string(value, out)
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(go_float(value, "json"))
    elif isinstance(value, dict):
        out.append("{")
        stack.append((True, "}"))
        keys = sorted(value, key=lambda k: _go_bytes(str(k)))
        for i in range(len(keys) - 1, -1, -1):
            key_text: list[str] = [","] if i else []
            _encode_string(str(keys[i]), key_text)
            key_text.append(":")
            stack.append((False, value[keys[i]]))
            stack.append((True, "".join(key_text)))
    elif isinstance(value, list | tuple):
        out.append("[")
        stack.append((True, "]"))
        for i in range(len(value) - 1, -1, -1):
            stack.append((False, value[i]))
            if i:
                stack.append((True, ","))
    else:
        _encode_string(str(value), out)


def go_json_dumps(value: Any) -> str:
    """Go's json.Marshal: compact, keys sorted bytewise, `<>&` and U+2028/U+2029 escaped."""
    out: list[str] = []
    _encode(value, out)
    return "".join(out)
