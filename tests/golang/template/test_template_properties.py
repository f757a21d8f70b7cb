"""Properties of the template engine that must hold on any input: parsing any text, then executing it on
any data, gives output or a TemplateError worded as Go's, never another exception."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from hookrunner.errors import TemplateError
from hookrunner.golang.template import Template

# Pieces of template text; joined at random they are often valid, and often almost valid.
PIECES = st.sampled_from([
    "{{", "}}", "{{- ", " -}}", ".", ".a", ".a.b", "$", "$x", "$x :=", "$x =", "if", "else", "else if", "end",
    "range", "with", "break", "continue", 'define "t"', 'template "t"', 'block "b" .', "len", "print", "printf",
    "println", "index", "slice", "and", "or", "not", "eq", "ne", "lt", "le", "gt", "ge", "html", "js",
    "urlquery", "call", "nil", "true", "false", "|", "(", ")", ",", '"s"', '"%d %s %v %q %x"', "`raw`", "'c'",
    "1", "-1", "3.5", "1e3", "0x10", "1i", "0b1", " ", "\n", "text", "/* c */", "{{/* c */}}", "$.a",
])
ACTIONS = st.lists(PIECES, min_size=1, max_size=5).map(lambda words: "{{" + " ".join(words) + "}}")
TEMPLATE_TEXT = st.lists(ACTIONS | PIECES, max_size=10).map("".join) | st.text(max_size=20)
DATA: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(["a", "b", "t"]), c, max_size=3),
    max_leaves=6,
)


@given(TEMPLATE_TEXT, DATA)
@example('{{define "t"}}{{template "t"}}{{end}}{{template "t"}}', None)
@example("{{range .}}{{.}}{{end}}", {"a": [1, 2]})
@example("{{printf}}", None)
@example("{{index . 5}}", [1])
@example("{{slice . 2 1}}", "abc")
@example("{{len 3}}", None)
@example("{{.a.b.c}}", {"a": 1})
def test_any_template_parses_and_runs_or_fails_typed(text: str, data: Any) -> None:
    try:
        template = Template.parse(text, "t")
    except TemplateError as exc:
        assert str(exc).startswith("template: ")
        return
    try:
        assert isinstance(template.execute(data), str)
    except TemplateError as exc:
        assert str(exc).startswith("template: ")
