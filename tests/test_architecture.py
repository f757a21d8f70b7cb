"""The package's shape, checked from its source (docs/architecture.md): no import circle, each layer imports
only from itself and the layers below it, golang/ knows nothing of hooks, and no module is over 600 lines.

Every import statement counts: at module level, inside functions, and under `if TYPE_CHECKING:` (a circle
hidden in a function is still a circle a reader has to untangle)."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "hookrunner"

#: Top to bottom. A module may import from its own layer and any layer below it, never from one above.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("hookrunner.__main__", "hookrunner.manpage"),
    ("hookrunner.cli",),
    ("hookrunner.flags",),
    ("hookrunner.serve",),
    ("hookrunner.run",),
    ("hookrunner.state",),
    ("hookrunner.hooks",),
    ("hookrunner.ops",),
    ("hookrunner.golang",),
    ("hookrunner.config", "hookrunner.errors", "hookrunner"),
)

MAX_LINES = 600


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(name: str, path: Path, known: Iterable[str]) -> set[str]:
    """The package's own modules that `name` imports anywhere in its source."""
    known = set(known)
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "hookrunner":
                    found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "hookrunner":
                continue
            found.add(target)
            for alias in node.names:  # `from hookrunner.ops import log` imports a module
                if f"{target}.{alias.name}" in known:
                    found.add(f"{target}.{alias.name}")
    # An import of a.b.c also runs a/__init__ and a/b/__init__, but those are the package's business: what
    # counts here is the module named.
    return {target for target in found if target in known and target != name}


@functools.cache
def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imported_modules(name, path, found) for name, path in found.items()}


def circles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        # Tarjan's algorithm, iterative: the import graph is deep enough to make recursion a bad idea.
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in edges.get(node, ()):
                        found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def layer_of(name: str) -> int:
    for rank, layer in enumerate(LAYERS):
        if any(name == prefix or name.startswith(prefix + ".") for prefix in layer if prefix != "hookrunner"):
            return rank
    if name == "hookrunner":
        return len(LAYERS) - 1
    raise AssertionError(f"{name} is in no layer: add it to LAYERS and to docs/architecture.md")


def test_the_circle_finder_finds_circles() -> None:
    # The check below must be able to fail: a two-module circle, a longer one and a self-import are found.
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    assert circles({"a": {"a"}}) == [["a"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_import_reader_sees_function_and_type_checking_imports(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from hookrunner.hooks.model import Hook\n"
        "def f():\n    import hookrunner.run.executor\n"
        "from hookrunner.ops import log\n"
    )
    known = {"hookrunner.hooks.model", "hookrunner.run.executor", "hookrunner.ops", "hookrunner.ops.log"}
    assert imported_modules("hookrunner.x", source, known) == known


def test_there_is_no_import_circle() -> None:
    assert circles(graph()) == []


def test_each_module_imports_only_its_own_layer_and_those_below() -> None:
    upward = [
        f"{name} (layer {layer_of(name)}) imports {target} (layer {layer_of(target)})"
        for name, targets in graph().items()
        for target in sorted(targets)
        if layer_of(target) < layer_of(name)
    ]
    assert upward == []


def test_golang_knows_nothing_of_hooks() -> None:
    outside = [
        f"{name} imports {target}"
        for name, targets in graph().items()
        if name.startswith("hookrunner.golang")
        for target in targets
        if not target.startswith("hookrunner.golang") and target != "hookrunner.errors"
    ]
    assert outside == []


@pytest.mark.parametrize("name", sorted(modules()))
def test_no_module_is_over_600_lines(name: str) -> None:
    lines = len(modules()[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines"


def test_docs_architecture_names_every_module() -> None:
    # The page a newcomer reads first must not fall behind the code: each module (a package's
    # submodules by its folder's name, for golang/template/ and hooks/bodies/) is named there.
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    missing = []
    for name, path in modules().items():
        relative = path.relative_to(PACKAGE)
        if path.name == "__init__.py":
            wanted = f"{relative.parent.name}/" if relative.parent.parts else None
        elif len(relative.parts) > 2:  # a module of a package inside a layer
            wanted = f"{relative.parts[-2]}/"
        else:
            wanted = f"`{path.name}`"
        if wanted and wanted not in text and f"{relative}" not in text:
            missing.append(f"{name} ({wanted})")
    assert missing == []
