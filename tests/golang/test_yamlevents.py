"""A YAML hooks file built from libyaml's events (yamlevents.py) gives exactly the exact reader's tree and Go's
wherever it takes the file, and stands aside where the composing reader must judge."""

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from test_yaml import _YAML_VALUES, LIBYAML_CASES
from test_yamljson import VECTORS, agrees_with_exact, vector_read_as_go, vectors_taken

from hookrunner.golang import yaml as golang_yaml
from hookrunner.golang.yamlevents import event_tree as events_alone
from hookrunner.hooks.load import parse_hooks


def event_tree(text: str) -> Any:
    """The event reading where libyaml_tree() uses it: on text whose characters libyaml reads as yaml.v2."""
    return events_alone(text) if golang_yaml.libyaml_reads(text) else None


@pytest.mark.parametrize("vector", VECTORS, ids=[vector["name"] for vector in VECTORS])
def test_every_vector_is_read_as_go_reads_it_or_left_to_the_composing_reader(vector: dict[str, str]) -> None:
    vector_read_as_go(event_tree, vector)


def test_the_vectors_give_the_event_reading_work() -> None:
    # Not vacuous: most vectors are block YAML without anchors or tags.
    assert len(vectors_taken(event_tree)) >= 200


#: What only the composing reader may read: (name, text, taken by the event reading).
EVENT_CASES: list[tuple[str, str, bool]] = [
    (
        "block hooks",
        "- id: a\n  execute-command: /bin/true\n  trigger-rule:\n    and:\n    - match: {type: value}\n",
        True,
    ),
    (
        "scalars resolved as yaml.v2",
        "- {a: yes, b: 0x1F, c: 1e3, d: 1e+3, e: 2026-11-27, f: ~, g: 0o17, h: 1_000}\n",
        True,
    ),
    ("empty values", "- id:\n  x: ''\n  l: []\n  m: {}\n", True),
    ("y as a key: a boolean to yaml.v2", "- {y: 1}\n", False),
    ("a scalar document", "just text\n", True),
    ("an anchor and an alias", "- &base {x: 1}\n- *base\n", False),
    ("a merge key", "- <<: {x: 1}\n  y: 2\n", False),
    ("a quoted << is a plain key", "- '<<': 1\n", True),
    ("duplicate keys", "- {id: a, id: b}\n", False),
    ("a number as a key", "- {1: a}\n", False),
    ("a boolean as a key", "- {yes: a}\n", False),
    ("a null key", "- {~: a}\n", False),
    ("a sequence as a key", "- ? [a]\n  : b\n", False),
    ("a mapping as a key", "- ? {a: 1}\n  : b\n", False),
    ("two documents", "- id: a\n---\n- id: b\n", False),
    ("explicit document end", "- id: a\n...\n", True),
    ("nested 120 deep", "[" * 120 + "]" * 120 + "\n", False),
    ("broken", "- id: [a\n", False),
]


@pytest.mark.parametrize(
    ("text", "taken"), [(t, k) for _, t, k in EVENT_CASES], ids=[n for n, _, _ in EVENT_CASES]
)
def test_event_edge_cases_agree_or_stand_aside(text: str, taken: bool) -> None:
    assert (agrees_with_exact(event_tree, text) is not None) == taken


@pytest.mark.parametrize("text", [t for _, t, _ in LIBYAML_CASES], ids=[n for n, _, _ in LIBYAML_CASES])
def test_libyaml_cases_agree_or_stand_aside(text: str) -> None:
    agrees_with_exact(event_tree, text)


@settings(max_examples=300, deadline=None)
@given(value=st.lists(_YAML_VALUES, max_size=4), flow=st.sampled_from([False, None, True]))
def test_generated_yaml_is_read_from_events_as_the_exact_reader_reads_it(
    value: Any, flow: bool | None
) -> None:
    agrees_with_exact(event_tree, yaml.safe_dump(value, default_flow_style=flow, allow_unicode=True))


def test_a_yaml_hooks_file_is_built_without_the_node_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    # Composing 10,000 YAML hooks took 1.5 s of CPU and held every node with its marks (issue 34).
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the composing reader was used")

    monkeypatch.setattr(golang_yaml, "_YamlV2CLoader", refuse)
    text = "".join(f"- id: h{index}\n  execute-command: /bin/true\n" for index in range(100))
    assert [hook.id for hook in parse_hooks(text)][99] == "h99"
