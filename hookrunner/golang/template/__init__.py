"""Go's text/template language for `-template` hooks files: lexer, parser, executor and Go's fmt verbs.

Checked against output and error text recorded from Go (tests/data/gotemplate/vectors.json)."""

from __future__ import annotations

import math
import os
import posixpath
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NoReturn

from hookrunner.errors import TemplateError
from hookrunner.golang.strconv import is_print as _is_print
from hookrunner.golang.strconv import quote as go_quote
from hookrunner.golang.strconv import quote_rune as _quote_rune
from hookrunner.golang.strconv import underscores_ok as _underscores_ok

__all__ = [
    "Template",
    "TemplateError",
    "WEBHOOK_FUNCS",
    "go_quote",
    "go_sprint",
    "go_sprintf",
    "render_hooks_template",
]


# ---------------------------------------------------------------------------------------------------------
# Go string helpers shared by the lexer, the parser's messages and fmt.


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


# ---------------------------------------------------------------------------------------------------------
# Lexer


class _Tok:
    ERROR = 0
    BOOL = 1
    CHAR = 2
    CHAR_CONSTANT = 3
    COMMENT = 4
    COMPLEX = 5
    ASSIGN = 6
    DECLARE = 7
    EOF = 8
    FIELD = 9
    IDENTIFIER = 10
    LEFT_DELIM = 11
    LEFT_PAREN = 12
    NUMBER = 13
    PIPE = 14
    RAW_STRING = 15
    RIGHT_DELIM = 16
    RIGHT_PAREN = 17
    SPACE = 18
    STRING = 19
    TEXT = 20
    VARIABLE = 21
    KEYWORD = 22
    BLOCK = 23
    BREAK = 24
    CONTINUE = 25
    DOT = 26
    DEFINE = 27
    ELSE = 28
    END = 29
    IF = 30
    NIL = 31
    RANGE = 32
    TEMPLATE = 33
    WITH = 34


_KEYWORDS = {
    ".": _Tok.DOT,
    "block": _Tok.BLOCK,
    "break": _Tok.BREAK,
    "continue": _Tok.CONTINUE,
    "define": _Tok.DEFINE,
    "else": _Tok.ELSE,
    "end": _Tok.END,
    "if": _Tok.IF,
    "range": _Tok.RANGE,
    "nil": _Tok.NIL,
    "template": _Tok.TEMPLATE,
    "with": _Tok.WITH,
}


@dataclass(slots=True)
class _Item:
    typ: int
    pos: int
    val: str
    line: int

    def __str__(self) -> str:
        if self.typ == _Tok.EOF:
            return "EOF"
        if self.typ == _Tok.ERROR:
            return self.val
        if self.typ > _Tok.KEYWORD:
            return f"<{self.val}>"
        if _utf8_len(self.val) > 10:
            return go_quote(self.val[:10]) + "..."
        return go_quote(self.val)


_SPACE = " \t\r\n"
_LEFT = "{{"
_RIGHT = "}}"


def _is_alnum(ch: str) -> bool:
    return ch == "_" or ch.isalpha() or ch.isdecimal()


class _Lexer:
    """Turns template text into items, as a state machine; the parser pulls items one at a time."""

    def __init__(self, text: str) -> None:
        self.input = text
        self.pos = 0
        self.start = 0
        self.line = 1
        self.start_line = 1
        self.paren_depth = 0
        self.items: list[_Item] = []
        self.read = 0
        state: Callable[[], Any] | None = self._lex_text
        # The lexer depends on nothing the parser learns, so it runs to the end (or the first error) at once.
        while state is not None:
            state = state()

    def next_item(self) -> _Item:
        if self.read < len(self.items):
            item = self.items[self.read]
            self.read += 1
            return item
        # Go's lexer channel is closed after EOF or an error: reading on yields the zero item (an error).
        return _Item(_Tok.ERROR, 0, "", 0)

    # -- primitives
    def _next(self) -> str:
        if self.pos >= len(self.input):
            self.pos = len(self.input) + 1  # remember that we went past the end, as Go's atEOF does
            return ""
        ch = self.input[self.pos]
        self.pos += 1
        if ch == "\n":
            self.line += 1
        return ch

    def _backup(self) -> None:
        if self.pos > len(self.input):
            self.pos = len(self.input)
            return
        if self.pos > 0:
            self.pos -= 1
            if self.input[self.pos] == "\n":
                self.line -= 1

    def _peek(self) -> str:
        if self.pos >= len(self.input):
            return ""
        return self.input[self.pos]

    def _emit(self, typ: int) -> None:
        self.items.append(_Item(typ, self.start, self.input[self.start : self.pos], self.start_line))
        self.start = self.pos
        self.start_line = self.line

    def _ignore(self) -> None:
        self.line += self.input.count("\n", self.start, self.pos)
        self.start = self.pos
        self.start_line = self.line

    def _accept(self, valid: str) -> bool:
        ch = self._next()
        if ch and ch in valid:
            return True
        self._backup()
        return False

    def _accept_run(self, valid: str) -> None:
        while True:
            ch = self._next()
            if not ch or ch not in valid:
                break
        self._backup()

    def _errorf(self, msg: str) -> None:
        self.items.append(_Item(_Tok.ERROR, self.start, msg, self.start_line))
        return None

    # -- states
    def _lex_text(self) -> Any:
        x = self.input.find(_LEFT, self.pos)
        if x >= 0:
            self.pos = x
            trim = 0
            if _has_left_trim(self.input, x + len(_LEFT)):
                chunk = self.input[self.start : self.pos]
                trim = len(chunk) - len(chunk.rstrip(_SPACE))
            self.pos -= trim
            if self.pos > self.start:
                self.line += self.input.count("\n", self.start, self.pos)
                self._emit(_Tok.TEXT)
            self.pos += trim
            self._ignore()
            return self._lex_left_delim
        self.pos = len(self.input)
        if self.pos > self.start:
            self.line += self.input.count("\n", self.start, self.pos)
            self._emit(_Tok.TEXT)
        self._emit(_Tok.EOF)
        return None

    def _at_right_delim(self) -> tuple[bool, bool]:
        if _has_right_trim(self.input, self.pos) and self.input.startswith(_RIGHT, self.pos + 2):
            return True, True
        if self.input.startswith(_RIGHT, self.pos):
            return True, False
        return False, False

    def _lex_left_delim(self) -> Any:
        self.pos += len(_LEFT)
        trim = _has_left_trim(self.input, self.pos)
        after = 2 if trim else 0
        if self.input.startswith("/*", self.pos + after):
            self.pos += after
            self._ignore()
            return self._lex_comment
        self._emit(_Tok.LEFT_DELIM)
        self.pos += after
        self._ignore()
        self.paren_depth = 0
        return self._lex_inside_action

    def _lex_comment(self) -> Any:
        self.pos += 2
        i = self.input.find("*/", self.pos)
        if i < 0:
            return self._errorf("unclosed comment")
        self.pos = i + 2
        delim, trim = self._at_right_delim()
        if not delim:
            return self._errorf("comment ends before closing delimiter")
        if trim:
            self.pos += 2
        self.pos += len(_RIGHT)
        if trim:
            rest = self.input[self.pos :]
            self.pos += len(rest) - len(rest.lstrip(_SPACE))
        self._ignore()
        return self._lex_text

    def _lex_right_delim(self) -> Any:
        trim = _has_right_trim(self.input, self.pos)
        if trim:
            self.pos += 2
            self._ignore()
        self.pos += len(_RIGHT)
        self._emit(_Tok.RIGHT_DELIM)
        if trim:
            rest = self.input[self.pos :]
            self.pos += len(rest) - len(rest.lstrip(_SPACE))
            self._ignore()
        return self._lex_text

    def _lex_inside_action(self) -> Any:
        delim, _ = self._at_right_delim()
        if delim:
            if self.paren_depth == 0:
                return self._lex_right_delim
            return self._errorf("unclosed left paren")
        ch = self._next()
        if ch == "":
            return self._errorf("unclosed action")
        if ch in _SPACE:
            self._backup()
            return self._lex_space
        if ch == "=":
            self._emit(_Tok.ASSIGN)
        elif ch == ":":
            if self._next() != "=":
                return self._errorf("expected :=")
            self._emit(_Tok.DECLARE)
        elif ch == "|":
            self._emit(_Tok.PIPE)
        elif ch == '"':
            return self._lex_quote
        elif ch == "`":
            return self._lex_raw_quote
        elif ch == "$":
            return self._lex_variable
        elif ch == "'":
            return self._lex_char
        elif ch == "." and self.pos < len(self.input) and not ("0" <= self.input[self.pos] <= "9"):
            return self._lex_field
        elif ch == "." or ch in "+-" or "0" <= ch <= "9":
            self._backup()
            return self._lex_number
        elif _is_alnum(ch):
            self._backup()
            return self._lex_identifier
        elif ch == "(":
            self._emit(_Tok.LEFT_PAREN)
            self.paren_depth += 1
        elif ch == ")":
            self._emit(_Tok.RIGHT_PAREN)
            self.paren_depth -= 1
            if self.paren_depth < 0:
                return self._errorf(f"unexpected right paren {_rune_desc(ch)}")
        elif ord(ch) < 0x80 and _is_print(ch):
            self._emit(_Tok.CHAR)
        else:
            return self._errorf(f"unrecognized character in action: {_rune_desc(ch)}")
        return self._lex_inside_action

    def _lex_space(self) -> Any:
        spaces = 0
        while True:
            ch = self._peek()
            if not ch or ch not in _SPACE:
                break
            self._next()
            spaces += 1
        # A space followed by "-}}" is the trim marker, not an argument separator.
        if _has_right_trim(self.input, self.pos - 1) and self.input.startswith(_RIGHT, self.pos + 1):
            self._backup()
            if spaces == 1:
                return self._lex_right_delim
        self._emit(_Tok.SPACE)
        return self._lex_inside_action

    def _lex_identifier(self) -> Any:
        while True:
            ch = self._next()
            if ch and _is_alnum(ch):
                continue
            self._backup()
            word = self.input[self.start : self.pos]
            if not self._at_terminator():
                return self._errorf(f"bad character {_rune_desc(ch) if ch else 'U+FFFFFFFF'}")
            kw = _KEYWORDS.get(word, 0)
            if kw > _Tok.KEYWORD:
                self._emit(kw)
            elif word[0] == ".":
                self._emit(_Tok.FIELD)
            elif word in ("true", "false"):
                self._emit(_Tok.BOOL)
            else:
                self._emit(_Tok.IDENTIFIER)
            return self._lex_inside_action

    def _lex_field(self) -> Any:
        return self._lex_field_or_variable(_Tok.FIELD)

    def _lex_variable(self) -> Any:
        if self._at_terminator():
            self._emit(_Tok.VARIABLE)
            return self._lex_inside_action
        return self._lex_field_or_variable(_Tok.VARIABLE)

    def _lex_field_or_variable(self, typ: int) -> Any:
        if self._at_terminator():
            self._emit(_Tok.VARIABLE if typ == _Tok.VARIABLE else _Tok.DOT)
            return self._lex_inside_action
        while True:
            ch = self._next()
            if not ch or not _is_alnum(ch):
                self._backup()
                break
        if not self._at_terminator():
            return self._errorf(f"bad character {_rune_desc(ch) if ch else 'U+FFFFFFFF'}")
        self._emit(typ)
        return self._lex_inside_action

    def _at_terminator(self) -> bool:
        ch = self._peek()
        if ch == "" or ch in _SPACE or ch in ".,|:)(":
            return True
        return self.input.startswith(_RIGHT, self.pos)

    def _lex_escaped(self, close: str, unterminated: str, token: Any) -> Any:
        """A character constant or an interpreted string: escapes skip a byte, a newline ends it badly."""
        while True:
            ch = self._next()
            if ch == "\\":
                if self._next() not in ("", "\n"):
                    continue
                return self._errorf(unterminated)
            if ch in ("", "\n"):
                return self._errorf(unterminated)
            if ch == close:
                break
        self._emit(token)
        return self._lex_inside_action

    def _lex_char(self) -> Any:
        return self._lex_escaped("'", "unterminated character constant", _Tok.CHAR_CONSTANT)

    def _lex_number(self) -> Any:
        if not self._scan_number():
            return self._errorf(f"bad number syntax: {go_quote(self.input[self.start : self.pos])}")
        sign = self._peek()
        if sign in ("+", "-") and sign:
            if not self._scan_number() or self.input[self.pos - 1] != "i":
                return self._errorf(f"bad number syntax: {go_quote(self.input[self.start : self.pos])}")
            self._emit(_Tok.COMPLEX)
        else:
            self._emit(_Tok.NUMBER)
        return self._lex_inside_action

    def _scan_number(self) -> bool:
        self._accept("+-")
        digits = "0123456789_"
        if self._accept("0"):
            if self._accept("xX"):
                digits = "0123456789abcdefABCDEF_"
            elif self._accept("oO"):
                digits = "01234567_"
            elif self._accept("bB"):
                digits = "01_"
        self._accept_run(digits)
        if self._accept("."):
            self._accept_run(digits)
        if len(digits) == 11 and self._accept("eE"):
            self._accept("+-")
            self._accept_run("0123456789_")
        if len(digits) == 23 and self._accept("pP"):
            self._accept("+-")
            self._accept_run("0123456789_")
        self._accept("i")
        ch = self._peek()
        if ch and _is_alnum(ch):
            self._next()
            return False
        return True

    def _lex_quote(self) -> Any:
        return self._lex_escaped('"', "unterminated quoted string", _Tok.STRING)

    def _lex_raw_quote(self) -> Any:
        while True:
            ch = self._next()
            if ch == "":
                return self._errorf("unterminated raw quoted string")
            if ch == "`":
                break
        self._emit(_Tok.RAW_STRING)
        return self._lex_inside_action


def _has_left_trim(s: str, i: int) -> bool:
    return len(s) >= i + 2 and s[i] == "-" and s[i + 1] in _SPACE


def _has_right_trim(s: str, i: int) -> bool:
    return i >= 0 and len(s) >= i + 2 and s[i] in _SPACE and s[i + 1] == "-"


# ---------------------------------------------------------------------------------------------------------
# Parse tree. Each node's str() is the text Go shows for it in error messages.


class _Node:
    __slots__ = ("pos", "tree")

    def __init__(self, tree: _Tree, pos: int) -> None:
        self.tree = tree
        self.pos = pos


class _ListNode(_Node):
    __slots__ = ("nodes",)

    def __init__(self, tree: _Tree, pos: int) -> None:
        super().__init__(tree, pos)
        self.nodes: list[_Node] = []

    def __str__(self) -> str:
        return "".join(str(n) for n in self.nodes)


class _TextNode(_Node):
    __slots__ = ("text",)

    def __init__(self, tree: _Tree, pos: int, text: str) -> None:
        super().__init__(tree, pos)
        self.text = text

    def __str__(self) -> str:
        return self.text


class _PipeNode(_Node):
    __slots__ = ("is_assign", "decl", "cmds")

    def __init__(self, tree: _Tree, pos: int) -> None:
        super().__init__(tree, pos)
        self.is_assign = False
        self.decl: list[_VariableNode] = []
        self.cmds: list[_CommandNode] = []

    def __str__(self) -> str:
        head = ""
        if self.decl:
            # Go writes " := " for assignments too.
            head = ", ".join(str(v) for v in self.decl) + " := "
        return head + " | ".join(str(c) for c in self.cmds)


class _ActionNode(_Node):
    __slots__ = ("pipe",)

    def __init__(self, tree: _Tree, pos: int, pipe: _PipeNode) -> None:
        super().__init__(tree, pos)
        self.pipe = pipe

    def __str__(self) -> str:
        return "{{" + str(self.pipe) + "}}"


class _CommandNode(_Node):
    __slots__ = ("args",)

    def __init__(self, tree: _Tree, pos: int) -> None:
        super().__init__(tree, pos)
        self.args: list[_Node] = []

    def __str__(self) -> str:
        return " ".join(f"({a})" if isinstance(a, _PipeNode) else str(a) for a in self.args)


class _IdentifierNode(_Node):
    __slots__ = ("ident",)

    def __init__(self, tree: _Tree, pos: int, ident: str) -> None:
        super().__init__(tree, pos)
        self.ident = ident

    def __str__(self) -> str:
        return self.ident


class _VariableNode(_Node):
    __slots__ = ("ident",)

    def __init__(self, tree: _Tree, pos: int, ident: str) -> None:
        super().__init__(tree, pos)
        self.ident = ident.split(".")

    def __str__(self) -> str:
        return ".".join(self.ident)


class _DotNode(_Node):
    __slots__ = ()

    def __str__(self) -> str:
        return "."


class _NilNode(_Node):
    __slots__ = ()

    def __str__(self) -> str:
        return "nil"


class _FieldNode(_Node):
    __slots__ = ("ident",)

    def __init__(self, tree: _Tree, pos: int, ident: str) -> None:
        super().__init__(tree, pos)
        self.ident = ident[1:].split(".")

    def __str__(self) -> str:
        return "".join("." + i for i in self.ident)


class _ChainNode(_Node):
    __slots__ = ("node", "fields")

    def __init__(self, tree: _Tree, pos: int, node: _Node) -> None:
        super().__init__(tree, pos)
        self.node = node
        self.fields: list[str] = []

    def __str__(self) -> str:
        head = f"({self.node})" if isinstance(self.node, _PipeNode) else str(self.node)
        return head + "".join("." + f for f in self.fields)


class _BoolNode(_Node):
    __slots__ = ("value",)

    def __init__(self, tree: _Tree, pos: int, value: bool) -> None:
        super().__init__(tree, pos)
        self.value = value

    def __str__(self) -> str:
        return "true" if self.value else "false"


class _NumberNode(_Node):
    __slots__ = (
        "text",
        "is_int",
        "is_uint",
        "is_float",
        "is_complex",
        "int64",
        "uint64",
        "float64",
        "complex",
    )

    def __init__(self, tree: _Tree, pos: int, text: str) -> None:
        super().__init__(tree, pos)
        self.text = text
        self.is_int = self.is_uint = self.is_float = self.is_complex = False
        self.int64 = 0
        self.uint64 = 0
        self.float64 = 0.0
        self.complex = 0j

    def __str__(self) -> str:
        return self.text


class _StringNode(_Node):
    __slots__ = ("quoted", "text")

    def __init__(self, tree: _Tree, pos: int, quoted: str, text: str) -> None:
        super().__init__(tree, pos)
        self.quoted = quoted
        self.text = text

    def __str__(self) -> str:
        return self.quoted


class _EndNode(_Node):
    __slots__ = ()

    def __str__(self) -> str:
        return "{{end}}"


class _ElseNode(_Node):
    __slots__ = ()

    def __str__(self) -> str:
        return "{{else}}"


class _BranchNode(_Node):
    __slots__ = ("pipe", "list", "else_list")
    keyword = ""

    def __init__(
        self, tree: _Tree, pos: int, pipe: _PipeNode, lst: _ListNode, else_list: _ListNode | None
    ) -> None:
        super().__init__(tree, pos)
        self.pipe = pipe
        self.list = lst
        self.else_list = else_list

    def __str__(self) -> str:
        tail = "" if self.else_list is None else "{{else}}" + str(self.else_list)
        return "{{" + self.keyword + " " + str(self.pipe) + "}}" + str(self.list) + tail + "{{end}}"


class _IfNode(_BranchNode):
    __slots__ = ()
    keyword = "if"


class _RangeNode(_BranchNode):
    __slots__ = ()
    keyword = "range"


class _WithNode(_BranchNode):
    __slots__ = ()
    keyword = "with"


class _BreakNode(_Node):
    __slots__ = ()

    def __str__(self) -> str:
        return "{{break}}"


class _ContinueNode(_Node):
    __slots__ = ()

    def __str__(self) -> str:
        return "{{continue}}"


class _TemplateNode(_Node):
    __slots__ = ("name", "pipe")

    def __init__(self, tree: _Tree, pos: int, name: str, pipe: _PipeNode | None) -> None:
        super().__init__(tree, pos)
        self.name = name
        self.pipe = pipe

    def __str__(self) -> str:
        tail = "" if self.pipe is None else " " + str(self.pipe)
        return "{{template " + go_quote(self.name) + tail + "}}"


# unicode.IsSpace, which bytes.TrimSpace uses to decide that a template body is empty.
_GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
)


def _is_empty_tree(node: _Node | None) -> bool:
    if node is None:
        return True
    if isinstance(node, _ListNode):
        return all(_is_empty_tree(n) for n in node.nodes)
    if isinstance(node, _TextNode):
        return node.text.strip(_GO_SPACE) == ""
    return False


# ---------------------------------------------------------------------------------------------------------
# Parser


class _ParseFailure(Exception):
    """A parse error, already worded as Go words it."""


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


def _new_number(tree: _Tree, pos: int, text: str, typ: int) -> _NumberNode:
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


class _Tree:
    """One template's parse tree; nested definitions get their own tree sharing the lexer."""

    def __init__(self, name: str, text: str, parse_name: str) -> None:
        self.name = name
        self.parse_name = parse_name
        self.text = text
        self.root: _ListNode | None = None
        self.lex: _Lexer | None = None
        self.token: list[_Item] = [_Item(_Tok.EOF, 0, "", 0)] * 3
        self.peek_count = 0
        self.vars: list[str] = []
        self.tree_set: dict[str, _Tree] = {}
        self.funcs: frozenset[str] = frozenset()
        self.action_line = 0
        self.range_depth = 0

    # -- token stream with three-token lookahead (Go's line numbers in errors depend on it)
    def _next(self) -> _Item:
        if self.peek_count > 0:
            self.peek_count -= 1
        else:
            assert self.lex is not None
            self.token[0] = self.lex.next_item()
        return self.token[self.peek_count]

    def _backup(self) -> None:
        self.peek_count += 1

    def _backup2(self, t1: _Item) -> None:
        self.token[1] = t1
        self.peek_count = 2

    def _backup3(self, t2: _Item, t1: _Item) -> None:
        self.token[1] = t1
        self.token[2] = t2
        self.peek_count = 3

    def _peek(self) -> _Item:
        if self.peek_count > 0:
            return self.token[self.peek_count - 1]
        self.peek_count = 1
        assert self.lex is not None
        self.token[0] = self.lex.next_item()
        return self.token[0]

    def _next_non_space(self) -> _Item:
        while True:
            token = self._next()
            if token.typ != _Tok.SPACE:
                return token

    def _peek_non_space(self) -> _Item:
        token = self._next_non_space()
        self._backup()
        return token

    # -- errors
    def _errorf(self, msg: str) -> NoReturn:
        self.root = None
        raise _ParseFailure(f"template: {self.parse_name}:{self.token[0].line}: {msg}")

    def _expect(self, expected: int, context: str) -> _Item:
        token = self._next_non_space()
        if token.typ != expected:
            self._unexpected(token, context)
        return token

    def _expect_one_of(self, e1: int, e2: int, context: str) -> _Item:
        token = self._next_non_space()
        if token.typ != e1 and token.typ != e2:
            self._unexpected(token, context)
        return token

    def _unexpected(self, token: _Item, context: str) -> NoReturn:
        if token.typ == _Tok.ERROR:
            extra = ""
            if self.action_line != 0 and self.action_line != token.line:
                extra = f" in action started at {self.parse_name}:{self.action_line}"
                if token.val.endswith(" action"):
                    extra = extra[len(" in action") :]
            self._errorf(f"{token}{extra}")
        self._errorf(f"unexpected {token} in {context}")

    def _start_parse(self, funcs: frozenset[str], lex: _Lexer, tree_set: dict[str, _Tree]) -> None:
        self.root = None
        self.lex = lex
        self.vars = ["$"]
        self.funcs = funcs
        self.tree_set = tree_set

    def _stop_parse(self) -> None:
        self.lex = None
        self.vars = []

    def parse(self, funcs: frozenset[str], tree_set: dict[str, _Tree]) -> None:
        self.parse_name = self.name
        self._start_parse(funcs, _Lexer(self.text), tree_set)
        self._parse()
        self._add()
        self._stop_parse()

    def _add(self) -> None:
        tree = self.tree_set.get(self.name)
        if tree is None or _is_empty_tree(tree.root):
            self.tree_set[self.name] = self
            return
        if not _is_empty_tree(self.root):
            self._errorf(f"template: multiple definition of template {go_quote(self.name)}")

    def _child(self, name: str) -> _Tree:
        child = _Tree(name, self.text, self.parse_name)
        assert self.lex is not None
        child._start_parse(self.funcs, self.lex, self.tree_set)
        return child

    def _parse(self) -> None:
        self.root = _ListNode(self, self._peek().pos)
        while self._peek().typ != _Tok.EOF:
            if self._peek().typ == _Tok.LEFT_DELIM:
                delim = self._next()
                if self._next_non_space().typ == _Tok.DEFINE:
                    self._child("definition")._parse_definition()
                    continue
                self._backup2(delim)
            n = self._text_or_action()
            if isinstance(n, _EndNode | _ElseNode):
                self._errorf(f"unexpected {n}")
            self.root.nodes.append(n)

    def _parse_definition(self) -> None:
        context = "define clause"
        name = self._expect_one_of(_Tok.STRING, _Tok.RAW_STRING, context)
        try:
            self.name = _go_unquote(name.val)
        except _SyntaxError as err:
            self._errorf(str(err))
        self._expect(_Tok.RIGHT_DELIM, context)
        self.root, end = self._item_list()
        if not isinstance(end, _EndNode):
            self._errorf(f"unexpected {end} in {context}")
        self._add()
        self._stop_parse()

    def _item_list(self) -> tuple[_ListNode, _Node]:
        lst = _ListNode(self, self._peek_non_space().pos)
        while self._peek_non_space().typ != _Tok.EOF:
            n = self._text_or_action()
            if isinstance(n, _EndNode | _ElseNode):
                return lst, n
            lst.nodes.append(n)
        self._errorf("unexpected EOF")

    def _text_or_action(self) -> _Node:
        token = self._next_non_space()
        if token.typ == _Tok.TEXT:
            return _TextNode(self, token.pos, token.val)
        if token.typ == _Tok.LEFT_DELIM:
            self.action_line = token.line
            try:
                return self._action()
            finally:
                self.action_line = 0
        self._unexpected(token, "input")

    def _action(self) -> _Node:
        token = self._next_non_space()
        typ = token.typ
        if typ == _Tok.BLOCK:
            return self._block_control()
        if typ == _Tok.BREAK:
            return self._break_control(token.pos, "{{break}}", _BreakNode)
        if typ == _Tok.CONTINUE:
            return self._break_control(token.pos, "{{continue}}", _ContinueNode)
        if typ == _Tok.ELSE:
            return self._else_control()
        if typ == _Tok.END:
            return _EndNode(self, self._expect(_Tok.RIGHT_DELIM, "end").pos)
        if typ == _Tok.IF:
            return _IfNode(self, *self._parse_control(True, "if"))
        if typ == _Tok.RANGE:
            return _RangeNode(self, *self._parse_control(False, "range"))
        if typ == _Tok.TEMPLATE:
            return self._template_control()
        if typ == _Tok.WITH:
            return _WithNode(self, *self._parse_control(False, "with"))
        self._backup()
        token = self._peek()
        return _ActionNode(self, token.pos, self._pipeline("command", _Tok.RIGHT_DELIM))

    def _break_control(self, pos: int, word: str, cls: type[_Node]) -> _Node:
        token = self._next_non_space()
        if token.typ != _Tok.RIGHT_DELIM:
            self._unexpected(token, word)
        if self.range_depth == 0:
            self._errorf(f"{word} outside {{{{range}}}}")
        return cls(self, pos)

    def _pipeline(self, context: str, end: int) -> _PipeNode:
        token = self._peek_non_space()
        pipe = _PipeNode(self, token.pos)
        while True:  # declarations; loops only for a range's second variable
            v = self._peek_non_space()
            if v.typ != _Tok.VARIABLE:
                break
            self._next()
            after = self._peek()
            nxt = self._peek_non_space()
            if nxt.typ in (_Tok.ASSIGN, _Tok.DECLARE):
                pipe.is_assign = nxt.typ == _Tok.ASSIGN
                self._next_non_space()
                pipe.decl.append(_VariableNode(self, v.pos, v.val))
                self.vars.append(v.val)
            elif nxt.typ == _Tok.CHAR and nxt.val == ",":
                self._next_non_space()
                pipe.decl.append(_VariableNode(self, v.pos, v.val))
                self.vars.append(v.val)
                if context == "range" and len(pipe.decl) < 2:
                    if self._peek_non_space().typ in (_Tok.VARIABLE, _Tok.RIGHT_DELIM, _Tok.RIGHT_PAREN):
                        continue
                    self._errorf("range can only initialize variables")
                self._errorf(f"too many declarations in {context}")
            elif after.typ == _Tok.SPACE:
                self._backup3(v, after)
            else:
                self._backup2(v)
            break
        while True:
            token = self._next_non_space()
            if token.typ == end:
                self._check_pipeline(pipe, context)
                return pipe
            if token.typ in _OPERAND_START:
                self._backup()
                pipe.cmds.append(self._command())
            else:
                self._unexpected(token, context)

    def _check_pipeline(self, pipe: _PipeNode, context: str) -> None:
        if not pipe.cmds:
            self._errorf(f"missing value for {context}")
        for i, c in enumerate(pipe.cmds[1:]):
            if isinstance(c.args[0], _BoolNode | _DotNode | _NilNode | _NumberNode | _StringNode):
                self._errorf(f"non executable command in pipeline stage {i + 2}")

    def _parse_control(
        self, allow_else_if: bool, context: str
    ) -> tuple[int, _PipeNode, _ListNode, _ListNode | None]:
        saved = len(self.vars)
        try:
            pipe = self._pipeline(context, _Tok.RIGHT_DELIM)
            if context == "range":
                self.range_depth += 1
            lst, nxt = self._item_list()
            if context == "range":
                self.range_depth -= 1
            else_list: _ListNode | None = None
            if isinstance(nxt, _ElseNode):
                if allow_else_if and self._peek().typ == _Tok.IF:
                    self._next()
                    else_list = _ListNode(self, nxt.pos)
                    else_list.nodes.append(_IfNode(self, *self._parse_control(True, "if")))
                else:
                    else_list, nxt = self._item_list()
                    if not isinstance(nxt, _EndNode):
                        self._errorf(f"expected end; found {nxt}")
            return pipe.pos, pipe, lst, else_list
        finally:
            del self.vars[saved:]

    def _else_control(self) -> _Node:
        peek = self._peek_non_space()
        if peek.typ == _Tok.IF:
            return _ElseNode(self, peek.pos)
        token = self._expect(_Tok.RIGHT_DELIM, "else")
        return _ElseNode(self, token.pos)

    def _block_control(self) -> _Node:
        context = "block clause"
        token = self._next_non_space()
        name = self._template_name(token, context)
        pipe = self._pipeline(context, _Tok.RIGHT_DELIM)
        block = self._child(name)
        block.root, end = block._item_list()
        if not isinstance(end, _EndNode):
            self._errorf(f"unexpected {end} in {context}")
        block._add()
        block._stop_parse()
        return _TemplateNode(self, token.pos, name, pipe)

    def _template_control(self) -> _Node:
        context = "template clause"
        token = self._next_non_space()
        name = self._template_name(token, context)
        pipe: _PipeNode | None = None
        if self._next_non_space().typ != _Tok.RIGHT_DELIM:
            self._backup()
            pipe = self._pipeline(context, _Tok.RIGHT_DELIM)
        return _TemplateNode(self, token.pos, name, pipe)

    def _template_name(self, token: _Item, context: str) -> str:
        if token.typ in (_Tok.STRING, _Tok.RAW_STRING):
            try:
                return _go_unquote(token.val)
            except _SyntaxError as err:
                self._errorf(str(err))
        self._unexpected(token, context)

    def _command(self) -> _CommandNode:
        cmd = _CommandNode(self, self._peek_non_space().pos)
        while True:
            self._peek_non_space()
            operand = self._operand()
            if operand is not None:
                cmd.args.append(operand)
            token = self._next()
            if token.typ == _Tok.SPACE:
                continue
            if token.typ in (_Tok.RIGHT_DELIM, _Tok.RIGHT_PAREN):
                self._backup()
            elif token.typ != _Tok.PIPE:
                self._unexpected(token, "operand")
            break
        if not cmd.args:
            self._errorf("empty command")
        return cmd

    def _operand(self) -> _Node | None:
        node = self._term()
        if node is None:
            return None
        if self._peek().typ == _Tok.FIELD:
            chain = _ChainNode(self, self._peek().pos, node)
            while self._peek().typ == _Tok.FIELD:
                chain.fields.append(self._next().val[1:])
            if isinstance(node, _FieldNode):
                return _FieldNode(self, chain.pos, str(chain))
            if isinstance(node, _VariableNode):
                return _VariableNode(self, chain.pos, str(chain))
            if isinstance(node, _BoolNode | _StringNode | _NumberNode | _NilNode | _DotNode):
                self._errorf(f"unexpected . after term {go_quote(str(node))}")
            return chain
        return node

    def _term(self) -> _Node | None:
        token = self._next_non_space()
        typ = token.typ
        if typ == _Tok.IDENTIFIER:
            if token.val not in self.funcs:
                self._errorf(f"function {go_quote(token.val)} not defined")
            return _IdentifierNode(self, token.pos, token.val)
        if typ == _Tok.DOT:
            return _DotNode(self, token.pos)
        if typ == _Tok.NIL:
            return _NilNode(self, token.pos)
        if typ == _Tok.VARIABLE:
            v = _VariableNode(self, token.pos, token.val)
            if v.ident[0] not in self.vars:
                self._errorf(f"undefined variable {go_quote(v.ident[0])}")
            return v
        if typ == _Tok.FIELD:
            return _FieldNode(self, token.pos, token.val)
        if typ == _Tok.BOOL:
            return _BoolNode(self, token.pos, token.val == "true")
        if typ in (_Tok.CHAR_CONSTANT, _Tok.COMPLEX, _Tok.NUMBER):
            try:
                return _new_number(self, token.pos, token.val, typ)
            except _NumberError as err:
                self._errorf(str(err))
        if typ == _Tok.LEFT_PAREN:
            return self._pipeline("parenthesized pipeline", _Tok.RIGHT_PAREN)
        if typ in (_Tok.STRING, _Tok.RAW_STRING):
            try:
                return _StringNode(self, token.pos, token.val, _go_unquote(token.val))
            except _SyntaxError as err:
                self._errorf(str(err))
        self._backup()
        return None


_OPERAND_START = frozenset(
    {
        _Tok.BOOL,
        _Tok.CHAR_CONSTANT,
        _Tok.COMPLEX,
        _Tok.DOT,
        _Tok.FIELD,
        _Tok.IDENTIFIER,
        _Tok.NUMBER,
        _Tok.NIL,
        _Tok.RAW_STRING,
        _Tok.STRING,
        _Tok.VARIABLE,
        _Tok.LEFT_PAREN,
    }
)


# ---------------------------------------------------------------------------------------------------------
# Values. A template sees Go values; they are modelled with Python ones:
#   None -> nil (no value), bool, int -> int, _Byte -> uint8 (an element of a string), float -> float64,
#   complex -> complex128, str -> string, list -> []interface {}, dict -> map[string]interface {},
#   _Iface(x) -> an element read out of a list or map: Go sees an interface value until it is unwrapped.


class _Byte(int):
    """A uint8, as indexing a string yields."""

    __slots__ = ()


class _Iface:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _unwrap(v: Any) -> Any:
    return v.value if type(v) is _Iface else v


def _go_type(v: Any) -> str:
    t = type(v)
    if t is _Iface:
        return "interface {}"
    if t is bool:
        return "bool"
    if t is _Byte:
        return "uint8"
    if t is int:
        return "int"
    if t is float:
        return "float64"
    if t is complex:
        return "complex128"
    if t is str:
        return "string"
    if t is list:
        return "[]interface {}"
    if t is dict:
        return "map[string]interface {}"
    return "<nil>"


def _is_true(v: Any) -> bool:
    v = _unwrap(v)
    if v is None:
        return False
    if isinstance(v, str | list | dict):
        return len(v) > 0
    return bool(v)


# ---------------------------------------------------------------------------------------------------------
# fmt: Sprint, Sprintln and Sprintf with Go's verbs, flags and error forms.


def _shortest_digits(x: float) -> tuple[str, int]:
    """The shortest decimal digits that read back as x (x > 0), and the decimal point position."""
    sign, digits, exp = Decimal(repr(x)).as_tuple()
    ds = "".join(str(d) for d in digits).rstrip("0")
    if not ds:
        return "", 0
    assert isinstance(exp, int)
    return ds, len(digits) + exp


def _rounded_digits(x: float, sig: int) -> tuple[str, int]:
    """x (>= 0) rounded to sig significant digits, trailing zeros dropped, and the decimal point position."""
    if x == 0:
        return "", 0
    mant, _, exp = f"{x:.{sig - 1}e}".partition("e")
    ds = mant.replace(".", "").rstrip("0")
    return ds, int(exp) + 1


def _fmt_e(digits: str, dp: int, prec: int, ch: str) -> str:
    out = digits[:1] or "0"
    if prec > 0:
        out += "." + digits[1 : 1 + prec].ljust(prec, "0")
    exp = 0 if not digits else dp - 1
    sign = "-" if exp < 0 else "+"
    return f"{out}{ch}{sign}{abs(exp):02d}"


def _fmt_f(digits: str, dp: int, prec: int) -> str:
    if dp > 0:
        out = digits[:dp].ljust(dp, "0")
    else:
        out = "0"
    if prec > 0:
        frac = "".join(digits[dp + i] if 0 <= dp + i < len(digits) else "0" for i in range(prec))
        out += "." + frac
    return out


def _format_float(v: float, verb: str, prec: int) -> str:
    """strconv.FormatFloat(v, verb, prec, 64) for verbs e E f g G x X."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    neg = math.copysign(1.0, v) < 0
    x = abs(v)
    sign = "-" if neg else ""
    if verb in "xX":
        return sign + _format_hex_float(x, prec, verb)
    if verb == "b":
        # Binary exponent form: the 53-bit mantissa as an integer, then p and the power of two.
        if x == 0:
            return sign + "0p-1074"
        m, e = math.frexp(x)
        mant, exp = int(m * (1 << 53)), e - 53
        if exp < -1074:
            mant, exp = mant >> (-1074 - exp), -1074
        return f"{sign}{mant}p{'-' if exp < 0 else '+'}{abs(exp)}"
    shortest = prec < 0
    if verb in "eE":
        if shortest:
            digits, dp = _shortest_digits(x) if x else ("", 0)
            return sign + _fmt_e(digits, dp, max(len(digits) - 1, 0), verb)
        return sign + f"{x:.{prec}e}".replace("e", verb)
    if verb == "f":
        if shortest:
            digits, dp = _shortest_digits(x) if x else ("", 0)
            return sign + _fmt_f(digits, dp, max(len(digits) - dp, 0))
        return sign + f"{x:.{prec}f}"
    # g / G
    if shortest:
        digits, dp = _shortest_digits(x) if x else ("", 0)
        prec = len(digits)
        eprec = 6
    else:
        if prec == 0:
            prec = 1
        digits, dp = _rounded_digits(x, prec)
        eprec = prec
        if eprec > len(digits) and len(digits) >= dp:
            eprec = len(digits)
    exp = dp - 1
    if exp < -4 or exp >= eprec:
        if prec > len(digits):
            prec = len(digits)
        return sign + _fmt_e(digits, dp, prec - 1, "e" if verb == "g" else "E")
    if prec > dp:
        prec = len(digits)
    return sign + _fmt_f(digits, dp, max(prec - dp, 0))


def _format_hex_float(x: float, prec: int, verb: str) -> str:
    if x == 0:
        mant, exp = "0", 0
    else:
        m, e = math.frexp(x)  # x = m * 2**e with 0.5 <= m < 1
        mant_int = int(m * (1 << 53))  # 53 significant bits, leading bit set
        exp = e - 1
        frac = mant_int - (1 << 52)
        hexfrac = f"{frac:013x}"
        if prec >= 0:
            if prec < 13:
                shift = (13 - prec) * 4
                value = (1 << 52) + frac
                q, r = divmod(value, 1 << shift)
                half = 1 << (shift - 1)
                if r > half or (r == half and q & 1):
                    q += 1
                lead = q >> (prec * 4)
                if lead >= 2:
                    q >>= 1
                    exp += 1
                    lead = q >> (prec * 4)
                hexfrac = f"{q & ((1 << (prec * 4)) - 1):0{prec}x}" if prec else ""
            else:
                hexfrac = hexfrac.ljust(prec, "0")
            mant = "1" + ("." + hexfrac if hexfrac else "")
        else:
            hexfrac = hexfrac.rstrip("0")
            mant = "1" + ("." + hexfrac if hexfrac else "")
    if x == 0 and prec > 0:
        mant = "0." + "0" * prec
    out = f"0x{mant}p{'-' if exp < 0 else '+'}{abs(exp):02d}"
    return out.upper() if verb == "X" else out


@dataclass
class _Flags:
    plus: bool = False
    minus: bool = False
    sharp: bool = False
    space: bool = False
    zero: bool = False
    plus_v: bool = False
    sharp_v: bool = False
    wid: int = 0
    wid_present: bool = False
    prec: int = 0
    prec_present: bool = False


class _Printer:
    """A port of the behaviour of fmt's printer state: one buffer and the flags of the current verb."""

    def __init__(self) -> None:
        self.buf: list[str] = []
        self.f = _Flags()

    # -- padding
    def _padding(self, n: int) -> None:
        if n > 0:
            self.buf.append(("0" if self.f.zero else " ") * n)

    def _pad(self, s: str) -> None:
        f = self.f
        if not f.wid_present or f.wid == 0:
            self.buf.append(s)
            return
        width = f.wid - len(s)
        if not f.minus:
            self._padding(width)
            self.buf.append(s)
        else:
            self.buf.append(s)
            self._padding(width)

    # -- per-kind formatting
    def _fmt_integer(self, u: int, base: int, verb: str, upper: bool = False) -> None:
        f = self.f
        negative = u < 0
        if negative:
            u = -u
        prec = 0
        if f.prec_present:
            prec = f.prec
            if prec == 0 and u == 0:
                old = f.zero
                f.zero = False
                self._padding(f.wid)
                f.zero = old
                return
        elif f.zero and f.wid_present:
            prec = f.wid
            if negative or f.plus or f.space:
                prec -= 1
        if base == 10:
            s = str(u)
        elif base == 16:
            s = f"{u:X}" if upper else f"{u:x}"
        elif base == 8:
            s = f"{u:o}"
        else:
            s = f"{u:b}"
        if prec > len(s):
            s = "0" * (prec - len(s)) + s
        if f.sharp:
            if base == 2:
                s = "0b" + s
            elif base == 8:
                if s[0] != "0":
                    s = "0" + s
            elif base == 16:
                s = ("0X" if upper else "0x") + s
        if verb == "O":
            s = "0o" + s
        if negative:
            s = "-" + s
        elif f.plus:
            s = "+" + s
        elif f.space:
            s = " " + s
        old = f.zero
        f.zero = False
        self._pad(s)
        f.zero = old

    def _fmt_unicode(self, u: int) -> None:
        f = self.f
        prec = 4
        if f.prec_present and f.prec > 4:
            prec = f.prec
        s = "U+" + f"{u:X}".rjust(prec, "0")
        if f.sharp and u <= 0x10FFFF and not (0xD800 <= u <= 0xDFFF) and _is_print(chr(u)):
            s += " '" + chr(u) + "'"
        old = f.zero
        f.zero = False
        self._pad(s)
        f.zero = old

    def _fmt_c(self, u: int) -> None:
        if u > 0x10FFFF or 0xD800 <= u <= 0xDFFF:
            u = 0xFFFD
        self._pad(chr(u))

    def _fmt_qc(self, u: int) -> None:
        self._pad(_quote_rune(u, self.f.plus))

    def _truncate(self, s: str) -> str:
        if self.f.prec_present:
            return s[: self.f.prec]
        return s

    def _fmt_s(self, s: str) -> None:
        self._pad(self._truncate(s))

    def _fmt_sx(self, s: str, upper: bool) -> None:
        f = self.f
        b = s.encode("utf-8", "surrogateescape")
        length = len(b)
        if f.prec_present and f.prec < length:
            length = f.prec
        width = 2 * length
        if width > 0:
            if f.space:
                if f.sharp:
                    width *= 2
                width += length - 1
            elif f.sharp:
                width += 2
        else:
            if f.wid_present:
                self._padding(f.wid)
            return
        if f.wid_present and f.wid > width and not f.minus:
            self._padding(f.wid - width)
        prefix = "0X" if upper else "0x"
        out: list[str] = []
        if f.sharp:
            out.append(prefix)
        for i in range(length):
            if f.space and i > 0:
                out.append(" ")
                if f.sharp:
                    out.append(prefix)
            out.append(f"{b[i]:02X}" if upper else f"{b[i]:02x}")
        self.buf.append("".join(out))
        if f.wid_present and f.wid > width and f.minus:
            self._padding(f.wid - width)

    def _fmt_q(self, s: str) -> None:
        s = self._truncate(s)
        if self.f.sharp and _can_backquote(s):
            self._pad("`" + s + "`")
            return
        self._pad(go_quote(s, self.f.plus))

    def _fmt_float(self, v: float, verb: str, prec: int) -> None:
        f = self.f
        if f.prec_present:
            prec = f.prec
        num = _format_float(v, verb, prec)
        if num[0] in "+-":
            pass
        else:
            num = "+" + num
        if f.space and num[0] == "+" and not f.plus:
            num = " " + num[1:]
        if num[1] in "IN":
            old = f.zero
            f.zero = False
            if num[1] == "N" and not f.space and not f.plus:
                num = num[1:]
            self._pad(num)
            f.zero = old
            return
        if f.sharp and verb != "b":
            digits = 0
            if verb in "vgGx":
                digits = prec if prec != -1 else 6
            tail = ""
            body = num[1:]
            has_point = False
            saw_nonzero = False
            kept: list[str] = []
            for i, ch in enumerate(body):
                if ch == ".":
                    has_point = True
                elif ch in "pP" or (ch in "eE" and verb not in "xX"):
                    tail = body[i:]
                    break
                else:
                    if ch != "0":
                        saw_nonzero = True
                    if saw_nonzero:
                        digits -= 1
                kept.append(ch)
            body = "".join(kept)
            if not has_point:
                if body == "0":
                    digits -= 1
                body += "."
            if digits > 0:
                body += "0" * digits
            num = num[0] + body + tail
        if f.plus or num[0] != "+":
            if f.zero and f.wid_present and f.wid > len(num):
                self.buf.append(num[0])
                self._padding(f.wid - len(num))
                self.buf.append(num[1:])
                return
            self._pad(num)
            return
        self._pad(num[1:])

    # -- dispatch
    def bad_verb(self, verb: str, arg: Any) -> None:
        self.buf.append("%!" + verb + "(")
        if arg is not None:
            self.buf.append(_go_type(arg) + "=")
            self.print_arg(arg, "v")
        else:
            self.buf.append("<nil>")
        self.buf.append(")")

    def print_arg(self, arg: Any, verb: str) -> None:
        arg = _unwrap(arg)
        if arg is None:
            if verb in "Tv":
                self._pad("<nil>")
            else:
                self.bad_verb(verb, None)
            return
        if verb == "T":
            self._fmt_s(_go_type(arg))
            return
        self._print_value(arg, verb, 0)

    def _print_value(self, v: Any, verb: str, depth: int) -> None:
        f = self.f
        t = type(v)
        if t is _Iface:
            inner = v.value
            if inner is None:
                self.buf.append("interface {}(nil)" if f.sharp_v else "<nil>")
                return
            self._print_value(inner, verb, depth + 1)
            return
        if t is bool:
            if verb in "tv":
                self._pad("true" if v else "false")
            else:
                self.bad_verb(verb, v)
        elif t is int or t is _Byte:
            self._print_int(v, verb, t is int)
        elif t is float:
            self._print_float(v, verb)
        elif t is complex:
            if verb in "vbgGxXfFeE":
                old_plus = f.plus
                self.buf.append("(")
                self._print_float(v.real, verb)
                f.plus = True
                self._print_float(v.imag, verb)
                self.buf.append("i)")
                f.plus = old_plus
            else:
                self.bad_verb(verb, v)
        elif t is str:
            if verb == "v":
                self._fmt_q(v) if f.sharp_v else self._fmt_s(v)
            elif verb == "s":
                self._fmt_s(v)
            elif verb in "xX":
                self._fmt_sx(v, verb == "X")
            elif verb == "q":
                self._fmt_q(v)
            else:
                self.bad_verb(verb, v)
        elif t is dict:
            if f.sharp_v:
                self.buf.append("map[string]interface {}{")
            else:
                self.buf.append("map[")
            for i, key in enumerate(sorted(v)):
                if i > 0:
                    self.buf.append(", " if f.sharp_v else " ")
                self._print_value(key, verb, depth + 1)
                self.buf.append(":")
                self._print_value(_Iface(v[key]), verb, depth + 1)
            self.buf.append("}" if f.sharp_v else "]")
        elif t is list:
            if f.sharp_v:
                self.buf.append("[]interface {}{")
                for i, e in enumerate(v):
                    if i > 0:
                        self.buf.append(", ")
                    self._print_value(_Iface(e), verb, depth + 1)
                self.buf.append("}")
            else:
                self.buf.append("[")
                for i, e in enumerate(v):
                    if i > 0:
                        self.buf.append(" ")
                    self._print_value(_Iface(e), verb, depth + 1)
                self.buf.append("]")
        else:
            self.buf.append("?")

    def _print_int(self, v: int, verb: str, signed: bool) -> None:
        if verb == "v":
            if self.f.sharp_v and not signed:
                old = self.f.sharp
                self.f.sharp = True
                self._fmt_integer(int(v), 16, "v")
                self.f.sharp = old
            else:
                self._fmt_integer(int(v), 10, verb)
        elif verb == "d":
            self._fmt_integer(int(v), 10, verb)
        elif verb == "b":
            self._fmt_integer(int(v), 2, verb)
        elif verb in "oO":
            self._fmt_integer(int(v), 8, verb)
        elif verb == "x":
            self._fmt_integer(int(v), 16, verb)
        elif verb == "X":
            self._fmt_integer(int(v), 16, verb, upper=True)
        elif verb == "c":
            self._fmt_c(int(v) if v >= 0 else int(v) + 2**64)
        elif verb == "q":
            self._fmt_qc(int(v) if v >= 0 else int(v) + 2**64)
        elif verb == "U":
            self._fmt_unicode(int(v) if v >= 0 else int(v) + 2**64)
        else:
            self.bad_verb(verb, v)

    def _print_float(self, v: float, verb: str) -> None:
        if verb == "v":
            self._fmt_float(v, "g", -1)
        elif verb in "bgGxX":
            self._fmt_float(v, verb, -1)
        elif verb in "feE":
            self._fmt_float(v, verb, 6)
        elif verb == "F":
            self._fmt_float(v, "f", 6)
        else:
            self.bad_verb(verb, v)

    # -- entry points
    def do_print(self, args: list[Any]) -> None:
        prev_string = False
        for i, arg in enumerate(args):
            arg = _unwrap(arg)
            is_string = type(arg) is str
            if i > 0 and not is_string and not prev_string:
                self.buf.append(" ")
            self.f = _Flags()
            self.print_arg(arg, "v")
            prev_string = is_string

    def do_println(self, args: list[Any]) -> None:
        for i, arg in enumerate(args):
            if i > 0:
                self.buf.append(" ")
            self.f = _Flags()
            self.print_arg(arg, "v")
        self.buf.append("\n")

    def do_printf(self, fmt: str, args: list[Any]) -> None:
        end = len(fmt)
        arg_num = 0
        after_index = False
        reordered = False
        i = 0
        while i < end:
            good_arg_num = True
            j = fmt.find("%", i)
            if j < 0:
                self.buf.append(fmt[i:])
                break
            if j > i:
                self.buf.append(fmt[i:j])
            i = j + 1
            f = self.f = _Flags()
            simple_done = False
            while i < end:
                c = fmt[i]
                if c == "#":
                    f.sharp = True
                elif c == "0":
                    f.zero = not f.minus
                elif c == "+":
                    f.plus = True
                elif c == "-":
                    f.minus = True
                    f.zero = False
                elif c == " ":
                    f.space = True
                else:
                    if "a" <= c <= "z" and arg_num < len(args):
                        if c == "v":
                            f.sharp_v, f.sharp = f.sharp, False
                            f.plus_v, f.plus = f.plus, False
                        self.print_arg(args[arg_num], c)
                        arg_num += 1
                        i += 1
                        simple_done = True
                    break
                i += 1
            if simple_done:
                continue
            # argument index, width, precision
            arg_num, i, after_index, ok, reordered = self._arg_number(arg_num, fmt, i, len(args), reordered)
            good_arg_num = good_arg_num and ok
            if i < end and fmt[i] == "*":
                i += 1
                f.wid, f.wid_present, arg_num = _int_from_arg(args, arg_num)
                if not f.wid_present:
                    self.buf.append("%!(BADWIDTH)")
                if f.wid < 0:
                    f.wid = -f.wid
                    f.minus = True
                    f.zero = False
                after_index = False
            else:
                f.wid, f.wid_present, i = _parse_num(fmt, i, end)
                if after_index and f.wid_present:
                    good_arg_num = False
            if i + 1 < end and fmt[i] == ".":
                i += 1
                if after_index:
                    good_arg_num = False
                arg_num, i, after_index, ok, reordered = self._arg_number(
                    arg_num, fmt, i, len(args), reordered
                )
                good_arg_num = good_arg_num and ok
                if i < end and fmt[i] == "*":
                    i += 1
                    f.prec, f.prec_present, arg_num = _int_from_arg(args, arg_num)
                    if f.prec < 0:
                        f.prec = 0
                        f.prec_present = False
                    if not f.prec_present:
                        self.buf.append("%!(BADPREC)")
                    after_index = False
                else:
                    f.prec, f.prec_present, i = _parse_num(fmt, i, end)
                    if not f.prec_present:
                        f.prec, f.prec_present = 0, True
            if not after_index:
                arg_num, i, after_index, ok, reordered = self._arg_number(
                    arg_num, fmt, i, len(args), reordered
                )
                good_arg_num = good_arg_num and ok
            if i >= end:
                self.buf.append("%!(NOVERB)")
                break
            verb = fmt[i]
            i += 1
            if verb == "%":
                self.buf.append("%")
            elif not good_arg_num:
                self.buf.append("%!" + verb + "(BADINDEX)")
            elif arg_num >= len(args):
                self.buf.append("%!" + verb + "(MISSING)")
            else:
                if verb == "v":
                    f.sharp_v, f.sharp = f.sharp, False
                    f.plus_v, f.plus = f.plus, False
                self.print_arg(args[arg_num], verb)
                arg_num += 1
        if not reordered and arg_num < len(args):
            self.f = _Flags()
            self.buf.append("%!(EXTRA ")
            for k, arg in enumerate(args[arg_num:]):
                if k > 0:
                    self.buf.append(", ")
                arg = _unwrap(arg)
                if arg is None:
                    self.buf.append("<nil>")
                else:
                    self.buf.append(_go_type(arg) + "=")
                    self.print_arg(arg, "v")
            self.buf.append(")")

    def _arg_number(
        self, arg_num: int, fmt: str, i: int, num_args: int, reordered: bool
    ) -> tuple[int, int, bool, bool, bool]:
        """An explicit [n] argument index: (arg_num, i, found, good, reordered)."""
        if i >= len(fmt) or fmt[i] != "[":
            return arg_num, i, False, True, reordered
        index, wid, ok = _parse_arg_number(fmt[i:])
        if ok and 0 <= index < num_args:
            return index, i + wid, True, True, True
        return arg_num, i + wid, ok, False, True


def _parse_num(s: str, start: int, end: int) -> tuple[int, bool, int]:
    if start >= end:
        return 0, False, end
    num = 0
    is_num = False
    i = start
    while i < end and "0" <= s[i] <= "9":
        if num > 1_000_000:  # Go's tooLarge guard
            return 0, False, end
        num = num * 10 + ord(s[i]) - 48
        is_num = True
        i += 1
    return num, is_num, i


def _parse_arg_number(fmt: str) -> tuple[int, int, bool]:
    if len(fmt) < 3:
        return 0, 1, False
    for i in range(1, len(fmt)):
        if fmt[i] == "]":
            width, ok, newi = _parse_num(fmt, 1, i)
            if not ok or newi != i:
                return 0, i + 1, False
            return width - 1, i + 1, True
    return 0, 1, False


def _int_from_arg(args: list[Any], arg_num: int) -> tuple[int, bool, int]:
    if arg_num >= len(args):
        return 0, False, arg_num
    arg = _unwrap(args[arg_num])
    num, is_int = 0, False
    if type(arg) is int or type(arg) is _Byte:
        num, is_int = int(arg), True
    if is_int and not (-1_000_000 <= num <= 1_000_000):
        num, is_int = 0, False
    return num, is_int, arg_num + 1


def go_sprint(*args: Any) -> str:
    """fmt.Sprint."""
    p = _Printer()
    p.do_print(list(args))
    return "".join(p.buf)


def go_sprintln(*args: Any) -> str:
    """fmt.Sprintln."""
    p = _Printer()
    p.do_println(list(args))
    return "".join(p.buf)


def go_sprintf(fmt: str, *args: Any) -> str:
    """fmt.Sprintf."""
    p = _Printer()
    p.do_printf(fmt, list(args))
    return "".join(p.buf)


# ---------------------------------------------------------------------------------------------------------
# Built-in functions. Parameters are typed as Go types them, because argument checking depends on it:
# "string", "any" (interface {}, receives the plain value) or "value" (reflect.Value, sees what Go sees).


class _CallError(Exception):
    """An error returned by a function; the executor wraps it as `error calling NAME: ...`."""


_ZERO_VALUE_TYPE = "reflect: call of reflect.Value.Type on zero Value"


@dataclass(frozen=True)
class _Func:
    params: tuple[str, ...]
    variadic: bool
    call: Callable[..., Any]
    builtin: bool = True


def _indirect_iface(v: Any) -> Any:
    return v.value if type(v) is _Iface else v


def _go_and_or(*args: Any) -> Any:  # never called: and/or short-circuit in the executor
    raise AssertionError("unreachable")


def _go_not(v: Any) -> bool:
    return not _is_true(v)


def _basic_kind(v: Any) -> str:
    t = type(v)
    if t is bool:
        return "bool"
    if t is int:
        return "int"
    if t is _Byte:
        return "uint"
    if t is float:
        return "float"
    if t is complex:
        return "complex"
    if t is str:
        return "string"
    return ""


def _go_eq(arg1: Any, *rest: Any) -> bool:
    arg1 = _indirect_iface(arg1)
    if not rest:
        raise _CallError("missing argument for comparison")
    k1 = _basic_kind(arg1)
    for arg in rest:
        arg = _indirect_iface(arg)
        k2 = _basic_kind(arg)
        truth = False
        if k1 != k2:
            if {k1, k2} == {"int", "uint"}:
                truth = int(arg1) >= 0 and int(arg) >= 0 and int(arg1) == int(arg)
            elif arg1 is not None and arg is not None:
                raise _CallError("incompatible types for comparison")
        elif k1:
            truth = arg1 == arg
        else:
            # Neither is a basic kind: only nil compares; lists and maps are not comparable.
            if arg1 is None or arg is None:
                truth = arg1 is None and arg is None
            else:
                if type(arg1) is not type(arg):
                    raise _CallError(
                        go_sprintf(
                            "non-comparable types %s: %v, %s: %v", arg1, _go_type(arg1), _go_type(arg), arg
                        )
                    )
                raise _CallError(go_sprintf("non-comparable type %s: %v", arg, _go_type(arg)))
        if truth:
            return True
    return False


def _go_ne(a: Any, b: Any) -> bool:
    return not _go_eq(a, b)


def _go_lt(a: Any, b: Any) -> bool:
    a = _indirect_iface(a)
    k1 = _basic_kind(a)
    if not k1:
        raise _CallError("invalid type for comparison")
    b = _indirect_iface(b)
    k2 = _basic_kind(b)
    if not k2:
        raise _CallError("invalid type for comparison")
    if k1 != k2:
        if {k1, k2} == {"int", "uint"}:
            return int(a) < int(b)
        raise _CallError("incompatible types for comparison")
    if k1 in ("bool", "complex"):
        raise _CallError("invalid type for comparison")
    if k1 == "string":
        # Go compares strings byte-wise, which for UTF-8 is code point order, as Python does.
        return bool(a < b)
    return bool(a < b)


def _go_le(a: Any, b: Any) -> bool:
    return _go_lt(a, b) or _go_eq(a, b)


def _go_gt(a: Any, b: Any) -> bool:
    return not _go_le(a, b)


def _go_ge(a: Any, b: Any) -> bool:
    return not _go_lt(a, b)


def _go_len(item: Any) -> int:
    if type(item) is _Iface:
        if item.value is None:
            raise _CallError("len of nil pointer")
        item = item.value
    if item is None:
        raise _CallError(_ZERO_VALUE_TYPE)
    if type(item) is str:
        return _utf8_len(item)
    if type(item) in (list, dict):
        return len(item)
    raise _CallError(f"len of type {_go_type(item)}")


def _index_arg(index: Any, cap: int) -> int:
    if type(index) is int or type(index) is _Byte:
        x = int(index)
    elif index is None:
        raise _CallError("cannot index slice/array with nil")
    else:
        raise _CallError(f"cannot index slice/array with type {_go_type(index)}")
    if x < 0 or x > cap:
        raise _CallError(f"index out of range: {x}")
    return x


def _go_index(item: Any, *indexes: Any) -> Any:
    item = _indirect_iface(item)
    if item is None:
        raise _CallError("index of untyped nil")
    for index in indexes:
        index = _indirect_iface(index)
        if type(item) is _Iface:
            if item.value is None:
                raise _CallError("index of nil pointer")
            item = item.value
        t = type(item)
        if t is str:
            b = item.encode("utf-8", "surrogateescape")
            x = _index_arg(index, len(b))
            if x == len(b):
                raise _CallError("reflect: string index out of range")
            item = _Byte(b[x])
        elif t is list:
            x = _index_arg(index, len(item))
            if x == len(item):
                raise _CallError("reflect: slice index out of range")
            item = _Iface(item[x])
        elif t is dict:
            if index is None:
                raise _CallError("value is nil; should be of type string")
            if type(index) is not str:
                raise _CallError(f"value has type {_go_type(index)}; should be string")
            item = _Iface(item.get(index))
        else:
            raise _CallError(f"can't index item of type {_go_type(item)}")
    return item


def _go_slice(item: Any, *indexes: Any) -> Any:
    item = _indirect_iface(item)
    if item is None:
        raise _CallError("slice of untyped nil")
    if len(indexes) > 3:
        raise _CallError(f"too many slice indexes: {len(indexes)}")
    t = type(item)
    if t is str:
        if len(indexes) == 3:
            raise _CallError("cannot 3-index slice a string")
        data = item.encode("utf-8", "surrogateescape")
        cap = len(data)
    elif t is list:
        cap = len(item)
    else:
        raise _CallError(f"can't slice item of type {_go_type(item)}")
    idx = [0, cap, 0]
    for i, index in enumerate(indexes):
        # Unlike index, slice does not look inside interface values: an element read from data is refused.
        idx[i] = _index_arg(index, cap)
    if idx[0] > idx[1]:
        raise _CallError(f"invalid slice index: {idx[0]} > {idx[1]}")
    if len(indexes) == 3 and idx[1] > idx[2]:
        raise _CallError(f"invalid slice index: {idx[1]} > {idx[2]}")
    if t is str:
        return data[idx[0] : idx[1]].decode("utf-8", "surrogateescape")
    return item[idx[0] : idx[1]]


def _go_call(fn: Any, *args: Any) -> Any:
    fn = _indirect_iface(fn)
    if fn is None:
        raise _CallError("call of nil")
    raise _CallError(f"non-function of type {_go_type(fn)}")


def _eval_args(args: tuple[Any, ...]) -> str:
    if len(args) == 1 and type(args[0]) is str:
        return str(args[0])
    # A nil argument prints as "<no value>" here, unlike in print.
    return go_sprint(*["<no value>" if a is None else a for a in args])


_HTML_ESCAPES = {"\0": "\ufffd", '"': "&#34;", "'": "&#39;", "&": "&amp;", "<": "&lt;", ">": "&gt;"}


def html_escape(s: str) -> str:
    """text/template's html: escapes " ' & < > and NUL."""
    if not any(c in s for c in "'\"&<>\0"):
        return s
    return "".join(_HTML_ESCAPES.get(c, c) for c in s)


_JS_ESCAPES = {
    "\\": "\\\\",
    "'": "\\'",
    '"': '\\"',
    "<": "\\u003C",
    ">": "\\u003E",
    "&": "\\u0026",
    "=": "\\u003D",
}


def js_escape(s: str) -> str:
    """text/template's js: escapes quotes, backslash, < > & =, control characters and unprintable runes."""
    out: list[str] = []
    for ch in s:
        code = ord(ch)
        if ch in _JS_ESCAPES:
            out.append(_JS_ESCAPES[ch])
        elif code < 0x20:
            out.append(f"\\u00{code:02X}")
        elif code < 0x80 or _is_print(ch) or 0xDC80 <= code <= 0xDCFF:
            # Bytes that are not UTF-8 decode to U+FFFD in Go, which is printable, so they pass as they are.
            out.append(ch)
        else:
            out.append(f"\\u{code:04X}")
    return "".join(out)


def _go_html(*args: Any) -> str:
    return html_escape(_eval_args(args))


def _go_js(*args: Any) -> str:
    return js_escape(_eval_args(args))


def _go_urlquery(*args: Any) -> str:
    text = _eval_args(args).encode("utf-8", "surrogateescape")
    return urllib.parse.quote_plus(text, safe="")


def _go_print(*args: Any) -> str:
    return go_sprint(*args)


def _go_printf(fmt: str, *args: Any) -> str:
    return go_sprintf(fmt, *args)


def _go_println(*args: Any) -> str:
    return go_sprintln(*args)


_BUILTINS: dict[str, _Func] = {
    "and": _Func(("value", "value"), True, _go_and_or),
    "call": _Func(("value", "value"), True, _go_call),
    "html": _Func(("any",), True, _go_html),
    "index": _Func(("value", "value"), True, _go_index),
    "slice": _Func(("value", "value"), True, _go_slice),
    "js": _Func(("any",), True, _go_js),
    "len": _Func(("value",), False, _go_len),
    "not": _Func(("value",), False, _go_not),
    "or": _Func(("value", "value"), True, _go_and_or),
    "print": _Func(("any",), True, _go_print),
    "printf": _Func(("string", "any"), True, _go_printf),
    "println": _Func(("any",), True, _go_println),
    "urlquery": _Func(("any",), True, _go_urlquery),
    "eq": _Func(("value", "value"), True, _go_eq),
    "ge": _Func(("value", "value"), False, _go_ge),
    "gt": _Func(("value", "value"), False, _go_gt),
    "le": _Func(("value", "value"), False, _go_le),
    "lt": _Func(("value", "value"), False, _go_lt),
    "ne": _Func(("value", "value"), False, _go_ne),
}


# webhook's own functions.


def getenv(name: str) -> str:
    """The environment variable NAME, or "" when unset."""
    return os.environ.get(name, "")


def cat(path: str) -> str:
    """The text of a file with one trailing newline cut, or "" if it cannot be read."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except (OSError, ValueError):
        return ""
    text = data.decode("utf-8", "surrogateescape")
    return text[:-1] if text.endswith("\n") else text


def credential(name: str) -> str:
    """systemd's LoadCredential: $CREDENTIALS_DIRECTORY/NAME, or the environment variable NAME without it."""
    directory = getenv("CREDENTIALS_DIRECTORY")
    if directory == "":
        return getenv(name)
    return cat(posixpath.join(directory, name))


WEBHOOK_FUNCS: dict[str, Callable[[str], str]] = {"cat": cat, "credential": credential, "getenv": getenv}


# ---------------------------------------------------------------------------------------------------------
# Executor


class _ExecFailure(Exception):
    pass


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


_MISSING = object()  # "no final value": the command is first in its pipeline
_MAX_DEPTH = 100000


class _State:
    __slots__ = ("tmpl", "out", "node", "vars", "depth")

    def __init__(self, tmpl: Template, out: list[str], variables: list[list[Any]], depth: int) -> None:
        self.tmpl = tmpl
        self.out = out
        self.node: _Node | None = None
        self.vars = variables
        self.depth = depth

    # -- errors
    def errorf(self, msg: str) -> NoReturn:
        name = self.tmpl.name
        node = self.node
        if node is None:
            raise _ExecFailure(f"template: {name}: {msg}")
        tree = node.tree
        before = tree.text[: node.pos]
        nl = before.rfind("\n")
        col = _utf8_len(before[nl + 1 :]) if nl >= 0 else _utf8_len(before)
        line = 1 + before.count("\n")
        location = f"{tree.parse_name}:{line}:{col}"
        raise _ExecFailure(f"template: {location}: executing {go_quote(name)} at <{node}>: {msg}")

    # -- variables
    def push(self, name: str, value: Any) -> None:
        self.vars.append([name, value])

    def set_var(self, name: str, value: Any) -> None:
        for entry in reversed(self.vars):
            if entry[0] == name:
                entry[1] = value
                return
        self.errorf(f"undefined variable: {name}")

    def var_value(self, name: str) -> Any:
        for entry in reversed(self.vars):
            if entry[0] == name:
                return entry[1]
        self.errorf(f"undefined variable: {name}")

    # -- walking the tree
    def walk(self, dot: Any, node: _Node) -> None:
        self.node = node
        t = type(node)
        if t is _TextNode:
            self.out.append(node.text)  # type: ignore[attr-defined]
        elif t is _ActionNode:
            assert isinstance(node, _ActionNode)
            val = self.eval_pipeline(dot, node.pipe)
            if not node.pipe.decl:
                self.node = node
                self.out.append("<no value>" if val is None else go_sprint(val))
        elif t is _ListNode:
            for n in node.nodes:  # type: ignore[attr-defined]
                self.walk(dot, n)
        elif t is _IfNode or t is _WithNode:
            assert isinstance(node, _BranchNode)
            self.walk_if_or_with(t is _WithNode, dot, node)
        elif t is _RangeNode:
            assert isinstance(node, _RangeNode)
            self.walk_range(dot, node)
        elif t is _TemplateNode:
            assert isinstance(node, _TemplateNode)
            self.walk_template(dot, node)
        elif t is _BreakNode:
            raise _Break()
        elif t is _ContinueNode:
            raise _Continue()
        else:
            self.errorf(f"unknown node: {node}")

    def walk_if_or_with(self, is_with: bool, dot: Any, node: _BranchNode) -> None:
        mark = len(self.vars)
        try:
            val = self.eval_pipeline(dot, node.pipe)
            if _is_true(val):
                self.walk(val if is_with else dot, node.list)
            elif node.else_list is not None:
                self.walk(dot, node.else_list)
        finally:
            del self.vars[mark:]

    def walk_range(self, dot: Any, r: _RangeNode) -> None:
        self.node = r
        mark0 = len(self.vars)
        try:
            val = _unwrap(self.eval_pipeline(dot, r.pipe))
            mark = len(self.vars)
            ndecl = len(r.pipe.decl)

            def one(index: Any, elem: Any) -> None:
                if ndecl > 0:
                    self.vars[-1][1] = elem
                if ndecl > 1:
                    self.vars[-2][1] = index
                try:
                    self.walk(elem, r.list)
                except _Continue:
                    pass
                finally:
                    del self.vars[mark:]

            t = type(val)
            if t is list:
                if val:
                    for i, e in enumerate(val):
                        one(i, _Iface(e))
                    return
            elif t is dict:
                if val:
                    for k in sorted(val):
                        one(k, _Iface(val[k]))
                    return
            elif val is not None:
                self.errorf(f"range can't iterate over {go_sprint(val)}")
            if r.else_list is not None:
                self.walk(dot, r.else_list)
        except _Break:
            pass
        finally:
            del self.vars[mark0:]

    def walk_template(self, dot: Any, t: _TemplateNode) -> None:
        self.node = t
        tmpl = self.tmpl.lookup(t.name)
        if tmpl is None:
            self.errorf(f"template {go_quote(t.name)} not defined")
        if self.depth == _MAX_DEPTH:
            self.errorf(f"exceeded maximum template depth ({_MAX_DEPTH})")
        dot = self.eval_pipeline(dot, t.pipe)
        state = _State(tmpl, self.out, [["$", dot]], self.depth + 1)
        assert tmpl.tree is not None and tmpl.tree.root is not None
        try:
            state.walk(dot, tmpl.tree.root)
        except RecursionError:
            if self.depth < 20:
                raise  # deep nesting inside one template, not template recursion
            # Python's stack ends long before Go's depth limit; report it the way Go reports its limit.
            self.node = t
            self.errorf(f"exceeded maximum template depth ({_MAX_DEPTH})")

    # -- pipelines and commands
    def eval_pipeline(self, dot: Any, pipe: _PipeNode | None) -> Any:
        if pipe is None:
            return None
        self.node = pipe
        value: Any = _MISSING
        for cmd in pipe.cmds:
            value = self.eval_command(dot, cmd, value)
            if type(value) is _Iface:
                value = value.value
        for var in pipe.decl:
            if pipe.is_assign:
                self.set_var(var.ident[0], value)
            else:
                self.push(var.ident[0], value)
        return value

    def not_a_function(self, args: list[_Node], final: Any) -> None:
        if len(args) > 1 or final is not _MISSING:
            self.errorf(f"can't give argument to non-function {args[0]}")

    def eval_command(self, dot: Any, cmd: _CommandNode, final: Any) -> Any:
        first = cmd.args[0]
        t = type(first)
        if t is _FieldNode:
            assert isinstance(first, _FieldNode)
            self.node = first
            return self.eval_field_chain(dot, dot, first, first.ident, cmd.args, final)
        if t is _ChainNode:
            assert isinstance(first, _ChainNode)
            return self.eval_chain_node(dot, first, cmd.args, final)
        if t is _IdentifierNode:
            assert isinstance(first, _IdentifierNode)
            return self.eval_function(dot, first, cmd, cmd.args, final)
        if t is _PipeNode:
            assert isinstance(first, _PipeNode)
            self.not_a_function(cmd.args, final)
            return self.eval_pipeline(dot, first)
        if t is _VariableNode:
            assert isinstance(first, _VariableNode)
            return self.eval_variable_node(dot, first, cmd.args, final)
        self.node = first
        self.not_a_function(cmd.args, final)
        if t is _BoolNode:
            return first.value  # type: ignore[attr-defined]
        if t is _DotNode:
            return dot
        if t is _NilNode:
            self.errorf("nil is not a command")
        if t is _NumberNode:
            assert isinstance(first, _NumberNode)
            return self.ideal_constant(first)
        if t is _StringNode:
            return first.text  # type: ignore[attr-defined]
        self.errorf(f"can't evaluate command {go_quote(str(first))}")

    def ideal_constant(self, c: _NumberNode) -> Any:
        self.node = c
        text = c.text
        is_hex_int = (
            len(text) > 2 and text[0] == "0" and text[1] in "xX" and not any(ch in text for ch in "pP")
        )
        if c.is_complex:
            return c.complex
        if c.is_float and not is_hex_int and text[:1] != "'" and any(ch in text for ch in ".eEpP"):
            return c.float64
        if c.is_int:
            return c.int64
        if c.is_uint:
            self.errorf(f"{text} overflows int")
        return None

    def eval_chain_node(self, dot: Any, chain: _ChainNode, args: list[_Node], final: Any) -> Any:
        self.node = chain
        if isinstance(chain.node, _NilNode):
            self.errorf(f"indirection through explicit nil in {chain}")
        pipe = self.eval_arg(dot, None, chain.node)
        return self.eval_field_chain(dot, pipe, chain, chain.fields, args, final)

    def eval_variable_node(self, dot: Any, var: _VariableNode, args: list[_Node] | None, final: Any) -> Any:
        self.node = var
        value = self.var_value(var.ident[0])
        if len(var.ident) == 1:
            self.not_a_function(args or [var], final)
            return value
        return self.eval_field_chain(dot, value, var, var.ident[1:], args, final)

    def eval_field_chain(
        self, dot: Any, receiver: Any, node: _Node, ident: list[str], args: list[_Node] | None, final: Any
    ) -> Any:
        for name in ident[:-1]:
            receiver = self.eval_field(name, None, _MISSING, receiver)
        return self.eval_field(ident[-1], args, final, receiver)

    def eval_field(self, name: str, args: list[_Node] | None, final: Any, receiver: Any) -> Any:
        if receiver is None:
            return None
        typ = _go_type(receiver)
        if type(receiver) is _Iface:
            receiver = receiver.value
            if receiver is None:
                self.errorf(f"nil pointer evaluating {typ}.{name}")
        has_args = (args is not None and len(args) > 1) or final is not _MISSING
        if type(receiver) is dict:
            if has_args:
                self.errorf(f"{name} is not a method but has arguments")
            if name in receiver:
                return _Iface(receiver[name])
            return None
        self.errorf(f"can't evaluate field {name} in type {typ}")

    def eval_function(
        self, dot: Any, node: _IdentifierNode, cmd: _Node, args: list[_Node] | None, final: Any
    ) -> Any:
        self.node = node
        name = node.ident
        fn = self.tmpl.funcs.get(name) or _BUILTINS.get(name)
        if fn is None:
            self.errorf(f"{go_quote(name)} is not a defined function")
        return self.eval_call(dot, fn, cmd, name, args, final)

    def eval_call(
        self, dot: Any, fn: _Func, node: _Node, name: str, args: list[_Node] | None, final: Any
    ) -> Any:
        call_args = args[1:] if args is not None else []
        num_in = len(call_args) + (0 if final is _MISSING else 1)
        nparams = len(fn.params)
        if fn.variadic:
            num_fixed = nparams - 1
            if num_in < num_fixed:
                self.errorf(
                    f"wrong number of args for {name}: want at least {num_fixed} got {len(call_args)}"
                )
        else:
            num_fixed = len(call_args)
            if num_in != nparams:
                self.errorf(f"wrong number of args for {name}: want {nparams} got {num_in}")
        if fn.builtin and name in ("and", "or"):
            v: Any = None
            for arg in call_args:
                v = self.eval_arg(dot, "value", arg)
                if _is_true(v) == (name == "or"):
                    return v
            if final is not _MISSING:
                v = self.validate_type(final, "value")
            return v
        argv: list[Any] = []
        i = 0
        while i < num_fixed and i < len(call_args):
            argv.append(self.eval_arg(dot, fn.params[i], call_args[i]))
            i += 1
        if fn.variadic:
            while i < len(call_args):
                argv.append(self.eval_arg(dot, fn.params[-1], call_args[i]))
                i += 1
        if final is not _MISSING:
            if fn.variadic and num_in - 1 < num_fixed:
                ptype = fn.params[num_in - 1]
            else:
                ptype = fn.params[-1]
            argv.append(self.validate_type(final, ptype))
        try:
            return fn.call(*argv)
        except _CallError as err:
            self.node = node
            self.errorf(f"error calling {name}: {err}")

    def validate_type(self, value: Any, typ: str | None) -> Any:
        if value is None:
            if typ is None or typ in ("any", "value"):
                return None
            self.errorf(f"invalid value; expected {typ}")
        if typ is None or typ == "value":
            return value
        if typ == "any":
            return _unwrap(value)
        # typ == "string"
        inner = value
        if type(inner) is _Iface:
            if inner.value is None:
                self.errorf(f"wrong type for value; expected string; got {_go_type(inner)}")
            inner = inner.value
        if type(inner) is not str:
            self.errorf(f"wrong type for value; expected string; got {_go_type(inner)}")
        return inner

    def eval_arg(self, dot: Any, typ: str | None, n: _Node) -> Any:
        self.node = n
        t = type(n)
        if t is _DotNode:
            return self.validate_type(dot, typ)
        if t is _NilNode:
            if typ in ("any", "value"):
                return None
            self.errorf(f"cannot assign nil to {_type_name(typ)}")
        if t is _FieldNode:
            assert isinstance(n, _FieldNode)
            self.node = n
            return self.validate_type(self.eval_field_chain(dot, dot, n, n.ident, [n], _MISSING), typ)
        if t is _VariableNode:
            assert isinstance(n, _VariableNode)
            return self.validate_type(self.eval_variable_node(dot, n, None, _MISSING), typ)
        if t is _PipeNode:
            assert isinstance(n, _PipeNode)
            return self.validate_type(self.eval_pipeline(dot, n), typ)
        if t is _IdentifierNode:
            assert isinstance(n, _IdentifierNode)
            return self.validate_type(self.eval_function(dot, n, n, None, _MISSING), typ)
        if t is _ChainNode:
            assert isinstance(n, _ChainNode)
            return self.validate_type(self.eval_chain_node(dot, n, [], _MISSING), typ)
        if typ == "string":
            if t is _StringNode:
                return n.text  # type: ignore[attr-defined]
            self.errorf(f"expected string; found {n}")
        if typ in ("any", "value"):
            return self.eval_empty_interface(dot, n)
        self.errorf(f"can't handle {n} for arg of type {_type_name(typ)}")

    def eval_empty_interface(self, dot: Any, n: _Node) -> Any:
        self.node = n
        t = type(n)
        if t is _BoolNode:
            return n.value  # type: ignore[attr-defined]
        if t is _NumberNode:
            assert isinstance(n, _NumberNode)
            return self.ideal_constant(n)
        if t is _StringNode:
            return n.text  # type: ignore[attr-defined]
        self.errorf(f"can't handle assignment of {n} to empty interface argument")


def _type_name(typ: str | None) -> str:
    return {"any": "interface {}", "value": "reflect.Value", "string": "string"}.get(typ or "", "<nil>")


# ---------------------------------------------------------------------------------------------------------
# The public face


@dataclass
class Template:
    """A parsed template set: the named template and every template it defines."""

    name: str
    funcs: dict[str, _Func] = field(default_factory=dict)
    tree: _Tree | None = None
    common: dict[str, Template] = field(default_factory=dict)

    @classmethod
    def parse(
        cls, text: str, name: str = "hooks", funcs: dict[str, Callable[[str], str]] | None = None
    ) -> Template:
        """Parse text as template NAME; raises TemplateError worded as Go's Parse error."""
        wrapped = {k: _Func(("string",), False, v, builtin=False) for k, v in (funcs or {}).items()}
        tree = _Tree(name, text, name)
        trees: dict[str, _Tree] = {}
        try:
            tree.parse(frozenset(_BUILTINS) | frozenset(wrapped), trees)
        except _ParseFailure as err:
            raise TemplateError(str(err)) from None
        except RecursionError:
            # Go has no such limit; a file nested this deeply is refused rather than crashing the loader.
            raise TemplateError(f"template: {name}: too deeply nested for hookrunner to parse") from None
        common: dict[str, Template] = {}
        top = cls(name, wrapped, None, common)
        common[name] = top
        for tname, t in trees.items():
            member = top if tname == name else cls(tname, wrapped, None, common)
            old = common.get(tname)
            # An empty definition does not replace a template that already has a body.
            if old is not None and old.tree is not None and _is_empty_tree(t.root):
                continue
            member.tree = t
            common[tname] = member
        return top

    def lookup(self, name: str) -> Template | None:
        t = self.common.get(name)
        if t is None or t.tree is None:
            return None
        return t

    def execute(self, data: Any = None) -> str:
        """Run the template with dot set to data; all output, or TemplateError and no output at all."""
        out: list[str] = []
        state = _State(self, out, [["$", data]], 0)
        try:
            if self.tree is None or self.tree.root is None:
                state.errorf(f"{go_quote(self.name)} is an incomplete or empty template")
            state.walk(data, self.tree.root)
        except _ExecFailure as err:
            raise TemplateError(str(err)) from None
        except RecursionError:
            msg = f"template: {self.name}: too deeply nested for hookrunner to execute"
            raise TemplateError(msg) from None
        return "".join(out)


def render_hooks_template(text: str, name: str = "hooks") -> str:
    """Render a hooks file as webhook's -template does: Go text/template, nil data, getenv/cat/credential."""
    return Template.parse(text, name, WEBHOOK_FUNCS).execute(None)
