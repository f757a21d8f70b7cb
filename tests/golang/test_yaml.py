"""Hooks files are read as Go's yaml.v2 (through ghodss/yaml) reads them: JSON as YAML, its scalars, escapes,
tabs and tags."""

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from test_yamljson import VECTORS, agrees_with_exact, vector_read_as_go, vectors_taken

from hookrunner.config import Header
from hookrunner.errors import HooksFileError
from hookrunner.golang.yaml import YamlV2Loader, libyaml_tree
from hookrunner.hooks.load import parse_hooks

ROOT = Path(__file__).resolve().parents[2]


def test_json_and_yaml_read_the_same() -> None:
    json_text = (
        '[{"id": "a", "execute-command": "/bin/true", "response-headers": [{"name": "X", "value": "z"}]}]'
    )
    yaml_text = "- id: a\n  execute-command: /bin/true\n  response-headers:\n  - {name: X, value: z}\n"
    assert parse_hooks(json_text) == parse_hooks(yaml_text)


def test_dates_stay_strings() -> None:
    (hook,) = parse_hooks("- id: 2026-11-22\n")
    assert hook.id == "2026-11-22"


def test_yaml_y_is_a_boolean_as_in_go() -> None:
    (hook,) = parse_hooks("- id: a\n  response-headers:\n  - {name: X, value: y}\n")
    assert hook.response_headers == (Header("X", "true"),)  # yaml.v2 reads `y` as true


def test_double_quoted_escapes_are_yaml_v2s() -> None:
    # Go's `js` writes \' for an apostrophe, which yaml.v2 (and so webhook) accepts; it refuses \/.
    (hook,) = parse_hooks('[{"id": "it\\\'s"}]')
    assert hook.id == "it's"
    with pytest.raises(HooksFileError):
        parse_hooks('[{"id": "a\\/b"}]')


def test_tabs_where_yaml_v2_skips_them() -> None:
    # Inside [...] and {...} yaml.v2 takes a tab as white space, as it does after text on a block line:
    # upstream's own test hooks file indents some hooks with tabs.
    text = '[\n  {\n\t\t"id":\t"a",\n\t\t"execute-command": "/bin/echo"\t\n  }\n]\n'
    assert [(hook.id, hook.execute_command) for hook in parse_hooks(text)] == [("a", "/bin/echo")]
    assert [hook.id for hook in parse_hooks("- id: b\t\n  execute-command: /bin/true\t# note\n")] == ["b"]


def test_tab_as_block_indentation_fails_as_in_yaml_v2() -> None:
    with pytest.raises(HooksFileError, match="yaml: line 1: found a tab character that violate indentation"):
        parse_hooks("- id: a\n\texecute-command: /bin/true\n")


def test_tagged_scalars_as_yaml_v2_reads_them() -> None:
    # A tag names the type the text must resolve to; a constructor's ValueError was once a crash.
    assert parse_hooks("- id: !!str 5\n  success-http-response-code: !!int '201'\n")[0].success_status == 201
    for bad in ("- id: !!float ',1'\n", "- id: !!float '1'\n", "- id: !!null '['\n", "- id: !!binary 'GVsG='\n"):
        with pytest.raises(HooksFileError):
            parse_hooks(bad)


# --- libyaml's parser, where it reads as yaml.v2 (libyaml_tree) ---------------------------------------------

def libyaml_agrees(text: str) -> Any:
    return agrees_with_exact(libyaml_tree, text)


@pytest.mark.parametrize("vector", VECTORS, ids=[vector["name"] for vector in VECTORS])
def test_libyaml_reads_every_vector_as_go_or_leaves_it_to_the_exact_reader(vector: dict[str, str]) -> None:
    vector_read_as_go(libyaml_tree, vector)


def test_the_vectors_give_libyaml_work() -> None:
    assert len(vectors_taken(libyaml_tree)) >= 250


#: YAML that libyaml (0.2.5) reads otherwise than yaml.v2, or might: each must be read as the exact reader
#: reads it, and `taken` says whether libyaml's reading is used.
LIBYAML_CASES: list[tuple[str, str, bool]] = [
    ("block hooks", "- id: a\n  execute-command: /bin/true\n  trigger-rule:\n    and:\n    - match: {type: value}\n", True),
    ("scalars resolved as yaml.v2", "- {a: yes, b: 0x1F, c: 1e3, d: 1e+3, e: 2026-11-27, f: ~, g: 0o17, h: 1_000}\n", True),
    ("anchors, aliases and a merge", "- &base {x: 1}\n- <<: *base\n  y: 2\n", True),
    ("a later anchor of the same name", "- &a 1\n- &a 2\n- *a\n", False),
    ("block scalars", "- a: |\n    line\n  b: >-\n    folded\n    text\n  c: |2+\n     kept\n\n", True),
    ("quoted", "- a: 'it''s'\n  b: \"q \\\" u\"\n", False),
    ("escaped apostrophe: yaml.v2 takes it", "- a: \"it\\'s\"\n", False),
    ("escaped slash: yaml.v2 refuses it", "- a: \"a\\/b\"\n", False),
    ("a tab after a value", "- id: a\t\n", False),
    ("a tag", "- id: !!str 5\n", False),
    ("a directive", "%YAML 1.1\n---\n- id: a\n", False),
    ("a colon in a flow plain scalar: yaml.v2 refuses it", "- {u: http://x}\n", False),
    ("a colon in a block plain scalar", "- u: http://x\n", True),
    ("a question mark in flow", "- [a?b]\n", False),
    ("a comment right after a block indicator", "- a: |#c\n    x\n", False),
    ("two documents", "- id: a\n---\n- id: b\n", False),
    ("duplicate keys", "- {id: a, id: b}\n", True),
    ("a key of 1025 characters", "- " + "k" * 1025 + ": 1\n", False),
    ("a BOM", "\ufeff- id: a\n", False),
    ("NEL", "- id: a\x85b\n", False),
    ("broken", "- id: [a\n", False),
]


@pytest.mark.parametrize(("text", "taken"), [(t, k) for _, t, k in LIBYAML_CASES], ids=[n for n, _, _ in LIBYAML_CASES])
def test_libyaml_edge_cases_read_as_the_exact_reader_reads_them(text: str, taken: bool) -> None:
    assert (libyaml_agrees(text) is not None) == taken


_YAML_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(1 << 70), max_value=1 << 70)
    | st.floats(allow_nan=False) | st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(value=st.lists(_YAML_VALUES, max_size=4), flow=st.sampled_from([False, None, True]))
def test_generated_yaml_is_read_by_libyaml_as_the_exact_reader_reads_it(value: Any, flow: bool | None) -> None:
    libyaml_agrees(yaml.safe_dump(value, default_flow_style=flow, allow_unicode=True))


def test_a_yaml_hooks_file_is_read_without_the_pure_python_scanner(monkeypatch: pytest.MonkeyPatch) -> None:
    # The pure-Python reader took 8 s of CPU for 10,000 YAML hooks; libyaml's takes about 1 s (issue 34).
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the pure-Python scanner was used")

    monkeypatch.setattr(YamlV2Loader, "scan_plain", refuse)
    text = "".join(f"- id: h{index}\n  execute-command: /bin/true\n" for index in range(100))
    assert [hook.id for hook in parse_hooks(text)][99] == "h99"
