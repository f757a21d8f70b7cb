"""A hooks file read one top-level entry at a time (golang/yaml.py's yaml_entries: yamljson.json_entries and
yamlevents.event_entries) gives exactly the entries of the tree its reading gives whole, or stands aside
(None at once, ReadOtherwise part way) exactly where that reading gives no tree."""

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from test_yaml import _YAML_VALUES
from test_yamlevents import EVENT_CASES
from test_yamljson import EDGE_CASES, VECTORS, typed

from hookrunner.golang import yaml as golang_yaml
from hookrunner.golang.yaml import decode_hooks_bytes, yaml_entries
from hookrunner.golang.yamlevents import event_entries, event_tree
from hookrunner.golang.yamljson import ReadOtherwise, json_entries, json_tree


def events_where_taken(read: Callable[[str], Any]) -> Callable[[str], Any]:
    """`read` where libyaml_tree() uses the event reading: on text whose characters libyaml reads as yaml.v2."""
    return lambda text: read(text) if golang_yaml.libyaml_reads(text) else None


READINGS = {
    "json": (json_entries, json_tree),
    "events": (events_where_taken(event_entries), events_where_taken(event_tree)),
}


def entries_agree(
    entries_of: Callable[[str], Iterator[Any] | None], tree_of: Callable[[str], Any], text: str
) -> bool:
    """Whether the entries were taken; where they are, they are the whole tree's, and where they stand aside
    part way, the whole reading gives no tree either."""
    tree = tree_of(text)
    entries = entries_of(text)
    if entries is None:
        assert not (isinstance(tree, list) and tree and entries_of is json_entries), text[:200]
        return False
    try:
        got = list(entries)
    except ReadOtherwise:
        assert tree is None, text[:200]
        return False
    assert typed(got) == typed(tree), text[:200]
    return True


@pytest.mark.parametrize("reading", READINGS)
@pytest.mark.parametrize("vector", VECTORS, ids=[vector["name"] for vector in VECTORS])
def test_every_vector_is_read_in_entries_as_whole(vector: dict[str, str], reading: str) -> None:
    entries_agree(*READINGS[reading], decode_hooks_bytes(base64.b64decode(vector["input"])))


@pytest.mark.parametrize("reading", READINGS)
def test_the_vectors_give_the_entries_work(reading: str) -> None:
    # Not vacuous: every vector whose whole tree is a list that the reading takes (most are mappings).
    texts = [decode_hooks_bytes(base64.b64decode(vector["input"])) for vector in VECTORS]
    taken = [text for text in texts if entries_agree(*READINGS[reading], text)]
    assert len(taken) >= (8 if reading == "json" else 10)


@pytest.mark.parametrize("text", [t for _, t, _ in EDGE_CASES + EVENT_CASES])
@pytest.mark.parametrize("reading", READINGS)
def test_edge_cases_in_entries_as_whole(text: str, reading: str) -> None:
    entries_agree(*READINGS[reading], text)


#: Files whose first entries the fast readings take and whose later ones they leave to the exact readers.
LATE_SURPRISES = [
    '[{"id": "a"}, {"id": "b", "id": "c"}]',  # a duplicate key
    '[{"id": "a"},\n{"id": "b"}\n,]',  # a trailing comma: YAML's flow takes it, JSON does not
    '[{"id": "a"}, {"id": "a\\/b"}]',  # an escape yaml.v2 refuses (found before any entry)
    '[{"id": "a"}, {"id": NaN}]',
    '[{"id": "a"}, {"id": "b"}] x',
    '[{"id": "a"}, {"id": "b"}',
    "- id: a\n- &x {id: b}\n- *x\n",  # an anchor and an alias
    "- id: a\n- <<: {id: b}\n",  # a merge key
    "- id: a\n- {id: b, id: c}\n",
    "- id: a\n- id: [b\n",  # broken
    "- id: a\n---\n- id: b\n",  # a second document
    "- id: a\n" * 150 + "- &x {id: b}\n- *x\n",  # after the first batch of entries (yamlevents._BATCH)
]


@pytest.mark.parametrize("text", LATE_SURPRISES)
@pytest.mark.parametrize("reading", READINGS)
def test_a_late_surprise_is_told_part_way(text: str, reading: str) -> None:
    entries_agree(*READINGS[reading], text)


def test_late_surprises_are_met_part_way() -> None:
    # Not vacuous: most of them are taken at first and stand aside only once parsing has begun; the YAML
    # ones within the first batch of entries before any is handed out, the last only after 100 were.
    part_way = handed_out = 0
    for text in LATE_SURPRISES:
        entries = yaml_entries(text)
        if entries is not None:
            taken: list[Any] = []
            with pytest.raises(ReadOtherwise):
                taken.extend(entries)
            assert taken[:1] in ([], [{"id": "a"}])
            part_way += 1
            handed_out += bool(taken)
    assert part_way >= 8
    assert handed_out >= 6  # four by the JSON reading, two by the YAML reading (one past its first batch)


def test_deep_entries_stand_aside_as_the_whole_reading_does() -> None:
    for depth in (97, 98, 99, 100, 101):
        for text in ("[" + "[" * depth + "]" * depth + "]", "- " + "[" * depth + "]" * depth + "\n"):
            for reading in READINGS.values():
                entries_agree(*reading, text)


@settings(max_examples=200, deadline=None)
@given(value=st.lists(_YAML_VALUES, max_size=6), flow=st.sampled_from([False, None, True]))
def test_generated_files_are_read_in_entries_as_whole(value: Any, flow: bool | None) -> None:
    for text in (
        yaml.safe_dump(value, default_flow_style=flow, allow_unicode=True),
        yaml.safe_dump(value).replace("\n", " "),
    ):
        for reading in READINGS.values():
            entries_agree(*reading, text)
    try:
        as_json = json.dumps(value, ensure_ascii=False)
    except ValueError:
        return
    entries_agree(json_entries, json_tree, as_json)
