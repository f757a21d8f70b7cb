"""The incoming request as the rules see it, and webhook's body parsers (JSON, form, XML, multipart)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hookrunner.errors import PayloadParseError


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


def canonical_header_key(name: str) -> str:
    """Go's textproto.CanonicalMIMEHeaderKey: `x-hub-signature` -> `X-Hub-Signature`.

    A name holding any character outside the RFC 7230 token set (a space, a colon, non-ASCII) is
    returned unchanged, as Go does.
    """
    if not all(c in _TOKEN_CHARS for c in name):
        return name
    out = []
    upper = True
    for c in name:
        out.append(c.upper() if upper else c.lower())
        upper = c == "-"
    return "".join(out)


def _go_bytes_to_str(raw: bytes) -> str:
    # A Go string holds bytes; bytes that are not UTF-8 survive as surrogate escapes (see params.py).
    return raw.decode("utf-8", "surrogateescape")


# --- JSON ---

# unicode.IsSpace on a single byte taken as a rune: this is how webhook spots a top-level array.
_GO_SPACE_BYTES = frozenset(b"\t\n\v\f\r \x85\xa0")


def parse_json_payload(body: bytes) -> dict[str, Any] | None:
    """webhook's ParseJSONPayload: an object, or `{"root": [...]}` when the body is an array.

    A top-level scalar fails (`json: cannot unmarshal string into Go value of type ...`), while `null`
    succeeds and leaves no payload (None), as decoding `null` into a Go map does. Only the first JSON
    value is read; anything after it is ignored.
    """
    # Imported here: params imports this module for Request and canonical_header_key.
    from hookrunner.params import GoJSONError, NilMap, decode_json_map, loads_json

    first = next((b for b in body if b not in _GO_SPACE_BYTES), None)
    if first == 0x5B:
        try:
            value = loads_json(body)
        except GoJSONError as exc:
            raise PayloadParseError(f"error parsing JSON array payload {exc}") from exc
        return {"root": value}
    try:
        payload = decode_json_map(body)
    except GoJSONError as exc:
        raise PayloadParseError(f"error parsing JSON payload {exc}") from exc
    # Go decodes `null` into a nil map: no payload at all.
    return None if isinstance(payload, NilMap) else payload


# --- URL-encoded forms and queries (Go's net/url.ParseQuery) ---

_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")


class _EscapeError(Exception):
    def __init__(self, fragment: bytes) -> None:
        from hookrunner.params import go_quote

        super().__init__(f"invalid URL escape {go_quote(_go_bytes_to_str(fragment))}")


def _query_unescape(raw: bytes) -> str:
    if b"%" not in raw and b"+" not in raw:
        return _go_bytes_to_str(raw)
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
    return _go_bytes_to_str(bytes(out))


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


def parse_form_payload(body: bytes) -> dict[str, Any]:
    """webhook's ParseFormPayload: the first value of each key; any error Go reports drops the payload."""
    values, error = go_parse_query(body)
    if error is not None:
        raise PayloadParseError(f"error parsing form payload {error}")
    return dict(values)


# --- XML (clbanning/mxj v2.7.0 NewMapXmlReader over Go's encoding/xml, as the reference is built) ---
#
# A small tokenizer that accepts and rejects what Go's strict xml.Decoder does, with its error texts.
# Like Go it knows only the five predefined entities and character references: a DOCTYPE is skipped,
# entities it declares are never expanded, so entity-expansion attacks have nothing to work with.

_XML_ENTITIES = {"lt": "<", "gt": ">", "amp": "&", "apos": "'", "quot": '"'}
_XML_SPACE = b" \r\n\t"
# mxj trims these around character data (\b cannot occur: Go rejects it as an illegal character).
_MXJ_TRIM = "\t\r\b\n "


class _XMLSyntaxError(Exception):
    """Go's xml.SyntaxError, or one of its plain errors when `line` is None."""

    def __init__(self, msg: str, line: int | None) -> None:
        super().__init__(msg)
        self.msg = msg
        self.line = line

    def __str__(self) -> str:
        if self.line is None:
            return self.msg
        return f"XML syntax error on line {self.line}: {self.msg}"


class _XMLEOF(Exception):
    """The input ended cleanly between tokens (Go's io.EOF)."""


def _is_name_byte(c: int) -> bool:
    return (
        0x41 <= c <= 0x5A or 0x61 <= c <= 0x7A or 0x30 <= c <= 0x39 or c in b"_:.-" or c >= 0x80
    )


def _is_xml_name(name: str) -> bool:
    if not name or "\udc80" <= name[0] <= "\udcff":
        return False
    first = name[0]
    if not (first.isalpha() or first in "_:"):
        return False
    return all(ch.isalnum() or ch in "_:.-\u00b7" or ch.isidentifier() for ch in name[1:])


def _in_xml_char_range(o: int) -> bool:
    return (
        o in (0x09, 0x0A, 0x0D)
        or 0x20 <= o <= 0xD7FF
        or 0xE000 <= o <= 0xFFFD
        or 0x10000 <= o <= 0x10FFFF
    )


class _XMLTokenizer:
    """Go's xml.Decoder.Token() in strict mode, over a byte string."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.line = 1
        self.stack: list[str] = []  # open element names, as written (prefix:local)

    # Byte access, keeping Go's line count (it counts the newlines consumed so far).
    def _err(self, msg: str) -> _XMLSyntaxError:
        return _XMLSyntaxError(msg, self.line)

    def _getc(self) -> int | None:
        if self.pos >= len(self.data):
            return None
        c = self.data[self.pos]
        self.pos += 1
        if c == 0x0A:
            self.line += 1
        return c

    def _mustgetc(self) -> int:
        c = self._getc()
        if c is None:
            raise self._err("unexpected EOF")
        return c

    def _ungetc(self) -> None:
        self.pos -= 1
        if self.data[self.pos] == 0x0A:
            self.line -= 1

    def _space(self) -> None:
        while self.pos < len(self.data) and self.data[self.pos] in _XML_SPACE:
            self._getc()

    def _read_name(self) -> bytes | None:
        start = self.pos
        c = self._mustgetc()
        if not _is_name_byte(c):
            self._ungetc()
            return None
        while True:
            c = self._mustgetc()
            if not _is_name_byte(c):
                self._ungetc()
                break
        return self.data[start : self.pos]

    def _name(self) -> str | None:
        raw = self._read_name()
        if raw is None:
            return None
        name = _go_bytes_to_str(raw)
        if not _is_xml_name(name):
            raise self._err("invalid XML name: " + name)
        return name

    def _text(self, quote: int, cdata: bool) -> str:
        """Character data up to `<` (or the closing quote, or `]]>` in CDATA), entities decoded."""
        out = bytearray()
        b0 = b1 = 0
        trunc = 0
        while True:
            c = self._getc()
            if c is None:
                if cdata:
                    raise self._err("unexpected EOF in CDATA section")
                if quote >= 0:
                    raise self._err("unexpected EOF")
                break
            if b0 == 0x5D and b1 == 0x5D and c == 0x3E:
                if cdata:
                    trunc = 2
                    break
                raise self._err("unescaped ]]> not in CDATA section")
            if c == 0x3C and not cdata:
                if quote >= 0:
                    raise self._err("unescaped < inside quoted string")
                self._ungetc()
                break
            if quote >= 0 and c == quote:
                break
            if c == 0x26 and not cdata:
                out.extend(self._entity())
                b0 = b1 = 0
                continue
            if c == 0x0D:
                out.append(0x0A)
            elif not (b1 == 0x0D and c == 0x0A):
                out.append(c)
            b0, b1 = b1, c
        if trunc:
            del out[-trunc:]
        try:
            text = out.decode("utf-8")
        except UnicodeDecodeError:
            raise self._err("invalid UTF-8") from None
        for ch in text:
            if not _in_xml_char_range(ord(ch)):
                raise self._err(f"illegal character code U+{ord(ch):04X}")
        return text

    def _entity(self) -> bytes:
        """After `&`: the replacement bytes, or Go's `invalid character entity` error."""
        start = self.pos - 1
        c = self._mustgetc()
        text: str | None = None
        if c == 0x23:  # &#
            c = self._mustgetc()
            base = 10
            if c == 0x78:  # x
                base = 16
                c = self._mustgetc()
            digits_start = self.pos - 1
            while 0x30 <= c <= 0x39 or (base == 16 and (0x61 <= c <= 0x66 or 0x41 <= c <= 0x46)):
                c = self._mustgetc()
            if c != 0x3B:
                self._ungetc()
            else:
                digits = self.data[digits_start : self.pos - 1]
                if digits:
                    n = int(digits, base)
                    if n <= 0x10FFFF:
                        # Go turns a surrogate code point into U+FFFD.
                        text = "\ufffd" if 0xD800 <= n <= 0xDFFF else chr(n)
        else:
            self._ungetc()
            self._read_name()
            c = self._mustgetc()
            if c != 0x3B:
                self._ungetc()
            else:
                name = _go_bytes_to_str(self.data[start + 1 : self.pos - 1])
                if _is_xml_name(name):
                    text = _XML_ENTITIES.get(name)
        if text is not None:
            return text.encode("utf-8", "surrogatepass")
        ent = _go_bytes_to_str(self.data[start : self.pos])
        if not ent.endswith(";"):
            ent += " (no semicolon)"
        raise self._err("invalid character entity " + ent)

    def token(self) -> tuple[str, Any]:
        """The next token as (kind, value): start (name, attrs, empty), end (name), text (str), other."""
        c = self._getc()
        if c is None:
            if self.stack:
                raise self._err("unexpected EOF")
            raise _XMLEOF()
        if c != 0x3C:
            self._ungetc()
            return "text", self._text(-1, False)
        c = self._mustgetc()
        if c == 0x2F:  # </
            name = self._name()
            if name is None:
                raise self._err("expected element name after </")
            self._space()
            if self._mustgetc() != 0x3E:
                raise self._err(f"invalid characters between </{_local_name(name)} and >")
            self._pop(name)
            return "end", name
        if c == 0x3F:  # <?
            return self._proc_inst()
        if c == 0x21:  # <!
            return self._bang()
        self._ungetc()
        name = self._name()
        if name is None:
            raise self._err("expected element name after <")
        attrs: list[tuple[str, str]] = []
        empty = False
        while True:
            self._space()
            c = self._mustgetc()
            if c == 0x2F:
                if self._mustgetc() != 0x3E:
                    raise self._err("expected /> in element")
                empty = True
                break
            if c == 0x3E:
                break
            self._ungetc()
            attr = self._name()
            if attr is None:
                raise self._err("expected attribute name in element")
            self._space()
            if self._mustgetc() != 0x3D:
                raise self._err("attribute name without = in element")
            self._space()
            quote = self._mustgetc()
            if quote not in (0x22, 0x27):
                raise self._err("unquoted or missing attribute value in element")
            attrs.append((attr, self._text(quote, False)))
        self.stack.append(name)
        return "start", (name, attrs, empty)

    def _pop(self, name: str) -> None:
        if not self.stack:
            raise self._err(f"unexpected end element </{_local_name(name)}>")
        top = self.stack.pop()
        if _local_name(top) != _local_name(name):
            raise self._err(f"element <{_local_name(top)}> closed by </{_local_name(name)}>")
        if top != name:
            raise self._err(
                f"element <{_local_name(top)}> in space {_name_space(top)} closed by "
                f"</{_local_name(name)}> in space {_name_space(name)}"
            )

    def _proc_inst(self) -> tuple[str, Any]:
        target = self._name()
        if target is None:
            raise self._err("expected target name after <?")
        self._space()
        start = self.pos
        b0 = 0
        while True:
            c = self._mustgetc()
            if b0 == 0x3F and c == 0x3E:
                break
            b0 = c
        if target == "xml":
            content = _go_bytes_to_str(self.data[start : self.pos - 2])
            ver = _proc_inst_param("version", content)
            if ver and ver != "1.0":
                raise _XMLSyntaxError(
                    f"xml: unsupported version {_quote(ver)}; only version 1.0 is supported", None
                )
            enc = _proc_inst_param("encoding", content)
            if enc and enc.lower() != "utf-8":
                raise _XMLSyntaxError(
                    f"xml: encoding {_quote(enc)} declared but Decoder.CharsetReader is nil", None
                )
        return "other", None

    def _bang(self) -> tuple[str, Any]:
        c = self._mustgetc()
        if c == 0x2D:  # <!-
            if self._mustgetc() != 0x2D:
                raise self._err("invalid sequence <!- not part of <!--")
            b0 = b1 = 0
            while True:
                c = self._mustgetc()
                if b0 == 0x2D and b1 == 0x2D:
                    if c != 0x3E:
                        raise self._err('invalid sequence "--" not allowed in comments')
                    return "other", None
                b0, b1 = b1, c
        if c == 0x5B:  # <![
            for expected in b"CDATA[":
                if self._mustgetc() != expected:
                    raise self._err("invalid <![ sequence")
            return "text", self._text(-1, True)
        # A directive such as <!DOCTYPE ...>: skipped, minding quotes, nesting and comments.
        inquote = 0
        depth = 0
        while True:
            c = self._mustgetc()
            if inquote == 0 and c == 0x3E and depth == 0:
                return "other", None
            if c == inquote:
                inquote = 0
            elif inquote:
                pass
            elif c in (0x22, 0x27):
                inquote = c
            elif c == 0x3E:
                depth -= 1
            elif c == 0x3C:
                if self.data[self.pos : self.pos + 3] == b"!--":
                    for _ in range(3):
                        self._getc()
                    b0 = b1 = 0
                    while True:
                        c = self._mustgetc()
                        if b0 == 0x2D and b1 == 0x2D and c == 0x3E:
                            break
                        b0, b1 = b1, c
                else:
                    # Go counts the `<` as nesting only once it is sure no comment starts here.
                    for expected in b"!--":
                        if self.pos >= len(self.data):
                            raise self._err("unexpected EOF")
                        if self.data[self.pos] != expected:
                            break
                        self._getc()
                    depth += 1


def _local_name(name: str) -> str:
    # Go splits a name at its one colon when both sides are non-empty; otherwise the name is all local.
    if name.count(":") == 1:
        space, _, local = name.partition(":")
        if space and local:
            return local
    return name


def _name_space(name: str) -> str:
    local = _local_name(name)
    return "" if local == name else name[: -len(local) - 1]


def _proc_inst_param(param: str, content: str) -> str:
    _, sep, value = content.partition(param + "=")
    if not sep or not value or value[0] not in "'\"":
        return ""
    inner, found, _ = value[1:].partition(value[0])
    return inner if found else ""


def _quote(s: str) -> str:
    from hookrunner.params import go_quote

    return go_quote(s)


def _xml_to_map(data: bytes) -> dict[str, Any]:
    """mxj's xmlToMapParser: the first element becomes the map; the rest of the input is never read."""
    tokenizer = _XMLTokenizer(data)
    # Each open element: its key, `n` (its text when it has no attributes or children) and `na`.
    frames: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    while True:
        kind, value = tokenizer.token()
        if kind == "start":
            name, attrs, empty = value
            na: dict[str, Any] = {}
            for attr, attr_value in attrs:
                na["-" + _local_name(attr)] = attr_value
            frames.append((_local_name(name), {}, na))
            if not empty:
                continue
            tokenizer.stack.pop()
            kind = "end"
        if kind == "end":
            key, n, na = frames.pop()
            # mxj v2.7.0: text before any child wins and the children are dropped (`<a>t<b/></a>` is "t").
            if not n:
                n[key] = na if na else ""
            if not frames:
                return n
            parent_na = frames[-1][2]
            child = n[key]
            if key in parent_na:
                existing = parent_na[key]
                parent_na[key] = [*existing, child] if isinstance(existing, list) else [existing, child]
            else:
                parent_na[key] = child
        elif kind == "text" and frames:
            text = value.strip(_MXJ_TRIM)
            if text:
                key, n, na = frames[-1]
                if na:
                    na["#text"] = text
                else:
                    n[key] = text


def parse_xml_payload(body: bytes) -> dict[str, Any]:
    """webhook's ParseXMLPayload (mxj): `{"root": {"-attr": ..., "#text": ..., "child": ...}}`, all strings.

    Repeated elements become lists, an empty element is "", namespace prefixes are dropped. Errors carry
    Go's text: `error parsing XML payload: EOF` when there is no element at all.
    """
    try:
        return _xml_to_map(body)
    except _XMLEOF:
        raise PayloadParseError("error parsing XML payload: EOF") from None
    except _XMLSyntaxError as exc:
        raise PayloadParseError(f"error parsing XML payload: xml.Decoder.Token() - {exc}") from None
