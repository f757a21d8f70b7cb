"""The executor of Go's text/template: walks a parse tree with dot and variables, if/range/with, template
invocation, pipelines and function calls; and Template, a parsed template set, that parses and runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from hookrunner.errors import TemplateError
from hookrunner.golang.strconv import quote as go_quote
from hookrunner.golang.template.funcs import _BUILTINS, _CallError, _Func
from hookrunner.golang.template.literals import _utf8_len
from hookrunner.golang.template.nodes import (
    _ActionNode,
    _BoolNode,
    _BranchNode,
    _BreakNode,
    _ChainNode,
    _CommandNode,
    _ContinueNode,
    _DotNode,
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
from hookrunner.golang.template.parse import _ParseFailure, _Tree
from hookrunner.golang.template.printf import go_sprint
from hookrunner.golang.template.values import _go_type, _Iface, _is_true, _unwrap


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
