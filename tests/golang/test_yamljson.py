"""The C JSON reading of a hooks file (golang/yamljson.py) gives yaml.v2's tree or stands aside: on every
yaml.v2 vector, on JSON's edge cases and on generated JSON it agrees with Go (the vectors) and with the
exact reader (golang/yaml.py's YamlV2Loader, itself held to the vectors)."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from test_yamlv2_vectors import agree, go_reads, hookrunner_reads_tree

from hookrunner.errors import HooksFileError
from hookrunner.golang.yaml import decode_hooks_bytes, exact_yaml_tree, yaml_tree
from hookrunner.golang.yamljson import json_tree

ROOT = Path(__file__).resolve().parents[2]
VECTORS: list[dict[str, str]] = json.loads((ROOT / "tests" / "data" / "yamlv2" / "vectors.json").read_text())[
    "vectors"
]


def typed(value: Any) -> Any:
    """A tree compared with its types apart (True is not 1, 1 is not 1.0) and floats by their bits."""
    if isinstance(value, dict):
        return ("map", sorted((key, typed(item)) for key, item in value.items()))
    if isinstance(value, list):
        return ("seq", [typed(item) for item in value])
    if isinstance(value, float):
        return ("float", value.hex())
    return (type(value).__name__, value)


def exact(text: str) -> tuple[str, Any]:
    try:
        return "ok", typed(exact_yaml_tree(text))
    except HooksFileError as exc:
        return "error", str(exc)


def agrees_with_exact(read: Callable[[str], Any], text: str) -> Any:
    """A faster reading (`read`) either stands aside (None) or gives exactly the exact reader's tree."""
    fast = read(text)
    if fast is not None:
        assert exact(text) == ("ok", typed(fast)), text[:300]
    return fast


def vector_read_as_go(read: Callable[[str], Any], vector: dict[str, str]) -> bool:
    """Whether `read` takes the vector's file; where it does, it gives Go's tree and the exact reader's."""
    text = decode_hooks_bytes(base64.b64decode(vector["input"]))
    fast = agrees_with_exact(read, text)
    if fast is not None:
        assert agree(hookrunner_reads_tree(fast), go_reads(vector)), text[:300]
    return fast is not None


def assert_agrees(text: str) -> Any:
    return agrees_with_exact(json_tree, text)


@pytest.mark.parametrize("vector", VECTORS, ids=[vector["name"] for vector in VECTORS])
def test_every_vector_read_as_go_reads_it_or_left_to_the_exact_reader(vector: dict[str, str]) -> None:
    vector_read_as_go(json_tree, vector)


def vectors_taken(read: Callable[[str], Any]) -> list[str]:
    """The names of the vectors whose file `read` takes (does not leave to the exact reader)."""
    return [v["name"] for v in VECTORS if read(decode_hooks_bytes(base64.b64decode(v["input"]))) is not None]


def test_the_vectors_give_the_fast_reading_work() -> None:
    # Not vacuous: the vectors' JSON files (tabs in flow, upstream's hooks.json, ...) take the fast path.
    taken = vectors_taken(json_tree)
    assert len(taken) >= 12, taken
    assert "file/tests/integration/hooks/hooks.json" in taken


#: JSON whose text yaml.v2 reads otherwise than a JSON parser: each must be read as the exact reader reads
#: it (the fast reading stands aside, or agrees), and `taken` says which way.
EDGE_CASES: list[tuple[str, str, bool]] = [
    ("plain", '[{"id": "a", "execute-command": "/bin/true"}]', True),
    ("object at the top", '{"id": "a"}', True),
    ("empty list", "[]", True),
    ("no white space", '[{"id":"a","n":1,"b":true,"z":null}]', True),
    ("CRLF lines", '[\r\n{"id": "a"}\r\n]\r\n', True),
    ("tabs inside the flow", '[\n\t{\t"id":\t"a"\t}\n]', True),
    ("exponent without sign: a string to yaml.v2", '[{"n": 1e3, "m": 1E5, "f": 2.5e10}]', True),
    ("exponent with sign: a float", '[{"n": 1e+3, "m": -2.5E-2}]', True),
    ("a float", '[{"n": 1.0, "m": -0.0, "z": 0.5}]', True),
    ("int64 and uint64 bounds", '[{"a": 9223372036854775807, "b": -9223372036854775808, '
                                '"c": 18446744073709551615, "d": 18446744073709551616}]', True),
    ("a big number: a float64 to yaml.v2", '[{"n": 123456789012345678901234567890}]', True),
    ("a float too big: +Inf", '[{"n": 1e+400}]', True),
    ("escapes both read alike", r'[{"s": "a\"b\\c\b\f\n\r\t\u00e9\u4e2d\u0000"}]', True),
    ("non-ASCII text as it is", '[{"s": "é中😀"}]', True),
    ("strings that look like other scalars", '[{"a": "true", "b": "1", "c": "null", "d": "~", "e": "1e3"}]', True),
    ("a key that looks like a number", '[{"1": "x", "true": "y"}]', True),
    ("escaped slash: yaml.v2 refuses it", r'[{"s": "a\/b"}]', False),
    ("surrogate pair escape: yaml.v2 refuses it", r'[{"s": "\ud83d\ude00"}]', False),
    ("lone surrogate escape", r'[{"s": "\udc80"}]', False),
    ("duplicate key", '[{"id": "a", "id": "b"}]', False),
    ("duplicate key in a nested object", '[{"id": "a", "r": {"x": 1, "x": 2}}]', False),
    ("merge key, quoted", '[{"<<": {"id": "a"}}]', False),
    ("key and colon on two lines", '[{"id"\n: "a"}]', False),
    ("key and colon on two lines, CR", '[{"id"\r  : "a"}]', False),
    ("key longer than a simple key may be", '[{"' + "k" * 1100 + '": 1}]', False),
    ("long key of escapes", '[{"' + "\\u00e9" * 200 + '": 1}]', False),
    ("blanks before the colon", '[{"id"' + " " * 1100 + ': "a"}]', False),
    ("a few blanks before the colon", '[{"id"   : "a"}]', True),
    ("NaN", '[{"n": NaN}]', False),
    ("Infinity", '[{"n": -Infinity}]', False),
    ("top-level string", '"a"', False),
    ("top-level number", "1", False),
    ("leading BOM", '\ufeff[{"id": "a"}]', False),
    ("BOM inside a string", '[{"id": "a\ufeffb"}]', False),
    ("tab before the value", '\t[{"id": "a"}]', False),
    ("tab after the value", '[{"id": "a"}]\t\n', False),
    ("DEL in a string: libyaml refuses it", '[{"id": "a\x7fb"}]', False),
    ("C1 control in a string", '[{"id": "a\x9fb"}]', False),
    ("NEL in a string: a line break to YAML", '[{"id": "a\x85b"}]', False),
    ("LS in a string", '[{"id": "a\u2028b"}]', False),
    ("a byte that is not UTF-8", '[{"id": "a\udcffb"}]', False),
    ("trailing comma: not JSON", '[{"id": "a"},]', False),
    ("comment: not JSON", '[{"id": "a"} # c\n]', False),
    ("two documents", '[{"id": "a"}]\n---\n[]', False),
    ("nesting of 100 levels", "[" * 100 + "]" * 100, True),
    ("nesting deeper: left to the exact reader", "[" * 101 + "]" * 101, False),
    ("nesting deeper than the exact reader can read", "[" * 500 + "]" * 500, False),
    ("nesting deeper than the JSON parser", "[" * 3000 + "]" * 3000, False),
]


@pytest.mark.parametrize(("text", "taken"), [(t, k) for _, t, k in EDGE_CASES], ids=[n for n, _, _ in EDGE_CASES])
def test_json_edge_cases_read_as_the_exact_reader_reads_them(text: str, taken: bool) -> None:
    fast = assert_agrees(text)
    assert (fast is not None) == taken


def test_numbers_are_resolved_from_their_text_as_yaml_v2_does() -> None:
    tree = json_tree('[{"a": 1e3, "b": 1e+3, "c": 12345678901234567890123, "d": 7, "e": 0.1}]')
    assert tree == [{"a": "1e3", "b": 1000.0, "c": 1.2345678901234568e22, "d": 7, "e": 0.1}]
    assert type(tree[0]["d"]) is int


_KEYS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_SCALARS = (
    st.none() | st.booleans() | st.integers(min_value=-(1 << 70), max_value=1 << 70)
    | st.floats(allow_nan=False, allow_infinity=False) | _KEYS
)
_VALUES = st.recursive(
    _SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4), max_leaves=20
)


@settings(max_examples=300, deadline=None)
@given(
    value=st.lists(_VALUES, max_size=4) | st.dictionaries(_KEYS, _VALUES, max_size=4),
    indent=st.sampled_from([None, 0, 1, 2, "\t"]),
    ascii_only=st.booleans(),
    compact=st.booleans(),
)
def test_generated_json_is_read_as_the_exact_reader_reads_it(value: Any, indent: Any, ascii_only: bool,
                                                             compact: bool) -> None:
    separators = (",", ":") if compact else None
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only, separators=separators)
    assert_agrees(text)


def test_a_json_hooks_file_is_read_without_the_yaml_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    # The pure-Python YAML reader took 7.5 s of a 10,000-hook JSON file's start (issue 34).
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the YAML reader was used")

    monkeypatch.setattr(yaml, "load", refuse)
    text = json.dumps([{"id": f"h{index}", "execute-command": "/bin/true"} for index in range(100)], indent=2)
    assert yaml_tree(text)[99] == {"id": "h99", "execute-command": "/bin/true"}


def test_floats_keep_their_sign_and_infinity() -> None:
    (tree,) = json_tree('[{"z": -0.0, "i": 1e+400}]') or [None]
    assert math.copysign(1.0, tree["z"]) < 0 and tree["i"] == math.inf
