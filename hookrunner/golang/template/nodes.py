"""The parse tree's node types of Go's text/template/parse. Each node's str() is the text Go shows for it
in error messages."""

from __future__ import annotations

from typing import Protocol

from hookrunner.golang.strconv import quote as go_quote


class _OwnerTree(Protocol):
    """What a node keeps of the tree it belongs to: the template text and the name its messages give."""

    text: str
    parse_name: str


class _Node:
    __slots__ = ("pos", "tree")

    def __init__(self, tree: _OwnerTree, pos: int) -> None:
        self.tree = tree
        self.pos = pos


class _ListNode(_Node):
    __slots__ = ("nodes",)

    def __init__(self, tree: _OwnerTree, pos: int) -> None:
        super().__init__(tree, pos)
        self.nodes: list[_Node] = []

    def __str__(self) -> str:
        return "".join(str(n) for n in self.nodes)


class _TextNode(_Node):
    __slots__ = ("text",)

    def __init__(self, tree: _OwnerTree, pos: int, text: str) -> None:
        super().__init__(tree, pos)
        self.text = text

    def __str__(self) -> str:
        return self.text


class _PipeNode(_Node):
    __slots__ = ("is_assign", "decl", "cmds")

    def __init__(self, tree: _OwnerTree, pos: int) -> None:
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

    def __init__(self, tree: _OwnerTree, pos: int, pipe: _PipeNode) -> None:
        super().__init__(tree, pos)
        self.pipe = pipe

    def __str__(self) -> str:
        return "{{" + str(self.pipe) + "}}"


class _CommandNode(_Node):
    __slots__ = ("args",)

    def __init__(self, tree: _OwnerTree, pos: int) -> None:
        super().__init__(tree, pos)
        self.args: list[_Node] = []

    def __str__(self) -> str:
        return " ".join(f"({a})" if isinstance(a, _PipeNode) else str(a) for a in self.args)


class _IdentifierNode(_Node):
    __slots__ = ("ident",)

    def __init__(self, tree: _OwnerTree, pos: int, ident: str) -> None:
        super().__init__(tree, pos)
        self.ident = ident

    def __str__(self) -> str:
        return self.ident


class _VariableNode(_Node):
    __slots__ = ("ident",)

    def __init__(self, tree: _OwnerTree, pos: int, ident: str) -> None:
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

    def __init__(self, tree: _OwnerTree, pos: int, ident: str) -> None:
        super().__init__(tree, pos)
        self.ident = ident[1:].split(".")

    def __str__(self) -> str:
        return "".join("." + i for i in self.ident)


class _ChainNode(_Node):
    __slots__ = ("node", "fields")

    def __init__(self, tree: _OwnerTree, pos: int, node: _Node) -> None:
        super().__init__(tree, pos)
        self.node = node
        self.fields: list[str] = []

    def __str__(self) -> str:
        head = f"({self.node})" if isinstance(self.node, _PipeNode) else str(self.node)
        return head + "".join("." + f for f in self.fields)


class _BoolNode(_Node):
    __slots__ = ("value",)

    def __init__(self, tree: _OwnerTree, pos: int, value: bool) -> None:
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

    def __init__(self, tree: _OwnerTree, pos: int, text: str) -> None:
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

    def __init__(self, tree: _OwnerTree, pos: int, quoted: str, text: str) -> None:
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
        self, tree: _OwnerTree, pos: int, pipe: _PipeNode, lst: _ListNode, else_list: _ListNode | None
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

    def __init__(self, tree: _OwnerTree, pos: int, name: str, pipe: _PipeNode | None) -> None:
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
