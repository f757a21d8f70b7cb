"""The incoming request as the rules see it, and webhook's body parsers (JSON, form, XML, multipart)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from hookrunner.errors import MultipartError, PayloadParseError


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
    from hookrunner.hooks.params import GoJSONError, NilMap, decode_json_map, loads_json

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
        from hookrunner.hooks.params import go_quote

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
# mxj trims these around character data (\b cannot occur: Go rejects it as an illegal character).
_MXJ_TRIM = "\t\r\b\n "
_XML_SPACE_RUN = re.compile(rb"[ \r\n\t]*")
_XML_NAME_RUN = re.compile(rb"[A-Za-z0-9_:.\-\x80-\xff]+")
# The bytes that end a run of plain character data (`>` only matters after `]]`).
_XML_TEXT_STOPS = re.compile(rb"[<&\r>]")
_XML_CDATA_STOPS = re.compile(rb"[\r>]")
_XML_QUOTED_STOPS = {q: re.compile(rb"[<&\r>" + bytes([q]) + rb"]") for q in (0x22, 0x27)}
_XML_ILLEGAL_CHAR = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


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


def _is_xml_name(name: str) -> bool:
    if not name or "\udc80" <= name[0] <= "\udcff":
        return False
    first = name[0]
    if not (first.isalpha() or first in "_:"):
        return False
    return all(ch.isalnum() or ch in "_:.-\u00b7" or ch.isidentifier() for ch in name[1:])


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
        match = _XML_SPACE_RUN.match(self.data, self.pos)
        end = match.end() if match else self.pos
        self.line += self.data.count(b"\n", self.pos, end)
        self.pos = end

    def _read_name(self) -> bytes | None:
        # Names never span lines, so the line count needs no update here.
        match = _XML_NAME_RUN.match(self.data, self.pos)
        end = match.end() if match else self.pos
        if end >= len(self.data):
            raise self._err("unexpected EOF")
        if end == self.pos:
            return None
        start, self.pos = self.pos, end
        return self.data[start:end]

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
        data = self.data
        if cdata:
            stops = _XML_CDATA_STOPS
        elif quote >= 0:
            stops = _XML_QUOTED_STOPS[quote]
        else:
            stops = _XML_TEXT_STOPS
        out = bytearray()
        b0 = b1 = 0  # the last two input bytes, to spot `]]>`
        trunc = 0
        while True:
            # Copy the run of ordinary bytes in one go; only the stop bytes need a closer look.
            match = stops.search(data, self.pos)
            end = match.start() if match else len(data)
            if end > self.pos:
                run = data[self.pos : end]
                out += run
                self.line += run.count(b"\n")
                b0, b1 = (run[-2], run[-1]) if len(run) > 1 else (b1, run[-1])
                self.pos = end
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
                # \r and \r\n both become \n.
                out.append(0x0A)
                if self.pos < len(data) and data[self.pos] == 0x0A:
                    self._getc()
                    b0, b1 = 0x0D, 0x0A
                    continue
            else:
                out.append(c)
            b0, b1 = b1, c
        if trunc:
            del out[-trunc:]
        try:
            text = out.decode("utf-8")
        except UnicodeDecodeError:
            raise self._err("invalid UTF-8") from None
        illegal = _XML_ILLEGAL_CHAR.search(text)
        if illegal:
            raise self._err(f"illegal character code U+{ord(illegal.group()):04X}")
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
    from hookrunner.hooks.params import go_quote

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
                # An element's own value is never a list, so a list here is one this loop built.
                if isinstance(existing, list):
                    existing.append(child)
                else:
                    parent_na[key] = [existing, child]
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


# --- Multipart (Go's mime/multipart ReadForm, as net/http's ParseMultipartForm runs it) ---

# unicode.IsSpace, which Go's mime package trims with.
_GO_UNICODE_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
)
_MIME_TSPECIALS = frozenset('()<>@,;:\\"/[]?=')


class _MediaTypeError(Exception):
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
    return _go_bytes_to_str(bytes(out))


def _decode_2231(v: str) -> str | None:
    parts = v.split("'", 2)
    if len(parts) != 3 or parts[0].lower() not in ("us-ascii", "utf-8"):
        return None
    return _percent_hex_unescape(parts[2])


def parse_media_type(v: str) -> tuple[str, dict[str, str]]:
    """Go's mime.ParseMediaType (with RFC 2231 parameters); raises _MediaTypeError on what Go rejects."""
    base = v.split(";", 1)[0]
    media_type = base.lower().strip(_GO_UNICODE_SPACE)
    main, rest = _consume_token(media_type)
    if not main:
        raise _MediaTypeError("mime: no media type")
    if rest:
        if not rest.startswith("/"):
            raise _MediaTypeError("mime: expected slash after first token")
        sub, rest = _consume_token(rest[1:])
        if not sub:
            raise _MediaTypeError("mime: expected token after slash")
        if rest:
            raise _MediaTypeError("mime: unexpected content after media subtype")
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
            raise _MediaTypeError("mime: invalid media parameter")
        target = params
        if "*" in key:
            target = continuations.setdefault(key.split("*", 1)[0], {})
        if key in target:
            raise _MediaTypeError("mime: duplicate parameter name")
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


class _MultipartReader:
    """Go's multipart.Reader over a byte stream: boundary lines, MIME headers, part bodies."""

    _CHUNK = 64 * 1024
    _PEEK_BUFFER = 4096  # Go's bufio size here: longer lines between parts are an error

    def __init__(self, stream: Any, content_length: int | None, boundary: str) -> None:
        self.stream = stream
        self.remaining = content_length
        self.buf = bytearray()
        self.eof = False
        b = boundary.encode("utf-8", "surrogateescape")
        self.nl = b"\r\n"
        self.dash_boundary = b"--" + b
        self.dash_boundary_dash = b"--" + b + b"--"
        self.parts_read = 0

    @property
    def nl_dash_boundary(self) -> bytes:
        return self.nl + self.dash_boundary

    def _fill(self) -> bool:
        """Read more of the body into the buffer; False once it is all read."""
        if self.eof:
            return False
        size = self._CHUNK if self.remaining is None else min(self._CHUNK, self.remaining)
        chunk = self.stream.read(size) if size > 0 else b""
        if not chunk:
            self.eof = True
            return False
        if self.remaining is not None:
            self.remaining -= len(chunk)
        self.buf.extend(chunk)
        return True

    def _read_slice(self) -> tuple[bytes, bool]:
        """bufio.Reader.ReadSlice('\\n'): (line, at_eof); a line over 4096 bytes is Go's ErrBufferFull."""
        while True:
            i = self.buf.find(b"\n", 0, self._PEEK_BUFFER)
            if i >= 0:
                line = bytes(self.buf[: i + 1])
                del self.buf[: i + 1]
                return line, False
            if len(self.buf) >= self._PEEK_BUFFER:
                raise MultipartError("multipart: NextPart: bufio: buffer full")
            if not self._fill():
                line = bytes(self.buf)
                self.buf.clear()
                return line, True

    def _read_line(self) -> bytes | None:
        """textproto's readLineSlice: a line without its \\n or \\r\\n; None at the end of input."""
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[: i + 1]
                return line[:-1] if line.endswith(b"\r") else line
            if not self._fill():
                if not self.buf:
                    return None
                line = bytes(self.buf)
                self.buf.clear()
                return line

    def _peek(self, n: int) -> bytes:
        while len(self.buf) < n and self._fill():
            pass
        return bytes(self.buf[:n])

    def _is_boundary_delimiter_line(self, line: bytes) -> bool:
        if not line.startswith(self.dash_boundary):
            return False
        rest = line[len(self.dash_boundary) :].lstrip(b" \t")
        # The first boundary line decides whether the body uses bare \n line ends.
        if self.parts_read == 0 and rest == b"\n":
            self.nl = b"\n"
            return True
        return rest == self.nl

    def _is_final_boundary(self, line: bytes) -> bool:
        if not line.startswith(self.dash_boundary_dash):
            return False
        rest = line[len(self.dash_boundary_dash) :].lstrip(b" \t")
        return not rest or rest == self.nl

    def next_part(self) -> dict[str, list[str]] | None:
        """Move to the next part and read its headers; None at the end of the form."""
        if self.dash_boundary == b"--":
            raise MultipartError("multipart: boundary is empty")
        expect_new_part = False
        while True:
            line, at_eof = self._read_slice()
            if at_eof and self._is_final_boundary(line):
                return None
            if at_eof:
                raise MultipartError("multipart: NextPart: EOF")
            if self._is_boundary_delimiter_line(line):
                self.parts_read += 1
                return self._read_headers()
            if self._is_final_boundary(line):
                return None
            if expect_new_part:
                got = _quote(_go_bytes_to_str(line))
                raise MultipartError(f"multipart: expecting a new Part; got line {got}")
            if self.parts_read == 0:
                continue  # the preamble
            if line == self.nl:
                expect_new_part = True
                continue
            raise MultipartError(f"multipart: unexpected line in Next(): {_quote(_go_bytes_to_str(line))}")

    def _read_headers(self) -> dict[str, list[str]] | None:
        """textproto's ReadMIMEHeader; None when the input ends inside them (Go then ends the form)."""
        headers: dict[str, list[str]] = {}
        first = self._peek(1)
        if first in (b" ", b"\t"):
            line = self._read_line()
            if line is None:
                return None
            raise MultipartError(f"malformed MIME header initial line: {_go_bytes_to_str(line)}")
        while True:
            line = self._read_line()
            if line is None:
                return None
            if not line:
                return headers
            if b":" not in line:
                bad = _quote(_go_bytes_to_str(line))
                raise MultipartError(f"malformed MIME header: missing colon: {bad}")
            text = line.rstrip(b" \t")
            # Continuation lines start with a space or tab and are joined with one space.
            while self._peek(1) in (b" ", b"\t"):
                more = self._read_line()
                if more is None:
                    break
                text = text + b" " + more.strip(b" \t")
            raw_key, _, raw_value = text.partition(b":")
            key = canonical_header_key(_go_bytes_to_str(raw_key))
            if not key:
                continue
            headers.setdefault(key, []).append(_go_bytes_to_str(raw_value.lstrip(b" \t")))

    def _byte_at(self, j: int) -> int | None:
        while len(self.buf) <= j:
            if not self._fill():
                return None
        return self.buf[j]

    def _boundary_follows(self, j: int) -> bool:
        """Go's matchAfterPrefix: a delimiter ends at buf[j] with `--`, blank, CR, LF or the input's end."""
        c = self._byte_at(j)
        if c is None or c in b" \t\r\n":
            return True
        return c == 0x2D and self._byte_at(j + 1) == 0x2D

    def read_body(self, sink: bytearray | None, limit: int | None = None) -> int:
        """Read the current part's body, keeping it in `sink` (None discards it); return its length.

        With a `limit`, reading stops once the body is known to be longer than that (io.CopyN).
        """
        # At the very start of a body the boundary may come without the line break before it.
        head = len(self.dash_boundary)
        while len(self.buf) < head and self._fill():
            pass
        if self.buf.startswith(self.dash_boundary) and self._boundary_follows(head):
            return 0
        total = 0
        delimiter = self.nl_dash_boundary
        search_from = 0
        while True:
            i = self.buf.find(delimiter, search_from)
            if i >= 0:
                if self._boundary_follows(i + len(delimiter)):
                    return total + self._emit(sink, i)
                search_from = i + 1
                continue
            # No delimiter yet: all but a tail that could start one split across reads is body.
            safe = max(0, len(self.buf) - len(delimiter) + 1)
            total += self._emit(sink, safe)
            if limit is not None and total > limit:
                return total
            if not self._fill():
                raise MultipartError("unexpected EOF")
            search_from = 0

    def _emit(self, sink: bytearray | None, n: int) -> int:
        if sink is not None:
            sink.extend(self.buf[:n])
        del self.buf[:n]
        return n


_MAX_PARTS = 1000  # Go 1.19.8's multipartmaxparts default
_MAX_HEADERS = 10000  # and its multipartmaxheaders
_MAP_ENTRY_OVERHEAD = 200
_FILE_HEADER_SIZE = 100
_TOO_LARGE = "multipart: message too large"


def _mime_header_size(headers: dict[str, list[str]]) -> int:
    return 400 + sum(len(k) + _MAP_ENTRY_OVERHEAD + sum(len(v) for v in vs) for k, vs in headers.items())


def _decode_part_body(headers: dict[str, list[str]], body: bytes) -> bytes:
    # Go decodes (and then hides) a quoted-printable Content-Transfer-Encoding.
    cte = headers.get("Content-Transfer-Encoding", [""])[0]
    if cte.lower() == "quoted-printable":
        import binascii

        return binascii.a2b_qp(body)
    return body


def parse_multipart(
    stream: Any,
    content_type: str,
    content_length: int | None,
    max_memory: int,
    json_file_names: set[str],
    *,
    raw_query: bytes = b"",
    on_log: Any = None,
) -> dict[str, Any] | None:
    """webhook's multipart handling: Go's ParseMultipartForm, then the payload webhook builds from it.

    `content_type` must be the request's own Content-Type header (Go parses the form from it even when a
    hook's `incoming-payload-content-type` made webhook take the multipart branch). Value parts give the
    first value of each name; a file part (one with a non-empty filename) is read only when it is the
    first file of its name and either its Content-Type is exactly `application/json` or its name is in
    `json_file_names`; it is decoded as a JSON object, and a failure stores NilMap under its name.
    Returns None when nothing was stored (Go's nil map). `raw_query` is the URL's query: Go's form parsing
    fails on a query that url.ParseQuery rejects. `on_log(message)` receives webhook's log lines
    (without the `[id] ` prefix). Raises MultipartError with Go's error text.
    """
    from hookrunner.hooks.params import GoJSONError, NilMap, decode_json_map

    def log_line(message: str) -> None:
        if on_log is not None:
            on_log(message)

    try:
        media_type, params = parse_media_type(content_type)
    except _MediaTypeError:
        media_type, params = "", {}
    if media_type != "multipart/form-data":
        raise MultipartError("request Content-Type isn't multipart/form-data")
    if "boundary" not in params:
        raise MultipartError("no multipart boundary param in Content-Type")
    reader = _MultipartReader(stream, content_length, params["boundary"])

    values: dict[str, str] = {}
    files: dict[str, tuple[dict[str, list[str]], bytes | None]] = {}
    max_file_memory = max_memory
    max_memory_bytes = max_memory + (10 << 20)
    if max_memory_bytes <= 0:
        max_memory_bytes = 0 if max_memory < 0 else 1 << 63
    max_parts = _MAX_PARTS
    max_headers = _MAX_HEADERS
    while True:
        headers = reader.next_part()
        if headers is None:
            break
        if sum(len(v) for v in headers.values()) > max_headers:
            raise MultipartError("message too large")
        if max_parts <= 0:
            raise MultipartError(_TOO_LARGE)
        max_parts -= 1
        disposition = headers.get("Content-Disposition", [""])[0]
        try:
            kind, disposition_params = parse_media_type(disposition)
        except _MediaTypeError:
            kind, disposition_params = "", {}
        name = disposition_params.get("name", "") if kind == "form-data" else ""
        if not name:
            reader.read_body(None)
            continue
        max_memory_bytes -= len(name.encode("utf-8", "surrogateescape")) + _MAP_ENTRY_OVERHEAD
        if max_memory_bytes < 0:
            raise MultipartError(_TOO_LARGE)
        if not disposition_params.get("filename", ""):
            sink = bytearray()
            size = reader.read_body(sink, max_memory_bytes)
            max_memory_bytes -= size
            if max_memory_bytes < 0:
                raise MultipartError(_TOO_LARGE)
            values.setdefault(name, _go_bytes_to_str(_decode_part_body(headers, bytes(sink))))
            continue
        max_memory_bytes -= _mime_header_size(headers) + _MAP_ENTRY_OVERHEAD + _FILE_HEADER_SIZE
        if max_memory_bytes < 0:
            raise MultipartError(_TOO_LARGE)
        max_headers -= sum(len(v) for v in headers.values())
        # Only the first file of a name is looked at, and only a JSON one is worth keeping.
        wanted = name not in files and (
            name in json_file_names or "application/json" in headers.get("Content-Type", [])
        )
        file_sink = bytearray() if wanted else None
        size = reader.read_body(file_sink)
        if size <= max_file_memory:
            # Go keeps a small file in memory and counts it; a bigger one goes to disk uncounted.
            max_file_memory -= size
            max_memory_bytes -= size
        if name not in files:
            body = _decode_part_body(headers, bytes(file_sink)) if file_sink is not None else None
            files[name] = (headers, body)
    if raw_query:
        _, query_error = go_parse_query(raw_query)
        if query_error is not None:
            raise MultipartError(query_error)

    payload: dict[str, Any] | None = None
    for name, value in values.items():
        log_line(f"found multipart form value {_quote(name)}")
        payload = payload if payload is not None else {}
        payload[name] = value
    for name, (_, body) in files.items():
        if body is None:
            continue
        log_line(f"parsing multipart form file {_quote(name)} as JSON")
        try:
            part: dict[str, Any] = decode_json_map(body)
        except GoJSONError as exc:
            log_line(f"error parsing JSON payload file: {exc}")
            part = NilMap()
        payload = payload if payload is not None else {}
        payload[name] = part
    return payload
