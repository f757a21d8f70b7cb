"""The Go text/template engine: golden vectors recorded from Go, plus the hooks-file entry point."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hookrunner.errors import HooksFileError, TemplateError
from hookrunner.golang.template import Template
from hookrunner.hooks.template import WEBHOOK_FUNCS, render_hooks_template

VECTORS_FILE = Path(__file__).resolve().parents[2] / "data" / "gotemplate" / "vectors.json"
DOC = json.loads(VECTORS_FILE.read_text(encoding="utf-8"))
VECTORS: list[dict[str, Any]] = DOC["vectors"]
# Every variable any vector sets; each test starts with none of them, as the recorder did.
ENV_NAMES = sorted({k for v in VECTORS for k in v.get("env", {})} | {"CREDENTIALS_DIRECTORY"})


def run_vector(vector: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """Render a vector as the recorder did; returns ("output", text) or ("error", message)."""
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    for name, value in vector.get("env", {}).items():
        monkeypatch.setenv(name, value)
    for rel, content in vector.get("files", {}).items():
        target = tmp_path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    try:
        tmpl = Template.parse(vector["template"], "hooks", WEBHOOK_FUNCS)
        return "output", tmpl.execute(vector.get("data"))
    except TemplateError as err:
        return "error", str(err)


def test_vectors_file_is_from_go_and_large_enough() -> None:
    assert DOC["go_version"].startswith("go1.")
    assert len(VECTORS) >= 150
    assert sum("error" in v for v in VECTORS) >= 50
    assert sum("output" in v for v in VECTORS) >= 100


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_matches_go(vector: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kind, got = run_vector(vector, tmp_path, monkeypatch)
    if "output" in vector:
        assert (kind, got) == ("output", vector["output"])
    else:
        assert (kind, got) == ("error", vector["error"])


# Every construct the issue names appears in some recorded vector, so a gap in coverage fails here.
CONSTRUCTS = [
    "{{-",
    "-}}",
    "{{/*",
    "|",
    "(",
    ":=",
    " = ",
    "$",
    "{{if",
    "{{else if",
    "{{else}}",
    "{{with",
    "{{else with",
    "{{range",
    "{{break}}",
    "{{continue}}",
    "{{define",
    "{{template",
    "{{block",
    "`",
    "'a'",
    "1.5",
    "true",
    "nil",
    "and ",
    "or ",
    "not ",
    "eq ",
    "ne ",
    "lt ",
    "le ",
    "gt ",
    "ge ",
    "len ",
    "index ",
    "slice ",
    "print ",
    "printf ",
    "println ",
    "js",
    "html ",
    "urlquery ",
    "getenv ",
    "cat ",
    "credential ",
    "%s",
    "%d",
    "%v",
    "%q",
    "%x",
    "%t",
    "%%",
    "%5",
    "%!",
    "(EXTRA",
    "MISSING",
]


@pytest.mark.parametrize("construct", CONSTRUCTS)
def test_every_construct_has_vectors(construct: str) -> None:
    hits = [v for v in VECTORS if construct in v["template"] or construct in v.get("output", "")]
    assert hits, f"no vector covers {construct!r}"


def test_error_names_template_hooks_and_line() -> None:
    with pytest.raises(TemplateError) as info:
        render_hooks_template('[\n  {"id": "a",\n   "x": "{{ nope }}"}\n]\n')
    assert str(info.value) == 'template: hooks:3: function "nope" not defined'


def test_template_error_is_a_hooks_file_error() -> None:
    # The hooks loader keeps the previous hooks on any HooksFileError; template errors must be among them.
    assert issubclass(TemplateError, HooksFileError)


def test_name_appears_in_messages() -> None:
    with pytest.raises(TemplateError) as info:
        render_hooks_template("{{len 3}}", name="other")
    assert (
        str(info.value)
        == 'template: other:1:2: executing "other" at <len 3>: error calling len: len of type int'
    )


def test_run_time_error_gives_no_partial_output() -> None:
    with pytest.raises(TemplateError) as info:
        render_hooks_template('lots of text {{ print "ok" }}\n{{ index "ab" 9 }} more')
    assert str(info.value).startswith('template: hooks:2:3: executing "hooks" at <index "ab" 9>:')


def test_dot_is_nil() -> None:
    assert render_hooks_template("{{.}}|{{print .}}|{{if .}}t{{else}}f{{end}}|{{len (print .)}}") == (
        "<no value>|<nil>|f|5"
    )


def test_invalid_utf8_passes_through() -> None:
    # A loader that decodes with surrogateescape gets its bytes back unchanged around the actions.
    raw = b"\xff\xfe {{ print 1 }} \xc3"
    text = raw.decode("utf-8", "surrogateescape")
    assert render_hooks_template(text).encode("utf-8", "surrogateescape") == b"\xff\xfe 1 \xc3"


def test_defined_templates_are_looked_up_by_name() -> None:
    tmpl = Template.parse('{{define "a"}}A{{.}}{{end}}main', "hooks", WEBHOOK_FUNCS)
    sub = tmpl.lookup("a")
    assert sub is not None and sub.execute("x") == "Ax"
    assert tmpl.lookup("b") is None
    assert tmpl.execute() == "main"


def test_data_other_than_nil() -> None:
    tmpl = Template.parse("{{range $k, $v := .}}{{$k}}={{$v}};{{end}}", "hooks", WEBHOOK_FUNCS)
    # As in Go, a nil map value prints as <no value> in an action, and as <nil> inside print.
    assert tmpl.execute({"b": [1, 2], "a": None}) == "a=<no value>;b=[1 2];"


def test_nesting_beyond_pythons_stack_is_an_error_not_a_crash() -> None:
    # Go would render this; hookrunner refuses it cleanly (a known, documented difference).
    deep = "{{if true}}" * 1000 + "x" + "{{end}}" * 1000
    with pytest.raises(TemplateError, match="too deeply nested"):
        render_hooks_template(deep)
    assert render_hooks_template("{{if true}}" * 100 + "x" + "{{end}}" * 100) == "x"
