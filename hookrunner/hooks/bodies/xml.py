"""webhook's XML body parser: clbanning/mxj v2.7.0 NewMapXmlReader over Go's encoding/xml.

A small tokenizer that accepts and rejects what Go's strict xml.Decoder does, with its error texts, and
mxj's building of a map from its tokens. Like Go it knows only the five predefined entities and
character references: a DOCTYPE is skipped, entities it declares are never expanded, so
entity-expansion attacks have nothing to work with.
"""

from __future__ import annotations

import re
from typing import Any

from hookrunner.errors import PayloadParseError
from hookrunner.golang.gostring import go_bytes_to_str
from hookrunner.golang.strconv import quote as go_quote

__all__ = ["parse_xml_payload"]

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
# The common tokens, each read in one match (a hostile body is millions of them): a start tag with an
# ASCII name and plain attribute values, an end tag, character data up to the next tag. An ASCII name that
# matches is a valid one. Anything else (entities, \r, non-ASCII names, CDATA, errors) is left to the
# tokenizer, which reads byte by byte as Go does.
_FAST_NAME = rb"[A-Za-z_:][A-Za-z0-9_:.\-]*(?![A-Za-z0-9_:.\-\x80-\xff])"
# Plain character data: no markup, no entity, no \r, no ASCII control character XML forbids.
_FAST_CHARS = rb"<&\r>\x00-\x08\x0b\x0c\x0e-\x1f"
_FAST_VALUE = rb'(?:"[^"' + _FAST_CHARS + rb']*"|' + rb"'[^'" + _FAST_CHARS + rb"]*')"
_FAST_ATTR = re.compile(rb"[ \t\r\n]*(" + _FAST_NAME + rb")[ \t\r\n]*=[ \t\r\n]*(" + _FAST_VALUE + rb")")
_FAST_TAG_END = re.compile(rb"[ \t\r\n]*(/?)>")
#: Which group matched last says what the token is: a start tag that ends here (_START: `<a>`, `<a/>`), one
#: with attributes to read next, one match each (_OPEN: a single match of millions of attributes kept as
#: many backtracking states, a GB), an end tag, character data.
_FAST_TOKEN = re.compile(
    rb"<(" + _FAST_NAME + rb")(?:[ \t\r\n]*(/?)>)?"
    rb"|</(" + _FAST_NAME + rb")[ \t\r\n]*>"
    rb"|([^" + _FAST_CHARS + rb"]+)(?=<)"
)
_OPEN, _START, _END, _TEXT, _OTHER = 1, 2, 3, 4, 0
#: Distinct names a parse keeps as one string each (the open elements hold one each, millions when nested).
_NAMES_KEPT = 1024


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
        name = go_bytes_to_str(raw)
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
                name = go_bytes_to_str(self.data[start + 1 : self.pos - 1])
                if _is_xml_name(name):
                    text = _XML_ENTITIES.get(name)
        if text is not None:
            return text.encode("utf-8", "surrogatepass")
        ent = go_bytes_to_str(self.data[start : self.pos])
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
        if top == name:
            return
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
            content = go_bytes_to_str(self.data[start : self.pos - 2])
            ver = _proc_inst_param("version", content)
            if ver and ver != "1.0":
                raise _XMLSyntaxError(
                    f"xml: unsupported version {go_quote(ver)}; only version 1.0 is supported", None
                )
            enc = _proc_inst_param("encoding", content)
            if enc and enc.lower() != "utf-8":
                raise _XMLSyntaxError(
                    f"xml: encoding {go_quote(enc)} declared but Decoder.CharsetReader is nil", None
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


def _plain_text(raw: bytes) -> str | None:
    """Plain character data (_FAST_CHARS) that is not all ASCII: its text, or None when it is not valid
    UTF-8 or holds a character XML forbids (the byte-by-byte reading then finds Go's error and line)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if _XML_ILLEGAL_CHAR.search(text) else text


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



def _xml_to_map(data: bytes) -> dict[str, Any]:
    """mxj's xmlToMapParser: the first element becomes the map; the rest of the input is never read."""
    tokenizer = _XMLTokenizer(data)
    stack = tokenizer.stack
    fast = _FAST_TOKEN.match
    names: dict[bytes, tuple[str, str]] = {}  # a name as written: it and its key (the local name)
    attr_keys: dict[bytes, str] = {}
    # Each open element, in three stacks (a hostile body nests millions): its key, its text when that came
    # before any attribute or child (then it is the element's value), and its map of attributes and
    # children, made when the first one comes.
    keys: list[str] = []
    texts: list[str | None] = []
    nas: list[dict[str, Any] | None] = []
    # Where the next token starts, and up to where the tokenizer has counted lines (only its errors say).
    pos = counted = 0
    while True:
        match = fast(data, pos)
        kind = _OTHER
        if match is not None:
            kind = match.lastindex or _OTHER
            if kind == _START or kind == _OPEN:
                name, key = names.get(match.group(1)) or _known(names, match.group(1))
                na, end = None, match.end()
                if kind == _OPEN:
                    na, end = _attribute_map(data, end, attr_keys)
                if end < 0:
                    kind = _OTHER  # not a plain tag: the tokenizer reads it (and finds Go's error)
                else:
                    kind, empty = _START, data[end - 2] == 0x2F  # `/>`
                    stack.append(name)
            elif kind == _END:
                name, key = names.get(match.group(3)) or _known(names, match.group(3))
                if not stack or stack[-1] != name:
                    tokenizer.line += data.count(b"\n", counted, match.end())
                    tokenizer._pop(name)  # raises Go's error
                stack.pop()
            else:
                raw = match.group(4)
                chars = raw.decode("ascii") if raw.isascii() else _plain_text(raw)
                if chars is None:
                    kind = _OTHER
            if kind != _OTHER:
                pos = end if kind == _START else match.end()
        if kind == _OTHER:
            tokenizer.pos = pos
            tokenizer.line += data.count(b"\n", counted, pos)
            token, value = tokenizer.token()
            pos = counted = tokenizer.pos
            if token == "start":
                name, attr_list, empty = value
                key, kind = _local_name(name), _START
                na = {"-" + _local_name(attr): attr_value for attr, attr_value in attr_list} or None
            elif token == "end":
                key, kind = _local_name(value), _END
            elif token == "text":
                chars, kind = value, _TEXT
        if kind == _START:
            keys.append(key)
            texts.append(None)
            nas.append(na)
            if not empty:
                continue
            stack.pop()
            kind = _END
        if kind == _END:
            key, text, na = keys.pop(), texts.pop(), nas.pop()
            # mxj v2.7.0: text before any child wins and the children are dropped (`<a>t<b/></a>` is "t").
            child: Any = text if text is not None else (na or "")
            if not keys:
                return {key: child}
            parent_na = nas[-1]
            if parent_na is None:
                nas[-1] = {key: child}
            elif key in parent_na:
                existing = parent_na[key]
                # An element's own value is never a list, so a list here is one this loop built.
                if isinstance(existing, list):
                    existing.append(child)
                else:
                    parent_na[key] = [existing, child]
            else:
                parent_na[key] = child
        elif kind == _TEXT and keys and chars:
            chars = chars.strip(_MXJ_TRIM)
            if chars:
                na = nas[-1]
                if na:
                    na["#text"] = chars
                else:
                    texts[-1] = chars


def _known(names: dict[bytes, tuple[str, str]], raw: bytes) -> tuple[str, str]:
    """An ASCII name _FAST_NAME matched, and its local name; kept in `names` while there are few."""
    name = raw.decode("ascii")
    known = name, _local_name(name)
    if len(names) < _NAMES_KEPT:
        names[raw] = known
    return known


def _attribute_map(data: bytes, pos: int, attr_keys: dict[bytes, str]) -> tuple[dict[str, Any] | None, int]:
    """A start tag's plain attributes from `pos` on, as `-name` keys, and where the tag ends; (None, -1) if
    it is not plain to its end (see _FAST_CHARS)."""
    na: dict[str, Any] = {}
    attr = _FAST_ATTR.match(data, pos)
    while attr is not None:
        raw = attr.group(2)[1:-1]
        value = raw.decode("ascii") if raw.isascii() else _plain_text(raw)
        if value is None:
            return None, -1
        raw = attr.group(1)
        key = attr_keys.get(raw)
        if key is None:
            key = "-" + _local_name(raw.decode("ascii"))
            if len(attr_keys) < _NAMES_KEPT:
                attr_keys[raw] = key
        na[key] = value
        pos = attr.end()
        attr = _FAST_ATTR.match(data, pos)
    end = _FAST_TAG_END.match(data, pos)
    if end is None:
        return None, -1
    return na or None, end.end()


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
