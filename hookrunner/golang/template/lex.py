"""The lexer of Go's text/template/parse: token kinds, items and the state machine that cuts template
text into them, with {{- and -}} trimming."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hookrunner.golang.strconv import is_print as _is_print
from hookrunner.golang.strconv import quote as go_quote
from hookrunner.golang.template.literals import _rune_desc, _utf8_len


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
