"""The parser of Go's text/template/parse: a tree per template, built from the lexer's items with Go's
lookahead, checks and error wording."""

from __future__ import annotations

from typing import NoReturn

from hookrunner.golang.strconv import quote as go_quote
from hookrunner.golang.template.lex import _Item, _Lexer, _Tok
from hookrunner.golang.template.literals import _go_unquote, _SyntaxError
from hookrunner.golang.template.nodes import (
    _ActionNode,
    _BoolNode,
    _BreakNode,
    _ChainNode,
    _CommandNode,
    _ContinueNode,
    _DotNode,
    _ElseNode,
    _EndNode,
    _FieldNode,
    _IdentifierNode,
    _IfNode,
    _is_empty_tree,
    _ListNode,
    _NilNode,
    _Node,
    _NumberNode,
    _PipeNode,
    _RangeNode,
    _StringNode,
    _TemplateNode,
    _TextNode,
    _VariableNode,
    _WithNode,
)
from hookrunner.golang.template.numbers import _new_number, _NumberError


class _ParseFailure(Exception):
    """A parse error, already worded as Go words it."""

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
