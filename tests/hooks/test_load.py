"""Hooks files load as webhook loads them, and the registry swaps whole, consistent sets."""

import copy
import json
from pathlib import Path

import pytest

from hookrunner.errors import DuplicateHookError, HooksFileError
from hookrunner.golang.yaml import exact_yaml_tree
from hookrunner.hooks.load import HookRegistry, parse_hooks
from hookrunner.hooks.model import decode_hook


def test_empty_file_has_no_hooks() -> None:
    assert parse_hooks("") == []


def write(path: Path, ids: list[str]) -> str:
    path.write_text("".join(f"- id: {i}\n  execute-command: /bin/true\n" for i in ids))
    return str(path)


def test_registry_loads_and_matches(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", ["one", "two"])
    b = write(tmp_path / "b.yaml", ["three"])
    registry = HookRegistry([a, b])
    registry.load_initial()
    assert len(registry) == 3
    assert registry.match("three") is not None
    assert registry.match("nope") is None


def test_duplicate_across_files_is_fatal_at_startup(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", ["one"])
    b = write(tmp_path / "b.yaml", ["one"])
    with pytest.raises(DuplicateHookError, match="one has already been loaded"):
        HookRegistry([a, b]).load_initial()


def test_broken_file_at_startup_is_skipped_but_kept_watchable(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", ["one"])
    broken = tmp_path / "b.yaml"
    broken.write_text("- id: [")
    registry = HookRegistry([a, str(broken)])
    registry.load_initial()
    assert len(registry) == 1
    write(broken, ["two"])
    assert registry.reload_file(str(broken)) is True
    assert registry.match("two") is not None


def test_reload_keeps_previous_hooks_on_error(tmp_path: Path) -> None:
    path = tmp_path / "h.yaml"
    registry = HookRegistry([write(path, ["one"])])
    registry.load_initial()
    path.write_text("- id: [")
    assert registry.reload_file(str(path)) is False
    assert registry.match("one") is not None


def test_reload_reverts_on_duplicates(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", ["one"])
    b = tmp_path / "b.yaml"
    registry = HookRegistry([a, write(b, ["two"])])
    registry.load_initial()
    write(b, ["one"])  # taken by a.yaml
    assert registry.reload_file(str(b)) is False
    write(b, ["two", "two"])  # twice in the same file
    assert registry.reload_file(str(b)) is False
    assert registry.match("two") is not None
    write(b, ["three"])
    assert registry.reload_file(str(b)) is True
    assert registry.match("two") is None and registry.match("three") is not None


def test_remove_and_recreate(tmp_path: Path) -> None:
    path = tmp_path / "h.yaml"
    registry = HookRegistry([write(path, ["one", "two"])])
    registry.load_initial()
    assert registry.remove_file(str(path)) == 2
    assert len(registry) == 0
    write(path, ["one"])
    assert registry.reload_file(str(path)) is True
    assert registry.match("one") is not None


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    registry = HookRegistry([str(tmp_path / "nope.json")])
    registry.load_initial()
    assert len(registry) == 0


def test_crlf_files_load(tmp_path: Path) -> None:
    path = tmp_path / "h.yaml"
    path.write_bytes(b"- id: a\r\n  execute-command: /bin/true\r\n")
    registry = HookRegistry([str(path)])
    registry.load_initial()
    assert registry.match("a") is not None


def test_load_times_and_the_publish_callback(tmp_path: Path) -> None:
    import time

    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text('[{"id": "a", "execute-command": "/bin/true"}]')
    second.write_text('[{"id": "b", "execute-command": "/bin/true"}]')
    registry = HookRegistry([str(first), str(second)])
    published: list[dict[str, float]] = []
    registry.on_publish = lambda: published.append(dict(registry.loaded_at))
    before = time.time()
    registry.load_initial()
    assert set(registry.loaded_at) == {str(first), str(second)}
    assert all(before <= when <= time.time() for when in registry.loaded_at.values())
    loaded = dict(registry.loaded_at)
    time.sleep(0.01)
    assert registry.reload_file(str(second))
    assert registry.loaded_at[str(first)] == loaded[str(first)]  # only the reloaded file's time moves
    assert registry.loaded_at[str(second)] > loaded[str(second)]
    second.write_text("not a list")
    assert not registry.reload_file(str(second))  # a refused reload publishes nothing
    registry.remove_file(str(second))
    assert set(registry.loaded_at) == {str(first)}
    assert len(published) == 3


# --- a file decoded entry by entry as the fast readings parse it (issue 34) ----------------------------------


def _error(text: str) -> str:
    with pytest.raises(HooksFileError) as caught:
        parse_hooks(text)
    return str(caught.value)


def _whole_tree_error(text: str) -> str:
    """The error of the whole-tree reading: the exact reader's tree, then each entry decoded in turn."""
    try:
        tree = exact_yaml_tree(text)
    except HooksFileError as exc:
        return str(exc)
    with pytest.raises(HooksFileError) as caught:
        for item in tree:
            decode_hook(item)
    return str(caught.value)


@pytest.mark.parametrize(
    "text",
    [
        '[{"id": []}, {"id": "b"}]',  # the first entry's error, once the whole file is read
        '[{"id": "a"}, {"id": []}, {"id": "c", "id": "d"}]',  # the second's, from the exact reader's tree
        '[{"id": []}, {"id": "b"}, ]',  # a trailing comma: JSON stands aside, YAML's flow reads it
        "- id: []\n- id: b\n",
        "- id: a\n- id: []\n- &x {id: c}\n- *x\n",  # an anchor after the bad entry
    ],
)
def test_an_entry_that_cannot_be_decoded_is_the_error_whole_tree_reading_gives(text: str) -> None:
    assert _error(text) == _whole_tree_error(text)
    assert "cannot unmarshal array into Go struct field Hook.id of type string" in _error(text)


@pytest.mark.parametrize("text", ['[{"id": []}, {"id": "b"} x]', "- id: []\n- id: [b\n"])
def test_a_file_broken_after_a_bad_entry_is_refused_as_broken(text: str) -> None:
    # The syntax error, as yaml.v2 finds it before any decoding, not the first entry's type error.
    assert _error(text).startswith("error converting YAML to JSON: yaml: ")
    assert "unmarshal" not in _error(text)
    assert _error(text) == _whole_tree_error(text)


def test_entries_are_decoded_as_they_are_read() -> None:
    # The whole tree of a big file is never held: only its hooks and one entry's tree (issue 34).
    import tracemalloc

    text = (
        "[\n"
        + ",\n".join(
            f'{{"id": "h{index}", "execute-command": "/bin/true", "trigger-rule": {{"match": {{"type": "value", '
            f'"value": "v{index}", "parameter": {{"source": "payload", "name": "ref"}}}}}}}}'
            for index in range(3000)
        )
        + "\n]\n"
    )
    tracemalloc.start()
    try:
        hooks = parse_hooks(text)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [hook.id for hook in hooks][-1] == "h2999"
    tree = json.loads(text)
    tracemalloc.start()
    try:
        whole = copy.deepcopy(tree)
        tree_size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del whole
    assert peak - held < tree_size / 2, (peak, held, tree_size)
